"""Attempts of one run: a requeued or restarted run that appends to the same log.

Slurm requeues a preempted job into the same output file (`--open-mode=append`, or the harness's
`>>`): the log then holds the first attempt's steps, the scheduler's end line (`slurmstepd: error:
*** JOB 123 ON n1 CANCELLED AT 2026-08-07T13:28:00 DUE TO PREEMPTION ***`), the restart's start-up
and the steps again from the last checkpoint. An attempt boundary is either such an end line or a
step number going backwards within one stream of one file (the restart resumed from a checkpoint
older than the last logged step). A restart that resumes exactly after its last logged step with no
end line in the logs cannot be told apart from one attempt.

Each parser names its step streams (`STEP_STREAMS` in runners/<framework>_logs.py: the record lines
of the trainer, one per step); this module scans the files the parser read for them and for end
lines, in file order, and picks the stream of the file with the most attempts (a run's steps may be
copied into several files: prime-rl's launcher log repeats its trainer's). The parsers keep the LAST
value logged for a step (a later record of the same step overwrites the earlier one), so a repeated
step's trace row is its last attempt's; the attempts recorded here are what the trace no longer shows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runners.run_config import ANSI_BYTES, BULK_DIRS, source

# Slurm's end line for a job or step; the reason is absent for a plain scancel
SLURM_END = re.compile(
    rb"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT (\S+)(?: DUE TO ([A-Z][A-Z _]*?))? \*\*\*"
)
ENDED = {
    b"PREEMPTION": "preempted",
    b"TIME LIMIT": "time_limit",
    b"NODE FAILURE": "node_failure",
    b"JOB REQUEUE": "requeued",
}
# the first ISO-like timestamp of a line (slime's logger, Ray's, loguru's with a date), read as UTC
LINE_TS = re.compile(rb"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)")
BLOCK = 8 << 20


@dataclass(frozen=True)
class Stream:
    """One kind of step record: `step` matches the record (group 1: the step number), `seconds`
    reads the step's wall time (s) from the matched line and `clock` the time it was logged (Unix
    seconds; default: the line's first ISO timestamp, read as UTC); None when not there."""

    name: str
    step: re.Pattern[bytes]
    seconds: Callable[[bytes], float | None] | None = None
    clock: Callable[[bytes], float | None] | None = None


@dataclass
class Occurrence:
    step: int
    seconds: float | None  # the step's wall time as logged, s
    at_unix_s: float | None  # the line's own timestamp (when it carries one), Unix seconds
    line: int  # 1-based line in its file


@dataclass
class Attempt:
    attempt: int  # 1-based
    steps: list[Occurrence] = field(default_factory=list)
    ended: str | None = None  # preempted | time_limit | node_failure | requeued | cancelled | restarted
    end_line: str | None = None  # "<file>:<line>" of the end line, or of the restart's first step
    end_unix_s: float | None = None  # the time the end line names


def line_time(line: bytes) -> float | None:
    """The line's first ISO timestamp (slime's logger, Ray's, loguru's with a date) as Unix seconds."""
    ts = LINE_TS.search(line)
    return _unix(ts.group(1)) if ts else None


def _unix(raw: bytes) -> float | None:
    try:
        return datetime.fromisoformat(raw.decode().replace(",", ".")).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _events(path: Path, streams: tuple[Stream, ...]) -> list[tuple[int, Stream | None, re.Match, bytes]]:
    """(1-based line, stream or None for an end line, match, the line) of every step record and
    end line of one file, in file order; blocks of whole lines, as the parsers read."""
    out: list[tuple[int, Stream | None, re.Match, bytes]] = []
    line_no, tail = 1, b""
    with open(path, "rb") as f:
        while True:
            block = f.read(BLOCK)
            buf = tail + block
            cut = len(buf) if not block else buf.rfind(b"\n") + 1
            whole, tail = buf[:cut], buf[cut:]
            if b"\x1b" in whole:  # colour codes: `ESC[32mstep:3` is a step record (lines kept)
                whole = ANSI_BYTES.sub(b"", whole)
            hits = [(m.start(), None, m) for m in SLURM_END.finditer(whole)]
            hits += [(m.start(), s, m) for s in streams for m in s.step.finditer(whole)]
            last = 0
            for at, stream, m in sorted(hits, key=lambda h: h[0]):
                line_no += whole.count(b"\n", last, at)
                last = at
                end = whole.find(b"\n", at)
                out.append(
                    (line_no, stream, m, whole[whole.rfind(b"\n", 0, at) + 1 : None if end < 0 else end])
                )
            line_no += whole.count(b"\n", last)
            if not block:
                break
    return out


def _file_attempts(path: Path, root: Path, stream: Stream, events: list) -> list[Attempt]:
    """One stream's step records of one file, split into attempts at end lines and at a step
    number going backwards."""
    attempts = [Attempt(1)]
    pending: tuple[str, str, float | None] | None = None  # an end line not yet followed by a step
    for line, kind, m, text in events:
        if kind is None:
            reason = ENDED.get((m.group(2) or b"").strip(), "cancelled")
            pending = (reason, source(root, path, line), _unix(m.group(1)))
            if attempts[-1].steps:
                attempts[-1].ended, attempts[-1].end_line, attempts[-1].end_unix_s = pending
            continue
        if kind is not stream:
            continue
        step, cur = int(m.group(1)), attempts[-1]
        if cur.steps and (pending or step < cur.steps[-1].step):
            if not pending:
                cur.ended, cur.end_line = "restarted", source(root, path, line)
            attempts.append(cur := Attempt(len(attempts) + 1))
        pending = None
        seconds = stream.seconds(text) if stream.seconds else None
        cur.steps.append(Occurrence(step, seconds, (stream.clock or line_time)(text), line))
    return [a for a in attempts if a.steps]


def scan(
    root: Path, files: list[str | Path], streams: tuple[Stream, ...]
) -> tuple[list[Attempt], str | None]:
    """The attempts of the run whose step records the parser read from `files` (under root), and
    the file they were read from; ([], None) when no file holds a step record of `streams`."""
    best: tuple[tuple[int, ...], list[Attempt], str | None] = ((0, 0, 0), [], None)
    for f in map(Path, files):
        rel = f.relative_to(root).parts[:-1] if root.is_dir() and f.is_relative_to(root) else ()
        if BULK_DIRS.intersection(rel) or not f.is_file():
            continue  # per-rollout trace files: no trainer step records, and many of them
        events = _events(f, streams)
        for s in streams:
            found = _file_attempts(f, root, s, events)
            steps = [o for a in found for o in a.steps]
            rank = (len(found), len(steps), sum(o.at_unix_s is not None for o in steps))
            if rank > best[0]:
                best = (rank, found, source(root, f, None))
    return best[1], best[2]


def summary(
    attempts: list[Attempt],
    src: str | None,
    t0_unix_s: float | None,
    gpus: int | None,
    gpus_reason: str | None,
) -> dict[str, Any]:
    """The manifest's `attempts` block: each attempt's steps and window, the repeated steps, and
    the GPU time lost to the work the next attempt redid.

    t_start_s/t_end_s count from t0_unix_s (the trace's time base) and are null when the step lines
    carry no timestamp; Slurm's `CANCELLED AT` time, which has no zone, is read as UTC like the
    logs' own timestamps. `gpu_hours_lost` = the logged wall time of every discarded step occurrence
    (a step an attempt ran and a later attempt ran again) x the run's GPUs / 3600; start-up of the
    restart and work after the last logged step are not in the step records and not counted.
    """
    kept = attempt_of_step(attempts)
    rows, repeated, lost_s, unknown = [], set(), 0.0, []
    for a in attempts:
        first, last = a.steps[0], a.steps[-1]
        timed = first.at_unix_s is not None and first.seconds is not None
        start = first.at_unix_s - first.seconds if timed else None
        # the attempt ends at its last step record, or later at the scheduler's end line
        end = max(x for x in (last.at_unix_s, a.end_unix_s) if x is not None) if last.at_unix_s else None
        rows.append(
            {
                "attempt": a.attempt,
                "first_step": first.step,
                "last_step": last.step,
                "steps": len(a.steps),
                "t_start_s": None if start is None or t0_unix_s is None else round(start - t0_unix_s, 3),
                "t_end_s": None if end is None or t0_unix_s is None else round(end - t0_unix_s, 3),
                "ended": a.ended or "end of log",
                "line": a.end_line,
            }
        )
        for o in a.steps:
            if kept[o.step] != a.attempt:
                repeated.add(o.step)
                if o.seconds is None:
                    unknown.append(o.step)
                else:
                    lost_s += o.seconds
    out: dict[str, Any] = {
        "count": len(attempts),
        "source": src,
        "attempts": rows,
        "repeated_steps": sorted(repeated),
        "trace_keeps": "the last value logged for each step and key: a repeated step holds its last attempt's values",
        "lost_step_s": None if unknown else round(lost_s, 3),
    }
    if any(r["t_start_s"] is None for r in rows):
        out["times_reason"] = "the step lines carry no timestamp (or the trace has no time base)"
    if unknown:
        out["gpu_hours_lost"], out["gpu_hours_lost_reason"] = None, f"step(s) {unknown} logged no wall time"
    elif gpus is None:
        out["gpu_hours_lost"], out["gpu_hours_lost_reason"] = None, gpus_reason or "GPU count unknown"
    else:
        out["gpu_hours_lost"] = round(lost_s * gpus / 3600.0, 6)
        out["gpu_hours_lost_counts"] = (
            f"the discarded runs of the repeated steps ({lost_s:g} s) x {gpus} GPUs; the restart's "
            "start-up and work after an attempt's last logged step are not in the step records"
        )
    return out


def attempt_of_step(attempts: list[Attempt]) -> dict[int, int]:
    """step -> the attempt whose values the trace keeps for it (the last one that logged it)."""
    return {o.step: a.attempt for a in attempts for o in a.steps}
