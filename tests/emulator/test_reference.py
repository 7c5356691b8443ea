"""The group-level engine (bench/emulator/generator.py) against the exact per-rollout
processor-sharing engine (tests/emulator/exact_ps.py), each run by the same Loop on the same draws:
steady-state production within 5% and trainer idle within 3 points, with in-flight rollouts carried (case 1 under
pinned prime-rl's rule) or cancelled at every batch fill (case 1 as published), where every group
starts at once and a single mean-field batch share per group was 6% pessimistic."""

from __future__ import annotations

import numpy as np
import pytest

from bench.config import compose
from bench.emulator.generator import Pool
from bench.emulator.run import build
from bench.resolve import Resolved
from tests.emulator import exact_ps

CASES = [
    ["experiment=semianalysis_case1", "framework=prime_rl", "emulator.steps=20", "emulator.surplus=carry"],
    ["experiment=semianalysis_case1", "framework=prime_rl", "emulator.steps=20"],
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
    """(production, idle) of the same Loop on the same draws, with the group-level Pool and with
    the exact per-rollout engine."""
    cfg = compose(overrides)
    r = Resolved.from_config(cfg)
    fast, _, _ = build(cfg, r)
    exact, _, _ = build(cfg, r, generator=exact_ps.ExactEngine)
    assert isinstance(exact.generator, exact_ps.ExactEngine)
    return _steady(fast.run().steps), _steady(exact.run().steps)


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o[1:]))
def test_group_level_engine_matches_exact_per_rollout_processor_sharing(overrides):
    fast, ref = _fast_and_exact(overrides)
    assert fast[0] == pytest.approx(ref[0], rel=0.05)  # production
    assert fast[1] == pytest.approx(ref[1], abs=0.03)  # trainer idle, within 3 points


def _run_alone(engine, work: list[float], delay: list[float], rate: list[float]) -> np.ndarray:
    """One group alone on one engine from t = 0: each rollout's finish time (s)."""
    engine.set_load(len(work), rate, 0.0)
    engine.prepare(np.array([work]), np.array([delay]))
    assert engine.place(0, np.array(work), np.array(delay), 0.0, True)
    while not (done := engine.step()):
        pass
    ((g, record),) = done
    assert g == 0 and engine.next_time() == np.inf
    return engine.finish_times([record], np.array([delay]), np.array([work]))[0]


def test_both_engines_give_delay_plus_work_over_rate_when_the_rate_ignores_the_batch():
    # 10 tokens/s per sequence at any batch: rollout i ends at delay_i + work_i / 10
    work, delay = [10.0, 20.0, 30.0, 40.0], [0.0, 1.0, 2.0, 3.0]
    for engine in (Pool(1, 4), exact_ps.ExactEngine(1, 4)):
        np.testing.assert_allclose(_run_alone(engine, work, delay, [10.0] * 5), [1.0, 3.0, 5.0, 7.0])


def test_exact_engine_shares_the_engine_between_decoding_sequences():
    # 20 tokens/s per step shared by the batch: two sequences decode at 10 tokens/s each until the
    # 10-token one ends at 1 s; the other's last 10 tokens then run alone at 20/s, ending at 1.5 s
    rate = [20.0, 20.0, 10.0]
    finish = _run_alone(exact_ps.ExactEngine(1, 2), [10.0, 20.0], [0.0, 0.0], rate)
    np.testing.assert_allclose(finish, [1.0, 1.5])
    # the group-level engine: three spans of the critical rollout's 20 tokens, with batch shares 2,
    # 1.5 (rounds to a batch of 2) and 1: 6.67/10 + 6.67/10 + 6.67/20 = 1.67 s, 11% late on a
    # two-rollout group alone (the case-level figures above are within 3%)
    np.testing.assert_allclose(_run_alone(Pool(1, 2), [10.0, 20.0], [0.0, 0.0], rate)[1], 5 / 3)
