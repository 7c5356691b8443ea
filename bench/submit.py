"""Submission through submitit: sbatch parameters from conf/cluster, job arrays, local in-process.

Every job gets whole nodes (`--exclusive`), `nodes` from its framework layout and
`--gpus-per-node=<type>:<n>`; partition, account, QoS, time, constraint and the container come
from conf/cluster/<name>.yaml. The submitted callable runs in the batch step (`use_srun=False`):
it starts its own `srun` steps per role (native) or the emulator (emulate). Jobs with the same
resource request are one job array (submitit's `executor.batch()`).
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import sys
from itertools import groupby
from pathlib import Path
from typing import Any

import submitit
from submitit.slurm.slurm import _make_sbatch_string

from bench import rundir
from bench.job import BenchJob
from bench.trace import RunPaths, redact_file, redact_text


def sbatch_params(cfg: Any, nodes: int, job_name: str, folder: Path | str) -> dict[str, Any]:
    """submitit SlurmExecutor parameters of one job (sorted into #SBATCH lines by submitit).

    The last setup line `exec`s the job's Python in place of the batch shell: the job runs in the
    batch step (no srun around it, so its own srun steps get the nodes), and `--signal=B:USR2@N`
    (a time limit coming) and `scancel --batch --signal=USR2` then reach submitit's checkpoint
    handler instead of killing a bash that does not forward signals. Job arrays too: submitit's
    array path drops the executor's `python`, the exec line does not.
    """
    c = cfg.cluster
    delay_s = min(90, int(c.time_min) * 60 // 4)
    submitit_cmd = f"{python_command(cfg)} -u -m submitit.core._submit {shlex.quote(str(folder))}"
    gres = f"{c.gpu_type}:{c.gpus_per_node}" if c.gpu_type else c.gpus_per_node
    params: dict[str, Any] = {
        "job_name": job_name,
        "nodes": nodes,
        "ntasks_per_node": 1,
        "gpus_per_node": gres,
        "time": int(c.time_min),
        "use_srun": False,  # the job places its own srun steps per role
        "stderr_to_stdout": True,
        "setup": [*c.setup, "# the batch shell becomes the job (signals reach it; see bench/submit.py)",
                  "export SUBMITIT_EXECUTOR=slurm", f"exec {submitit_cmd}"],
        # Timeouts: USR2 this many seconds before the limit -> BenchJob.checkpoint -> requeue
        "signal_delay_s": delay_s,
        "additional_parameters": {"signal": f"B:USR2@{delay_s}"},
    }  # fmt: skip
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(c, key):
            params[key] = getattr(c, key)
    if c.exclusive:
        params["exclusive"] = True
    if c.cpus_per_task:
        params["cpus_per_task"] = int(c.cpus_per_task)
    kind, image = c.container.kind, c.container.image or cfg.framework.container
    if kind == "pyxis":
        extra = {"container-image": image}
        if c.container.mounts:
            extra["container-mounts"] = ",".join(c.container.mounts)
        params["additional_parameters"].update(extra)
    return params


def python_command(cfg: Any) -> str:
    """The interpreter submitit runs the job with; Apptainer wraps it in `apptainer exec`."""
    c = cfg.cluster.container
    if c.kind != "apptainer":
        return shlex.quote(sys.executable)
    image = c.image or cfg.framework.container
    binds = ["--bind", ",".join(c.mounts)] if c.mounts else []
    return shlex.join(["apptainer", "exec", "--nv", *binds, image, "python"])


def _group_key(p: Any) -> tuple:
    params = sbatch_params(p.cfg, p.nodes, "", "")
    return (repr(sorted(params.items())), p.cfg.cluster.name, p.cfg.results_dir, p.cfg.experiment.name)


def prepare(p: Any, dry_run: bool = False) -> RunPaths:
    """Allocate the run directory; write manifest.json, config.resolved.yaml and launch/.

    A dry run writes the same files under results/<experiment>/dry-run/, where reports and
    `bench status` (which read results/<experiment>/<run_id>/) never mistake it for a run.
    """
    cfg = p.cfg
    where = f"{cfg.experiment.name}/dry-run" if dry_run else cfg.experiment.name
    p.paths = rundir.allocate(rundir.REPO / cfg.results_dir, where, p.framework, p.point)
    with rundir.building(p.paths.root, allocated=True):  # a failed write: no half-written run left
        manifest = rundir.initial_manifest(cfg, p.paths, p.point, p.overrides, p.resolved)
        manifest["dispatch"].update(
            nodes=p.nodes, gpus_per_node=p.gpus_per_node, gpus=p.nodes * p.gpus_per_node
        )
        if dry_run:
            manifest["dispatch"]["state"] = "DRY_RUN"
        rundir.start(p.paths, manifest)
        rundir.write_resolved_config(p.paths, manifest["config"], manifest["resolved"])
        if p.launch is not None:
            p.launch.write(p.paths.launch)
        else:
            (p.paths.launch / "render_error.txt").write_text(redact_text(f"{p.render_error}\n"))
    return p.paths


def submit(plans: list[Any], dry_run: bool = False) -> list[RunPaths]:
    """Prepare every run directory, then submit (or, dry, only write launch/submit.sbatch)."""
    from bench.monitor import slurm_env

    groups = [list(g) for _, g in groupby(sorted(plans, key=_group_key), key=_group_key)]
    runs: list[RunPaths] = []
    try:  # every run directory complete before the first job goes, or none left (a full disk)
        for p in plans:
            runs.append(prepare(p, dry_run))
        for group in groups:
            _write_sbatch(group, _submitit_folder(group[0].cfg))
    except BaseException:
        for run in runs:
            rundir.discard(run.root)
        raise
    for group in groups:
        cfg = group[0].cfg
        os.environ.update(slurm_env(cfg.cluster))
        if cfg.cluster.executor == "local":
            if not dry_run:
                _run_local(group)
            continue
        folder = _submitit_folder(cfg)
        if dry_run:
            continue
        try:
            _submit_slurm(group, folder)
        except Exception as e:  # sbatch refused (account, QoS, partition): the other groups still go
            for p in group:
                rundir.update(
                    p.paths, status="failed", state="SUBMIT_FAILED", exit_state="SUBMIT_FAILED",
                    ended_at=rundir.now_iso(), reason=f"sbatch failed: {type(e).__name__}: {e}",
                )  # fmt: skip
            print(f"submission failed for {len(group)} job(s): {e}", file=sys.stderr)
    return runs


def _submitit_folder(cfg: Any) -> Path | None:
    """results/<experiment>/.submitit/, where submitit keeps a Slurm job's pickle and logs; None
    on cluster=local (the jobs run in this process)."""
    if cfg.cluster.executor == "local":
        return None
    results = Path(cfg.results_dir) if Path(cfg.results_dir).is_absolute() else rundir.REPO / cfg.results_dir
    return results / cfg.experiment.name / ".submitit"


def job_config(cfg: Any) -> Any:
    """The config the job is handed (pickled by submitit into results/<experiment>/.submitit/ for
    a Slurm job): a copy of `cfg` with every value bench.redact hides replaced by its redacted form,
    so no file the suite writes holds a secret. The job loses nothing it could use: a secret the job
    would run with is refused before submission (bench.validate), since its launch is written redacted."""
    from omegaconf import read_write

    from bench.redact import redact, secret_paths
    from bench.validate import to_container

    plain = to_container(cfg)
    found = secret_paths(plain)
    if not found:
        return cfg
    hidden, out = redact(plain), copy.deepcopy(cfg)
    for path in found:
        *parents, last = [
            int(k[1:-1]) if k.startswith("[") else k for k in re.findall(r"\[\d+\]|[^.\[\]]+", path)
        ]
        node, shown = out, hidden
        for key in parents:
            node, shown = node[key], shown[key]
        with read_write(node):
            try:
                node[last] = shown[last]
            except Exception:  # a typed non-string field (an int under a secret's name): drop the value
                node[last] = None
    return out


def _write_sbatch(group: list[Any], folder: Path | None) -> None:
    """launch/submit.sbatch: the batch script submitit submits for this job (arrays: per member)."""
    cfg = group[0].cfg
    params = sbatch_params(cfg, group[0].nodes, f"bench-{cfg.experiment.name}", folder or ".")
    command = f"{python_command(cfg)} -u -m submitit.core._submit {shlex.quote(str(folder or '.'))}"
    text = _make_sbatch_string(
        command=command,
        folder=str(folder or "."),
        map_count=len(group) if len(group) > 1 else None,
        **params,
    )
    for p in group:
        (p.paths.launch / "submit.sbatch").write_text(redact_file("submit.sbatch", text))


def slurm_executor(cfg: Any, nodes: int, name: str, folder: Path) -> submitit.SlurmExecutor:
    """submitit's SlurmExecutor for jobs of `nodes` whole nodes of cfg's cluster, named `name`, its
    files under `folder`: the one place a Slurm job's executor is made (bench run, bench probe)."""
    ex = submitit.SlurmExecutor(folder=folder, python=python_command(cfg))
    ex.update_parameters(**sbatch_params(cfg, nodes, name, folder))
    return ex


def _submit_slurm(group: list[Any], folder: Path) -> None:
    cfg = group[0].cfg
    ex = slurm_executor(cfg, group[0].nodes, f"bench-{cfg.experiment.name}", folder)
    submitted_at = rundir.now_iso()
    with ex.batch():
        jobs = [ex.submit(BenchJob(), str(p.paths.root), job_config(p.cfg)) for p in group]
    for p, job in zip(group, jobs, strict=True):
        main_id, _, index = job.job_id.partition("_")
        rundir.update(
            p.paths,
            state="PENDING",
            slurm_job_id=job.job_id,
            array_job_id=main_id if index else None,
            array_index=int(index) if index else None,
            submitted_at=submitted_at,
            submitit_log=str(job.paths.stdout),
        )


def _run_local(group: list[Any]) -> None:
    """cluster.executor=local: the same callable, in this process (a laptop has no queue)."""
    for p in group:
        rundir.update(p.paths, state="PENDING", submitted_at=rundir.now_iso())
        BenchJob()(str(p.paths.root), job_config(p.cfg))
