"""What runs inside one job's allocation: `BenchJob()(run_dir)`.

The job gets the config composed and validated at submission (pickled with it by submitit; the
manifest's overrides recompose it when it is missing), so what runs is what was checked. Then:

- mode=emulate: the emulator (bench.emulator.run.emulate) on the batch node of the allocation;
- mode=native: the runner's rendered launch/job.sbatch, executed inside this allocation (its
  `srun` steps place roles on the nodes, with the Ray bootstrap for verl and slime), a 1-s
  nvidia-smi sampler on every node, then runner.parse_logs(logs/) -> trace/ -> metrics.json.

A failure marks the run failed (or partial when some steps were traced) with the reason and keeps
logs/ and the complete steps. On a timeout or preemption submitit calls `checkpoint`, which
requeues the same callable on the same run directory (resume = rerun into the same folder).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import submitit

from bench import rundir, telemetry
from bench.trace import RunPaths, read_manifest, redact_text, write_manifest


def slurm_fields() -> dict[str, Any]:
    """Dispatch facts of the current allocation from Slurm's environment (local: this host)."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return {"node_list": socket.gethostname(), "nodes": 1}
    nodes = int(env.get("SLURM_JOB_NUM_NODES", env.get("SLURM_NNODES", "1")))
    gpn = env.get("SLURM_GPUS_PER_NODE", "")
    gpus_per_node = int(gpn.rsplit(":", 1)[-1]) if gpn.rsplit(":", 1)[-1].isdigit() else None
    array_task = env.get("SLURM_ARRAY_TASK_ID")
    fields = {
        "slurm_job_id": rundir.slurm_job_id(),  # '<array>_<index>', as submitit recorded it
        "slurm_job_id_raw": env["SLURM_JOB_ID"],
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_index": int(array_task) if array_task is not None else None,
        "node_list": env.get("SLURM_JOB_NODELIST"),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "gpus": gpus_per_node * nodes if gpus_per_node is not None else None,
        "requeues": int(env.get("SLURM_RESTART_COUNT", "0")),
    }
    # What Slurm does not say (no GPU env on a GRES-less site) keeps the value planned at submission
    return {k: v for k, v in fields.items() if v is not None}


class BenchJob(submitit.helpers.Checkpointable):
    """The submitted callable; one instance per run directory, safe to requeue."""

    def __call__(self, run_dir: str, cfg: Any = None) -> str:
        """Run one job into `run_dir`; `cfg` is the config composed at submission (pickled with
        the job: recomposing here would cost ~1 s of Hydra per job), else recomposed from the
        manifest's overrides. Returns the run's final status."""
        paths = RunPaths(Path(run_dir))
        # status back to running: a requeued attempt starts over in the same directory; this
        # process owns the run now (bench status shows it lost if the process dies)
        mine = rundir.update(
            paths, status="running", owner=rundir.owner(), state="RUNNING", started_at=rundir.now_iso(),
            ended_at=None, exit_state=None, reason=None, **slurm_fields(),
        )  # fmt: skip
        previous = signal.getsignal(signal.SIGTERM)
        if previous is not _cancel:  # under a `bench run` driver (local), the driver owns the signals
            _stop_on_sigterm()
        ok, reason, extra, exit_state = True, None, {}, None
        try:
            if cfg is None:
                from bench.config import compose

                cfg = compose(mine["overrides"])
            if cfg.mode == "native":
                ok, reason = run_native(cfg, paths)
            else:
                rundir.update(paths, emulator_started_at=rundir.now_iso())
                extra = run_emulator(cfg, paths)
        except Terminated as e:  # scancel, preemption, time limit: `bench status` asks Slurm which
            job = rundir.slurm_job_id()
            by = (
                f"terminated by Slurm (job {job})" if job else f"sent to process {os.getpid()} (no Slurm job)"
            )
            ok, reason, exit_state = False, f"{e}: {by}", "TERMINATED"
        except Exception as e:  # the run fails; the job (and the other jobs) do not
            ok, reason = False, f"{type(e).__name__}: {e}"
            (paths.logs / "job-error.txt").write_text(redact_text(traceback.format_exc()))
        try:
            return self._finish(paths, ok, reason, extra, exit_state)
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _finish(
        self,
        paths: RunPaths,
        ok: bool,
        reason: str | None,
        extra: dict[str, Any],
        exit_state: str | None = None,
    ) -> str:
        current = read_manifest(paths)
        if current.get("status") in ("failed", "partial", "cancelled") and current.get("dispatch", {}).get(
            "exit_state"
        ):
            return current["status"]  # already marked by `bench status` or the driver (cancelled under us)
        return rundir.finish(paths, ok, reason, extra, exit_state)

    def checkpoint(self, run_dir: str, cfg: Any = None) -> submitit.helpers.DelayedSubmission:
        """Timeout/preemption: record the requeue and resubmit onto the same run directory."""
        paths = RunPaths(Path(run_dir))
        n = read_manifest(paths).get("dispatch", {}).get("requeues", 0) + 1
        rundir.update(paths, state="REQUEUED", requeues=n, reason=f"requeued ({n}) after timeout/preemption")
        return submitit.helpers.DelayedSubmission(self, run_dir, cfg)


class Terminated(BaseException):  # noqa: N818 - it is what happened, not an error of ours
    """SIGTERM arrived: Slurm ending the job (scancel, preemption, time limit), or, outside Slurm,
    whoever started the process (the reason then says so).

    A BaseException, like KeyboardInterrupt: an `except Exception` anywhere in the emulator or a
    library must not swallow it and let the run go on to report itself completed."""


class Cancelled(BaseException):  # noqa: N818 - what happened to the run, not an error of ours
    """SIGINT, SIGTERM or SIGHUP reached the `bench run` driver (bench.launch): every run it owns is
    cancelled. A BaseException for the same reason as Terminated; str(e) is the signal's name."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _cancel(signum: int, frame: Any) -> None:
    """The driver's SIGINT/SIGTERM handler: once (a second signal must not interrupt the marking)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    raise Cancelled(signum)


@contextlib.contextmanager
def cancel_on_signals() -> Iterator[None]:
    """Within the block SIGINT, SIGTERM and SIGHUP (the terminal closed) raise Cancelled (the
    driver's jobs run inside it: a job run in this process leaves the signals to the driver); the
    previous handlers come back after. A SIGHUP already ignored (`nohup bench run`) stays ignored."""
    hangup = [] if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else [signal.SIGHUP]
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, *hangup)}
    for s in previous:
        signal.signal(s, _cancel)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _stop_on_sigterm() -> None:
    """Make SIGTERM end the run now (submitit only logs it): the run must not go on to report
    itself completed after Slurm cancelled it. Preemption requeues are Slurm's, timeouts use USR2."""

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the run dir be written
        raise Terminated(f"SIGTERM at {rundir.now_iso()}")

    signal.signal(signal.SIGTERM, handler)


def run_emulator(cfg: Any, paths: RunPaths) -> dict[str, Any]:
    """Emulate into this run directory's trace/ and return the emulator's own manifest keys; the
    manifest itself stays this job's alone (status running until `_finish`)."""
    from bench.emulator.run import emulate_into

    emulated = emulate_into(cfg, paths)
    own = set(read_manifest(paths)) | {"config"}  # identity, config (redacted) and dispatch stay ours
    return {k: v for k, v in emulated.items() if k not in own}


def run_native(cfg: Any, paths: RunPaths) -> tuple[bool, str | None]:
    """Execute launch/job.sbatch inside this allocation, sample GPUs, parse logs into the trace."""
    from bench.trace import write_rollouts, write_steps
    from runners.base import load_runner

    script = paths.launch / "job.sbatch"
    if not script.exists():
        return False, f"{script}: missing (the runner rendered no sbatch for this framework)"
    sampler = telemetry.start_sampler(paths)
    env = {**os.environ, "BENCH_RUN_DIR": str(paths.root)}
    t0 = time.time()
    with open(paths.logs / "job.out", "ab") as out:
        rc = subprocess.run(
            ["bash", str(script)], cwd=paths.root, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    telemetry.stop_sampler(sampler, paths, t0)
    result = load_runner(cfg.framework).parse_logs(paths.logs)
    if result.steps:
        write_steps(paths.steps, result.steps)
    if result.rollouts:
        write_rollouts(paths.rollouts, result.rollouts)
    if result.warnings:
        manifest = read_manifest(paths)
        manifest["warnings"] = [*manifest.get("warnings", []), *result.warnings]
        write_manifest(paths, manifest)
    if rc.returncode != 0:
        return False, f"launch/job.sbatch exited {rc.returncode} (logs/job.out)"
    if not result.steps:
        return False, f"parse_logs found no steps in {paths.logs}"
    return True, None
