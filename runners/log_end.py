"""How a run's logs end: the exception, signal or cut that stopped it, read from the log tails.

Framework-neutral: every framework here is Python under Ray or torchrun, so a fatal error is a
Python traceback's last line (`ValueError: ...`, `torch.OutOfMemoryError: CUDA out of memory`,
`ray.exceptions.ActorDiedError: The actor died unexpectedly ...`, `RuntimeError: DataLoader worker
(pid 44800) is killed by signal: Killed.`), a line Ray or NCCL print without a traceback (actor
death, the NCCL watchdog's collective timeout), or a line of the scheduler or shell (Slurm's
`*** JOB 12 ON n1 CANCELLED AT ...`, a bare `Killed`). A log whose last line is cut off (no final
newline, or a zero-filled block a crash left behind) is truncated.

Only the tail of each file is read (TAIL_BYTES): a fatal error is the last thing a process prints;
one followed by a step record (verl `step:N - `, prime-rl `Step N |`, slime `perf N: {`) or by more
than FATAL_TAIL_LINES lines was survived.
Ray prefixes (`(TaskRunner pid=N)`) and colour codes are stripped before matching.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from runners.run_config import RAY_PREFIX_PATTERN, source

TAIL_BYTES = 256 << 10
# A fatal error is among the last lines a process prints (Ray's detail lines, its job-failed banner,
# shutdown notices follow it). One followed by a step record, or by much more output, was survived
# (a retried request, a warning printed with its traceback) and does not end the run.
FATAL_TAIL_LINES = 200
# step records of verl (`step:N - `), prime-rl (`Step N |`), slime/Miles (`perf N: {` records)
STEP_RECORD = re.compile(r"\bstep:\d+ - |\bStep \d+ \||\bperf \d+: \{")
TRACEBACK_DETAIL_LINES = 30  # Ray prints the actor's class, id, pid and exit detail under the error
# Ray's `(TaskRunner pid=N)` and torchrun's `[trainer0]:` / `[default0]:` line prefixes
PREFIX = re.compile(r"^(?:\x1b?\[[0-9;]*m)*(?:" + RAY_PREFIX_PATTERN + r" ?)?(?:\[[A-Za-z]+\d+\]:)?")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
EXC_LINE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout))(?::\s*(.*))?$"
)
# Fatal lines printed without a Python traceback: (regex, failure class)
BARE = (
    (re.compile(r"Watchdog caught collective operation timeout.*"), "NCCLTimeout"),
    # Hydra without HYDRA_FULL_ERROR prints the InstantiationException's text without a traceback
    (re.compile(r"^Error in call to target '[^']*':?\s*$"), "hydra.errors.InstantiationException"),
    (
        re.compile(
            r"(?:A worker died or was killed while executing a task|The actor died unexpectedly|"
            r"The actor is dead because).*"
        ),
        "RayActorDied",
    ),  # fmt: skip
    (re.compile(r"(?:CUDA out of memory|OutOfMemoryError).*"), "OutOfMemoryError"),
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT .*"), "SlurmCancelled"),
    (re.compile(r"^(?:Killed|Terminated|Aborted|Segmentation fault)(?: \(core dumped\))?\s*$"), "Signal"),
    (
        re.compile(
            r"(?:srun|slurmstepd): error: .*(?:Killed|Terminated|Exited with exit code [1-9]\d*|"
            r"Out Of Memory|oom-kill).*"
        ),
        "Signal",
    ),  # fmt: skip
)


@dataclass
class Failure:
    kind: str  # the exception class (ValueError, ray.exceptions.ActorDiedError), or NCCLTimeout, Signal, ...
    message: str  # the line as the log printed it (prefix and colour codes stripped)
    source: str  # "<file>:<line>"
    wrapped_by: str | None = None  # the wrapper's line (Hydra, Ray, multiprocessing) when unwrapped

    def text(self) -> str:
        return self.message if self.message.startswith(self.kind) else f"{self.kind}: {self.message}"


@dataclass
class LogEnd:
    failures: list[Failure] = field(default_factory=list)  # at most one per file, file order
    cut_files: list[str] = field(default_factory=list)  # files whose last line is cut off

    @property
    def failure(self) -> Failure | None:
        return self.failures[0] if self.failures else None


def _tail_lines(path: Path) -> tuple[list[str], list[int], bool]:
    """(records of the tail, the physical line of each, whether the file ends mid-line). A record
    ends at LF or at a bare CR (a tqdm redraw; a log written with CR line ends only); lines are
    counted at LF only, as `grep -n` counts them, so every record of one line cites that line."""
    size = path.stat().st_size
    start = max(0, size - TAIL_BYTES)
    first_line = 1
    with open(path, "rb") as f:
        while f.tell() < start:  # line numbers: count the newlines before the tail, 1 MiB at a time
            first_line += f.read(min(1 << 20, start - f.tell())).count(b"\n")
        raw = f.read()
    if start:
        cut = raw.find(b"\n") + 1  # drop the partial first line of the tail
        raw, first_line = raw[cut:], first_line + 1
    stripped = raw.rstrip(b"\0")
    cut_off = bool(stripped) and (not stripped.endswith((b"\n", b"\r")) or len(stripped) < len(raw))
    text = stripped.replace(b"\0", b"").replace(b"\r\n", b"\n").decode("utf-8", "replace")
    records: list[str] = []
    numbers: list[int] = []
    for n, line in enumerate(text.split("\n"), first_line):
        for record in line.split("\r"):
            records.append(record)
            numbers.append(n)
    return records, numbers, cut_off


def _clean(line: str) -> str:
    return ANSI.sub("", PREFIX.sub("", line)).strip()


def last_failure(lines: list[str]) -> tuple[int, str, str, str | None] | None:
    """(index, class, line, wrapper line or None) of the last fatal line: a traceback's exception
    line, or a BARE line; an exception that wraps another is unwrapped (`_unwrap`)."""
    found: tuple[int, str, str] | None = None
    in_tb = from_tb = False
    for i, raw in enumerate(lines):
        line = _clean(raw)
        if line.startswith("Traceback (most recent call last)"):
            in_tb = True
            continue
        if in_tb:
            m = EXC_LINE.match(line) or RAY_TASK_ERROR.match(line)
            if m:
                found, in_tb, from_tb = (i, m.group(1), line), False, True
            continue
        if from_tb and i - found[0] <= TRACEBACK_DETAIL_LINES:
            continue  # Ray's detail lines under a traceback's exception explain it: keep the class
        for pattern, kind in BARE:
            m = pattern.search(line)
            if m:
                found, from_tb = (i, kind, line), False
                break
    return _unwrap(lines, found) if found else None


# Exceptions that carry another: Hydra's InstantiationException (`Error in call to target 'x':`
# then the cause's repr `ValueError('...')`, with or without a traceback), Ray's
# `RayTaskError(ValueError): ray::Task.run() ...` and `ActorDiedError: The actor died because of
# an error raised in its creation task` (the cause's traceback follows), multiprocessing's
# RemoteTraceback (the cause's traceback inside it).
WRAPPER = re.compile(
    r"InstantiationException|RayTaskError|ActorDiedError|RayActorError|RemoteTraceback|"
    r"^Error in call to target "
)
RAY_TASK_ERROR = re.compile(r"^((?:[A-Za-z_]\w*\.)*RayTaskError)\((\w+)\):")
CAUSE_REPR = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout))\((['\"])(.*)\2\)$"
)
DIRECT_CAUSE = "The above exception was the direct cause of the following exception:"


def _unwrap(lines: list[str], found: tuple[int, str, str]) -> tuple[int, str, str, str | None]:
    """The original exception under a wrapper: the first exception line (or Hydra's repr line)
    among the TRACEBACK_DETAIL_LINES after the wrapper, else the exception printed before Python's
    "direct cause" banner above the wrapper's traceback; the wrapper itself when neither exists."""
    i, kind, line = found
    if not (WRAPPER.search(kind) or WRAPPER.search(line) or RAY_TASK_ERROR.match(line)):
        return i, kind, line, None
    for j in range(i + 1, min(len(lines), i + 1 + TRACEBACK_DETAIL_LINES)):
        text = _clean(lines[j])
        m = EXC_LINE.match(text)
        if m and not WRAPPER.search(text):
            return j, m.group(1), text, line
        m = CAUSE_REPR.match(text)
        if m:
            return j, m.group(1), f"{m.group(1)}: {m.group(3)}", line
    for j in range(i - 1, max(-1, i - 1 - 4 * TRACEBACK_DETAIL_LINES), -1):
        if _clean(lines[j]) == DIRECT_CAUSE:
            for k in range(j - 1, max(-1, j - 1 - TRACEBACK_DETAIL_LINES), -1):
                text = _clean(lines[k]).strip('"')
                m = EXC_LINE.match(text)
                if m and not WRAPPER.search(text):
                    return k, m.group(1), text, line
            break
    ray = RAY_TASK_ERROR.match(line)
    if ray:  # the cause's class is in the wrapper's name even when its line is not in the tail
        return i, ray.group(2), line, line
    return i, kind, line, None


def _survived(after: list[str]) -> bool:
    """Whether the lines after an error show the run went on (a step record, or long output)."""
    rest = [ln for ln in after if ln.strip()]
    return len(rest) > FATAL_TAIL_LINES or any(STEP_RECORD.search(ln) for ln in rest)


def scan(log_dir: Path, files: list[Path]) -> LogEnd:
    """The failures and cut-off files among `files` (text logs under log_dir)."""
    end = LogEnd()
    for path in files:
        try:
            lines, numbers, cut_off = _tail_lines(path)
        except OSError:
            continue
        if cut_off:
            end.cut_files.append(source(log_dir, path, None))
        hit = last_failure(lines)
        if hit and not _survived(lines[hit[0] + 1 :]):
            i, kind, line, wrapper = hit
            end.failures.append(Failure(kind, line, source(log_dir, path, numbers[i]), wrapper))
    return end
