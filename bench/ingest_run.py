"""What belongs to the one run `bench ingest` reads (bench/ingest.py), decided before anything is
written: a --logs folder with several runs is refused (harness wall-time files of different
windows, or different frameworks' logs side by side), only the GPU telemetry whose samples overlap
the run's window is kept (the others named as left out), and the attempts of a requeued run appended
to one log are recorded (runners/attempts.py) with the attempt each trace row keeps.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import telemetry
from bench.trace import read_env_file
from runners import attempts
from runners.base import ParseResult
from runners.run_config import harness_values, text_files

# what each framework's logs say about themselves (first MiB of any file), for "wrong --framework"
# and for several frameworks' logs side by side; the first SNIFF_FILES files are read
SNIFF_FILES = 200
SIGNATURES = {
    "verl": (b"(TaskRunner", b"actor_rollout_ref", b"timing_s/step"),
    "slime": (b"MegatronTrainRayActor", b"n_samples_per_prompt ....", b"--rollout-batch-size"),
    "prime_rl": (b"[trainer0]:", b"SUCCESS Step ", b'"progress/rollouts"', b"Starting orchestrator"),
}


def gpu_csvs(log_dir: Path) -> list[tuple[Path, telemetry.GpuCsv]]:
    """Every telemetry CSV under log_dir (bench.telemetry.read_gpu_csv: a header naming a time
    column and the device index; node = the file's stem), read once, t_s in Unix seconds (UTC)."""
    found = []
    for path in text_files(log_dir):
        read = telemetry.read_gpu_csv(path, path.stem)
        if read.is_telemetry and read.rows:
            found.append((path, read))
    return found


def read_gpu_csvs(
    log_dir: Path, t0_epoch_s: float | None, csvs: list[tuple[Path, telemetry.GpuCsv]] | None = None
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Rows of GPU_SCHEMA from the telemetry CSVs (`csvs`, default every one under log_dir), the
    files read, and the GPU names a `name` column gave. t_s counts from t0_epoch_s (Unix seconds),
    else from the first sample of all files."""
    csvs = gpu_csvs(log_dir) if csvs is None else csvs
    rows = [dict(r) for _, read in csvs for r in read.rows]
    if rows:
        t0 = t0_epoch_s if t0_epoch_s is not None else min(r["t_s"] for r in rows)
        for r in rows:
            r["t_s"] = round(r["t_s"] - t0, 3)
    return rows, [str(p) for p, _ in csvs], gpu_names(csvs)


def gpu_names(csvs: list[tuple[Path, telemetry.GpuCsv]]) -> list[str]:
    """The GPU model names the CSVs' `name` columns give, first-seen order."""
    names: list[str] = []
    for _, read in csvs:
        names += [n for n in read.names if n not in names]
    return names


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _span(read: telemetry.GpuCsv) -> tuple[float, float]:
    ts = [r["t_s"] for r in read.rows]
    return min(ts), max(ts)


def own_gpu_csvs(
    logs: Path, csvs: list[tuple[Path, telemetry.GpuCsv]], window: tuple[float, float, str] | None
) -> tuple[list[tuple[Path, telemetry.GpuCsv]], list[str]]:
    """The telemetry CSVs that belong to the run, and one line per CSV left out.

    A CSV belongs when its samples overlap the run's window (Unix seconds: the harness's start/end,
    else the trace's timestamped steps) for at least half of the shorter of the two spans: the
    nodes of one run sample at the same time, another run's sampler before or after it does not.
    Without a window, CSVs of separate periods cannot be told apart: refused (Refused)."""
    if window is None:
        periods: list[list] = []
        for path, read in sorted(csvs, key=lambda c: _span(c[1])):
            a, b = _span(read)
            if periods and a <= periods[-1][1]:
                periods[-1][1] = max(periods[-1][1], b)
                periods[-1][2].append(path)
            else:
                periods.append([a, b, [path]])
        if len(periods) > 1:
            shown = "; ".join(
                f"{', '.join(_rel(logs, p) for p in ps)}: {_utc(a)}-{_utc(b)[11:]} UTC"
                for a, b, ps in periods
            )
            raise Refused(
                f"--logs {logs}: GPU telemetry of {len(periods)} separate periods ({shown}) and no "
                "wall-time file or timestamped step to tell which is this run's; keep only this run's CSVs in --logs"
            )
        return csvs, []
    start, end, what = window
    kept, left = [], []
    for path, read in csvs:
        a, b = _span(read)
        overlap = min(b, end) - max(a, start)
        if a <= end and b >= start and overlap >= 0.5 * min(b - a, end - start):
            kept.append((path, read))
        else:
            left.append(
                f"{_rel(logs, path)}: left out, another run's GPU samples ({_utc(a)}-{_utc(b)[11:]} UTC, "
                f"outside this run's {what} {_utc(start)}-{_utc(end)[11:]} UTC)"
            )
    return kept, left


def run_window(logs: Path, result: ParseResult | None) -> tuple[float, float, str] | None:
    """The run's (start, end, what) in Unix seconds: the harness's wall-time file, else the span
    of the trace's steps when the parser placed them on the clock (`t0_unix_s`); None when neither."""
    vals, rel = harness_values(logs, ("start_epoch", "end_epoch"))
    if vals:
        return vals["start_epoch"], vals["end_epoch"], f"window ({rel})"
    t0 = result.run_info.get("t0_unix_s") if result else None
    starts = [r["t_start_s"] for r in result.steps if r.get("t_start_s") is not None] if result else []
    ends = [r["t_end_s"] for r in result.steps if r.get("t_end_s") is not None] if result else []
    if t0 is None or not starts or not ends:
        return None
    return t0 + min(starts), t0 + max(ends), "steps"


def ingest_gpus(inferred: dict[str, Any]) -> tuple[int | None, str | None]:
    """(every GPU the run's logs name by role, None) or (None, why not): as bench.metrics counts an
    ingested run's GPU-hours."""
    counts = [v.get("value") for v in (inferred.get("gpus") or {}).values() if isinstance(v, dict)]
    if not counts or None in counts:
        return None, "GPU roles unknown: pass experiment.trainer_gpus=<n> experiment.generator_gpus=<n>"
    return int(sum(counts)), None


def with_attempts(steps: Any, found: list[attempts.Attempt]) -> Any:
    """The parser's step rows with `attempt`: the attempt whose values each row keeps (the last
    that logged the step; null for a row whose step no step record of the attempt scan named)."""
    import pandas as pd

    df = steps.to_frame() if hasattr(steps, "to_frame") else pd.DataFrame.from_records(list(steps))
    return df.assign(attempt=df["step"].map(attempts.attempt_of_step(found)).astype("Int64"))


def attempts_warning(tried: dict[str, Any]) -> list[str]:
    """One warning line for a run that took more than one attempt: how each ended, where, and
    what was redone."""
    if tried["count"] < 2:
        return []
    ends = ", ".join(
        f"{a['ended']} after step {a['last_step']} ({a['line']})" for a in tried["attempts"][:-1]
    )
    lost = tried["gpu_hours_lost"]
    return [
        f"{tried['count']} attempts in {tried['source']}: {ends}; step(s) {tried['repeated_steps']} "
        f"repeated, the trace keeps their last attempt; "
        + (
            f"{lost:g} GPU-hours lost"
            if lost is not None
            else f"GPU-hours lost unknown ({tried['gpu_hours_lost_reason']})"
        )
    ]


def _rel(logs: Path, path: Path) -> str:
    return path.name if logs.is_file() else str(path.relative_to(logs))


class Refused(Exception):
    """Bad input: str() is the one line (or short list) the user sees; nothing was written."""


def runs_in(logs: Path, fw: str) -> None:
    """Refuse a --logs folder that holds more than one run: harness wall-time files (`start_epoch=`,
    `end_epoch=`) with different windows, or logs that carry different frameworks' signatures
    (SIGNATURES, file by file). Parsers merge every file they find, so one run's steps would meet
    another's wall clock and GPU samples; the line lists the runs found and the folder to pass."""
    windows: dict[tuple[float, float], tuple[Path, dict[str, Any]]] = {}
    signed: dict[str, list[Path]] = {}
    for i, path in enumerate(text_files(logs)):
        if path.stat().st_size <= 65536 and path.suffix not in (".csv", ".parquet", ".jsonl", ".json"):
            vals = read_env_file(path)  # a harness's wall-time file is small KEY=value text
            start, end = vals.get("start_epoch"), vals.get("end_epoch")
            if isinstance(start, int | float) and isinstance(end, int | float):
                windows.setdefault((float(start), float(end)), (path, vals))
        if i >= SNIFF_FILES:
            continue
        with open(path, "rb") as f:
            head = f.read(1 << 20)
        for name, marks in SIGNATURES.items():
            if any(m in head for m in marks):
                signed.setdefault(name, []).append(path)
    runs: list[tuple[Path, str]] = []  # (the run's folder, how the line names it)
    if len(windows) > 1:
        for (start, end), (path, v) in sorted(windows.items()):
            who = " ".join(str(v[k]) for k in ("framework", "run_id") if k in v)
            runs.append(
                (
                    path.parent,
                    f"{_rel(logs, path)}: {who + ', ' if who else ''}{_utc(start)}-{_utc(end)[11:]} UTC",
                )
            )
    elif len(signed) > 1:
        for name, paths in sorted(signed.items()):
            home = Path(os.path.commonpath(paths)) if len(paths) > 1 else paths[0].parent
            more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
            runs.append(
                (home, f"{name.replace('_', '-')}: {', '.join(_rel(logs, p) for p in paths[:3])}{more}")
            )
    else:
        return
    mine = {home for home, _ in runs if any(p.is_relative_to(home) for p in signed.get(fw, []))}
    example = next(iter(mine)) if len(mine) == 1 and logs not in mine else None
    raise Refused(
        f"--logs {logs}: holds {len(runs)} runs, not one ({'; '.join(label for _, label in runs)}); "
        "pass one run's folder as --logs" + (f" (this {fw} run's: --logs {example})" if example else "")
    )
