"""SemiAnalysis case 1 within 15% of the published figures (calibrated: trainer_mfu on
consumption and decode_bw_eff on production in conf/emulator/semianalysis.yaml, oversampling on the
discard in conf/experiment/semianalysis_case1.yaml), case 2 predicted within 15%, case 4's dependence on its
unpublished environment latency, the trainer-idle identity, and determinism by seed."""

from __future__ import annotations

import pytest

from tests.emulator.conftest import run

PUBLISHED = {  # https://newsletter.semianalysis.com/p/rl-systems-mind-the-gap-matching (published.md 1.2)
    "trainer_idle_frac": 0.30,
    "consumption_samples_per_s": 2.75,
    "production_samples_per_s": 1.95,
    "mfu": 0.105,
    "oversampling_waste": 0.60,
}


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_case1_within_15_percent_of_published(case1, key):
    got = case1["metrics"][key]
    assert got == pytest.approx(PUBLISHED[key], rel=0.15), f"{key}: emulated {got:.4g} vs {PUBLISHED[key]}"


def test_case1_is_emulated_prime_rl_fully_async(case1):
    m = case1["manifest"]
    assert m["mode"] == "emulated" and m["framework"] == "prime_rl"
    assert m["emulator"]["policy"] == "bench.emulator.policies.fully_async"
    assert m["emulator"]["engines"] == 24 and m["emulator"]["engine_gpus"] == 8


def test_trainer_idle_identity_consumption_times_busy_is_production(case1):
    m = case1["metrics"]
    lhs = m["consumption_samples_per_s"] * (1 - m["trainer_idle_frac"])
    # equal up to the weight-sync share of the step (~1% here)
    assert lhs == pytest.approx(m["production_samples_per_s"], rel=0.03)


def test_case1_discard_needs_the_recipes_cancel_rule(case1, tmp_path):
    # the recipe cancels what is still in flight when a batch fills (the article's words) ...
    assert case1["manifest"]["emulator"]["schedule"]["surplus"] == "cancel"
    # ... while pinned prime-rl carries in-flight rollouts to the next step, which discards
    # nothing here: no rollout ages past the 16-step staleness budget
    carry = run(tmp_path, ["experiment=semianalysis_case1", "framework=prime_rl", "emulator.surplus=carry"])
    assert carry["metrics"]["oversampling_waste"] == 0.0


def test_same_seed_same_trace_other_seed_other_trace(tmp_path):
    base = ["experiment=smoke", "framework=slime", "emulator.steps=4"]
    a = run(tmp_path / "a", base)
    b = run(tmp_path / "b", base)
    c = run(tmp_path / "c", [*base, "experiment.seed=1"])
    assert a["steps"].equals(b["steps"])
    assert a["rollouts"].equals(b["rollouts"])
    assert not a["steps"]["t_end_s"].equals(c["steps"]["t_end_s"])


def test_case2_trainer_idle_predicted_within_15_percent(tmp_path):
    # not calibrated: case 1's inputs, case 2's published setup
    got = run(tmp_path, ["experiment=semianalysis_case2", "framework=prime_rl"])["metrics"][
        "trainer_idle_frac"
    ]
    assert got == pytest.approx(0.74, rel=0.15)


def test_case4_idle_rises_with_environment_latency_and_brackets_the_published_60_percent(tmp_path):
    # Case 4's environment latency per turn (OpenHands on Modal) is unpublished; at the 6 s default
    # the generator keeps up and the prediction misses (docs/emulator.md). The published 60% idle
    # lies between 30 and 90 s a turn, and idle rises with the latency.
    def idle(latency_s: int) -> float:
        ov = ["experiment=semianalysis_case4", "framework=slime", f"workload.env_latency_mean_s={latency_s}"]
        return run(tmp_path / str(latency_s), ov)["metrics"]["trainer_idle_frac"]

    at_30, at_60, at_90 = idle(30), idle(60), idle(90)
    assert at_30 < at_60 < at_90
    assert at_30 < 0.60 < at_90
