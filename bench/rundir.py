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

from bench.trace import SECRET_MARKERS, RunPaths, read_manifest, write_manifest

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


def redact_config(node: Any) -> Any:
    """Resolved config with the value of every secret-looking key ('*token*', '*key*', ...) redacted."""
    if isinstance(node, dict):
        return {
            k: "<redacted>"
            if any(m in str(k).upper() for m in SECRET_MARKERS) and not isinstance(v, dict | list)
            else redact_config(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [redact_config(v) for v in node]
    return node


def initial_manifest(cfg: Any, paths: RunPaths, point: dict[str, str], overrides: list[str]) -> dict:
    """The manifest written at submission: status running, dispatch fields still empty."""
    from bench.validate import to_container

    return {
        "experiment": cfg.experiment.name,
        "run_id": paths.root.name,
        "framework": cfg.framework.name,
        "framework_version": cfg.framework.version,
        "mode": MODE_NAMES[cfg.mode],
        "status": "running",
        "cluster": cfg.cluster.name,
        "sweep_point": point,
        "overrides": overrides,
        "git_revision": git_revision(),
        "config": redact_config(to_container(cfg)),
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
