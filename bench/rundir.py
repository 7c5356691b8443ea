"""Run-directory allocation and the dispatch part of manifest.json.

`results/<experiment>/<run_id>/` is created with `mkdir(exist_ok=False)`, so two jobs (or two
invocations in the same second) never share or overwrite a directory. The manifest is the
record `bench status` and the report read; every update re-reads it and rewrites it atomically
(bench.trace.write_manifest), so whatever another stage wrote (the emulator's own keys) survives.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.trace import RunPaths, read_manifest, redact, redact_text, write_json, write_manifest

REPO = Path(__file__).resolve().parent.parent
MODE_NAMES = {"emulate": "emulated", "native": "native"}  # cfg.mode -> manifest mode


def now_iso() -> str:
    """UTC wall-clock time, ISO 8601 with milliseconds (manifest timestamps)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def slug(text: str) -> str:
    """Filesystem-safe, readable form of an override value or key."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-")[:60]


def point_slug(point: dict[str, str]) -> str:
    """'workload.group_size=8 experiment.seed=1' -> 'group_size-8_seed-1' (last key part only;
    a secret swept value is named by its redacted form, never written into a directory name)."""
    return "_".join(f"{slug(k.rsplit('.', 1)[-1])}-{slug(v)}" for k, v in sorted(redact(point).items()))


def allocate(results_dir: Path | str, experiment: str, framework: str, point: dict[str, str]) -> RunPaths:
    """Create a fresh run directory: <framework>[-<sweep point>]-<UTC time>[-<n>]; never reuses one.

    The last line of defence for every writer of runs: a directory outside `results_dir` (an
    experiment name like `../../x`) or at its top (an empty name) is refused (UsageError) before
    anything is created."""
    base = Path(results_dir) / experiment
    top = Path(os.path.abspath(results_dir))
    if not experiment or top not in Path(os.path.abspath(base)).parents:
        from bench.errors import UsageError

        raise UsageError(
            f"experiment.name={experiment!r}: its runs would land in {base}, outside {results_dir}/<experiment>/; "
            "expected one folder name (not empty, no '/' or '..')"
        )
    base.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    stem = "-".join(p for p in (framework, point_slug(point), stamp) if p)
    for n in range(1000):
        root = base / (stem if n == 0 else f"{stem}-{n}")
        try:
            root.mkdir()
        except FileExistsError:
            continue
        with building(root, allocated=True) as paths:  # a full disk before its subfolders: no folder
            return paths
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
        "owner": owner(),
        "config": redact(to_container(cfg)),
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


@contextlib.contextmanager
def building(root: Path | str, allocated: bool = False) -> Iterator[RunPaths]:
    """Yield RunPaths(root), made, for a block that writes a new run directory up to its manifest;
    if the block fails (a full disk, a refusal, a bug), remove everything it made and re-raise, so
    either a complete run directory exists or nothing does: never a folder without manifest.json.
    An OSError (disk full, read-only) becomes one UsageError line naming the file and the reason.

    `allocated`: `root` was just created by `allocate` and is removed whole; otherwise `root` is new
    or an empty folder the user named (`--out`, accepted by bench.outdir.check_out), left empty."""
    root = Path(root)
    keep_root = root.is_dir() and not allocated
    try:
        yield RunPaths(root).make()
    except BaseException as e:
        discard(root, keep_root)
        if isinstance(e, OSError):  # the disk refused (full, read-only): one line, not a traceback
            from bench.errors import UsageError

            why = os.strerror(e.errno) if e.errno else str(e)
            raise UsageError(
                f"{e.filename or root}: cannot write ({why}); its run directory was removed, "
                "free space or write elsewhere"
            ) from None
        raise


def discard(root: Path | str, keep_root: bool = False) -> None:
    """Remove a run directory this process made and never handed on (nothing submitted, no manifest
    anyone has read); `keep_root`: empty it but keep the folder itself (it existed before)."""
    root = Path(root)
    if not keep_root:
        shutil.rmtree(root, ignore_errors=True)
        return
    for child in root.iterdir() if root.is_dir() else ():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def start(paths: RunPaths, manifest: dict[str, Any]) -> None:
    """Write a freshly made run directory's first manifest; if even that fails (a full disk), remove
    the directory's empty folders again, so no run directory is ever left without a manifest."""
    try:
        write_manifest(paths, manifest)
    except BaseException:
        for d in (paths.launch, paths.logs, paths.trace, paths.root):
            with contextlib.suppress(OSError):
                d.rmdir()  # only if empty: whatever holds files was not made here
        raise


def write_resolved_config(paths: RunPaths, config: dict[str, Any], resolved: dict[str, Any]) -> None:
    """config.resolved.yaml: the (redacted) composed config, then the layout derived from it under
    `resolved:` (GPU pools, engines, KV bytes per token, concurrency ceiling, mode and policy)."""
    import yaml

    from bench.trace import atomic_path

    text = yaml.safe_dump(redact(config), sort_keys=False)
    text += "# derived once from the config above by bench/resolve.py\n"
    text += yaml.safe_dump({"resolved": redact(resolved)}, sort_keys=False)
    with atomic_path(paths.resolved_config) as tmp:
        tmp.write_text(text)


def update(
    paths: RunPaths, status: str | None = None, owner: dict[str, Any] | None = None, **dispatch: Any
) -> dict:
    """Merge `dispatch` fields (and optionally the run status and its owner) into manifest.json;
    return it."""
    manifest = read_manifest(paths)
    manifest.setdefault("dispatch", {}).update(dispatch)
    if status is not None:
        manifest["status"] = status
    if owner is not None:
        manifest["owner"] = owner
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
    status: str | None = None,
) -> str:
    """End a run: merge a stage's manifest keys (`extra`; the run's own keys win), compute
    metrics.json exactly once from the trace, then write the final status last, so whoever waits
    on the status finds metrics.json. A run whose metrics cannot be computed is not completed: it
    ends partial (its trace is kept) with the error as its reason. `status` names the end when it
    is not the run's own (cancelled by its driver); a run that did not complete keeps its own
    reason, with the metrics error after it. Returns the final status."""
    manifest = {**(extra or {}), **read_manifest(paths)}
    steps = steps_traced(paths)
    status = status or final_status(steps, ok)
    if steps:
        write_manifest(paths, manifest)  # metrics read the stage's keys (wall_s, resources, config)
        try:  # the import too: a signal that broke pandas' import must not stop the run being ended
            from bench.metrics import compute

            write_json(paths.metrics, {**compute(paths.root), "status": status})
        except Exception as e:  # noqa: BLE001 - any failure here is the run's, recorded, not raised
            error = f"metrics.json could not be computed: {type(e).__name__}: {e}"
            reason = error if status == "completed" or not reason else f"{reason}; {error}"
            status = "partial" if status == "completed" else status
            (paths.logs / "metrics-error.txt").write_text(redact_text(error) + "\n")
    manifest["status"] = status
    if reason:
        manifest["reason"] = reason
    if "dispatch" in manifest:
        state = exit_state or ("COMPLETED" if status == "completed" else "FAILED")
        manifest["dispatch"].update(state=state, exit_state=state, reason=reason, ended_at=now_iso())
    write_manifest(paths, manifest)
    return status


# -- who runs a run, and whether it still can ----------------------------------------------------


def slurm_job_id() -> str | None:
    """The Slurm job this process runs in, as squeue and scancel name it ('<array>_<index>' for an
    array member, whose own SLURM_JOB_ID is a fresh number); None outside Slurm."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return None
    task = env.get("SLURM_ARRAY_TASK_ID")
    return f"{env['SLURM_ARRAY_JOB_ID']}_{task}" if task is not None else env["SLURM_JOB_ID"]


def process_start(pid: int) -> float | None:
    """When process `pid` started, in Unix seconds to the clock tick (/proc: boot time + its start
    ticks); None when no such process runs (gone, or a zombie) or /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    if stat[0] == "Z":  # exited, not yet reaped by its parent: it runs nothing
        return None
    return round(boot + int(stat[19]) / os.sysconf("SC_CLK_TCK"), 2)  # field 22 of proc(5)


def owner() -> dict[str, Any]:
    """The process that runs (or submits) a run, recorded in its manifest: host, pid, the process's
    start time (Unix s; a pid reused later is another process) and the Slurm job id inside Slurm."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "pid_started_at": process_start(pid),
        "slurm_job_id": slurm_job_id(),
    }


def owner_gone(record: Any) -> str | None:
    """Why the owner recorded in a manifest can no longer be running its run, or None while it may
    (alive, on another host where this one cannot look, or not recorded)."""
    if not isinstance(record, dict) or record.get("host") != socket.gethostname() or not record.get("pid"):
        return None
    pid, host = int(record["pid"]), record["host"]
    started = process_start(pid)
    if started is None:
        return f"its process {pid} on {host} is gone"
    recorded = record.get("pid_started_at")
    if isinstance(recorded, int | float) and abs(started - recorded) > 0.015:  # one tick of slack
        return f"pid {pid} on {host} is another process now (started {started}, not {recorded})"
    return None


def last_seen(paths: RunPaths) -> str:
    """When the run last wrote anything (manifest.json, trace/, logs/), UTC ISO 8601."""
    files = [paths.manifest, *(f for d in (paths.trace, paths.logs) if d.is_dir() for f in d.iterdir())]
    mtimes = [f.stat().st_mtime for f in files if f.is_file()]
    return dt.datetime.fromtimestamp(max(mtimes), dt.UTC).isoformat(timespec="seconds") if mtimes else "never"


def lost(paths: RunPaths, manifest: dict[str, Any], why: str) -> dict[str, Any]:
    """The manifest as shown for a run nobody runs any more: status `lost`, with `last_seen` and the
    reason (shown, never written: the manifest stays its owner's record)."""
    seen = last_seen(paths)
    reason = f"lost: {why}; last seen {seen}"
    dispatch = {**manifest.get("dispatch", {}), "state": "LOST", "reason": reason}
    return {**manifest, "status": "lost", "last_seen": seen, "reason": reason, "dispatch": dispatch}


def shown(paths: RunPaths, manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as `bench status` and the report show it: a `running` run whose owner process
    on this host is gone (or is another process now) is `lost` (see `lost`). A run handed to Slurm
    is Slurm's to judge (bench.monitor.reconcile asks it), not the submitting process's."""
    record, dispatch = manifest.get("owner"), manifest.get("dispatch", {})
    slurm = dispatch.get("slurm_job_id") or (record or {}).get("slurm_job_id")
    if manifest.get("status") != "running" or slurm or dispatch.get("state") == "DRY_RUN":
        return manifest  # a dry run was never meant to run: nobody lost it
    why = owner_gone(record)
    return manifest if why is None else lost(paths, manifest, why)


@contextlib.contextmanager
def ends_if_failed(paths: RunPaths) -> Iterator[None]:
    """Within the block, whatever stops the run (an exception, a full disk, Ctrl-C) marks it ended
    with what happened before it propagates: failed (partial with traced steps) with the error as
    the reason, or cancelled on KeyboardInterrupt. Best effort: if even that write fails (a full
    disk), the manifest still says running and its owner is gone, so `bench status` shows it lost."""
    try:
        yield
    except BaseException as e:
        cancelled = isinstance(e, KeyboardInterrupt)
        reason = "cancelled: SIGINT (Ctrl-C)" if cancelled else f"{type(e).__name__}: {e}"
        with contextlib.suppress(Exception):
            if read_manifest(paths).get("status") == "running":
                finish(paths, ok=False, reason=reason, status="cancelled" if cancelled else None)
        raise
