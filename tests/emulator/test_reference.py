"""The group-level engine (bench/emulator/generator.py) against the exact per-rollout
processor-sharing reference (tests/emulator/exact_ps.py) on the same draws: steady-state
production within 5% and trainer idle within 3 points; and the one known bias, when every in-flight
group is cancelled at each batch fill (docs/emulator.md)."""

from __future__ import annotations

import pytest

from bench.config import compose
from bench.emulator import costmodel
from bench.emulator.draws import Draws
from bench.emulator.run import build
from tests.emulator import exact_ps

CASES = [
    ["experiment=semianalysis_case1", "framework=prime_rl", "emulator.steps=20", "emulator.surplus=carry"],
    ["experiment=smoke", "framework=slime", "emulator.policy=bench.emulator.policies.disaggregated_sync"],
    ["experiment=smoke", "framework=slime", "emulator.policy=bench.emulator.policies.one_step_off"],
    ["experiment=smoke", "framework=verl", "emulator.policy=bench.emulator.policies.fully_async"],
    [
        "experiment=smoke",
        "framework=verl",
        "emulator.policy=bench.emulator.policies.colocated_sync",
        "experiment.placement=colocated",
        "experiment.trainer_gpus=16",
        "experiment.generator_gpus=16",
    ],
]


def _steady(rows) -> tuple[float, float]:
    """(production samples/s, trainer idle fraction) after the first 10% of steps."""
    w = rows[max(1, len(rows) // 10) :]
    wait = sum(r.wait_s for r in w)
    step = sum(r.t_end_s - r.t_start_s for r in w)
    return sum(r.samples for r in w) / step, wait / step


def _fast_and_exact(overrides: list[str]) -> tuple[tuple[float, float], tuple[float, float]]:
    cfg = compose(overrides)
    loop, sched, _ = build(cfg)
    fast = _steady(loop.run().steps)
    eng = costmodel.engine_model(cfg)
    exact = exact_ps.Loop(
        sched,
        eng,
        costmodel.trainer_model(cfg),
        Draws(cfg, int(cfg.experiment.seed)),
        engines=int(cfg.experiment.generator_gpus) // eng.gpus,
        max_concurrency=int(cfg.experiment.generator.max_concurrency),
        prompts_per_step=int(cfg.workload.prompts_per_step),
        steps=int(cfg.emulator.steps or cfg.workload.steps),
    )
    return fast, _steady(exact.run().steps)


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o[1:]))
def test_group_level_engine_matches_exact_per_rollout_processor_sharing(overrides):
    fast, ref = _fast_and_exact(overrides)
    assert fast[0] == pytest.approx(ref[0], rel=0.05)  # production
    assert fast[1] == pytest.approx(ref[1], abs=0.03)  # trainer idle, within 3 points


def test_cancel_at_every_fill_is_the_known_pessimistic_bias():
    # Case 1 as published (surplus=cancel): each batch fill empties the engines and the refill
    # starts together; production then comes out 5-10% under the exact model's (7.4% at seed 0,
    # 7.1% at seed 1). Cause not isolated; the suspect is the mean-field batch share of a group
    # (constant over its life), least true right after a refill. docs/emulator.md states it.
    fast, ref = _fast_and_exact(["experiment=semianalysis_case1", "framework=prime_rl", "emulator.steps=20"])
    assert -0.10 < fast[0] / ref[0] - 1 < -0.05
