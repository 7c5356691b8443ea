"""`bench run` on the real slurm-wlm testbed: multi-node jobs, arrays, cancel, requeue, status."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from bench import launch, monitor

pytestmark = pytest.mark.slurm


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _submit(results: Path, *overrides: str) -> list[Path]:
    plans = launch.plan(["cluster=testbed", f"results_dir={results}", *overrides], True)
    assert [m for p in plans for m in p.problems] == []
    from bench.submit import submit

    return [r.root for r in submit(plans)]


def _wait_for_state(run: Path, state: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while _manifest(run)["dispatch"]["state"] != state:
        assert time.monotonic() < deadline, f"{run.name} never reached {state}: {_manifest(run)['dispatch']}"
        time.sleep(0.1)


def test_run_returns_after_sbatch_and_every_job_gets_two_whole_nodes(testbed, results: Path, capsys):
    t0 = time.monotonic()
    rc = launch.main(
        ["experiment=smoke", "cluster=testbed", "framework=verl,slime", "-m", f"results_dir={results}"]
    )
    submit_s = time.monotonic() - t0
    assert rc == 0 and submit_s < 15  # returned once sbatch answered (includes composing + rendering)
    runs = sorted((results / "smoke").glob("*-*"))
    assert len(runs) == 2
    for run in runs:
        job_id = _manifest(run)["dispatch"]["slurm_job_id"]
        assert "_" in job_id  # one array for the two jobs with the same request
        job = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id],
            capture_output=True,
            text=True,
            env=testbed.env(),
            check=True,
        ).stdout
        fields = dict(kv.split("=", 1) for kv in job.split() if "=" in kv)
        # NumNodes reads "2-2" while pending (min-max), "2" once allocated
        assert fields["NumNodes"].split("-")[0] == "2"
        assert (fields["TresPerNode"], fields["OverSubscribe"]) == ("gres:gpu:h100:8", "NO")  # exclusive
    assert monitor.wait([launch.RunPaths(r) for r in runs], timeout_s=90) == ["completed", "completed"]
    for run in runs:
        m = _manifest(run)
        d = m["dispatch"]
        assert (m["mode"], m["status"], d["nodes"], d["gpus"]) == ("emulated", "completed", 2, 16)
        assert d["node_list"] in ("n[1-2]", "n[3-4]")
        assert json.loads((run / "metrics.json").read_text())["mode"] == "emulated"
        assert (run / "trace" / "steps.parquet").is_file()


def test_cancelled_job_fails_with_the_reason_and_the_others_complete(testbed, results: Path):
    earlier = _submit(results, "experiment=smoke", "framework=verl", "workload.steps=4")
    assert monitor.wait([launch.RunPaths(r) for r in earlier], timeout_s=60) == ["completed"]
    earlier_bytes = {p: p.read_bytes() for p in earlier[0].rglob("*") if p.is_file()}

    # one long run (cancelled mid-run) and two short ones, all in one array
    runs = _submit(results, "experiment=smoke", "framework=verl,slime", "workload.steps=6,150")
    long_run = next(r for r in runs if r.name.startswith("verl-steps-150"))
    _wait_for_state(long_run, "RUNNING")
    time.sleep(1.0)  # inside the emulator by now (import ~1 s; 150 steps take ~10 s)
    job_id = _manifest(long_run)["dispatch"]["slurm_job_id"]
    subprocess.run(["scancel", job_id], env=testbed.env(), check=True)

    statuses = monitor.wait([launch.RunPaths(r) for r in runs], timeout_s=120)
    by_name = {r.name: s for r, s in zip(runs, statuses, strict=True)}
    assert by_name.pop(long_run.name) == "failed"
    assert set(by_name.values()) == {"completed"}
    d = _manifest(long_run)["dispatch"]
    assert d["exit_state"] == "CANCELLED" and d["reason"].startswith(f"Slurm job {job_id} ended CANCELLED")
    assert (long_run / "launch" / "job.sbatch").is_file()  # launch and logs are kept
    # nothing overwritten: the earlier run is byte-for-byte what it was, and every run has its own dir
    assert {p: p.read_bytes() for p in earlier[0].rglob("*") if p.is_file()} == earlier_bytes
    assert len({r.name for r in [*earlier, *runs]}) == 5


def test_timeout_signal_requeues_into_the_same_directory(testbed, results: Path):
    (run,) = _submit(results, "experiment=smoke", "framework=verl", "workload.steps=120")
    _wait_for_state(run, "RUNNING")
    time.sleep(1.0)
    job_id = _manifest(run)["dispatch"]["slurm_job_id"]
    # what Slurm sends before a time limit (--signal=USR2@90): submitit checkpoints and requeues
    subprocess.run(["scancel", "--batch", "--signal=USR2", job_id], env=testbed.env(), check=True)
    assert monitor.wait([launch.RunPaths(run)], timeout_s=120) == ["completed"]
    d = _manifest(run)["dispatch"]
    assert d["requeues"] == 1 and d["slurm_job_id"] == job_id
    assert sorted(p.name for p in run.parent.iterdir()) == [".submitit", run.name]


def test_status_shows_each_run_with_its_slurm_state(testbed, results: Path, capsys):
    runs = _submit(results, "experiment=smoke", "framework=verl", "workload.steps=4")
    monitor.wait([launch.RunPaths(r) for r in runs], timeout_s=60)
    capsys.readouterr()
    assert launch.status_main([str(results / "smoke")]) == 0
    out = capsys.readouterr().out
    assert "completed" in out and "n[1-2]" in out and _manifest(runs[0])["dispatch"]["slurm_job_id"] in out


def test_sbatch_refusal_marks_the_runs_failed_with_slurms_message(testbed, results: Path):
    rc = launch.main(
        [
            "experiment=smoke",
            "cluster=testbed",
            "framework=verl",
            "cluster.partition=nosuch",
            f"results_dir={results}",
        ]
    )
    assert rc == 1
    (run,) = [p for p in (results / "smoke").iterdir() if not p.name.startswith(".")]
    m = _manifest(run)
    assert (m["status"], m["dispatch"]["exit_state"]) == ("failed", "SUBMIT_FAILED")
    assert "invalid partition specified: nosuch" in m["dispatch"]["reason"].lower()
