"""prime-rl's single_node deployment (runners/prime_rl_job.py single_node_layout): a trainer and
inference sharing one node, as the opd-benchmark Prime-RL run was deployed (1 trainer + 1 inference
GPU, ../shared/fixtures/opd-benchmark/opd-frameworks/prime.toml), rendered as prime-rl's `rl`
launcher lays it out (entrypoints/rl.py rl_local at v0.8.0): inference on the node's first GPUs,
the trainer on the next, one env server and the orchestrator beside them."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from bench.config import compose
from bench.validate import validate
from runners.base import load_runner
from runners.prime_rl import check_keys, layout, load_schema
from tests.conftest import repo_neutral

GOLDEN = Path(__file__).parent / "golden" / "prime_rl_single_node" / "smoke_2_trainer_6_inference"
# smoke (Qwen3-8B GRPO) on one 8-GPU node: 2 trainer GPUs, 6 inference GPUs
SPLIT = ["experiment=smoke", "framework=prime_rl", "experiment.trainer_gpus=2", "experiment.generator_gpus=6"]


def _render(*overrides: str):
    cfg = compose([*SPLIT, *overrides])
    return cfg, load_runner(cfg.framework).render_launch(cfg)


def test_a_split_within_one_node_is_legal_and_renders_prime_rls_single_node_keys():
    cfg, launch = _render()
    assert validate(cfg) == []
    rl = tomllib.loads(launch.files["rl.toml"])
    assert rl["deployment"] == {
        "type": "single_node",
        "gpus_per_node": 8,
        "num_train_gpus": 2,
        "num_infer_gpus": 6,
    }
    assert "slurm" not in rl  # with [slurm], `rl` would submit its own sbatch instead of writing configs
    assert check_keys(rl, load_schema("0.8.0")) == []
    assert launch.nodes == 1


def test_processes_share_the_node_inference_first_then_the_trainer():
    _, launch = _render()
    by_role = {p.role: p for p in launch.processes}
    assert sorted(by_role) == ["env_server", "inference", "orchestrator", "trainer"]
    assert {p.node_rank for p in launch.processes} == {0}
    assert by_role["inference"].env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5"
    assert by_role["trainer"].env["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert "--nproc-per-node=2" in by_role["trainer"].argv
    assert 'MASTER_ADDR="${NODES[0]}"' in launch.sbatch
    assert "inference on the first GPUs, the trainer on the next" in launch.sbatch


def test_whole_nodes_are_still_required_beyond_one_node():
    cfg = compose(["experiment=smoke", "framework=prime_rl", "experiment.trainer_gpus=4",
                   "experiment.generator_gpus=12"])  # fmt: skip
    with pytest.raises(
        ValueError, match="experiment.trainer_gpus=4: prime-rl's multi-node layout needs whole nodes"
    ):
        layout(cfg)
    assert layout(compose(["experiment=smoke", "framework=prime_rl"])).single_node is False  # 8 + 8


def test_inference_gpus_must_hold_whole_engines():
    cfg = compose(
        [*SPLIT[:2], "experiment.trainer_gpus=1", "experiment.generator_gpus=3", "experiment.generator.tp=2"]
    )
    assert any(
        p.startswith("experiment.generator.tp=2: must divide experiment.generator_gpus=3")
        for p in validate(cfg)
    )


def test_sbatch_is_valid_bash():
    _, launch = _render()
    subprocess.run(["bash", "-n", "/dev/stdin"], input=launch.sbatch, text=True, check=True)


def test_golden_render(tmp_path):
    _, launch = _render()
    launch.write(tmp_path)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for f in tmp_path.iterdir():
            (GOLDEN / f.name).write_text(repo_neutral(f.read_text()))
    for name in ("command.json", "rl.toml", "job.sbatch"):
        assert repo_neutral((tmp_path / name).read_text()) == (GOLDEN / name).read_text(), f"{name} differs"
