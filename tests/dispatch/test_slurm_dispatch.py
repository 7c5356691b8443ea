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


def _wait_until(run: Path, ready, what: str, timeout_s: float = 180) -> dict:
    """Poll manifest.json until `ready(dispatch)`; a bound on a hang, not a race: every job waited
    on here is held by `emulator.pace` for minutes, so the state it waits for cannot pass by."""
    deadline = time.monotonic() + timeout_s
    while not ready(d := _manifest(run)["dispatch"]):
        assert time.monotonic() < deadline, f"{run.name} never {what}: {d}"
        time.sleep(0.1)
    return d


@pytest.fixture
def held(testbed):
    """Slurm job ids of paced (held) jobs: cancelled at teardown whatever the test did, so a failed
    assertion never leaves a job holding testbed nodes for the tests after it."""
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], env=testbed.env(), check=False)


def _emulating(run: Path, after: str = "") -> dict:
    """Wait until the job runs the emulator: its SIGTERM handler is installed by then."""
    return _wait_until(
        run,
        lambda d: d["state"] == "RUNNING" and d.get("emulator_started_at", "") > after,
        "started emulating",
    )


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


def test_cancelled_job_fails_with_the_reason_and_the_others_complete(testbed, results: Path, held: list[str]):
    earlier = _submit(results, "experiment=smoke", "framework=verl", "workload.steps=4")
    assert monitor.wait([launch.RunPaths(r) for r in earlier], timeout_s=60) == ["completed"]
    earlier_bytes = {p: p.read_bytes() for p in earlier[0].rglob("*") if p.is_file()}

    # two runs held by their pace (4 steps x 10 min: still running whenever scancel comes) and two
    # unpaced ones, all in one array
    runs = _submit(
        results, "experiment=smoke", "framework=verl,slime", "workload.steps=4", "emulator.pace=0,600"
    )
    paced = [r for r in runs if "-pace-600-" in r.name]
    job_ids = [_emulating(r)["slurm_job_id"] for r in paced]
    held += job_ids
    subprocess.run(["scancel", *job_ids], env=testbed.env(), check=True)

    statuses = monitor.wait([launch.RunPaths(r) for r in runs], timeout_s=120)
    by_name = {r.name: s for r, s in zip(runs, statuses, strict=True)}
    assert [by_name.pop(r.name) for r in paced] == ["failed", "failed"]  # cancelled before a paced step
    assert list(by_name.values()) == ["completed", "completed"]
    for run, job_id in zip(paced, job_ids, strict=True):
        d = _manifest(run)["dispatch"]
        assert d["exit_state"] == "CANCELLED" and d["reason"].startswith(
            f"Slurm job {job_id} ended CANCELLED"
        )
    assert (paced[0] / "launch" / "job.sbatch").is_file()  # launch and logs are kept
    # nothing overwritten: the earlier run is byte-for-byte what it was, and every run has its own dir
    assert {p: p.read_bytes() for p in earlier[0].rglob("*") if p.is_file()} == earlier_bytes
    assert len({r.name for r in [*earlier, *runs]}) == 5


def test_timeout_signal_requeues_into_the_same_directory(testbed, results: Path, held: list[str]):
    (run,) = _submit(results, "experiment=smoke", "framework=verl", "workload.steps=2", "emulator.pace=600")
    first = _emulating(run)
    job_id = first["slurm_job_id"]
    held.append(job_id)
    # what Slurm sends before a time limit (--signal=USR2@90): submitit checkpoints and requeues
    subprocess.run(["scancel", "--batch", "--signal=USR2", job_id], env=testbed.env(), check=True)
    again = _emulating(run, after=first["emulator_started_at"])  # the requeued attempt, same directory
    assert (again["requeues"], again["slurm_job_id"]) == (1, job_id)
    subprocess.run(["scancel", job_id], env=testbed.env(), check=True)  # held by its pace: end it
    assert monitor.wait([launch.RunPaths(run)], timeout_s=120) == ["failed"]
    assert _manifest(run)["dispatch"]["requeues"] == 1
    assert sorted(p.name for p in run.parent.iterdir()) == [".submitit", run.name]


def test_status_shows_each_run_with_its_slurm_state(testbed, results: Path, capsys):
    runs = _submit(results, "experiment=smoke", "framework=verl", "workload.steps=4")
    monitor.wait([launch.RunPaths(r) for r in runs], timeout_s=60)
    capsys.readouterr()
    assert monitor.status_main([str(results / "smoke")]) == 0
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
