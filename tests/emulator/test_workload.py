"""Load shape and workload options: zero-advantage filtering with and without backfill, drift,
draw distributions, and what-if sweeps through the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.config import compose
from bench.emulator.draws import Draws
from bench.emulator.run import main
from bench.sweep import expand
from tests.emulator.conftest import run

SMOKE = ["experiment=smoke", "framework=slime", "framework.mode=sync", "emulator.steps=5"]


def test_filtering_with_backfill_keeps_full_batches(tmp_path):
    r = run(tmp_path, [*SMOKE, "experiment.filter_zero_advantage=true"])
    steps = r["steps"]
    assert (steps["samples"] == 64 * 16).all()
    assert steps["filtered_samples"].sum() > 0
    rollouts = r["rollouts"]
    filtered = rollouts[rollouts["status"] == "filtered"]
    # a filtered group really has no advantage signal: all rewards equal
    assert (filtered.groupby("group_id")["reward"].nunique() == 1).all()


def test_filtering_without_backfill_trains_smaller_batches(tmp_path):
    r = run(tmp_path, [*SMOKE, "experiment.filter_zero_advantage=true", "emulator.filter_backfill=false"])
    steps = r["steps"]
    assert (steps["samples"] < 64 * 16).all()
    assert ((steps["samples"] + steps["filtered_samples"]) == 64 * 16).all()


def test_zero_advantage_share_follows_the_solve_rate_distribution():
    # case 2 workload: Beta(3, 0.35) solve rates -> most groups solve every rollout (published: 55%)
    d = Draws(compose(["experiment=semianalysis_case2"]), seed=0)
    c = d.chunk(4096, 0)
    assert c.solve_all.mean() == pytest.approx(0.55, abs=0.08)


def test_drift_triples_tool_calls_and_length_over_training():
    cfg = compose(["experiment=semianalysis_case2"])
    d = Draws(cfg, seed=0)
    first, last = d.chunk(2048, 0), d.chunk(2048, cfg.workload.steps - 1)
    assert last.turns.mean() / first.turns.mean() == pytest.approx(51 / 20, rel=0.1)
    assert last.response_tokens.mean() > 1.5 * first.response_tokens.mean()


def test_response_lengths_are_capped_and_long_tailed():
    cfg = compose(["experiment=semianalysis_case1"])
    c = Draws(cfg, seed=0).chunk(1024, 0)
    assert c.response_tokens.max() <= cfg.workload.max_response_len
    assert np.median(c.response_tokens) < c.response_tokens.mean()


def test_sweep_override_expands_to_one_run_per_point():
    points = expand(["experiment=semianalysis_case1", "experiment.generator_gpus=range(64,321,32)"], True)
    assert [p for p, _ in points] == [{"experiment.generator_gpus": str(g)} for g in range(64, 321, 32)]
    assert points[0][1] == ["experiment=semianalysis_case1", "experiment.generator_gpus=64"]


def test_cli_sweep_writes_one_run_dir_per_split(tmp_path, capsys):
    rc = main([*SMOKE, "experiment.generator_gpus=8,16", "--out", str(tmp_path)])
    assert rc == 0
    dirs = sorted(p.name for p in tmp_path.iterdir())
    assert dirs == ["experiment.generator_gpus=16", "experiment.generator_gpus=8"]
    idle = {d: json.loads((tmp_path / d / "metrics.json").read_text())["trainer_idle_frac"] for d in dirs}
    # twice the generator GPUs: the trainer waits less
    assert idle["experiment.generator_gpus=16"] < idle["experiment.generator_gpus=8"]
    assert "[emulated]" in capsys.readouterr().err


def test_too_few_generator_gpus_for_one_engine_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="experiment.generator_gpus=4"):
        run(tmp_path, ["experiment=semianalysis_case1", "experiment.generator_gpus=4"])


def test_cli_defaults_to_the_experiments_own_framework(tmp_path):
    assert main(["experiment=semianalysis_case1", "emulator.steps=3", "--out", str(tmp_path)]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (manifest["framework"], manifest["mode"], manifest["seed"]) == ("prime_rl", "emulated", 0)
    assert manifest["config"]["experiment"]["name"] == "semianalysis_case1"
