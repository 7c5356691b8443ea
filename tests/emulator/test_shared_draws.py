"""Draws shared between runs (bench.emulator.draws.shared, what bench plan runs its splits in): a run
with the workload and seed of an earlier run replays that run's chunks, and its trace is bit-identical
to the trace of the same run drawing its own, whether the GPU split differs (case 1: the draws never
depend on it) or the response lengths drift (the runs ask for other drifts and draw their own)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.config import compose
from bench.emulator import draws
from bench.emulator.draws import Draws
from tests.emulator.test_scoring import trace_sha256

CASE1 = ["experiment=semianalysis_case1", "framework=prime_rl", "emulator.steps=20"]
RUNS = {
    "case1 64:192 seed 0": CASE1,
    "case1 128:128 seed 0": [*CASE1, "experiment.trainer_gpus=128", "experiment.generator_gpus=128"],
    "case1 32:224 seed 1": [*CASE1, "experiment.trainer_gpus=32", "experiment.generator_gpus=224", "experiment.seed=1"],
    # swe_tool_heavy drifts 2.55x over the run: each split reaches step k at another time, so its
    # chunks are drawn at other drifts than the earlier run's and it draws its own from there
    "tool-heavy drift 8:8": ["experiment=smoke", "framework=verl", "workload=swe_tool_heavy", "emulator.steps=8"],
    "tool-heavy drift 8:16": ["experiment=smoke", "framework=verl", "workload=swe_tool_heavy", "emulator.steps=8",
                              "experiment.generator_gpus=16"],
}  # fmt: skip


def test_runs_sharing_draws_are_bit_identical_to_runs_drawing_their_own():
    alone = {name: trace_sha256(o) for name, o in RUNS.items()}
    with draws.shared():
        shared = {name: trace_sha256(o) for name, o in RUNS.items()}
        again = {name: trace_sha256(o) for name, o in RUNS.items()}  # every run replays now
    assert shared == alone
    assert again == alone


def test_a_run_with_the_same_workload_and_seed_replays_the_earlier_runs_chunks():
    cfg = compose(CASE1)
    with draws.shared():
        first, second, other_seed = Draws(cfg, 0), Draws(cfg, 0), Draws(cfg, 1)
        a = [first.chunk(256, 0) for _ in range(3)]
        b = [second.chunk(256, 0) for _ in range(4)]  # one chunk further than the first run
        assert all(x is y for x, y in zip(a, b[:3], strict=False))
        assert other_seed.chunk(256, 0) is not a[0]
        with pytest.raises(ValueError, match="read-only"):  # a shared chunk is never changed by a run
            b[0].response_tokens[0] = 1
    # the fourth chunk continues from the generator's state after the third: as a run drawing alone
    alone = Draws(cfg, 0)
    own = [alone.chunk(256, 0) for _ in range(4)]
    assert np.array_equal(own[3].response_tokens, b[3].response_tokens)
    assert np.array_equal(own[3].env_s, b[3].env_s)


def test_outside_shared_every_run_draws_its_own():
    cfg = compose(CASE1)
    a, b = Draws(cfg, 0).chunk(256, 0), Draws(cfg, 0).chunk(256, 0)
    assert a is not b and np.array_equal(a.response_tokens, b.response_tokens)
    a.response_tokens[0] = 1  # a run's own chunk stays writeable


def test_a_run_on_another_engine_derives_its_own_delays_and_group_shapes_from_a_shared_chunk():
    """What a run derives from a shared chunk (prefill delays, group shapes: GroupChunk.memo) is kept
    per engine: case 1 on engines of 4 GPUs after engines of 8 (other prefill and decode rates) gives
    the trace it gives alone, and the chunk holds one entry per engine."""
    tp4 = [*CASE1, "experiment.generator.tp=4", "experiment.generator.ep=4"]
    alone = trace_sha256(tp4)
    with draws.shared():
        trace_sha256(CASE1)
        after_tp8 = trace_sha256(tp4)
        (log,) = draws._SHARED.values()
    assert after_tp8 == alone
    assert len(log[0].chunk.memo) == 2
    assert all(not a.flags.writeable for m in log[0].chunk.memo.values() for a in (m["delay"], m["work"]))
