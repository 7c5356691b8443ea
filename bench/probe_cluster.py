"""`python -m bench probe cluster=<site>`: the probe as one Slurm job per node type (docs/probe.md).

A node type is one resource request of conf/cluster: a cluster YAML's partition, GPU type (GRES) and
constraint. Each cluster YAML names exactly one, so `cluster=<site>` is one job; a site whose nodes
differ is described by one YAML per node type and probed with `cluster=a,b` (one job each, at once).
A node type's folder is named `<partition>-<gpu_type>[-<constraint>]` (the cluster's name when all
three are empty), e.g. probes/testbed-h100/.

Each job is submitted the way `bench run` submits (bench.submit): the sbatch parameters of
`bench.submit.sbatch_params` (partition, account, QoS, time, constraint, --exclusive, the GPUs of one
whole node, the cluster's setup lines, the container, the `exec` of the job's Python) for one node,
in the executor `bench.submit.slurm_executor` makes for every Slurm job. The submitted callable is
bench.probe's `measure_into`, pickled by submitit with its arguments, so the batch script holds no
value the user typed except submitit's folder (under --out), quoted by sbatch_params and checked
here for line breaks by runners.shell.header_value; the cluster's own values are checked by
runners.shell.script_value_problems, as for `bench run`.

Every problem of the input is one line and exit 2 before anything is written or submitted: an
unknown site, a site without Slurm (`executor: local`), no `sbatch` on this machine, two sites that
name the same node type, an --out that already holds results or may not be written
(bench.outdir.check_out, as the local probe). Then the jobs are submitted, waited for (the result
pickle submitit writes, or Slurm's state through bench.monitor.slurm_state when the job ended
without one), and one line per node type is printed; exit 1 when any node type has no probe.json.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import UsageError

POLL_S = 1.0  # how often a waiting driver looks at its jobs (submitit's result pickle, then Slurm)


@dataclass(frozen=True)
class NodeType:
    """One node type of a site: the cluster config it is requested with, and its folder name."""

    name: str
    cluster: str  # the conf/cluster entry
    cfg: Any  # the composed config (its `cluster` is the request)

    @property
    def request(self) -> str:
        c = self.cfg.cluster
        gres = f"{c.gpu_type}:{c.gpus_per_node}" if c.gpu_type else str(c.gpus_per_node)
        where = f"partition {c.partition}" if c.partition else "the default partition"
        return f"{where}, 1 node, GPUs {gres}" + (f", constraint {c.constraint}" if c.constraint else "")


def node_type_name(cluster: Any) -> str:
    """`<partition>-<gpu_type>[-<constraint>]` of a cluster config, as a folder name (characters
    other than letters, digits, `.`, `_`, `-` become `_`); the cluster's name when all are empty."""
    parts = [str(cluster.partition), str(cluster.gpu_type), str(cluster.constraint)]
    name = "-".join(p for p in parts if p) or str(cluster.name)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".") or "node"


def node_types(sites: list[str]) -> list[NodeType]:
    """The node types of `cluster=` values (each may be a comma list), every problem refused here."""
    from bench.config import compose
    from runners.shell import script_value_problems

    names = [s for value in sites for s in value.split(",")]
    if not all(names):
        raise UsageError(
            f"cluster={','.join(sites)}: an empty site name; give cluster=<conf/cluster> (or cluster=a,b)"
        )
    found: dict[str, NodeType] = {}
    for site in dict.fromkeys(names):
        cfg = compose([f"cluster={site}"])
        executor = getattr(cfg.cluster.executor, "value", cfg.cluster.executor)
        if executor != "slurm":
            raise UsageError(
                f"cluster={site}: executor {executor} has no Slurm to submit to; run `python -m bench "
                "probe` without cluster= on the node itself, or choose a site with executor: slurm"
            )
        problems = script_value_problems(cfg)
        if problems:
            raise UsageError(problems[0])
        kind = NodeType(node_type_name(cfg.cluster), site, cfg)
        if kind.name in found:
            raise UsageError(
                f"cluster={','.join(names)}: {found[kind.name].cluster} and {site} both request node type "
                f"{kind.name} (same partition, GPU type and constraint); give it once"
            )
        found[kind.name] = kind
    return list(found.values())


def check_out(out: Path, kinds: list[NodeType]) -> None:
    """Refuse an --out that holds results (a node type's probe.json, or anything else: never
    overwritten), lies in a run directory or cannot be written; or whose path cannot go into a
    #SBATCH line (submitit's log paths are under it)."""
    from bench.outdir import check_out as check_out_dir
    from runners.shell import header_value

    for kind in kinds:
        if (out / kind.name / "probe.json").exists():
            raise UsageError(f"--out {out}: already holds {kind.name}/probe.json; choose a new directory")
    check_out_dir(out, "probe")
    try:
        header_value("--out", os.path.abspath(out))
    except ValueError as e:
        raise UsageError(str(e)) from None


def main(
    sites: list[str],
    models: list[str],
    out: Path,
    quick: bool,
    fs_path: Path | None,
    measure: Callable[..., str],
) -> int:
    """Submit `measure` (bench.probe.measure_into) once per node type, wait, print one line each."""
    kinds = node_types(sites)
    if shutil.which("sbatch") is None:
        raise UsageError(
            f"cluster={','.join(k.cluster for k in kinds)}: sbatch not found on this machine; run "
            "`bench probe cluster=...` where Slurm's commands are (the site's login node)"
        )
    check_out(out, kinds)
    out = Path(os.path.abspath(out))  # the job may start elsewhere: every path it is given is absolute
    fs = Path(os.path.abspath(fs_path)) if fs_path else None
    jobs: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for kind in kinds:
        try:
            jobs[kind.name] = submit(kind, out / kind.name, models, quick, fs, measure)
        except Exception as e:  # sbatch refused (partition, account, QoS): the other node types still go
            failed[kind.name] = f"submission failed: {type(e).__name__}: {e}".strip()
            continue
        print(
            f"{kind.name}: submitted Slurm job {jobs[kind.name].job_id} (cluster={kind.cluster}, {kind.request})",
            file=sys.stderr,
        )
    try:
        results = wait(jobs, {k.name: k for k in kinds})
    except KeyboardInterrupt:
        for job in jobs.values():
            job.cancel(check=False)
        print(f"cancelled Slurm job(s) {', '.join(j.job_id for j in jobs.values())}", file=sys.stderr)
        raise
    ok = True
    for kind in kinds:
        if kind.name in failed:
            ok = False
            print(f"{kind.name}: {failed[kind.name]}")
            continue
        done, line = results[kind.name]
        log = _keep_log(jobs[kind.name], out / kind.name)
        ok &= done
        where = f"Slurm job {jobs[kind.name].job_id}" + (f", log {log}" if log else "")
        print(f"{kind.name}: {line} ({where})" if done else f"{kind.name}: failed: {line} ({where})")
    return 0 if ok else 1


def submit(
    kind: NodeType,
    folder: Path,
    models: list[str],
    quick: bool,
    fs_path: Path | None,
    measure: Callable[..., str],
) -> Any:
    """One job for one whole node of `kind`, through bench.submit's parameters and submitit."""
    from bench.monitor import slurm_env
    from bench.submit import slurm_executor

    cfg = kind.cfg
    os.environ.update(slurm_env(cfg.cluster))  # the testbed's SLURM_CONF, as bench.submit does
    logs = folder / "submitit"
    logs.mkdir(parents=True, exist_ok=True)
    return slurm_executor(cfg, 1, f"bench-probe-{kind.name}", logs).submit(
        measure, folder, models, quick, fs_path, False
    )


def wait(
    jobs: dict[str, Any], kinds: dict[str, NodeType], poll_s: float = POLL_S
) -> dict[str, tuple[bool, str]]:
    """{node type: (measured, line)} once every job has ended: the job's own summary line, or why
    it has no probe.json (its exception, or Slurm's state when it ended without a result)."""
    from bench.monitor import slurm_env

    pending, results = dict(jobs), {}
    while pending:
        for name, job in list(pending.items()):
            ended = _ended(job, slurm_env(kinds[name].cfg.cluster))
            if ended is not None:
                results[name] = ended
                del pending[name]
        if pending:
            time.sleep(poll_s)  # a poll of running jobs, as bench.monitor.wait polls
    return results


def _ended(job: Any, env: dict[str, str]) -> tuple[bool, str] | None:
    """(measured, line) of a job that ended; None while it is pending or running."""
    from bench.monitor import ENDED_BAD, slurm_state

    if job.paths.result_pickle.exists():
        return _result(job)
    info = slurm_state(str(job.job_id), env)
    if job.paths.result_pickle.exists():  # written between the two looks: the job's own word
        return _result(job)
    if info is None:
        return False, f"Slurm knows no job {job.job_id} (squeue, scontrol, sacct)"
    state = info["state"]
    if state == "COMPLETED" or state.startswith(ENDED_BAD):
        reason = info.get("reason") or ""
        return False, f"Slurm job {job.job_id} ended {state}" + (
            f" ({reason})" if reason not in ("", "None") else ""
        )
    return None


def _result(job: Any) -> tuple[bool, str]:
    try:
        return True, str(job.result())
    except Exception as e:  # the job raised: its last line says why (the traceback is in its log)
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        return False, lines[-1].strip() if lines else type(e).__name__


def _keep_log(job: Any, folder: Path) -> Path | None:
    """The job's log (submitit's stdout, stderr merged into it) copied to <node type>/job.log."""
    src = Path(job.paths.stdout)
    if not src.exists():
        return None
    dest = folder / "job.log"
    shutil.copyfile(src, dest)
    return dest
