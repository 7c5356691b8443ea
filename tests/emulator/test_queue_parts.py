"""The queue's parts on hand-made groups: batch filling and filtering (batches.py), the surplus at a
batch fill (surplus.py), and the rollout columns they act on (rollouts.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.emulator import surplus
from bench.emulator.batches import Batch, verdict
from bench.emulator.draws import GroupChunk
from bench.emulator.policies import Schedule
from bench.emulator.rollouts import DISCARDED, FILTERED, PENDING, RESUMED, RUNNING, Rollouts


def _sched(**kw) -> Schedule:
    base = dict(name="t", colocated=False, lag=1, refill=True, surplus="abort", staleness_bound=1,
                inflight_groups=4, filter_zero_advantage=True)  # fmt: skip
    return Schedule(**{**base, **kw})


def test_a_finished_group_is_discarded_when_too_stale_then_filtered_then_kept():
    s = _sched()
    # batch 3 trains with weights 2: a group started on version 1 lags 1 (allowed), on version 0 lags 2
    assert verdict(s, 3, 1, False) == PENDING
    assert verdict(s, 3, 0, False) == DISCARDED
    assert verdict(s, 3, 0, True) == DISCARDED  # staleness is judged first
    assert verdict(s, 3, 1, True) == FILTERED
    assert verdict(_sched(filter_zero_advantage=False), 3, 1, True) == PENDING


def test_filtered_groups_count_toward_the_batch_only_without_backfill():
    b = Batch(2, kept=[4, 5], filtered=[6])
    assert b.counted(backfill=True) == 2  # DAPO dynamic sampling: a replacement is dispatched
    assert b.counted(backfill=False) == 3  # prime-rl: the trainer takes a smaller batch


def test_generation_time_runs_from_the_round_or_the_previous_fill():
    first = Batch(1, filled_at=30.0)
    assert first.generation_s(None) == 30.0  # from the start of the run
    assert Batch(2, filled_at=50.0).generation_s(first) == 20.0  # refill: since batch 1 filled
    assert Batch(2, round_at=35.0, filled_at=50.0).generation_s(first) == 15.0  # its own round


def _one_group(work: list[int], env_s: list[float]) -> Rollouts:
    """One group of len(work) rollouts, prompt 100 tokens, prefill 1 ms a token."""
    n = len(work)
    r = Rollouts(n)
    one = np.ones(n, dtype=np.int64)
    chunk = GroupChunk(100 * one, np.array(work), 0 * one, one, np.array(env_s), np.zeros(n),
                       np.array([True]), np.array([False]), np.array([True]))  # fmt: skip
    r.add_chunk(chunk, lambda tokens: tokens * 1e-3)
    r.dispatch(0, 10.0, version=3)
    return r


def test_cancel_discards_every_rollout_in_flight_with_the_tokens_it_decoded():
    r = _one_group([100, 100], [5.0, 5.0])
    surplus.stop_in_flight(r, [0], ([0], np.array([[40.0, 0.0]])), 20.0, 4, abort=False, never_placed=())
    r.settle()  # cancelled groups' rows are written when the run's segments are read (Rollouts.discard)
    c = r.table.cols
    assert c["status"][:2].tolist() == [DISCARDED, DISCARDED]
    assert c["tokens"][:2].tolist() == [40.0, 0.0]
    assert c["t_finish"][:2].tolist() == [20.0, 20.0] and c["version_end"][:2].tolist() == [4, 4]
    assert r.history.n == 0


def test_abort_buffers_what_is_left_and_resume_restarts_it_with_a_re_prefill():
    # three rollouts aborted at t = 20 (dispatched at 10, 105 ms prefill + 5/20/5 s environment):
    # one decoded 40 of 100 tokens, one was still in its environment (20 s), one had just finished
    r = _one_group([100, 100, 30], [5.0, 20.0, 5.0])
    decoded = ([0], np.array([[40.0, 0.0, 30.0]]))
    surplus.stop_in_flight(r, [0], decoded, 20.0, 4, abort=True, never_placed=())
    c = r.table.cols
    # the two cut short leave a `resumed` segment; the finished one keeps its result (pending)
    assert c["status"][:3].tolist() == [RESUMED, RESUMED, PENDING]
    assert c["left"][:2].tolist() == [60.0, 100.0]
    # the episode still in its environment keeps the rest of it: 20.1 s - 10 s spent
    assert c["env_left"][:2] == pytest.approx([0.0, 10.1])
    assert r.history.n == 2 and r.history.cols["rollout"][:2].tolist() == [0, 1]
    assert r.history.cols["tokens"][:2].tolist() == [40.0, 0.0]
    work, delay = surplus.resume_segments(r, 0, 30.0, lambda tokens: tokens * 1e-3)
    assert work.tolist() == [60.0, 100.0, 0.0]
    # re-prefill prompt + tokens so far (140 tokens; 100), plus the environment time left
    assert delay == pytest.approx([0.14, 0.1 + 10.1, 0.0])
    assert c["status"][:3].tolist() == [RUNNING, RUNNING, PENDING]
    assert c["t_dispatch"][:2].tolist() == [30.0, 30.0] and c["version_start"][0] == 3


def test_a_group_still_queued_for_an_engine_keeps_all_its_environment_time():
    r = _one_group([100], [5.0])
    surplus.stop_in_flight(r, [0], ([], np.zeros((0, 1))), 20.0, 4, abort=True, never_placed={0})
    assert r.table.cols["env_left"][0] == pytest.approx(5.1)


def test_a_group_that_waited_for_a_slot_counts_its_environment_time_from_its_placement():
    # dispatched at 10 s, placed at 16 s after waiting for an engine, aborted at 20 s before decoding:
    # 4 s of its 5.1 s spent, not 10 s
    r = _one_group([100], [5.0])
    surplus.stop_in_flight(
        r, [0], ([], np.zeros((0, 1))), 20.0, 4, abort=True, never_placed=(), placed_at={0: 16.0}
    )
    assert r.table.cols["env_left"][0] == pytest.approx(1.1)
