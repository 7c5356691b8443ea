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

    def text(self) -> str:
        return self.message if self.message.startswith(self.kind) else f"{self.kind}: {self.message}"


@dataclass
class LogEnd:
    failures: list[Failure] = field(default_factory=list)  # at most one per file, file order
    cut_files: list[str] = field(default_factory=list)  # files whose last line is cut off

    @property
    def failure(self) -> Failure | None:
        return self.failures[0] if self.failures else None


def _tail_lines(path: Path) -> tuple[list[str], int, bool]:
    """(lines of the tail, line number of the first of them, whether the file ends mid-line)."""
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
    cut_off = bool(stripped) and (not stripped.endswith(b"\n") or len(stripped) < len(raw))
    text = (
        stripped.replace(b"\0", b"").replace(b"\r\n", b"\n").replace(b"\r", b"\n").decode("utf-8", "replace")
    )
    return text.split("\n"), first_line, cut_off


def _clean(line: str) -> str:
    return ANSI.sub("", PREFIX.sub("", line)).strip()


def last_failure(lines: list[str]) -> tuple[int, str, str] | None:
    """(index, class, line) of the last fatal line: a traceback's exception line, or a BARE line."""
    found: tuple[int, str, str] | None = None
    in_tb = from_tb = False
    for i, raw in enumerate(lines):
        line = _clean(raw)
        if line.startswith("Traceback (most recent call last)"):
            in_tb = True
            continue
        if in_tb:
            m = EXC_LINE.match(line)
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
    return found


def _survived(after: list[str]) -> bool:
    """Whether the lines after an error show the run went on (a step record, or long output)."""
    rest = [ln for ln in after if ln.strip()]
    return len(rest) > FATAL_TAIL_LINES or any(STEP_RECORD.search(ln) for ln in rest)


def scan(log_dir: Path, files: list[Path]) -> LogEnd:
    """The failures and cut-off files among `files` (text logs under log_dir)."""
    end = LogEnd()
    for path in files:
        try:
            lines, first, cut_off = _tail_lines(path)
        except OSError:
            continue
        if cut_off:
            end.cut_files.append(source(log_dir, path, None))
        hit = last_failure(lines)
        if hit and not _survived(lines[hit[0] + 1 :]):
            i, kind, line = hit
            end.failures.append(Failure(kind, line, source(log_dir, path, first + i)))
    return end
