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

import os
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


def expand(
    overrides: list[str], multirun: bool, max_points: int | None = None
) -> list[tuple[dict[str, str], list[str]]]:
    """Sweep points (bench.sweep.expand); a framework sweep is jobs, not a point key."""
    from bench.sweep import MAX_POINTS, SweepError
    from bench.sweep import expand as sweep

    try:
        points = sweep(overrides, multirun, max_points or MAX_POINTS)
    except SweepError as e:
        raise DispatchError(str(e)) from None
    return [({k: v for k, v in point.items() if k != "framework"}, combo) for point, combo in points]


def plan(
    overrides: list[str], multirun: bool, dry_run: bool = False, max_points: int | None = None
) -> list[JobPlan]:
    """Compose, render and validate every job; problems are collected, nothing is written.

    A dry run skips the "can this machine submit" checks: it must work on a laptop."""
    from bench.config import compose, for_framework
    from bench.redact import carried_secrets_note
    from bench.resolve import Resolved, job_nodes
    from bench.validate import validate
    from runners.base import load_runner

    plans = []
    for point, combo in expand(overrides, multirun, max_points):
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
            if carried := [] if dry_run else submitted_secrets(p):
                p.problems.append(f"[{fw}] {carried_secrets_note(carried)}")
            if cfg.cluster.executor == "slurm" and p.nodes > cfg.cluster.nodes:
                p.problems.append(
                    f"[{fw}] job needs {p.nodes} nodes; cluster.nodes={cfg.cluster.nodes} (conf/cluster/{cfg.cluster.name}.yaml)"
                )
            plans.append(p)
    return plans


def submitted_secrets(p: JobPlan) -> list[str]:
    """Config keys whose secret values a real submission would have to run: the native launch's
    (mode=native), and cluster.setup's in submitit's batch script (executor=slurm, every mode).
    Both are written redacted, so such a job cannot work: `plan` refuses it before anything is written."""
    from bench.redact import secret_paths

    keys = list(p.launch.secrets) if p.launch is not None and p.cfg.mode == "native" else []
    if p.cfg.cluster.executor == "slurm":
        keys += list(secret_paths({"cluster": {"setup": [str(s) for s in p.cfg.cluster.setup]}}))
    return list(dict.fromkeys(keys))


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
    wrapper, with its job.sbatch path. Every word is quoted by runners/shell.py, as in job.sbatch:
    only the suite's own `${RUN_DIR}`-style references (set by job.sbatch) expand."""
    import json

    from bench.redact import carried_secrets_note
    from runners.shell import shell_join, shell_word

    for p, r in zip(plans, runs, strict=True):
        how = "emulated by the job; mode=native runs it" if p.cfg.mode == "emulate" else "run by the job"
        print(f"# {p.framework}: {r.root} (mode={p.cfg.mode}: the launch below is {how})")
        if not (r.launch / "command.json").exists():
            print(f"  no native launch: {p.render_error}")
            continue
        cmd = json.loads((r.launch / "command.json").read_text())
        if p.launch is not None and p.launch.secrets:
            print(f"  warning: {carried_secrets_note(p.launch.secrets)}", file=sys.stderr)
        sbatch = r.launch / "job.sbatch"
        where = sbatch if sbatch.exists() else "(none)"
        print(f"  job.sbatch: {where} ({cmd['nodes']} nodes x {cmd['gpus_per_node']} GPUs)")
        for proc in cmd["processes"]:  # quoted as job.sbatch quotes it: safe to paste after the label
            words = [*(f"{k}={shell_word(v)}" for k, v in proc["env"].items()), shell_join(proc["argv"])]
            print(f"  [{proc['role']} @ node {proc['node_rank']}] {' '.join(words)}")
    print(
        f"dry run: {len(runs)} job(s) written, nothing submitted (submitit's wrapper: launch/submit.sbatch)"
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m bench run ...`; exit 0 once submitted (or finished with --wait), 2 on problems."""
    from bench.cli import add_overrides, command_parser, number_arg

    ap = command_parser(
        "run",
        "Compose an experiment, validate every job, render each framework's native launch and submit one "
        "job per framework and sweep point (to Slurm, or in this process on cluster=local).",
        "conf/ (experiment, cluster, framework, model, hardware) and the overrides; for mode=native, the "
        "site's Slurm and the data and models that bench prepare put on it.",
        "one new run directory per job under results/<experiment>/ (manifest.json, config.resolved.yaml, "
        "launch/, then trace/ and metrics.json as the job runs); --dry-run writes results/<experiment>/dry-run/.",
        [
            "python -m bench run experiment=smoke cluster=local --wait",
            "python -m bench run experiment=semianalysis_case1 'experiment.generator_gpus=range(64,321,32)' --multirun",
        ],
    )
    add_overrides(ap, "sweeps a=1,2 and range(lo,hi,step) with --multirun")
    ap.add_argument("--multirun", "-m", action="store_true", help="expand sweep overrides (key=a,b)")
    ap.add_argument(
        "--dry-run", action="store_true", help="write launch/ and print the sbatch; submit nothing"
    )
    ap.add_argument("--wait", action="store_true", help="wait for every job, with a live table")
    ap.add_argument("--timeout", type=number_arg(0, False), help="seconds to wait at most (--wait)")
    ap.add_argument("--max-points", type=number_arg(1, True, int), help="confirm a sweep over 256 points")
    args = ap.parse_intermixed_args(argv)  # overrides may come after the flags
    from hydra.errors import HydraException

    from bench.errors import UsageError
    from bench.redact import redact_text

    try:
        plans = plan(args.overrides, args.multirun, args.dry_run, args.max_points)
    except DispatchError as e:  # a sweep without --multirun
        raise UsageError(str(e)) from None
    except HydraException as e:  # an override Hydra's sweep parser cannot read
        raise UsageError(f"cannot parse the overrides: {str(e).splitlines()[0]}") from None
    problems = list(dict.fromkeys(m for p in plans for m in p.problems))  # cluster problems: once
    if problems:
        text = "pre-flight problems (nothing submitted):\n  " + "\n  ".join(problems)
        print(redact_text(text), file=sys.stderr)
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

    if args.dry_run:
        print_dry_run(plans, submit(plans, dry_run=True))
        return 0
    from bench.job import Cancelled, cancel_on_signals

    try:
        with cancel_on_signals():  # Ctrl-C or SIGTERM: stop every job this driver owns
            runs = submit(plans)
            for r in runs:
                print(r.root, flush=True)
            if args.wait:
                statuses = wait(runs, timeout_s=args.timeout)
                return 0 if all(s == "completed" for s in statuses) else 1
    except Cancelled as e:
        for line in stop(owned(plans), f"cancelled: {driver()} received {e} at {rundir.now_iso()}"):
            print(line, file=sys.stderr)
        return 128 + e.signum  # as a shell reports a process ended by the signal
    except Exception as e:  # the driver itself failed: no run it owns may stay `running`
        stop(owned(plans), f"{driver()} failed: {type(e).__name__}: {e}", status=None)
        if isinstance(e, OSError) and e.errno:  # a full or read-only results_dir: one line
            raise UsageError(f"{e.filename or 'results_dir'}: cannot write ({os.strerror(e.errno)}); "
                             "runs already allocated are marked failed") from None  # fmt: skip
        raise
    from bench.trace import read_manifest

    return 1 if any(read_manifest(r)["dispatch"]["state"] == "SUBMIT_FAILED" for r in runs) else 0


def driver() -> str:
    """This driver, as a reason names it: 'bench run (pid N on HOST)'."""
    import socket

    return f"bench run (pid {os.getpid()} on {socket.gethostname()})"


def owned(plans: list[JobPlan]) -> list[RunPaths]:
    """The run directories this driver allocated so far (a plan not yet prepared has none)."""
    return [p.paths for p in plans if p.paths is not None]


def stop(runs: list[RunPaths], reason: str, status: str | None = "cancelled") -> list[str]:
    """Stop every run of `runs` still running (scancel for a Slurm job; a local job ran in this
    process and stopped with it) and end it with `reason`: `cancelled` (exit state CANCELLED), or
    with status None failed (partial with traced steps), keeping its trace and the metrics of the
    steps it traced. Returns one line per run stopped."""
    import subprocess

    from bench.monitor import slurm_env
    from bench.trace import read_manifest

    lines = []
    for paths in runs:
        if not paths.manifest.is_file():  # its first manifest failed: the directory was removed
            continue
        m = read_manifest(paths)
        if m.get("status") != "running":
            continue
        job = m.get("dispatch", {}).get("slurm_job_id")
        if job:  # the job's own SIGTERM handler then finds the run already ended
            subprocess.run(["scancel", str(job)], env=slurm_env(m.get("config", {}).get("cluster")),
                           capture_output=True, check=False, timeout=30)  # fmt: skip
        state = "CANCELLED" if status == "cancelled" else "FAILED"
        try:
            rundir.finish(paths, ok=False, reason=reason, exit_state=state, status=status)
        except OSError as e:  # a full disk: the manifest keeps `running`, and `bench status` shows it lost
            lines.append(f"{paths.root}: could not be marked ({os.strerror(e.errno or 0)}); shown lost")
            continue
        lines.append(f"{paths.root}: {reason}" + (f" (scancel {job})" if job else ""))
    return lines
