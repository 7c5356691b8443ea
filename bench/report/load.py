"""Run directories -> one summary DataFrame with a declared column schema.

The report reads only the run-directory contract (ARCHITECTURE.md): manifest.json and
metrics.json here; trace/*.parquet in `series.py`. A run without metrics.json (failed before
metrics, or never finished) still gets a row: every metric is null and `missing` says why,
so the table shows "not reported" with the reason, never 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bench import metrics as metrics_module
from bench.trace import RunPaths, redact


class ReportError(ValueError):
    """An input the report cannot use; the message names the path and what was expected."""


class Skipped(ReportError):
    """A run directory the report leaves out (load_attempts names it and goes on): str() is the line."""


@dataclass(frozen=True)
class Column:
    """One metric column of the summary table.

    `better` is "higher", "lower", "one" (closest to 1 is best) or None (no ranking: the value
    depends on run length or is another convention's figure). `scale` turns the stored unit
    into the displayed one (fractions -> percent).
    """

    key: str
    label: str
    unit: str
    better: str | None
    scale: float = 1.0
    digits: int = 2


# The table of issue 6, in order. Keys are metrics.json names except `prod_cons_ratio` and
# `tinker_ratio`, which the report derives from two metrics of the same run when metrics.json
# lacks them.
METRIC_COLUMNS: list[Column] = [
    Column("trajectories_per_s", "Trajectories/s", "samples/s", "higher"),
    # the same samples over the step windows only (start-up, gaps and teardown excluded): docs/metrics.md "Windows"
    Column("trajectories_per_s_steps", "Trajectories/s (step windows)", "samples/s", "higher"),
    # Production alone is not ranked: producing faster than the trainer consumes only ages
    # samples in the queue. The ratio column ranks the match instead.
    Column("production_samples_per_s", "Production", "samples/s", None),
    Column("consumption_samples_per_s", "Consumption", "samples/s", "higher"),
    Column("prod_cons_ratio", "Production ÷ consumption", "", "one"),
    Column("trainer_idle_frac", "Trainer idle", "%", "lower", 100.0, 1),
    Column("mfu", "MFU (suite)", "%", "higher", 100.0, 1),
    # The framework's own MFU uses its own FLOPs convention: shown beside, never ranked.
    Column("mfu_native", "MFU (native)", "%", None, 100.0, 1),
    Column("oversampling_waste", "Oversampling waste", "%", "lower", 100.0, 1),
    Column("zero_advantage_frac", "Zero-advantage waste", "%", "lower", 100.0, 1),
    Column("staleness_mean", "Staleness mean", "versions", "lower"),
    Column("staleness_max", "Staleness max", "versions", "lower", 1.0, 0),
    Column("token_waste", "Token waste", "% of generated", "lower", 100.0, 1),
    # Trained tokens count prompt + response of trained samples (so they can exceed generated
    # response tokens, as in slime's smoke run); the response-only count is a report column.
    Column("trained_tokens", "Trained tokens (prompt + response)", "tokens", None, 1.0, 0),
    Column("generated_tokens", "Generated response tokens", "tokens", None, 1.0, 0),
    Column("gpu_hours", "GPU-hours", "GPU·h", "lower", 1.0, 2),
    Column("cost_per_mtok_usd", "$ / M trained tokens", "USD", "lower", 1.0, 3),
    Column("tinker_equiv_per_mtok_usd", "Tinker $ / M trained tokens", "USD", None, 1.0, 3),
    # bench.metrics's definition: own $/M tokens over Tinker's (< 1: own hardware is cheaper).
    Column("tinker_ratio", "Own cost ÷ Tinker", "×", "lower", 1.0, 2),
]

# Columns the report computes from the trace (bench.report.evidence), not in metrics.json.
REPORT_COLUMNS: list[Column] = [
    Column("generator_idle_frac", "Generator idle", "%", None, 100.0, 1),
    Column("sync_share", "Weight sync share of step", "%", None, 100.0, 1),
    Column("trained_response_tokens", "Trained response tokens", "tokens", None, 1.0, 0),
]

DERIVED_KEYS = ["prod_cons_ratio", "tinker_ratio"]
# Every metrics.json number the CSV carries: bench.metrics's own list (the ratios are re-derived).
METRIC_KEYS = [k for k in metrics_module.METRIC_KEYS if k not in DERIVED_KEYS]
MATCH_TOLERANCE = 0.05  # |log(production / consumption)| within this counts as production meeting consumption

# Identity columns of the summary, with their dtypes; then one float64 per metric.
ID_COLUMNS: dict[str, str] = {
    "run_id": "string",
    "experiment": "string",
    "framework": "string",
    "framework_version": "string",
    "mode": "string",  # native | emulated
    "status": "string",  # completed | failed | partial | cancelled | running | lost (owner gone)
    "sweep": "string",  # "key=value, ..." over the keys that differ between a framework's runs
    "sweep_value": "float64",  # numeric value of the first swept key (NaN when none / not numeric)
    "path": "string",
}
SUMMARY_SCHEMA: dict[str, str] = ID_COLUMNS | {k: "float64" for k in METRIC_KEYS + DERIVED_KEYS}

# Resolved-config keys that differ between runs for reasons other than a sweep.
# The cluster is where a workload ran, not a point of a sweep.
_NOT_SWEPT = ("framework.", "results_dir", "experiment.frameworks", "hydra.", "run_id", "cluster.")
# Config groups whose node is one conf entry: runs of other entries differ by its name (model=...,
# hardware=...), not by each of its fields (dozens of them, or all null where the logs name none).
_NAMED_GROUPS = ("model", "hardware")


@dataclass
class Run:
    """One run directory as the report sees it."""

    paths: RunPaths
    manifest: dict[str, Any]
    metrics: dict[str, Any]  # {} when metrics.json is absent
    missing: dict[str, str]  # metric -> reason it is null

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.paths.root.name)

    @property
    def label(self) -> str:
        """Short name for legends: framework, plus the sweep point when there is one."""
        sweep = self.manifest.get("_sweep_label") or ""
        return f"{self.manifest['framework']} {sweep}".strip()


# What a run directory holds beside manifest.json (bench.trace.RunPaths): a directory with any of
# these but no manifest is a run the report cannot read, named as skipped, never passed over silently.
RUN_MARKS = ("trace", "metrics.json", "config.resolved.yaml", "launch")


NO_MANIFEST = (
    "no manifest.json: not a run the report can read (its writer stopped before it, or a copy left it out)"
)


def _runs_without_manifest(d: Path) -> list[Path]:
    """Directories up to three levels below d that hold RUN_MARKS but no manifest.json, outside any run."""
    found = []
    for p in sorted(q for depth in ("*", "*/*", "*/*/*") for q in d.glob(depth) if q.is_dir()):
        if (p / "manifest.json").is_file() or not any((p / m).exists() for m in RUN_MARKS):
            continue
        if not any((q / "manifest.json").is_file() for q in p.parents):
            found.append(p)
    return found


def discover(result_dirs: list[Path | str], skipped: list[str] | None = None) -> list[Path]:
    """Run directories under each argument: the directory itself if it holds manifest.json,
    else every descendant (up to three levels) that does. Sorted, deduplicated. Directories that
    look like runs (RUN_MARKS) but have no manifest.json are appended to `skipped`, one line each."""
    found: list[Path] = []
    for d in map(Path, result_dirs):
        if not d.is_dir():
            raise ReportError(f"{d}: not a directory (expected a run directory or results/<experiment>)")
        if (d / "manifest.json").is_file():
            found.append(d)
            continue
        if skipped is not None:
            skipped += [f"{p}: {NO_MANIFEST}" for p in _runs_without_manifest(d)]
        hits = [p.parent for depth in ("*", "*/*", "*/*/*") for p in d.glob(f"{depth}/manifest.json")]
        if not hits:
            raise ReportError(
                f"{d}: no manifest.json in it or below (expected results/<experiment>/<run_id>/)"
            )
        found += hits
    return sorted({p.resolve() for p in found})


def _read_json(path: Path) -> dict[str, Any]:
    """A run's JSON file, redacted (bench.redact): a manifest written before redaction covered
    overrides, or by another tool, still puts no secret into the report's HTML, CSV or figures."""
    try:
        obj = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(obj, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return redact(obj)


def dispatch(manifest: dict[str, Any]) -> dict[str, Any]:
    """The `dispatch` block `bench run` writes (Slurm ids, nodes, times, exit state), or {}."""
    d = manifest.get("dispatch")
    return d if isinstance(d, dict) else {}


def failure_reason(manifest: dict[str, Any]) -> str:
    """Why a run failed or is partial: manifest `reason`, else the `failure` ingest read from the
    logs (message, file:line, phase), else dispatch.reason; "" when none."""
    f = manifest.get("failure")
    if not manifest.get("reason") and isinstance(f, dict) and f.get("message"):
        return f"{f['message']} ({f.get('source') or 'source not recorded'}, {f.get('phase') or 'phase not recorded'})"
    return str(manifest.get("reason") or dispatch(manifest).get("reason") or "")


def load_run(root: Path) -> Run:
    """Read one run's manifest.json and metrics.json (absent metrics -> reasons in `missing`)."""
    from bench.rundir import shown

    paths = RunPaths(Path(root))
    manifest = _read_json(paths.manifest)
    for key in ("framework", "mode", "status"):
        if key not in manifest:
            raise ReportError(f"{paths.manifest}: key {key!r} missing (see bench/trace.py MANIFEST_REQUIRED)")
    manifest = shown(paths, manifest)  # `running` with its owner process gone: `lost`, last seen when
    check_readable(paths, manifest)
    if paths.metrics.is_file():
        try:
            metrics = _read_json(paths.metrics)
        except ReportError as e:
            raise Skipped(f"{e}; recompute it with `bench metrics {paths.root}`") from None
        missing = {str(k): str(v) for k, v in (metrics.get("missing") or {}).items()}
        for k in METRIC_KEYS:
            if metrics.get(k) is None and k not in missing:
                missing[k] = "absent from metrics.json"
    else:
        metrics = {}
        why = f"no metrics.json (run status: {manifest['status']}"
        why += f": {failure_reason(manifest)})" if failure_reason(manifest) else ")"
        missing = {k: why for k in METRIC_KEYS}
    return Run(paths, manifest, metrics, missing)


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out |= _flatten(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: json.dumps(obj, sort_keys=True) if isinstance(obj, list) else obj}


def resolved_config(manifest: dict[str, Any]) -> dict[str, Any]:
    """The resolved config a manifest carries (under `config` or `resolved_config`), or {}."""
    cfg = manifest.get("config") or manifest.get("resolved_config") or {}
    return cfg if isinstance(cfg, dict) else {}


def sweep_keys(runs: list[Run]) -> list[str]:
    """Config keys that take more than one value among the runs of any one framework.

    An explicit sweep point wins (`manifest["sweep_point"]`, written by `bench run` for Hydra
    multiruns, or `manifest["sweep"]`; both {key: value}); otherwise resolved configs are
    compared (framework-specific keys excluded: they differ across frameworks by design).
    """
    explicit = sorted({k for r in runs for k in _explicit_sweep(r.manifest)})
    if explicit:
        return explicit
    by_fw: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_fw.setdefault(r.manifest["framework"], []).append(_flatten(resolved_config(r.manifest)))
    keys: set[str] = set()
    for flats in by_fw.values():
        differ = set()
        for k in set().union(*flats) if flats else ():
            # A seed is a replicate of a point (its spread is the seed band), not a point of its own.
            if k.startswith(_NOT_SWEPT) or k.endswith((".name", ".seed")):
                continue
            if len({repr(f.get(k)) for f in flats}) > 1:
                differ.add(k)
        for g in _NAMED_GROUPS:
            if len({repr(f.get(f"{g}.name")) for f in flats}) > 1:
                differ = {k for k in differ if k != g and not k.startswith(f"{g}.")} | {f"{g}.name"}
        keys |= differ
    return sorted(keys)


def _key_labels(keys: list[str]) -> dict[str, str]:
    """Each swept key as the report shows it: its last part (two, where another key ends the same:
    trainer.tp, generator.tp), a conf group by its own name."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    labels = {}
    for key, end in zip(keys, last, strict=True):
        group = key.split(".", 1)[0]
        if key == f"{group}.name" and group in _NAMED_GROUPS:
            labels[key] = group
        else:
            labels[key] = ".".join(key.split(".")[-2:]) if last.count(end) > 1 else end
    return labels


def _explicit_sweep(manifest: dict[str, Any]) -> dict[str, Any]:
    point = manifest.get("sweep_point") or manifest.get("sweep") or {}
    return point if isinstance(point, dict) else {}


def _number(v: Any) -> float | None:
    """A swept value as a float (override values arrive as strings), else None."""
    if isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _sweep_values(run: Run, keys: list[str]) -> dict[str, Any]:
    explicit = _explicit_sweep(run.manifest)
    flat = _flatten(resolved_config(run.manifest))
    return {k: explicit.get(k, flat.get(k)) for k in keys}


def _ratio(num: Any, den: Any) -> float:
    try:
        num, den = float(num), float(den)
    except (TypeError, ValueError):
        return float("nan")
    return num / den if den > 0 else float("nan")


def summarize(runs: list[Run]) -> pd.DataFrame:
    """One row per run, columns exactly SUMMARY_SCHEMA (asserted), sorted by framework then sweep."""
    keys = sweep_keys(runs)
    labels = _key_labels(keys)
    rows = []
    for r in runs:
        values = _sweep_values(r, keys)
        label = ", ".join(f"{labels[k]}={v}" for k, v in values.items())
        r.manifest["_sweep_label"] = label
        first = next(iter(values.values()), None)
        m = r.metrics
        row: dict[str, Any] = {
            "run_id": r.run_id,
            "experiment": str(r.manifest.get("experiment", "")),
            "framework": str(r.manifest["framework"]),
            "framework_version": str(r.manifest.get("framework_version", "")),
            "mode": str(r.manifest["mode"]),
            "status": str(r.manifest["status"]),
            "sweep": label,
            "sweep_value": _number(first),
            "path": str(r.paths.root),
        }
        for k in METRIC_KEYS:
            v = m.get(k)
            row[k] = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
        row["prod_cons_ratio"] = _ratio(m.get("production_samples_per_s"), m.get("consumption_samples_per_s"))
        tr = m.get("tinker_ratio")
        row["tinker_ratio"] = (
            float(tr)
            if isinstance(tr, int | float)
            else _ratio(m.get("cost_per_mtok_usd"), m.get("tinker_equiv_per_mtok_usd"))
        )
        for d, (a, b) in {
            "prod_cons_ratio": ("production_samples_per_s", "consumption_samples_per_s"),
            "tinker_ratio": ("cost_per_mtok_usd", "tinker_equiv_per_mtok_usd"),
        }.items():
            if row[d] != row[d]:
                r.missing[d] = r.missing.get(a) or r.missing.get(b) or f"{a} / {b} not computable"
        rows.append(row)
    labels = [r.label for r in runs]
    for r in runs:  # legends and colours are keyed by label: two runs must never share one
        if labels.count(r.label) > 1:
            r.manifest["_sweep_label"] = f"{r.manifest['_sweep_label']} {r.run_id}".strip()
    df = pd.DataFrame(rows, columns=list(SUMMARY_SCHEMA)).astype(SUMMARY_SCHEMA)
    df = df.sort_values(["framework", "sweep_value", "sweep", "run_id"], kind="stable").reset_index(drop=True)
    check_schema(df)
    return df


def check_schema(df: pd.DataFrame) -> None:
    """Assert the summary has exactly the declared columns and dtypes (a drift fails loudly)."""
    got = {c: str(t) for c, t in df.dtypes.items()}
    want = {c: str(pd.Series([], dtype=t).dtype) for c, t in SUMMARY_SCHEMA.items()}
    if got != want:
        diff = {c: (got.get(c), want.get(c)) for c in set(got) | set(want) if got.get(c) != want.get(c)}
        raise ReportError(f"summary columns differ from SUMMARY_SCHEMA (got, expected): {diff}")


def latest_per_point(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """Per (framework, mode, workload configuration): the newest completed run, plus any failed or
    partial runs newer than it (their reasons belong in the report). Returns (kept, superseded).

    Re-running an experiment adds run directories and never overwrites old ones; the report
    compares the newest runs and counts the older ones it left out.
    """

    def point(r: Run) -> str:
        flat = _flatten(resolved_config(r.manifest))
        cfg = {k: v for k, v in flat.items() if not k.startswith(_NOT_SWEPT)}
        # Mode is part of the point: a measured run is never superseded by an emulated one.
        return json.dumps(
            [r.manifest["framework"], r.manifest["mode"], _explicit_sweep(r.manifest), cfg],
            sort_keys=True,
            default=str,
        )

    kept: list[Run] = []
    by_point: dict[str, list[Run]] = {}
    for r in sorted(runs, key=lambda r: r.paths.manifest.stat().st_mtime, reverse=True):
        by_point.setdefault(point(r), []).append(r)
    for newest_first in by_point.values():
        for r in newest_first:
            kept.append(r)
            if r.manifest.get("status") == "completed":
                break
    return kept, [r for r in runs if r not in kept]


def load(result_dirs: list[Path | str], all_runs: bool = False) -> tuple[list[Run], pd.DataFrame]:
    """Discover and read the runs under `result_dirs` (the newest per framework and configuration,
    or every run with `all_runs`); return the runs (in table order) and the summary."""
    runs, df, _ = load_attempts(result_dirs, all_runs)
    return runs, df


def load_attempts(
    result_dirs: list[Path | str], all_runs: bool = False
) -> tuple[list[Run], pd.DataFrame, list[Run]]:
    """`load`, plus the runs it left out as older attempts of the same point: the software
    experience counts every attempt, the tables only the newest."""
    skipped: list[str] = []
    runs = []
    for p in discover(result_dirs, skipped):
        try:
            runs.append(load_run(p))
        except Skipped as e:
            skipped.append(str(e))
    if not runs:
        raise ReportError(f"no readable run directory: {'; '.join(skipped)}")
    superseded: list[Run] = []
    if not all_runs:
        runs, superseded = latest_per_point(runs)
    df = summarize(runs)
    order = {p: i for i, p in enumerate(df["path"])}
    runs.sort(key=lambda r: order[str(r.paths.root)])
    df.attrs["superseded"] = sorted(r.run_id for r in superseded)
    df.attrs["skipped"] = skipped
    return runs, df, superseded


def check_readable(paths: RunPaths, manifest: dict[str, Any]) -> None:
    """Skipped (one line naming the file and the fix) when the report cannot read a run: a
    manifest of a schema version this suite does not read, a trace parquet whose footer does not
    read (a copy cut short, a disk that filled up). metrics.json is checked where it is read."""
    import pyarrow.parquet as pq

    from bench.errors import UsageError
    from bench.trace import check_manifest_version

    try:
        check_manifest_version(paths.manifest, manifest)
    except UsageError as e:
        raise Skipped(str(e)) from None
    for trace in (paths.steps, paths.rollouts, paths.gpu):
        if trace.is_file():
            try:
                pq.read_metadata(trace)
            except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
                raise Skipped(
                    f"{trace}: unreadable parquet ({e}); recompute the run's files with `bench metrics {paths.root}`"
                ) from None
