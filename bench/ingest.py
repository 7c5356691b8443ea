"""`python -m bench ingest --framework X --logs PATH --out RUN_DIR [overrides]`: a framework's native
logs -> a run directory (trace/steps.parquet, trace/rollouts.parquet, trace/gpu.parquet,
manifest.json with mode "native" and an `inferred` block, then metrics.json).

Framework-neutral: the runner named by conf/framework/X.yaml parses the steps, runners/X_config.py
reads the configuration that ran (bench/infer.py matches the model and merges what the user gives),
runners/log_end.py reads how the logs end. No experiment is needed: what the logs hold is used,
what they lack is unknown (null with the reason) unless given (`hardware=h100_sxm`,
`model=qwen3_0_6b`, `workload.group_size=16`). GPU telemetry CSVs in the logs (nvidia-smi's
`--format=csv` with a header row) are read by content, whatever their name.

Bad input ends with one line on stderr and exit 2, nothing written: missing or empty logs, logs of
another framework, an --out that exists (runs are never overwritten), a given value the logs
contradict.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from bench import infer, infer_teacher, telemetry
from bench.config import CONF_DIR, compose
from bench.errors import EXIT_USAGE, UsageError
from bench.trace import RunPaths, write_gpu, write_manifest, write_rollouts, write_steps
from runners import log_end
from runners.base import ParseResult, load_runner
from runners.run_config import binary_share, harness_values, text_files

NOT_LOGS = (".csv", ".parquet", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".env", ".py", ".sh")
# what each framework's logs say about themselves (first MiB of any file), for "wrong --framework"
SIGNATURES = {
    "verl": (b"(TaskRunner", b"actor_rollout_ref", b"timing_s/step"),
    "slime": (b"MegatronTrainRayActor", b"n_samples_per_prompt ....", b"--rollout-batch-size"),
    "prime_rl": (b"[trainer0]:", b"SUCCESS Step ", b'"progress/rollouts"', b"Starting orchestrator"),
}


def read_gpu_csvs(
    log_dir: Path, t0_epoch_s: float | None
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Rows of GPU_SCHEMA from every telemetry CSV under log_dir (bench.telemetry.read_gpu_csv: a
    header naming a time column and the device index; node = the file's stem), the files read, and
    the GPU names a `name` column gave. Timestamps are read as UTC; t_s counts from t0_epoch_s (Unix
    seconds), else from the first sample of all files.
    """
    rows: list[dict[str, Any]] = []
    files, names = [], []
    for path in text_files(log_dir):
        read = telemetry.read_gpu_csv(path, path.stem)
        if not read.is_telemetry:
            continue
        rows += read.rows
        names += [n for n in read.names if n not in names]
        files.append(str(path))
    if rows:
        t0 = t0_epoch_s if t0_epoch_s is not None else min(r["t_s"] for r in rows)
        for r in rows:
            r["t_s"] = round(r["t_s"] - t0, 3)
    return rows, files, names


class Refused(Exception):
    """Bad input: str() is the one line (or short list) the user sees; nothing was written."""


def frameworks() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "framework").glob("*.yaml"))


def log_files(logs: Path) -> tuple[list[Path], list[str]]:
    """(text logs to read for how the run ended, 'file: reason' of files skipped as not text)."""
    keep, skipped = [], []
    for path in text_files(logs):
        if path.suffix in NOT_LOGS or path.name.startswith("."):
            continue
        with open(path, "rb") as f:
            head = f.read(8192).replace(b"\0", b"")
        junk = binary_share(head)
        if junk > 0.3:
            skipped.append(
                f"{path}: skipped, binary ({junk:.0%} of its first {len(head)} non-NUL bytes are not text)"
            )
        elif head or path.stat().st_size:
            keep.append(path)
    return keep, skipped


def sniff_framework(logs: Path) -> str | None:
    """The framework whose signatures the logs' first MiB carry most, if any."""
    hits = dict.fromkeys(SIGNATURES, 0)
    for path in text_files(logs)[:200]:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
        for fw, marks in SIGNATURES.items():
            hits[fw] += sum(m in head for m in marks)
    best = max(hits, key=hits.get)
    return best if hits[best] else None


def wall_window(logs: Path, steps: list[dict[str, Any]], info: dict[str, Any]) -> dict[str, Any]:
    """The one wall clock every framework's rates use: the harness's start/end epochs when a
    wall-time file (`start_epoch=`, `end_epoch=` lines) is in the logs, else the trace's span from
    the first step's start to the last step's end."""
    vals, rel = harness_values(logs, ("start_epoch", "end_epoch"))
    if vals:
        return {
            "window": "harness",
            "definition": "harness start (before any framework or teacher process) to harness end",
            "wall_s": vals["end_epoch"] - vals["start_epoch"],
            "start_epoch_s": vals["start_epoch"],
            "end_epoch_s": vals["end_epoch"],
            "framework_start_epoch_s": vals.get("training_start_epoch"),
            "source": str(logs if logs.is_file() else logs / rel),
        }
    starts = [r["t_start_s"] for r in steps if r.get("t_start_s") is not None]
    ends = [r["t_end_s"] for r in steps if r.get("t_end_s") is not None]
    if starts and ends:
        return {
            "window": "trace",
            "definition": "first step's start to the last step's end (framework start-up not included)",
            "wall_s": max(ends) - min(starts),
            "source": "trace/steps.parquet t_start_s/t_end_s",
        }
    return {"window": None, "wall_s": None, "reason": "no wall-time file and no step timestamps in the logs"}


def phase_of(n_steps: int, total: int | None, done: bool) -> str:
    """Where a run was when it failed, from the steps it completed: "launch or first step" (no step
    finished: bring-up and the first step cannot be told apart from the steps alone), "warm-up"
    (within the steps metrics skip before the steady window, ceil 10% of the configured steps, at
    least 1), "steady state", or "teardown" (every configured step done)."""
    if done:
        return "teardown"
    if n_steps == 0:
        return "launch or first step"
    warm_up = max(1, math.ceil(0.1 * total)) if total else 1
    return "warm-up" if n_steps <= warm_up else "steady state"


def run_status(n_steps: int, total: int | None, end: log_end.LogEnd) -> tuple[str, dict[str, Any] | None]:
    """(status, failure) from the steps kept, the configured step count and how the logs end."""
    done = total is not None and n_steps >= total
    f = end.failure
    if f is None and end.cut_files and not done:
        return ("partial" if n_steps else "failed"), {
            "kind": "truncated",
            "message": f"log cut off mid-line after step {n_steps}" + (f" of {total}" if total else ""),
            "source": end.cut_files[0],
            "phase": phase_of(n_steps, total, done),
        }
    if f is None and total is not None and not done:
        return ("partial" if n_steps else "failed"), {
            "kind": "truncated",
            "message": f"the logs end after step {n_steps} of {total} with no error logged",
            "source": None,
            "phase": phase_of(n_steps, total, done),
        }
    if f is None:
        return ("completed" if n_steps else "failed"), None
    failure = {
        "kind": f.kind,
        "message": f.text(),
        "source": f.source,
        "phase": phase_of(n_steps, total, done),
    }
    if len(end.failures) > 1:
        failure["also"] = [g.text() + f" ({g.source})" for g in end.failures[1:]]
    return ("completed" if done else "partial" if n_steps else "failed"), failure


def _runner(cfg: Any, overrides: list[str], logged_hw: str | None) -> Any:
    """The framework's runner, with the GPU peak its parser may use for native MFU taken from the
    run's own hardware (given, or from the logs), never from the compose default."""
    node = OmegaConf.to_container(cfg.framework, resolve=True)
    native = node.get("native") or {}
    if "peak_flops" in native:
        groups = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
        if groups & {"hardware", "experiment"}:
            native["peak_flops"] = float(cfg.hardware.peak_bf16_flops)
        elif logged_hw:
            native["peak_flops"] = float(compose([f"hardware={logged_hw}"]).hardware.peak_bf16_flops)
        else:
            native["peak_flops"] = None
    return load_runner(OmegaConf.create(node))


def ingest(
    cfg: Any, logs: Path, run_dir: Path, overrides: list[str] = ()
) -> tuple[ParseResult, dict[str, Any]]:
    """Parse `logs` with cfg's runner, infer what ran, write the run directory; returns
    (parse result, manifest). Raises Refused before writing anything on bad input."""
    fw = str(cfg.framework.name)
    files, skipped = log_files(logs)
    if not files and not any(p.stat().st_size for p in text_files(logs)):
        raise Refused(f"--logs {logs}: empty (no file with any content); nothing to ingest")
    if not files and skipped and len(skipped) == len(text_files(logs)):
        raise Refused(f"--logs {logs}: no text log, only binary files ({'; '.join(skipped)})")
    gpu_rows, gpu_files, gpu_names = read_gpu_csvs(logs, None)
    hardware = infer.hardware_from_logs(logs, gpu_names)
    result = _runner(cfg, overrides, hardware[0]).parse_logs(logs)
    end = log_end.scan(logs, files)
    if not result.steps:
        other = sniff_framework(logs)
        if other and other != fw:
            raise Refused(
                f"--logs {logs}: no {fw} records; these look like {other.replace('_', '-')} logs: `--framework {other}`"
            )
        if end.failure is None:
            raise Refused(
                f"--logs {logs}: no {fw} step records and no error found in {len(files)} file(s); is this a {fw} run?"
            )
    reader = importlib.import_module(f"runners.{fw}_config")
    facts = reader.read(logs, result.run_info)
    epoch_rows, _, _ = read_gpu_csvs(logs, 0.0)  # t_s in Unix seconds, for the harness's epochs
    gpu_src = ", ".join(str(Path(f).relative_to(logs)) if logs.is_dir() else Path(f).name for f in gpu_files)
    teacher_unknown = infer_teacher.complete(facts, logs, epoch_rows, gpu_src or None)
    gpu_rows, _, _ = read_gpu_csvs(logs, result.run_info.get("start_epoch"))
    try:
        inferred, config = infer.resolve(facts, list(overrides), cfg, hardware, teacher_unknown)
    except infer.Conflict as e:
        raise Refused(str(e)) from None
    total = facts["total_steps"].value if "total_steps" in facts else None
    status, failure = run_status(len(result.steps), total, end)
    wall = wall_window(logs, result.steps, result.run_info)
    paths = RunPaths(run_dir).make()
    if result.steps:
        write_steps(paths.steps, result.steps)
    if result.rollouts:
        write_rollouts(paths.rollouts, result.rollouts)
    if gpu_rows:
        write_gpu(paths.gpu, gpu_rows)
    manifest: dict[str, Any] = {
        "experiment": str(config["experiment"].get("name") or "ingested"),
        "run_id": run_dir.name,
        "framework": fw,
        "framework_version": str(cfg.framework.version),
        "mode": "native",
        "status": status,
        "failure": failure,
        "source_logs": str(logs.resolve()),
        "parsed_files": result.files + gpu_files,
        "skipped_files": skipped,
        "skipped_lines": result.skipped_lines,
        "warnings": list(result.warnings) + skipped,
        "run_info": result.run_info,
        "inferred": inferred,
        "wall_window": wall,
        "config": config,
    }
    if wall.get("wall_s") is not None:
        manifest["wall_s"] = float(wall["wall_s"])
    if wall.get("start_epoch_s") is not None:
        manifest["start_epoch_s"], manifest["end_epoch_s"] = wall["start_epoch_s"], wall["end_epoch_s"]
    write_manifest(paths, manifest)
    return result, manifest


def _refuse(text: str) -> int:
    for line in text.splitlines():
        print(f"error: {line}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str]) -> int:
    """Ingest; 0 when the run directory was written, 2 on bad input (one line, nothing written)."""
    ap = argparse.ArgumentParser(prog="python -m bench ingest", description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, help="conf/framework/<name>.yaml")
    ap.add_argument("--logs", type=Path, required=True, help="native log folder (or one file)")
    ap.add_argument("--out", type=Path, required=True, help="run directory to write (must not exist)")
    args, overrides = ap.parse_known_args(argv)
    if args.framework not in frameworks():
        return _refuse(f"framework {args.framework!r} not found; choose one of {', '.join(frameworks())}")
    if not args.logs.exists():
        return _refuse(f"--logs {args.logs}: no such file or directory")
    if args.out.exists():
        return _refuse(
            f"--out {args.out}: already exists; runs are never overwritten: choose a new directory"
        )
    overrides = [o for o in overrides if not o.startswith("framework=")]
    try:
        cfg = compose([*overrides, f"framework={args.framework}"])
    except UsageError as e:  # an unknown group option or key, already one line per problem
        return _refuse(str(e))
    try:
        result, manifest = ingest(cfg, args.logs, args.out, overrides)
    except Refused as e:
        return _refuse(str(e))
    for w in manifest["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    failure = manifest["failure"]
    print(
        f"{args.out}: {manifest['status']}, {len(result.steps)} steps from {len(result.files)} file(s), "
        f"{result.skipped_lines} skipped line(s)"
        + (f"; {failure['message']} ({failure['phase']})" if failure else "")
    )
    if result.steps:
        return _metrics(args.out, manifest)
    return 0


def _metrics(run_dir: Path, manifest: dict[str, Any]) -> int:
    """metrics.json of the new run; a run whose metrics fail is not `completed` (its manifest says
    `partial` with the error), exit 1."""
    from bench.metrics import write_metrics

    try:
        metrics = write_metrics(run_dir)
    except Exception as e:  # any failure here is the run's, recorded, not a traceback
        manifest["status"] = "partial"
        manifest["failure"] = {"kind": "MetricsError", "message": f"{type(e).__name__}: {e}", "source": None,
                               "phase": "metrics"}  # fmt: skip
        write_manifest(RunPaths(run_dir), manifest)
        print(f"{run_dir}: metrics failed ({type(e).__name__}: {e}); status partial", file=sys.stderr)
        return 1
    print(f"{run_dir / 'metrics.json'}: {sum(v is not None for v in metrics.values())} values")
    return 0
