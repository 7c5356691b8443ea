"""Job state from run directories and Slurm: `python -m bench status EXP`, and `run --wait`'s table.

The run directory is the record; Slurm is asked only about runs still marked `running`. A job that
Slurm reports ended (cancelled, timed out, failed, node failure) while its manifest still says
running cannot have finished its run: it is marked failed (partial if steps were traced) with
Slurm's state and reason. Queries go through squeue, then `scontrol show job` (kept MinJobAge
seconds after the end; the testbed has no accounting daemon), then sacct. A run still marked
running whose owner is gone (its process on this host, or a Slurm job Slurm no longer knows) is
shown `lost`, with when it last wrote anything (bench.rundir.shown); that view is never written.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import rundir
from bench.cli import counted
from bench.trace import RunPaths, read_manifest

# Slurm keeps a job's last pending reason after it ran: not a reason for its end
PENDING_REASONS = ("", "None", "Resources", "Priority", "BeginTime", "Dependency", "JobArrayTaskLimit")
ENDED_BAD = (
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)


def _run(argv: list[str], env: dict[str, str] | None = None) -> str | None:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


def slurm_state(job_id: str, env: dict[str, str] | None = None) -> dict[str, str] | None:
    """{'state', 'reason', 'node_list'} of a Slurm job (array member '123_4' too); None if unknown."""
    out = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%N"], env)
    if out and out.strip():
        state, reason, nodes = out.strip().splitlines()[0].split("|")
        return {"state": state, "reason": reason, "node_list": nodes}
    out = _run(["scontrol", "-o", "show", "job", job_id], env)
    if out and out.strip():
        fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
        return {
            "state": fields.get("JobState", "UNKNOWN"),
            "reason": fields.get("Reason", ""),
            "node_list": fields.get("NodeList", ""),
        }
    out = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,Reason,NodeList"], env)
    if out and out.strip():
        state, reason, nodes = out.strip().splitlines()[-1].split("|")
        return {"state": state.split()[0], "reason": reason, "node_list": nodes}
    return None


def slurm_env(cluster: Any) -> dict[str, str]:
    """Environment for Slurm's client commands on `cluster` (a ClusterConf, or the manifest's copy of
    it): SLURM_CONF of the cluster's own slurm.conf (the testbed), else this shell's Slurm."""
    conf = cluster.get("slurm_conf") if cluster else None
    if not conf:  # a site cluster: whatever Slurm this shell is configured for
        return dict(os.environ)
    return {**os.environ, "SLURM_CONF": str(rundir.REPO / conf)}


def reconcile(paths: RunPaths) -> dict[str, Any]:
    """The manifest, with Slurm's view merged in for a run still marked running.

    Writes only when Slurm says the job ended without the run finishing: while the job lives,
    it alone writes its manifest (a second writer could lose its updates).
    """
    m = read_manifest(paths)
    d = m.get("dispatch", {})
    job_id = d.get("slurm_job_id")
    if job_id and d.get("exit_state") == "TERMINATED":
        return _name_termination(paths, m)
    if m.get("status") != "running" or not job_id:
        return rundir.shown(paths, m)  # a local run whose owner process is gone: lost
    info = slurm_state(str(job_id), slurm_env(m.get("config", {}).get("cluster")))
    if info is None:  # shown, not written: squeue may only be out of reach from here
        return rundir.lost(paths, m, f"Slurm knows no job {job_id} (squeue, scontrol, sacct)")
    state = info["state"]
    if state.startswith(ENDED_BAD) or state == "COMPLETED":
        # Re-read: the job writes its final manifest before it exits, so a manifest read after
        # Slurm reports the end is the last word (the first read may predate the job's own).
        m = read_manifest(paths)
        if m.get("status") != "running":
            return m
        why = f"Slurm job {job_id} ended {state}" + (
            f" ({info['reason']})" if info["reason"] not in PENDING_REASONS else ""
        )
        if state == "COMPLETED":
            why += ": the batch job exited before the run finished"
        return rundir.update(
            paths,
            status=_failed_or_partial(paths),
            state=state,
            exit_state=state.split()[0],
            ended_at=rundir.now_iso(),
            reason=why,
            node_list=info["node_list"] or d.get("node_list"),
        )
    shown = {"state": state if d.get("state") != "REQUEUED" else d["state"]}
    if info["node_list"] and not d.get("node_list"):
        shown["node_list"] = info["node_list"]
    return {**m, "dispatch": {**d, **shown}}


def _name_termination(paths: RunPaths, m: dict[str, Any]) -> dict[str, Any]:
    """A job that stopped on SIGTERM: once Slurm has finished ending it, record how (CANCELLED, ...).

    While the job is being killed Slurm shows only COMPLETING; the final state comes after KillWait.
    """
    d = m["dispatch"]
    info = slurm_state(str(d["slurm_job_id"]), slurm_env(m.get("config", {}).get("cluster")))
    if info is None or not info["state"].startswith((*ENDED_BAD, "COMPLETED")):
        return m
    state = info["state"].split()[0]
    return rundir.update(
        paths,
        state=state,
        exit_state=state,
        reason=f"Slurm job {d['slurm_job_id']} ended {state} ({d.get('reason')})",
    )


def pending(m: dict[str, Any], grace_s: float = 60.0) -> bool:
    """Still worth waiting for: running, or terminated less than `grace_s` ago and not yet named."""
    d = m.get("dispatch", {})
    if m.get("status") == "running":
        return True
    if d.get("exit_state") != "TERMINATED" or not d.get("ended_at"):
        return False
    ended = dt.datetime.fromisoformat(d["ended_at"]).timestamp()
    return time.time() - ended < grace_s


def _failed_or_partial(paths: RunPaths) -> str:
    from bench.rundir import steps_traced

    return "partial" if steps_traced(paths) > 0 else "failed"


def _elapsed(d: dict[str, Any]) -> str:
    start = d.get("started_at")
    if not start:
        return "-"
    end = dt.datetime.fromisoformat(d["ended_at"]) if d.get("ended_at") else dt.datetime.now(dt.UTC)
    return f"{(end - dt.datetime.fromisoformat(start)).total_seconds():.1f}s"


def _duration(m: dict[str, Any]) -> str:
    """How long the run took: the emulated wall time (manifest `wall_s`) for an emulated run,
    labelled so; the job's own elapsed time otherwise (native: the job is the run)."""
    if m.get("mode") == "emulated":
        wall = m.get("wall_s")
        if not isinstance(wall, int | float):
            return "-"  # still emulating: the job column shows how long so far
        h, rest = divmod(int(round(wall)), 3600)
        return (
            f"{h}h{rest // 60:02d}m{rest % 60:02d}s emulated"
            if h
            else f"{rest // 60}m{rest % 60:02d}s emulated"
        )
    return _elapsed(m.get("dispatch", {}))


def _last_step(paths: RunPaths) -> str:
    from bench.rundir import steps_traced

    n = steps_traced(paths)
    return str(n) if n else "-"


def table(rows: list[tuple[RunPaths, dict[str, Any]]], title: str):
    """A rich Table: run, framework, status, job state, job id, node list, run duration (emulated
    or measured), the job's own wall time, steps, reason."""
    from rich.table import Table

    t = Table(title=title)
    cols = (
        "run",
        "framework",
        "status",
        "job state",
        "job id",
        "nodes",
        "duration",
        "job time",
        "steps",
        "reason",
    )
    for col in cols:
        t.add_column(col)
    for paths, m in rows:
        d = m.get("dispatch", {})
        t.add_row(
            paths.root.name,
            str(m.get("framework")),
            str(m.get("status")),
            str(d.get("state") or "-"),
            str(d.get("slurm_job_id") or "-"),
            str(d.get("node_list") or "-"),
            _duration(m),
            _elapsed(d),
            _last_step(paths),
            str(d.get("reason") or ""),
        )
    return t


def wait(runs: list[RunPaths], timeout_s: float | None = None, poll_s: float = 1.0) -> list[str]:
    """Poll until no run is `running` (live table on a terminal); return the final statuses."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if not console.is_terminal:
        console = Console(width=220)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    rows = [(p, reconcile(p)) for p in runs]
    with Live(table(rows, "jobs"), console=console, refresh_per_second=2, transient=False) as live:
        while any(pending(m) for _, m in rows):
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(poll_s)
            rows = [(p, reconcile(p)) for p in runs]
            live.update(table(rows, "jobs"))
    console.print()
    return [m.get("status") for _, m in rows]


def status_main(argv: list[str] | None = None) -> int:
    """`python -m bench status EXP [--results DIR]`: every run of an experiment, with Slurm's state."""
    from bench.cli import command_parser

    ap = command_parser(
        "status",
        "Show the state of each run of an experiment (running, completed, partial, failed, cancelled, or lost "
        "when its owner is gone), "
        "asking Slurm only about the runs still marked running.",
        "results/<experiment>/*/manifest.json and, for runs still running, Slurm (squeue, scontrol, sacct).",
        "only the manifest.json of a run Slurm reports ended while it was still marked running "
        "(failed, or partial when steps were traced); the table goes to stdout.",
        ["python -m bench status smoke", "python -m bench status results/smoke --cluster testbed"],
    )
    ap.add_argument(
        "experiment", help="experiment name (results/<experiment>/) or a results/<experiment> path"
    )
    ap.add_argument("--results", default=None, help="results directory (default: results/ of the checkout)")
    ap.add_argument("--cluster", default=None, help="cluster whose slurm.conf to ask (e.g. testbed)")
    args = ap.parse_args(argv)
    exp = Path(args.experiment)
    base = exp.parent if exp.parent != Path(".") else Path(args.results or rundir.REPO / "results")
    if args.cluster:
        from bench.config import compose

        os.environ.update(slurm_env(compose([f"cluster={args.cluster}"]).cluster))
    runs = rundir.run_dirs(base, exp.name)
    if not runs:
        from bench.errors import UsageError

        known = (
            sorted(d.name for d in base.iterdir() if rundir.run_dirs(base, d.name)) if base.is_dir() else []
        )
        raise UsageError(
            f"{base / exp.name}: no run directories with a manifest.json; "
            + (f"experiments with runs in {base}: {', '.join(known)}" if known else f"{base} holds no runs")
        )
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a pipe or a log file: do not squeeze the table into 80 columns
        console = Console(width=220)
    console.print(table([(p, reconcile(p)) for p in runs], f"{exp.name}: {counted(len(runs), 'run')}"))
    return 0
