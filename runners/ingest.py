"""`python -m bench ingest --framework X --logs PATH --out RUN_DIR [hydra overrides]`: native logs ->
a run directory (trace/steps.parquet, trace/rollouts.parquet, trace/gpu.parquet, manifest.json with
mode "native", then metrics.json).

Framework-neutral: the runner named by conf/framework/X.yaml parses the logs; this module only
writes the trace contract. The Hydra overrides describe the workload the logs came from (experiment,
GPU split, hardware): metrics need them for FLOPs, GPU-hours and cost. GPU telemetry CSVs in the
logs (nvidia-smi's `--format=csv` with a header row) are read by content, whatever their name.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import importlib.util
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from bench.config import compose
from bench.trace import RunPaths, write_gpu, write_manifest, write_rollouts, write_steps
from runners.base import ParseResult, load_runner

# header name (nvidia-smi's own, or the snake_case a harness wrote) -> GPU_SCHEMA column
GPU_COLUMNS = {
    "timestamp": "t_s",
    "index": "gpu",
    "utilization.gpu [%]": "util_pct",
    "utilization_gpu_pct": "util_pct",
    "memory.used [MiB]": "mem_used_mb",
    "memory_used_mib": "mem_used_mb",
    "power.draw [W]": "power_w",
    "power_w": "power_w",
}


def read_gpu_csvs(log_dir: Path, t0_epoch_s: float | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of GPU_SCHEMA from every telemetry CSV under log_dir (header with timestamp and index).

    Timestamps ('YYYY/MM/DD HH:MM:SS.mmm') are read as UTC; t_s counts from t0_epoch_s (Unix
    seconds), else from the first sample. MiB are kept as the mem_used_mb figure.
    """
    rows: list[dict[str, Any]] = []
    files = []
    paths = [log_dir] if log_dir.is_file() else sorted(p for p in log_dir.rglob("*") if p.is_file())
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            header = [h.strip() for h in f.readline().split(",")]
            if not header or header[0] != "timestamp" or "index" not in header:
                continue
            cols = {i: GPU_COLUMNS[h] for i, h in enumerate(header) if h in GPU_COLUMNS}
            for rec in csv.reader(f):
                row = _gpu_row(rec, cols, path.stem)
                if row is not None:
                    rows.append(row)
        files.append(str(path))
    if rows:
        t0 = t0_epoch_s if t0_epoch_s is not None else min(r["t_s"] for r in rows)
        for r in rows:
            r["t_s"] -= t0
    return rows, files


def _gpu_row(rec: list[str], cols: dict[int, str], node: str) -> dict[str, Any] | None:
    row: dict[str, Any] = {"node": node}
    try:
        for i, name in cols.items():
            v = rec[i].strip()
            if name == "t_s":
                stamp = dt.datetime.strptime(v, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.UTC)
                row[name] = stamp.timestamp()
            elif name == "gpu":
                row[name] = int(v)
            else:
                row[name] = float(v) if v.replace(".", "", 1).isdigit() else None
    except (IndexError, ValueError):
        return None  # a cut-off last line
    return row


def ingest(cfg: Any, logs: Path, run_dir: Path) -> tuple[ParseResult, dict[str, Any]]:
    """Parse `logs` with cfg's runner and write the run directory; returns (parse result, manifest)."""
    paths = RunPaths(run_dir).make()
    result = load_runner(cfg.framework).parse_logs(logs)
    if result.steps:
        write_steps(paths.steps, result.steps)
    if result.rollouts:
        write_rollouts(paths.rollouts, result.rollouts)
    info = result.run_info
    gpu_rows, gpu_files = read_gpu_csvs(logs, info.get("start_epoch"))
    if gpu_rows:
        write_gpu(paths.gpu, gpu_rows)
    manifest: dict[str, Any] = {
        "experiment": str(cfg.experiment.name),
        "run_id": run_dir.name,
        "framework": str(cfg.framework.name),
        "framework_version": str(cfg.framework.version),
        "mode": "native",
        "status": "completed" if result.steps else "failed",
        "source_logs": str(logs.resolve()),
        "parsed_files": result.files + gpu_files,
        "skipped_lines": result.skipped_lines,
        "warnings": list(result.warnings),
        "run_info": info,
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
    }
    if info.get("wall_seconds") is not None:
        manifest["wall_s"] = float(info["wall_seconds"])
    if info.get("start_epoch") is not None and info.get("end_epoch") is not None:
        manifest["start_epoch_s"], manifest["end_epoch_s"] = info["start_epoch"], info["end_epoch"]
    write_manifest(paths, manifest)
    return result, manifest


def main(argv: list[str]) -> int:
    """Ingest; 0 when steps were traced, 1 when the logs held none (the run dir is still written)."""
    ap = argparse.ArgumentParser(prog="python -m bench ingest", description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, help="conf/framework/<name>.yaml")
    ap.add_argument("--logs", type=Path, required=True, help="native log folder (or one file)")
    ap.add_argument("--out", type=Path, required=True, help="run directory to write")
    args, overrides = ap.parse_known_args(argv)
    if not args.logs.exists():
        print(f"--logs {args.logs}: no such file or directory", file=sys.stderr)
        return 2
    overrides = [o for o in overrides if not o.startswith("framework=")] + [f"framework={args.framework}"]
    cfg = compose(overrides)
    result, _ = ingest(cfg, args.logs, args.out)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(
        f"{args.out}: {len(result.steps)} steps from {len(result.files)} file(s), {result.skipped_lines} skipped line(s)"
    )
    if importlib.util.find_spec("bench.metrics") is not None and result.steps:
        from bench.metrics import write_metrics

        metrics = write_metrics(args.out)
        print(f"{args.out / 'metrics.json'}: {sum(v is not None for v in metrics.values())} values")
    return 0 if result.steps else 1
