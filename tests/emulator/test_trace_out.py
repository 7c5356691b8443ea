"""trace_out: what an emulated run's trace counts per step window."""

from __future__ import annotations

import numpy as np

from bench.config import compose
from bench.emulator.run import build
from bench.emulator.trace_out import first_segments, step_rows


def test_each_rollout_is_dispatched_once_at_its_first_segment_also_when_aborted_and_resumed():
    """Partial rollout (emulator.surplus=abort) on case 1: thousands of rollouts are cut at a batch
    fill and resumed later, each leaving `resumed` segments before its own row. Its first segment is
    the first in the segment order (the earliest dispatch), and the step rows count every rollout
    dispatched exactly once."""
    cfg = compose(["experiment=semianalysis_case1", "framework=prime_rl", "emulator.steps=20",
                   "emulator.surplus=abort"])  # fmt: skip
    r = build(cfg)[0].run()
    ids = r.segments["rollout"]
    rollouts = len(r.draws["prompt_tokens"])
    assert len(ids) - rollouts > 1000  # resumed segments
    earliest = np.zeros(len(ids), dtype=bool)
    earliest[np.unique(ids, return_index=True)[1]] = True
    first = first_segments(r)
    assert np.array_equal(first, earliest)
    assert np.array_equal(np.sort(ids[first]), np.arange(rollouts))
    dispatched = sum(row["dispatched_samples"] for row in step_rows(r))
    assert dispatched == np.isfinite(r.segments["t_dispatch"][first]).sum() == rollouts
