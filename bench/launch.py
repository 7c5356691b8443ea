"""`python -m bench run`: compose, validate, render, submit, write the run directories.

    python -m bench run experiment=smoke cluster=testbed mode=emulate [key=a,b ...] [--multirun]
                        [--dry-run] [--wait]

One job per framework of `experiment.frameworks` (or `framework=...`) times each sweep point
(Hydra's own override parser expands `key=a,b` and `range(64,321,32)`). Every job is validated
before anything is submitted; a problem exits 2 with nothing queued. Jobs go through submitit:
on Slurm, jobs with the same resource request form one job array (`executor.batch()`), and `run`
returns as soon as sbatch answered unless `--wait`. `cluster.executor=local` runs the same job
callable in this process, one after the other (no queue to return from).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import rundir
from bench.monitor import wait
from bench.trace import RunPaths

REPO = Path(__file__).resolve().parent.parent


class DispatchError(ValueError):
    """The command line cannot be dispatched (sweep without --multirun, bad override)."""


@dataclass
class JobPlan:
    """One job to submit: a framework at one sweep point, with its composed config."""

    framework: str
    point: dict[str, str]  # swept key -> value of this point ({} without a sweep)
    overrides: list[str]  # complete override list the job recomposes from
    cfg: Any
    nodes: int
    gpus_per_node: int
    resolved: Any = None  # bench.resolve.Resolved of cfg
    launch: Any = None  # runners.base.Launch, or None when the runner could not render
    render_error: str | None = None
    paths: RunPaths | None = None
    problems: list[str] = field(default_factory=list)


def expand(overrides: list[str], multirun: bool) -> list[tuple[dict[str, str], list[str]]]:
    """Sweep points (bench.sweep.expand); a framework sweep is jobs, not a point key."""
    from bench.sweep import SweepError
    from bench.sweep import expand as sweep

    try:
        points = sweep(overrides, multirun)
    except SweepError as e:
        raise DispatchError(str(e)) from None
    return [({k: v for k, v in point.items() if k != "framework"}, combo) for point, combo in points]


def plan(overrides: list[str], multirun: bool, dry_run: bool = False) -> list[JobPlan]:
    """Compose, render and validate every job; problems are collected, nothing is written.

    A dry run skips the "can this machine submit" checks: it must work on a laptop."""
    from bench.config import compose, for_framework
    from bench.resolve import Resolved, job_nodes
    from bench.validate import validate
    from runners.base import load_runner

    plans = []
    for point, combo in expand(overrides, multirun):
        explicit = [o.split("=", 1)[1] for o in combo if o.startswith("framework=")]
        frameworks = explicit or list(compose(combo).experiment.frameworks)
        for fw in frameworks:
            cfg = for_framework(combo, fw)
            p = JobPlan(fw, point, [*[o for o in combo if not o.startswith("framework=")], f"framework={fw}"],
                        cfg, 0, cfg.cluster.gpus_per_node)  # fmt: skip
            p.resolved = Resolved.from_config(cfg)
            p.problems = [
                f"[{fw}{' ' + rundir.point_slug(point) if point else ''}] {m}"
                for m in validate(cfg, p.resolved)
            ]
            try:
                p.launch = load_runner(cfg.framework).render_launch(cfg)
            except Exception as e:  # emulate mode runs without a native launch; native cannot
                p.render_error = f"{type(e).__name__}: {e}"
                if cfg.mode == "native":
                    p.problems.append(f"[{fw}] runner cannot render the native launch: {p.render_error}")
            p.nodes = job_nodes(cfg, p.launch, p.resolved)
            p.problems += [] if dry_run else cluster_problems(cfg)
            if cfg.cluster.executor == "slurm" and p.nodes > cfg.cluster.nodes:
                p.problems.append(
                    f"[{fw}] job needs {p.nodes} nodes; cluster.nodes={cfg.cluster.nodes} (conf/cluster/{cfg.cluster.name}.yaml)"
                )
            plans.append(p)
    return plans


def cluster_problems(cfg: Any) -> list[str]:
    """Can this machine submit to cfg.cluster at all? (sbatch on PATH; the testbed's slurm.conf)."""
    import shutil

    c = cfg.cluster
    if c.executor != "slurm":
        return []
    where = f"cluster={c.name} (conf/cluster/{c.name}.yaml)"
    if c.slurm_conf and not (REPO / c.slurm_conf).is_file():
        return [
            f"{where}: cluster.slurm_conf={c.slurm_conf} does not exist; expected a running testbed (make testbed-up)"
        ]
    if shutil.which("sbatch") is None:
        return [f"{where}: executor=slurm but sbatch is not on PATH; expected a Slurm login node"]
    return []


def print_dry_run(plans: list[JobPlan], runs: list[RunPaths]) -> None:
    """Each job's own command (launch/command.json, the framework's argv per role), not submitit's
    wrapper, with its job.sbatch path."""
    import json

    for p, r in zip(plans, runs, strict=True):
        how = "emulated by the job; mode=native runs it" if p.cfg.mode == "emulate" else "run by the job"
        print(f"# {p.framework}: {r.root} (mode={p.cfg.mode}: the launch below is {how})")
        if not (r.launch / "command.json").exists():
            print(f"  no native launch: {p.render_error}")
            continue
        cmd = json.loads((r.launch / "command.json").read_text())
        sbatch = r.launch / "job.sbatch"
        where = sbatch if sbatch.exists() else "(none)"
        print(f"  job.sbatch: {where} ({cmd['nodes']} nodes x {cmd['gpus_per_node']} GPUs)")
        for proc in cmd["processes"]:
            env = " ".join(f"{k}={v}" for k, v in proc["env"].items())
            print(
                f"  [{proc['role']} @ node {proc['node_rank']}] {env + ' ' if env else ''}{' '.join(proc['argv'])}"
            )
    print(
        f"dry run: {len(runs)} job(s) written, nothing submitted (submitit's wrapper: launch/submit.sbatch)"
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m bench run ...`; exit 0 once submitted (or finished with --wait), 2 on problems."""
    ap = argparse.ArgumentParser(prog="python -m bench run", description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (experiment=, cluster=, mode=, sweeps)")
    ap.add_argument("--multirun", "-m", action="store_true", help="expand sweep overrides (key=a,b)")
    ap.add_argument(
        "--dry-run", action="store_true", help="write launch/ and print the sbatch; submit nothing"
    )
    ap.add_argument("--wait", action="store_true", help="wait for every job, with a live table")
    ap.add_argument("--timeout", type=float, default=None, help="seconds to wait at most (--wait)")
    args = ap.parse_intermixed_args(argv)  # overrides may come after the flags
    from hydra.errors import HydraException

    from bench.errors import UsageError

    try:
        plans = plan(args.overrides, args.multirun, args.dry_run)
    except DispatchError as e:  # a sweep without --multirun
        raise UsageError(str(e)) from None
    except HydraException as e:  # an override Hydra's sweep parser cannot read
        raise UsageError(f"cannot parse the overrides: {str(e).splitlines()[0]}") from None
    problems = list(dict.fromkeys(m for p in plans for m in p.problems))  # cluster problems: once
    if problems:
        print("pre-flight problems (nothing submitted):\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    native = [p for p in plans if p.cfg.mode == "native"]
    if (
        native and not args.dry_run
    ):  # the site itself (bench inspect): partition, account, runtime, storage, data
        from bench.inspect import failures

        if failed := failures(native):
            print("bench inspect failed (nothing submitted):\n  " + "\n  ".join(failed), file=sys.stderr)
            return 2
    from bench.submit import submit

    runs = submit(plans, dry_run=args.dry_run)
    if args.dry_run:
        print_dry_run(plans, runs)
        return 0
    for r in runs:
        print(r.root)
    if args.wait:
        statuses = wait(runs, timeout_s=args.timeout)
        return 0 if all(s == "completed" for s in statuses) else 1
    from bench.trace import read_manifest

    return 1 if any(read_manifest(r)["dispatch"]["state"] == "SUBMIT_FAILED" for r in runs) else 0
