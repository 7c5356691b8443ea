"""Run-directory allocation and the dispatch part of manifest.json.

`results/<experiment>/<run_id>/` is created with `mkdir(exist_ok=False)`, so two jobs (or two
invocations in the same second) never share or overwrite a directory. The manifest is the
record `bench status` and the report read; every update re-reads it and rewrites it atomically
(bench.trace.write_manifest), so whatever another stage wrote (the emulator's own keys) survives.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from pathlib import Path
from typing import Any

from bench.trace import RunPaths, read_manifest, redact_config, write_json, write_manifest

REPO = Path(__file__).resolve().parent.parent
MODE_NAMES = {"emulate": "emulated", "native": "native"}  # cfg.mode -> manifest mode


def now_iso() -> str:
    """UTC wall-clock time, ISO 8601 with milliseconds (manifest timestamps)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def slug(text: str) -> str:
    """Filesystem-safe, readable form of an override value or key."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-")[:60]


def point_slug(point: dict[str, str]) -> str:
    """'workload.group_size=8 experiment.seed=1' -> 'group_size-8_seed-1' (last key part only)."""
    return "_".join(f"{slug(k.rsplit('.', 1)[-1])}-{slug(v)}" for k, v in sorted(point.items()))


def allocate(results_dir: Path | str, experiment: str, framework: str, point: dict[str, str]) -> RunPaths:
    """Create a fresh run directory: <framework>[-<sweep point>]-<UTC time>[-<n>]; never reuses one."""
    base = Path(results_dir) / experiment
    base.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    stem = "-".join(p for p in (framework, point_slug(point), stamp) if p)
    for n in range(1000):
        root = base / (stem if n == 0 else f"{stem}-{n}")
        try:
            root.mkdir()
        except FileExistsError:
            continue
        return RunPaths(root).make()
    raise RuntimeError(f"{base}: could not allocate a run directory for {stem} (1000 taken)")


def git_revision(repo: Path = REPO) -> str:
    """The suite's git commit ('<sha>' or '<sha>-dirty'); 'unknown' outside a checkout."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{sha}-dirty" if sha and dirty else sha or "unknown"


def run_identity(cfg: Any, paths: RunPaths, mode: str, resolved: Any = None) -> dict:
    """What every run's manifest starts with (status running): identity, mode, the redacted config,
    its derived layout and the `inferred` block an ingested run carries too; `resolved`
    (bench.resolve.Resolved of cfg) is worked out here when not given."""
    from bench.infer import inferred_from_config
    from bench.resolve import Resolved
    from bench.validate import to_container

    resolved = resolved or Resolved.from_config(cfg)
    return {
        "experiment": cfg.experiment.name,
        "run_id": paths.root.name,
        "framework": cfg.framework.name,
        "framework_version": cfg.framework.version,
        "mode": mode,
        "status": "running",
        "config": redact_config(to_container(cfg)),
        "resolved": resolved.to_dict(),
        "inferred": inferred_from_config(cfg, resolved),
    }


def initial_manifest(
    cfg: Any, paths: RunPaths, point: dict[str, str], overrides: list[str], resolved: Any = None
) -> dict:
    """The manifest written at submission: the run's identity (run_identity), where and how it was
    dispatched, dispatch fields still empty."""
    return {
        **run_identity(cfg, paths, MODE_NAMES[cfg.mode], resolved),
        "cluster": cfg.cluster.name,
        "sweep_point": point,
        "overrides": overrides,
        "git_revision": git_revision(),
        "dispatch": {
            "executor": str(getattr(cfg.cluster.executor, "value", cfg.cluster.executor)),
            "state": "SUBMITTING",
            "slurm_job_id": None,
            "array_job_id": None,
            "array_index": None,
            "nodes": None,
            "node_list": None,
            "gpus_per_node": None,
            "gpus": None,
            "submitted_at": None,
            "started_at": None,
            "ended_at": None,
            "exit_state": None,
            "reason": None,
            "requeues": 0,
        },
    }


def write_resolved_config(paths: RunPaths, config: dict[str, Any], resolved: dict[str, Any]) -> None:
    """config.resolved.yaml: the (redacted) composed config, then the layout derived from it under
    `resolved:` (GPU pools, engines, KV bytes per token, concurrency ceiling, mode and policy)."""
    import yaml

    from bench.trace import atomic_path

    text = yaml.safe_dump(redact_config(config), sort_keys=False)
    text += "# derived once from the config above by bench/resolve.py\n"
    text += yaml.safe_dump({"resolved": resolved}, sort_keys=False)
    with atomic_path(paths.resolved_config) as tmp:
        tmp.write_text(text)


def update(paths: RunPaths, status: str | None = None, **dispatch: Any) -> dict:
    """Merge `dispatch` fields (and optionally the run status) into manifest.json; return it."""
    manifest = read_manifest(paths)
    manifest.setdefault("dispatch", {}).update(dispatch)
    if status is not None:
        manifest["status"] = status
    write_manifest(paths, manifest)
    return manifest


def run_dirs(results_dir: Path | str, experiment: str) -> list[RunPaths]:
    """Every run directory of an experiment that has a manifest, oldest first (by name time)."""
    base = Path(results_dir) / experiment
    if not base.is_dir():
        return []
    return [RunPaths(d) for d in sorted(base.iterdir()) if (d / "manifest.json").is_file()]


def steps_traced(paths: RunPaths) -> int:
    """Rows of trace/steps.parquet (0 when the run traced no step)."""
    if not paths.steps.exists():
        return 0
    import pyarrow.parquet as pq

    return pq.read_metadata(paths.steps).num_rows


def final_status(steps: int, ok: bool) -> str:
    """completed if the run finished; partial if it failed after tracing steps; else failed."""
    if ok and steps > 0:
        return "completed"
    return "partial" if steps > 0 else "failed"


def finish(
    paths: RunPaths,
    ok: bool,
    reason: str | None = None,
    extra: dict[str, Any] | None = None,
    exit_state: str | None = None,
) -> str:
    """End a run: merge a stage's manifest keys (`extra`; the run's own keys win), compute
    metrics.json exactly once from the trace, then write the final status last, so whoever waits
    on the status finds metrics.json. A run whose metrics cannot be computed is not completed: it
    ends partial (its trace is kept) with the error as its reason. Returns the final status."""
    from bench.metrics import compute

    manifest = {**(extra or {}), **read_manifest(paths)}
    steps = steps_traced(paths)
    status = final_status(steps, ok)
    if steps:
        write_manifest(paths, manifest)  # metrics read the stage's keys (wall_s, resources, config)
        try:
            write_json(paths.metrics, {**compute(paths.root), "status": status})
        except Exception as e:  # noqa: BLE001 - any failure here is the run's, recorded, not raised
            status = "partial"
            reason = f"metrics.json could not be computed: {type(e).__name__}: {e}"
            (paths.logs / "metrics-error.txt").write_text(reason + "\n")
    manifest["status"] = status
    if reason:
        manifest["reason"] = reason
    if "dispatch" in manifest:
        state = exit_state or ("COMPLETED" if status == "completed" else "FAILED")
        manifest["dispatch"].update(state=state, exit_state=state, reason=reason, ended_at=now_iso())
    write_manifest(paths, manifest)
    return status
