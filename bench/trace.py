"""The trace contract: the run directory, steps.parquet, rollouts.parquet, manifest.json.

Every stage speaks only through these files (docs/architecture.md, "The run directory"): runners and
the emulator write them, metrics and the report read them. Writes are atomic (temporary file
in the same directory, then rename), so a reader never sees half a file and a crash never
leaves a truncated one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# Redaction lives in its own leaf module; runners reach it through the trace contract.
from bench.redact import carried_secrets, carried_secrets_note, redact, redact_file, redact_text  # noqa: F401

F64, I64, STR = pa.float64(), pa.int64(), pa.string()

# steps.parquet: one row per trainer step; times in seconds, counts in samples/tokens.
STEP_FIELDS: list[tuple[str, pa.DataType]] = [
    ("step", I64),
    ("t_start_s", F64),  # since the run's start
    ("t_end_s", F64),
    ("step_s", F64),  # wall time of the step
    ("wait_s", F64),  # trainer idle, waiting for data
    ("gen_s", F64),  # generation time attributed to the step (meaning per framework mode)
    ("logprob_s", F64),  # old/ref log-prob forward passes (= ref_s + old_logprob_s where split)
    ("compute_s", F64),  # forward + backward + optimizer (the update phase)
    ("sync_s", F64),  # weight sync trainer -> generator
    # teacher / reward-model scoring as a phase of the trainer step, wall time as the framework logs it
    # (verl timing_s/reward, Miles' Megatron teacher forward); null when not logged or no scoring stage
    ("score_s", F64),
    # scoring of the step's rollouts on the generation side, concurrent with generation like gen_s
    # (emulated: union of the step's groups' scoring batches): inside the trainer's wait, not a phase
    ("gen_score_s", F64),
    # Phases of the step that only some frameworks time (null when not logged); see STEP_PHASES
    ("ref_s", F64),  # reference-policy log-prob pass (part of logprob_s)
    ("old_logprob_s", F64),  # old-policy log-prob and critic value passes (part of logprob_s)
    ("adv_s", F64),  # advantage computation
    ("handoff_s", F64),  # colocated hand-off (trainer offloaded, engines woken), timed inside wait_s
    ("checkpoint_s", F64),  # checkpoint save inside the step
    ("validation_s", F64),  # validation (test-set generation and scoring) inside the step
    ("data_s", F64),  # data loading
    ("unattributed_s", F64),  # step_s minus every phase above: time no timer covers (bench.trace.step_phases)
    ("samples", I64),  # rollouts trained on
    ("prompts", I64),
    ("prompt_tokens", I64),
    ("response_tokens", I64),  # response tokens trained on
    ("dispatched_samples", I64),
    ("discarded_samples", I64),  # oversampling / staleness drops
    ("filtered_samples", I64),  # zero-advantage groups dropped
    ("generated_tokens", I64),  # response tokens generated (trained or not)
    ("staleness_mean", F64),  # policy versions behind, over the step's samples
    ("staleness_max", F64),
    ("reward_mean", F64),
    ("solve_all_frac", F64),  # groups where every rollout passed
    ("solve_none_frac", F64),  # groups where every rollout failed
    # 1-based attempt of a requeued run whose values the row keeps (the last that logged the step;
    # the manifest's `attempts` lists every attempt); null when not parsed from logs (emulated)
    ("attempt", I64),
]
STEP_SCHEMA = pa.schema(STEP_FIELDS)

# The phases of a trainer step: disjoint parts of step_s (s), in the order the report draws them.
# wait_s is the generation phase of a colocated run (the trainer's own GPUs generate) and waiting for
# rollouts in a disaggregated one, less handoff_s (timed inside it); logprob_s counts only where a
# writer does not split it into ref_s + old_logprob_s. unattributed_s closes the sum: step_s = the
# sum of the phases (docs/metrics.md "Phases").
STEP_PHASES = (
    "wait_s",
    "score_s",
    "ref_s",
    "old_logprob_s",
    "logprob_s",
    "adv_s",
    "compute_s",
    "sync_s",
    "handoff_s",
    "checkpoint_s",
    "validation_s",
    "data_s",
    "unattributed_s",
)


def step_phases(steps: Any) -> Any:
    """Per step, the seconds of each STEP_PHASES phase (a DataFrame, one column per phase present).

    The one place the step is split: logprob_s counts only on rows without ref_s / old_logprob_s (it
    is their sum there), the wait phase is wait_s less handoff_s (the hand-off is timed inside the
    wait), and unattributed_s, when a writer left it null, is step_s minus the other
    phases (null without step_s). A negative unattributed_s means timers overlap (a phase timed
    inside another), kept as it is so the sum still equals step_s.
    """
    import pandas as pd

    df = steps if isinstance(steps, pd.DataFrame) else pd.DataFrame.from_records(list(steps))
    out = pd.DataFrame(index=df.index)
    for col in STEP_PHASES[:-1]:
        if col in df.columns and df[col].notna().any():
            out[col] = pd.to_numeric(df[col], errors="coerce")
    if "handoff_s" in out.columns and "wait_s" in out.columns:
        out["wait_s"] = out["wait_s"] - out["handoff_s"].fillna(0)
    if "logprob_s" in out.columns:
        split = [c for c in ("ref_s", "old_logprob_s") if c in out.columns]
        if split:
            out.loc[out[split].notna().any(axis=1), "logprob_s"] = None
            if out["logprob_s"].isna().all():
                out = out.drop(columns="logprob_s")
    step = pd.to_numeric(df["step_s"], errors="coerce") if "step_s" in df.columns else None
    given = df["unattributed_s"] if "unattributed_s" in df.columns else pd.Series(None, index=df.index)
    derived = step - out.sum(axis=1, min_count=0) if step is not None else None
    out["unattributed_s"] = pd.to_numeric(given, errors="coerce")
    if derived is not None:
        out["unattributed_s"] = out["unattributed_s"].fillna(derived)
    return out


# Policy versions count optimizer updates: trainer step s (1-based) starts from version s - 1,
# so a rollout's staleness is (step_consumed - 1) - policy_version_start.
ROLLOUT_STATUSES = ("used", "discarded", "aborted", "filtered", "resumed")
ROLLOUT_FIELDS: list[tuple[str, pa.DataType]] = [
    ("rollout_id", I64),
    ("group_id", I64),
    ("step_consumed", I64),  # null if never trained
    ("policy_version_start", I64),
    ("policy_version_end", I64),
    ("t_dispatch_s", F64),
    ("t_finish_s", F64),
    ("prompt_tokens", I64),
    ("response_tokens", I64),
    ("turns", I64),
    ("env_s", F64),
    ("reward", F64),
    ("status", STR),  # one of ROLLOUT_STATUSES
]
ROLLOUT_SCHEMA = pa.schema(ROLLOUT_FIELDS)

GPU_FIELDS: list[tuple[str, pa.DataType]] = [
    ("t_s", F64),
    ("node", STR),
    ("gpu", I64),
    ("util_pct", F64),
    ("mem_used_mib", F64),  # MiB, as nvidia-smi reports memory.used (one unit for every reader)
    ("power_w", F64),
]
GPU_SCHEMA = pa.schema(GPU_FIELDS)

NATIVE_PREFIX = "native_"  # extra float64 columns: what the framework itself reported
# cancelled: the driver that owned the run stopped it on SIGINT/SIGTERM (bench.launch). A run whose
# owner is gone while it says running is shown `lost` (bench.rundir.shown), never written so.
RUN_STATUSES = ("running", "completed", "failed", "partial", "cancelled")
MODES = ("native", "emulated")


class TraceError(ValueError):
    """A trace file does not match the contract; the message names the file and column."""


@dataclass(frozen=True)
class RunPaths:
    """Every path of one run directory: results/<experiment>/<run_id>/."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def launch(self) -> Path:
        return self.root / "launch"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def trace(self) -> Path:
        return self.root / "trace"

    @property
    def steps(self) -> Path:
        return self.trace / "steps.parquet"

    @property
    def rollouts(self) -> Path:
        return self.trace / "rollouts.parquet"

    @property
    def gpu(self) -> Path:
        return self.trace / "gpu.parquet"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def resolved_config(self) -> Path:
        """The composed config and its derived layout (bench.resolve), as the run used them."""
        return self.root / "config.resolved.yaml"

    def make(self) -> RunPaths:
        for d in (self.root, self.launch, self.logs, self.trace):
            d.mkdir(parents=True, exist_ok=True)
        return self


@contextlib.contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as e:  # a write error names no file (disk full): name the one being written
        if e.filename is None and e.errno:
            raise OSError(e.errno, os.strerror(e.errno), str(path)) from e
        raise
    finally:
        tmp_path.unlink(missing_ok=True)


def write_json(path: Path | str, obj: Any) -> None:
    """Atomically write `obj` as indented JSON (NaN written as null)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_nan_to_none(obj), indent=2, sort_keys=False, default=str) + "\n")


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj


def _schema_for(columns: list[str], base: pa.Schema, allow_native: bool) -> pa.Schema:
    fields = list(base)
    if allow_native:
        fields += [pa.field(c, F64) for c in columns if c.startswith(NATIVE_PREFIX)]
    return pa.schema(fields)


def to_table(rows: list[dict[str, Any]] | Any, schema: pa.Schema, allow_native: bool = False) -> pa.Table:
    """Rows (list of dicts or a DataFrame) -> a table of exactly `schema`; missing columns are null.

    Unknown columns raise TraceError (a typo would otherwise vanish silently).
    """
    import pandas as pd

    if isinstance(rows, pd.DataFrame):
        df = rows
    elif hasattr(rows, "to_frame"):  # a parser's compact column store (runners/prime_rl_columns.py)
        df = rows.to_frame()
    else:
        df = pd.DataFrame.from_records(list(rows))
    full = _schema_for(list(df.columns), schema, allow_native)
    unknown = [c for c in df.columns if c not in full.names]
    if unknown:
        raise TraceError(f"unknown trace column(s) {unknown}; expected a subset of {full.names}")
    arrays = []
    for f in full:
        if f.name in df.columns:
            col = df[f.name]
            try:
                arrays.append(pa.array(col.astype(object).where(col.notna(), None), type=f.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
                raise TraceError(f"column {f.name!r}: cannot convert to {f.type}: {e}") from e
        else:
            arrays.append(pa.nulls(len(df), type=f.type))
    return pa.Table.from_arrays(arrays, schema=full)


def write_steps(path: Path | str, rows: list[dict[str, Any]] | Any) -> None:
    """Validate and atomically write steps.parquet; unattributed_s is filled here (step_phases), so
    every writer's trace accounts for each second of its steps."""
    import pandas as pd

    df = rows if isinstance(rows, pd.DataFrame) else None
    if df is None:
        df = rows.to_frame() if hasattr(rows, "to_frame") else pd.DataFrame.from_records(list(rows))
    if len(df) and "step_s" in df.columns:
        df = df.assign(unattributed_s=step_phases(df)["unattributed_s"])
    table = to_table(df, STEP_SCHEMA, allow_native=True)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def write_rollouts(path: Path | str, rows: list[dict[str, Any]] | Any) -> None:
    """Validate and atomically write rollouts.parquet (small traces; see RolloutWriter for large)."""
    table = to_table(rows, ROLLOUT_SCHEMA)
    _check_status(table, path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


class RolloutWriter:
    """Stream rollouts.parquet in row groups so a 500k-rollout run is never held whole.

    Use as a context manager; the file appears (atomically) only when the block exits cleanly.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._ctx = atomic_path(self.path)
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0

    def __enter__(self) -> RolloutWriter:
        self._tmp = self._ctx.__enter__()
        self._writer = pq.ParquetWriter(self._tmp, ROLLOUT_SCHEMA)
        return self

    def write(self, columns: dict[str, Any]) -> None:
        """Append one row group given as column arrays (numpy or lists) of equal length."""
        table = pa.Table.from_pydict(
            {f.name: columns.get(f.name) for f in ROLLOUT_SCHEMA}
            | {f.name: pa.nulls(_len(columns), f.type) for f in ROLLOUT_SCHEMA if f.name not in columns},
            schema=ROLLOUT_SCHEMA,
        )
        self._writer.write_table(table)
        self.rows += table.num_rows

    def __exit__(self, *exc: Any) -> None:
        self._writer.close()
        self._ctx.__exit__(*exc)


def _len(columns: dict[str, Any]) -> int:
    return len(next(iter(columns.values())))


def _check_status(table: pa.Table, path: Path | str) -> None:
    bad = set(table.column("status").drop_null().unique().to_pylist()) - set(ROLLOUT_STATUSES)
    if bad:
        raise TraceError(f"{path}: column 'status' has {sorted(bad)}; expected one of {ROLLOUT_STATUSES}")


# Step columns added after the first trace layout: a trace written before them lacks them, and reads
# them as null (unknown, never zero), so the runs a user already has stay readable.
LATER_STEP_COLUMNS = frozenset(
    {"gen_score_s", "ref_s", "old_logprob_s", "adv_s", "handoff_s", "checkpoint_s", "validation_s", "data_s",
     "unattributed_s", "attempt"}
)  # fmt: skip


def _read(path: Path | str, schema: pa.Schema, allow_native: bool, columns: list[str] | None = None):
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: missing")
    actual = pq.read_schema(path)
    later = LATER_STEP_COLUMNS if schema is STEP_SCHEMA else frozenset()
    absent = [f for f in schema if f.name not in actual.names and f.name in later]
    for f in schema:
        if f.name not in actual.names and f.name not in later:
            raise TraceError(f"{path}: column {f.name!r} missing (type {f.type} expected)")
        if f.name not in actual.names:
            continue
        got = actual.field(f.name).type
        if got != f.type and not (pa.types.is_null(got)):
            raise TraceError(f"{path}: column {f.name!r} has type {got}; expected {f.type}")
    extra = [n for n in actual.names if n not in schema.names]
    for n in extra:
        if not (allow_native and n.startswith(NATIVE_PREFIX)):
            raise TraceError(f"{path}: unexpected column {n!r}")
        if not pa.types.is_floating(actual.field(n).type):
            raise TraceError(f"{path}: column {n!r} has type {actual.field(n).type}; expected double")
    present = None if columns is None else [c for c in columns if c in actual.names]
    table = pq.read_table(path, columns=present)
    for f in absent:
        if columns is None or f.name in columns:
            table = table.append_column(f.name, pa.nulls(len(table), f.type))
    return table.to_pandas()


def read_steps(path: Path | str, columns: list[str] | None = None):
    """Read steps.parquet as a DataFrame, validating every column name and type."""
    return _read(path, STEP_SCHEMA, True, columns)


def read_rollouts(path: Path | str, columns: list[str] | None = None):
    """Read rollouts.parquet as a DataFrame (optionally only `columns`), validating the schema."""
    return _read(path, ROLLOUT_SCHEMA, False, columns)


def write_gpu(path: Path | str, rows: list[dict[str, Any]] | Any) -> None:
    table = to_table(rows, GPU_SCHEMA)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_gpu(path: Path | str):
    return _read(path, GPU_SCHEMA, False)


MANIFEST_REQUIRED = ("experiment", "run_id", "framework", "framework_version", "mode", "status")
# manifest.json's layout version: write_manifest stamps it as `schema_version`, read_manifest (and
# the report) refuse any version not in MANIFEST_VERSIONS_READ. A manifest without the key was
# written before it existed, in the layout of version 1.
MANIFEST_SCHEMA_VERSION = 1
MANIFEST_VERSIONS_READ = (1,)


def read_env_file(path: Path | str) -> dict[str, int | float | str]:
    """`KEY=value` lines of a harness file beside the logs (the opd-benchmark launchers'
    wall_time.env: start/end epochs in Unix seconds, *_seconds durations): the suite's one reader.
    Integers and decimals become numbers, quotes are stripped, blank and `#` lines are skipped;
    other lines are ignored (the file is the harness's, not a format the suite owns)."""
    out: dict[str, int | float | str] = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip().strip('"').strip("'")
        if not sep or not key or key.startswith("#"):
            continue
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def write_manifest(paths: RunPaths, manifest: dict[str, Any]) -> None:
    """Validate and atomically write manifest.json, the run's one manifest writer: everything it
    records (config, overrides, sweep point, reasons) is redacted here, always, whoever calls."""
    missing = [k for k in MANIFEST_REQUIRED if k not in manifest]
    if missing:
        raise TraceError(f"{paths.manifest}: manifest keys missing: {missing}")
    if manifest["mode"] not in MODES:
        raise TraceError(f"{paths.manifest}: mode={manifest['mode']!r}; expected one of {MODES}")
    if manifest["status"] not in RUN_STATUSES:
        raise TraceError(f"{paths.manifest}: status={manifest['status']!r}; expected one of {RUN_STATUSES}")
    # the layout this writer writes, first in the file, whatever version the dict was read as
    stamped = {"schema_version": MANIFEST_SCHEMA_VERSION}
    stamped |= {k: v for k, v in manifest.items() if k != "schema_version"}
    write_json(paths.manifest, redact(stamped))


def read_manifest(paths: RunPaths) -> dict[str, Any]:
    if not paths.manifest.exists():
        raise TraceError(f"{paths.manifest}: missing")
    manifest = json.loads(paths.manifest.read_text())
    check_manifest_version(paths.manifest, manifest)
    return manifest


def check_manifest_version(path: Path | str, manifest: dict[str, Any]) -> None:
    """UsageError (one line) when a manifest's schema_version is not one this suite reads."""
    version = manifest.get("schema_version", 1)
    if version not in MANIFEST_VERSIONS_READ:
        from bench.errors import UsageError

        raise UsageError(
            f"{path}: schema_version {version!r} is not one this suite reads "
            f"({', '.join(map(str, MANIFEST_VERSIONS_READ))}); read it with the suite that wrote it, "
            "or ingest its logs again"
        )
