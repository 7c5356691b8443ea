"""Sweep expansion, job layout, run-directory allocation and pre-flight: no Slurm needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import launch, rundir
from bench.config import compose
from bench.resolve import job_nodes


def test_sweep_expands_with_hydra_syntax_into_the_cartesian_product():
    points = launch.expand(
        ["experiment=smoke", "workload.group_size=8,16", "experiment.seed=range(0,3)", "framework=verl"], True
    )
    assert [p for p, _ in points] == [
        {"workload.group_size": g, "experiment.seed": s} for g in ("8", "16") for s in ("0", "1", "2")
    ]
    assert points[4][1] == [
        "experiment=smoke",
        "workload.group_size=16",
        "experiment.seed=1",
        "framework=verl",
    ]


def test_sweep_without_multirun_is_refused_like_hydra():
    with pytest.raises(launch.DispatchError, match=r"workload.group_size.*--multirun"):
        launch.expand(["workload.group_size=8,16"], False)


def test_no_sweep_is_one_point_with_the_overrides_as_given():
    assert launch.expand(["experiment=smoke", "cluster=testbed"], False) == [
        ({}, ["experiment=smoke", "cluster=testbed"])
    ]


def test_framework_sweep_is_jobs_not_a_point_key():
    plans = launch.plan(["experiment=smoke", "cluster=testbed", "framework=verl,slime"], True)
    assert [(p.framework, p.point) for p in plans] == [("verl", {}), ("slime", {})]
    assert plans[1].overrides == ["experiment=smoke", "cluster=testbed", "framework=slime"]


def test_smoke_layout_is_two_whole_nodes_of_eight_gpus():
    # smoke: 8 trainer + 8 generator GPUs, disaggregated, 8 GPUs per node -> 2 nodes
    # dry_run: the layout is planned without asking whether this machine can submit (testbed up)
    plans = launch.plan(["experiment=smoke", "cluster=testbed", "framework=verl"], False, dry_run=True)
    assert (plans[0].nodes, plans[0].gpus_per_node, plans[0].problems) == (2, 8, [])


def test_colocated_layout_counts_trainer_gpus_only():
    cfg = compose(["experiment=smoke", "experiment.placement=colocated", "experiment.generator_gpus=8"])
    assert job_nodes(cfg, None) == 1
    cfg = compose(["experiment=smoke", "experiment.trainer_gpus=24", "experiment.generator_gpus=16"])
    assert job_nodes(cfg, None) == 5  # 40 GPUs over 8 per node


def test_point_slug_names_the_swept_values():
    assert rundir.point_slug({"workload.group_size": "16", "experiment.seed": "1"}) == "seed-1_group_size-16"


def test_allocate_never_reuses_a_directory(tmp_path: Path):
    a = rundir.allocate(tmp_path, "smoke", "verl", {})
    (a.root / "marker").write_text("first")
    b = rundir.allocate(tmp_path, "smoke", "verl", {})  # same second, same name stem
    assert a.root != b.root and b.root.name == f"{a.root.name}-1"
    assert (a.root / "marker").read_text() == "first"
    assert sorted(p.name for p in b.root.iterdir()) == ["launch", "logs", "trace"]


def test_redact_config_hides_secret_keys_at_any_depth():
    cfg = {"framework": {"native": {"wandb_api_key": "abc", "hf_token": "t", "lr": 1e-6}}, "steps": [1]}
    assert rundir.redact(cfg) == {
        "framework": {"native": {"wandb_api_key": "<redacted>", "hf_token": "<redacted>", "lr": 1e-6}},
        "steps": [1],
    }


def test_preflight_problem_exits_2_before_anything_is_written(results: Path, capsys):
    rc = launch.main(
        [
            "experiment=smoke",
            "framework=verl",
            "experiment.trainer.tp=3",
            f"results_dir={results}",
            "--dry-run",
        ]
    )
    assert rc == 2
    assert "experiment.trainer: tp x pp x cp = 3" in capsys.readouterr().err
    assert list(results.iterdir()) == []


def test_job_larger_than_the_cluster_is_a_preflight_problem():
    plans = launch.plan(["experiment=smoke", "cluster=testbed", "framework=verl", "cluster.nodes=1"], False)
    assert "[verl] job needs 2 nodes; cluster.nodes=1 (conf/cluster/testbed.yaml)" in plans[0].problems


def test_dry_run_writes_launch_and_the_sbatch_and_submits_nothing(results: Path, capsys):
    rc = launch.main(
        ["experiment=smoke", "cluster=testbed", "framework=verl,slime", "--multirun", "--dry-run",
         f"results_dir={results}"]
    )  # fmt: skip
    assert rc == 0
    assert sorted(p.name for p in (results / "smoke").iterdir()) == ["dry-run"]  # never mistaken for runs
    runs = sorted((results / "smoke" / "dry-run").iterdir())
    assert [r.name.split("-")[0] for r in runs] == ["slime", "verl"]
    for run in runs:
        sbatch = (run / "launch" / "submit.sbatch").read_text()
        for line in (
            "#SBATCH --nodes=2",
            "#SBATCH --exclusive",
            "#SBATCH --gpus-per-node=h100:8",
            "#SBATCH --partition=testbed",
            "#SBATCH --time=10",
            "#SBATCH --array=0-1%2",  # same resource request -> one job array
        ):
            assert line in sbatch
        assert (run / "launch" / "command.json").is_file() and (run / "launch" / "job.sbatch").is_file()
        manifest = json.loads((run / "manifest.json").read_text())
        assert (manifest["mode"], manifest["dispatch"]["state"], manifest["dispatch"]["slurm_job_id"]) == (
            "emulated",
            "DRY_RUN",
            None,
        )
        assert manifest["dispatch"]["gpus"] == 16
    assert "dry run: 2 job(s) written, nothing submitted" in capsys.readouterr().out
