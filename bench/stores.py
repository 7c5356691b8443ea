"""Users' own runs where they live: a W&B run directory, a history table exported from W&B, TensorBoard
event files or an MLflow file-store run, read into the framework's own file-logger records so the
framework's one key map (runners/<framework>_logs.py) parses them exactly as it parses its logs.

    source = detect(path)                 # "console" | "wandb" | "table" | "tensorboard" | "mlflow"
    run = read(path, source)              # StoreRun: per-step history, config, console, GPU samples
    stage(run, framework, logs_dir)       # the framework's own formats, for its parser

What each store gives and lacks is in docs/ingest-sources.md; `StoreRun.lacks` says it per run, and
ingest writes it into the manifest (`source`). Nothing here touches the network.
"""

from __future__ import annotations

import json
import math
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.errors import UsageError
from runners.config_tree import set_dotted, yaml_scalar

SOURCES = ("console", "wandb", "table", "tensorboard", "mlflow")
TABLE_SUFFIXES = (".csv", ".parquet", ".jsonl")
# Every store lacks what only a framework's own files hold.
ALWAYS_LACKS = ["per-rollout records (trace/rollouts.parquet): metric stores hold per-step aggregates"]


@dataclass
class StoreRun:
    """One run read from a metric store."""

    source: str
    path: Path
    history: dict[int, dict[str, float]] = field(
        default_factory=lambda: defaultdict(dict)
    )  # step -> key -> value
    times: dict[int, float] = field(default_factory=dict)  # step -> Unix seconds it was logged
    config: dict[str, Any] = field(default_factory=dict)  # the framework's config as the store holds it
    console: str | None = None  # the captured console (W&B files/output.log, output records)
    gpu_rows: list[dict[str, Any]] = field(default_factory=list)  # GPU_SCHEMA rows (t_s from start_epoch)
    start_epoch: float | None = None
    end_epoch: float | None = None
    lacks: list[str] = field(default_factory=list)

    def manifest_entry(self) -> dict[str, Any]:
        return {"kind": self.source, "path": str(self.path), "steps": len(self.history), "lacks": self.lacks}


# ---------------------------------------------------------------------------------------------------
# Detection


def _wandb_runs(path: Path) -> list[Path]:
    """W&B run record files (run-<id>.wandb) at or under path (a run dir, wandb/ or its parent)."""
    if path.is_file():
        return [path] if path.suffix == ".wandb" else []
    direct = sorted(path.glob("*.wandb"))
    if direct:
        return direct
    nested = sorted(path.glob("*run-*/*.wandb")) + sorted(path.glob("wandb/*run-*/*.wandb"))
    return sorted(set(nested))


def _mlflow_runs(path: Path) -> list[Path]:
    if (path / "metrics").is_dir() and ((path / "params").is_dir() or (path / "meta.yaml").is_file()):
        return [path]
    return sorted(
        p.parent for p in path.glob("**/metrics") if p.is_dir() and (p.parent / "meta.yaml").is_file()
    )


def detect(path: Path) -> str:
    """What `path` holds: a W&B run, a history table, TensorBoard events, an MLflow run, or console logs."""
    if _wandb_runs(path):
        return "wandb"
    if path.is_file() and path.suffix in TABLE_SUFFIXES and _is_history_table(path):
        return "table"
    if (path.is_file() and path.name.startswith("events.out.tfevents.")) or (
        path.is_dir() and next(path.rglob("events.out.tfevents.*"), None) is not None
    ):
        return "tensorboard"
    if path.is_dir() and _mlflow_runs(path):
        return "mlflow"
    return "console"


def _is_history_table(path: Path) -> bool:
    """A W&B history export: a `_step` column (CSV header, parquet schema, or the first JSON line)."""
    try:
        if path.suffix == ".csv":
            with open(path, encoding="utf-8", errors="replace") as f:
                return "_step" in next(iter(__import__("csv").reader(f)), [])
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return "_step" in pq.read_schema(path).names
        with open(path, encoding="utf-8", errors="replace") as f:
            first = json.loads(f.readline() or "{}")
        return isinstance(first, dict) and "_step" in first
    except (OSError, ValueError, StopIteration):
        return False


def one(runs: list[Path], path: Path, what: str) -> Path:
    """The one run under path, or a refusal listing the runs found (one store run per ingest)."""
    if len(runs) > 1:
        listed = ", ".join(str(r) for r in runs[:6]) + (" ..." if len(runs) > 6 else "")
        raise UsageError(
            f"--logs {path}: {len(runs)} {what} runs found ({listed}); give one of them as --logs"
        )
    return runs[0]


def read(path: Path, source: str) -> StoreRun:
    reader = {
        "wandb": read_wandb,
        "table": read_table,
        "tensorboard": read_tensorboard,
        "mlflow": read_mlflow,
    }
    return reader[source](path)


def _put(run: StoreRun, step: Any, key: str, value: Any) -> None:
    """One numeric value of one step (non-numbers, histograms and media are not trace inputs)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or key.startswith("_"):
        return
    try:
        run.history[int(step)][key] = float(value)
    except (TypeError, ValueError, OverflowError):
        return


# ---------------------------------------------------------------------------------------------------
# W&B: the run's .wandb record file (LevelDB-log framing of wandb.proto Record messages)

WANDB_IDENT, WANDB_MAGIC, WANDB_HEADER = b":W&B", 0xBEE1, 7
BLOCK, RECORD_HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list[bytes]:
    """The payloads of a .wandb file: a 7-byte header (`:W&B`, magic 0xBEE1, version), then 32-KiB blocks
    of records (CRC32C 4 B, length 2 B, type 1 B: full, or first/middle/last fragments). A record cut
    short by a crash ends the list (what came before it is kept)."""
    data = Path(path).read_bytes()
    if (
        len(data) < WANDB_HEADER
        or data[:4] != WANDB_IDENT
        or struct.unpack("<H", data[4:6])[0] != WANDB_MAGIC
    ):
        raise UsageError(f"{path}: not a W&B record file (no ':W&B' header); expected run-<id>.wandb")
    out, pos, pending = [], WANDB_HEADER, b""
    while pos + RECORD_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < RECORD_HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        body = data[pos + 7 : pos + 7 + length]
        if kind == 0 and length == 0:  # zero padding at a block end
            pos += left
            continue
        if len(body) < length or kind not in (FULL, FIRST, MIDDLE, LAST):
            break
        pos += RECORD_HEADER + length
        if kind == FULL:
            out.append(body)
        elif kind == FIRST:
            pending = body
        elif kind == MIDDLE:
            pending += body
        else:
            out.append(pending + body)
            pending = b""
    return out


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _unwrap(value: Any) -> Any:
    """W&B stores config values as {"value": v, "desc": ...} in files/config.yaml: keep v."""
    if isinstance(value, dict) and "value" in value and set(value) <= {"value", "desc"}:
        return _unwrap(value["value"])
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value


def read_wandb(path: Path) -> StoreRun:
    from wandb.proto import wandb_internal_pb2 as pb

    record_file = one(_wandb_runs(path), path, "W&B")
    run = StoreRun("wandb", record_file.parent)
    console: list[str] = []
    for payload in wandb_records(record_file):
        rec = pb.Record()
        try:
            rec.ParseFromString(payload)
        except Exception:  # noqa: BLE001 - a record this wandb.proto does not know
            continue
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            items = {("/".join(i.nested_key) or i.key): _json(i.value_json) for i in rec.history.item}
            step = items.get("_step", rec.history.step.num)
            for key, value in items.items():
                _put(run, step, key, value)
            if isinstance(items.get("_timestamp"), int | float):
                run.times[int(step)] = float(items["_timestamp"])
        elif kind == "config":
            for item in rec.config.update:
                key = "/".join(item.nested_key) or item.key
                if not key.startswith("_"):
                    run.config[key] = _unwrap(_json(item.value_json))
        elif kind == "run":
            run.start_epoch = rec.run.start_time.seconds + rec.run.start_time.nanos / 1e9 or run.start_epoch
            for item in rec.run.config.update:
                key = "/".join(item.nested_key) or item.key
                if not key.startswith("_"):
                    run.config.setdefault(key, _unwrap(_json(item.value_json)))
        elif kind == "stats":
            t = rec.stats.timestamp.seconds + rec.stats.timestamp.nanos / 1e9
            run.gpu_rows += _wandb_gpu_rows(t, {i.key: _json(i.value_json) for i in rec.stats.item})
        elif kind in ("output", "output_raw"):
            console.append(getattr(rec, kind).line)
    files = record_file.parent / "files"
    if not run.config and (files / "config.yaml").is_file():
        loaded = yaml.safe_load((files / "config.yaml").read_text()) or {}
        run.config = {
            k: _unwrap(v) for k, v in loaded.items() if not k.startswith("_") and k != "wandb_version"
        }
    if (files / "output.log").is_file():
        run.console = (files / "output.log").read_text(errors="replace")
    elif console:
        run.console = "".join(console)
    if run.times:
        run.end_epoch = max(run.times.values())
        run.start_epoch = run.start_epoch or min(run.times.values())
    _finish_gpu(run)
    run.lacks = ALWAYS_LACKS + (
        [] if run.gpu_rows else ["GPU telemetry: the run logged no W&B system metrics"]
    )
    run.lacks += [] if run.console else ["the console: no files/output.log or output records"]
    return run


def _wandb_gpu_rows(t: float, items: dict[str, Any]) -> list[dict[str, Any]]:
    """W&B system metrics (`gpu.<i>.gpu` %, `gpu.<i>.powerWatts`, `gpu.<i>.memoryAllocatedBytes`) as
    GPU_SCHEMA rows; t_s is made relative to the run's start in _finish_gpu."""
    by_gpu: dict[int, dict[str, Any]] = defaultdict(dict)
    for key, value in items.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "gpu" and parts[1].isdigit() and isinstance(value, int | float):
            by_gpu[int(parts[1])][parts[2]] = float(value)
    rows = []
    for gpu, m in sorted(by_gpu.items()):
        mem = m.get("memoryAllocatedBytes")
        rows.append(
            {
                "t_s": t,
                "node": "wandb",
                "gpu": gpu,
                "util_pct": m.get("gpu"),
                "mem_used_mib": mem / 2**20 if mem is not None else None,
                "power_w": m.get("powerWatts"),
            }
        )
    return rows


def _finish_gpu(run: StoreRun) -> None:
    if run.gpu_rows:
        t0 = run.start_epoch if run.start_epoch is not None else min(r["t_s"] for r in run.gpu_rows)
        for r in run.gpu_rows:
            r["t_s"] -= t0


def _metrics_only(run: StoreRun, no_config: str, no_gpu: str) -> StoreRun:
    """A store of per-step metrics alone: its wall window from their timestamps, and what it lacks."""
    if run.times:
        run.start_epoch, run.end_epoch = min(run.times.values()), max(run.times.values())
    run.lacks = ALWAYS_LACKS + [
        f"the run's config ({no_config}): pass model=, hardware= and the workload keys",
        f"GPU telemetry ({no_gpu})",
        "the console",
    ]
    return run


# ---------------------------------------------------------------------------------------------------
# A W&B history table: the UI's CSV export, or run.history() / scan_history() saved as CSV, parquet
# or JSON lines, with `_step`.


def read_table(path: Path) -> StoreRun:
    import pandas as pd

    run = StoreRun("table", path)
    if path.suffix == ".csv":
        frame = pd.read_csv(path)
    elif path.suffix == ".parquet":
        frame = pd.read_parquet(path)
    else:
        frame = pd.read_json(path, lines=True)
    if "_step" not in frame:
        raise UsageError(f"--logs {path}: no _step column; expected a W&B history export (run.history())")
    for record in frame.to_dict("records"):
        step = record.get("_step")
        if step is None or (isinstance(step, float) and math.isnan(step)):
            continue
        for key, value in record.items():
            if isinstance(value, float) and math.isnan(value):
                continue  # W&B exports a key a step did not log as an empty cell
            _put(run, step, str(key), value)
        if isinstance(record.get("_timestamp"), int | float) and not math.isnan(record["_timestamp"]):
            run.times[int(step)] = float(record["_timestamp"])
    return _metrics_only(
        run, "a history table holds metrics only", "system metrics are a separate W&B stream"
    )


# ---------------------------------------------------------------------------------------------------
# TensorBoard event files (verl's `tensorboard` logger and others), read by TensorBoard's own reader


def read_tensorboard(path: Path) -> StoreRun:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = [path] if path.is_file() else sorted(path.rglob("events.out.tfevents.*"))
    dirs = sorted({f.parent for f in files})
    logdir = one(dirs, path, "TensorBoard") if path.is_dir() else path
    run = StoreRun("tensorboard", logdir)
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    for tag in tags.get("scalars", []):
        for ev in acc.Scalars(tag):
            _put(run, ev.step, tag, ev.value)
            run.times[int(ev.step)] = max(run.times.get(int(ev.step), 0.0), ev.wall_time)
    for tag in tags.get("tensors", []):  # TF2 / torch writers may log scalars as rank-0 tensors
        for ev in acc.Tensors(tag):
            values = list(ev.tensor_proto.float_val) or list(ev.tensor_proto.double_val)
            if len(values) == 1:
                _put(run, ev.step, tag, values[0])
                run.times[int(ev.step)] = max(run.times.get(int(ev.step), 0.0), ev.wall_time)
    return _metrics_only(run, "event files hold scalars", "event files hold no system metrics")


# ---------------------------------------------------------------------------------------------------
# MLflow file store: mlruns/<experiment>/<run>/{metrics,params,meta.yaml}


def read_mlflow(path: Path) -> StoreRun:
    root = one(_mlflow_runs(path), path, "MLflow")
    run = StoreRun("mlflow", root)
    metrics = root / "metrics"
    for f in sorted(p for p in metrics.rglob("*") if p.is_file()):
        key = f.relative_to(metrics).as_posix()  # MLflow keeps '/' in a key as sub-folders
        for line in f.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            try:  # "<timestamp ms> <value> [<step>]"
                ts, value, step = int(parts[0]), float(parts[1]), int(parts[2]) if len(parts) > 2 else 0
            except ValueError:
                continue
            _put(run, step, key, value)
            run.times[step] = max(run.times.get(step, 0.0), ts / 1000.0)
    params = root / "params"
    flat = {
        f.relative_to(params).as_posix(): f.read_text(errors="replace")
        for f in params.rglob("*")
        if f.is_file()
    }
    run.config = _nest({k.replace("/", "."): yaml_scalar(v) for k, v in flat.items()})
    meta = yaml.safe_load((root / "meta.yaml").read_text()) if (root / "meta.yaml").is_file() else {}
    if isinstance(meta, dict) and meta.get("start_time"):
        run.start_epoch = meta["start_time"] / 1000.0
        run.end_epoch = (meta.get("end_time") or 0) / 1000.0 or None
    if run.times:
        run.start_epoch = run.start_epoch or min(run.times.values())
        run.end_epoch = run.end_epoch or max(run.times.values())
    run.lacks = ALWAYS_LACKS + ["GPU telemetry (MLflow system metrics are not read)", "the console"]
    return run


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """`a.b.c: v` (MLflow params, W&B flattened configs) -> {a: {b: {c: v}}}."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        set_dotted(out, key, value)
    return out


# ---------------------------------------------------------------------------------------------------
# Staging: the store's run in the framework's own file formats, for the framework's own parser.


def stage(run: StoreRun, framework: str, logs: Path) -> list[str]:
    """Write `run` into logs/ as the framework itself logs: verl's file-logger JSONL and its Hydra
    config dump, prime-rl's metrics.jsonl, slime's `perf N: {...}` console records; the console the
    store captured goes beside them (the console parser adds what only the console has) and the
    run's wall clock into wall_time.env. Returns the files written."""
    logs.mkdir(parents=True, exist_ok=True)
    steps = sorted(run.history)
    written = []

    def write(name: str, text: str) -> None:
        (logs / name).write_text(text)
        written.append(name)

    config = _nest(run.config) if any("." in k for k in run.config) else run.config
    if framework == "verl":
        write("metrics.jsonl", "".join(json.dumps({"step": s, "data": run.history[s]}) + "\n" for s in steps))
        if config:
            write("config.yaml", yaml.safe_dump(config, sort_keys=False))
    elif framework == "prime_rl":
        write(
            "metrics.jsonl",
            "".join(
                json.dumps(
                    {"step": s, **({"time": run.times[s]} if s in run.times else {}), **run.history[s]}
                )
                + "\n"
                for s in steps
            ),
        )
        if config:
            write("config.json", json.dumps(config))
    elif framework == "slime":
        lines = []
        for s in steps:
            rollout = {
                k: v
                for k, v in run.history[s].items()
                if k == "perf/rollout_time" or k.startswith("rollout/")
            }
            train = {k: v for k, v in run.history[s].items() if k not in rollout}
            # slime logs the trainer's and the rollout side's perf dicts as two records of the same id
            lines += [f"perf {s}: {payload!r}" for payload in (train, rollout) if payload]
        write("store-records.log", "\n".join(lines) + "\n")
    else:
        raise UsageError(
            f"--framework {framework}: no store staging for it; expected verl, slime or prime_rl"
        )
    if run.console:
        write("output.log", run.console)
    if run.start_epoch is not None and run.end_epoch is not None and run.end_epoch >= run.start_epoch:
        wall = run.end_epoch - run.start_epoch
        write(
            "wall_time.env",
            f"start_epoch={run.start_epoch:.3f}\nend_epoch={run.end_epoch:.3f}\nwall_seconds={wall:.3f}\n",
        )
    return written
