"""`bench plan --cluster NAME`: the plan's emulations as jobs through bench.launch / bench.submit,
one per (split, seed). `local` runs them in this process through the same path; `testbed` submits
them to the Slurm testbed as one job array (a Slurm test: it skips outside CI when the testbed is down)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import monitor
from bench.__main__ import main as bench_main
from bench.trace import RunPaths

# smoke at 32 GPUs: validate admits trainer 16 or 8 (whole nodes of 8, 1024 samples over DP ranks)
PLAN = ["experiment=smoke", "gpus=32", "seeds=2", "emulator.steps=2"]


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _runs(results: Path) -> list[Path]:
    return sorted(p.parent for p in (results / "smoke").glob("*/manifest.json"))


def test_local_cluster_runs_every_split_and_seed_as_a_job(tmp_path, capsys):
    results = tmp_path / "results"
    assert bench_main(["plan", *PLAN, f"results_dir={results}", "--cluster", "local"]) == 0
    runs = _runs(results)
    assert len(runs) == 4  # 2 splits x 2 seeds
    got = set()
    for run in runs:
        m = _manifest(run)
        e = m["config"]["experiment"]
        got.add((e["trainer_gpus"], e["generator_gpus"], e["seed"]))
        assert (m["mode"], m["status"], m["framework"]) == ("emulated", "completed", "verl")
        assert json.loads((run / "metrics.json").read_text())["trainer_idle_frac"] is not None
    assert got == {(16, 16, 0), (16, 16, 1), (8, 24, 0), (8, 24, 1)}
    out = capsys.readouterr().out
    assert "4 emulations submitted to local" in out and "python -m bench report" in out


def test_a_cluster_plan_from_a_run_is_refused(tmp_path, capsys):
    assert bench_main(["plan", str(tmp_path), "--cluster", "local"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.slurm
def test_testbed_gets_the_plan_as_one_job_array(testbed, tmp_path):
    results = tmp_path / "results"
    assert bench_main(["plan", *PLAN, f"results_dir={results}", "--cluster", "testbed"]) == 0
    runs = _runs(results)
    assert len(runs) == 4
    dispatch = [_manifest(r)["dispatch"] for r in runs]
    # every split holds whole nodes, so every point asks the same 4 nodes: one array of 4 members
    assert len({d["array_job_id"] for d in dispatch}) == 1 and dispatch[0]["array_job_id"]
    assert sorted(d["array_index"] for d in dispatch) == [0, 1, 2, 3]
    assert {d["nodes"] for d in dispatch} == {4}
    assert monitor.wait([RunPaths(r) for r in runs], timeout_s=180) == ["completed"] * 4
    for run in runs:
        assert json.loads((run / "metrics.json").read_text())["mode"] == "emulated"
