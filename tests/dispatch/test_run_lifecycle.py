"""A run nobody runs is never shown as running (cluster=local, real `python -m bench run --wait`).

Each test starts the real driver in a subprocess with `emulator.pace=600` (ten minutes per
emulated step), so its job is held by design while the test signals it: the polls below bound a
hang, they never race the clock.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import monitor
from bench.report.load import load_run
from bench.rundir import owner, owner_gone, process_start
from bench.trace import RunPaths

REPO = Path(__file__).resolve().parents[2]
HELD = ["experiment=smoke", "cluster=local", "emulator.pace=600", "workload.steps=4"]


def _driver(results: Path, *frameworks: str) -> subprocess.Popen:
    fw = (
        ["framework=" + ",".join(frameworks), "-m"] if len(frameworks) > 1 else [f"framework={frameworks[0]}"]
    )
    return subprocess.Popen(
        [sys.executable, "-m", "bench", "run", *HELD, *fw, f"results_dir={results}", "--wait"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: under `nohup pytest` SIGHUP would be inherited ignored, and a driver
        # started with SIGHUP ignored keeps it ignored by design (bench.job.cancel_on_signals)
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _emulating(results: Path, driver: subprocess.Popen, runs: int = 1) -> list[Path]:
    """The run directories, once the first job runs the emulator (it then holds for 40 minutes)."""
    deadline = time.monotonic() + 180  # a bound on a hang (composing, emulating 4 steps), not a race
    while True:
        dirs = sorted(d for d in (results / "smoke").glob("*-*") if (d / "manifest.json").is_file())
        started = [d for d in dirs if "emulator_started_at" in _manifest(d)["dispatch"]]
        if len(dirs) == runs and started:
            return dirs
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, [_manifest(d)["dispatch"] for d in dirs]
        time.sleep(0.2)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_signal_to_the_driver_cancels_every_run_it_owns_with_the_signal_named(results, sig, code):
    driver = _driver(results, "verl", "slime")
    runs = _emulating(results, driver, runs=2)
    driver.send_signal(sig)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == code, err
    for run in runs:
        m = _manifest(run)
        reason = m["reason"]
        assert (m["status"], m["dispatch"]["exit_state"]) == ("cancelled", "CANCELLED")
        assert reason.startswith(
            f"cancelled: bench run (pid {driver.pid} on {socket.gethostname()}) received {sig.name} at "
        )
        assert "Slurm" not in reason  # no Slurm was involved
        assert f"{run}: {reason}" in err.splitlines()
    # the second job never started: the driver stopped it before it ran
    assert [("emulator_started_at" in _manifest(r)["dispatch"]) for r in runs].count(True) == 1
    assert [monitor.reconcile(RunPaths(r))["status"] for r in runs] == ["cancelled", "cancelled"]


def test_a_killed_driver_leaves_its_run_shown_lost_in_status_and_report_never_written(results):
    driver = _driver(results, "verl")
    (run,) = _emulating(results, driver)
    recorded = _manifest(run)["owner"]
    assert (recorded["host"], recorded["pid"], recorded["slurm_job_id"]) == (
        socket.gethostname(),
        driver.pid,
        None,
    )
    assert recorded["pid_started_at"] == process_start(driver.pid)
    driver.kill()
    killed = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    driver.communicate(timeout=60)  # reaped: the pid is gone

    shown = monitor.reconcile(RunPaths(run))
    seen = shown["last_seen"]
    assert shown["status"] == "lost"
    assert (
        shown["reason"]
        == f"lost: its process {driver.pid} on {socket.gethostname()} is gone; last seen {seen}"
    )
    # last seen: its last write (the manifest, at the latest when the emulator started), before the kill
    assert _manifest(run)["dispatch"]["emulator_started_at"][:19] <= seen[:19] <= killed[:19]
    assert load_run(run).manifest["status"] == "lost"  # the report shows it the same way
    assert _manifest(run)["status"] == "running"  # a view: the manifest stays the owner's record

    status = subprocess.run(
        [sys.executable, "-m", "bench", "status", "smoke", "--results", str(results)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if run.name in line)
    assert "│ lost " in row and "LOST" in row and "running" not in row


def test_a_pid_now_held_by_another_process_is_not_the_owner():
    me = owner()
    assert owner_gone(me) is None  # this very process: alive, same start time
    reused = {**me, "pid_started_at": me["pid_started_at"] - 3600.0}  # the pid an hour-older process had
    assert owner_gone(reused) == (
        f"pid {me['pid']} on {me['host']} is another process now "
        f"(started {me['pid_started_at']}, not {reused['pid_started_at']})"
    )
    assert owner_gone({**me, "host": "another-host"}) is None  # cannot look there: not judged lost


def _dry_run(results: Path) -> Path:
    """The held verl job's run directory, written by `bench run --dry-run` (nothing submitted)."""
    dry = subprocess.run(
        [sys.executable, "-m", "bench", "run", *HELD, "framework=verl", f"results_dir={results}", "--dry-run"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    (run,) = (results / "smoke" / "dry-run").iterdir()
    return run


def test_sigterm_to_a_job_outside_slurm_says_so_not_slurm(results):
    """A job process on its own (no driver, no Slurm), as a site's own scheduler would start it."""
    run = _dry_run(results)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    job = subprocess.Popen(
        [sys.executable, "-c", "import sys; from bench.job import BenchJob; print(BenchJob()(sys.argv[1]))", str(run)],
        cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180  # a bound on a hang: the job then holds for 40 minutes
    while "emulator_started_at" not in _manifest(run)["dispatch"]:
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.2)
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    m = _manifest(run)
    assert (out.strip(), m["status"], m["dispatch"]["exit_state"]) == ("failed", "failed", "TERMINATED"), err
    assert m["reason"].startswith("SIGTERM at ")
    assert m["reason"].endswith(f": sent to process {job.pid} (no Slurm job)")


def test_a_dry_run_is_never_shown_lost(results):
    run = _dry_run(results)
    recorded = _manifest(run)["owner"]  # the finished `bench run --dry-run` process
    assert owner_gone(recorded) == f"its process {recorded['pid']} on {socket.gethostname()} is gone"
    assert load_run(run).manifest["status"] == "running"  # state DRY_RUN: listed apart, never `lost`
