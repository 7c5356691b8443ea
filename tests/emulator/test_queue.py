"""Queue invariants of every policy: outcomes, staleness bound, time accounting, trace consistency."""

from __future__ import annotations

import numpy as np
import pytest

from tests.emulator.conftest import POLICIES

FINAL = {"used", "discarded", "aborted", "filtered"}


@pytest.mark.parametrize("policy", POLICIES)
def test_every_dispatched_rollout_ends_used_discarded_aborted_or_filtered(policy_runs, policy):
    r = policy_runs[policy]["rollouts"]
    last = r.groupby("rollout_id", sort=False)["status"].last()
    assert set(last.unique()) <= FINAL
    # a `resumed` row is never a rollout's last word
    assert not (last == "resumed").any()
    steps = policy_runs[policy]["steps"]
    assert steps["dispatched_samples"].sum() == r["rollout_id"].nunique()


@pytest.mark.parametrize("policy", POLICIES)
def test_trained_rollouts_match_step_samples(policy_runs, policy):
    r, steps = policy_runs[policy]["rollouts"], policy_runs[policy]["steps"]
    used = r[r["status"] == "used"].groupby("step_consumed").size()
    assert used.to_dict() == {int(s): int(n) for s, n in zip(steps["step"], steps["samples"], strict=True)}
    assert (steps["samples"] == 64 * 16).all()  # smoke: 64 prompts x 16 per step


@pytest.mark.parametrize("policy", POLICIES)
def test_staleness_never_exceeds_the_policy_bound(policy_runs, policy):
    run = policy_runs[policy]
    bound = run["manifest"]["emulator"]["schedule"]["staleness_bound"]
    r = run["rollouts"]
    used = r[r["status"] == "used"]
    lag = used["step_consumed"] - 1 - used["policy_version_start"]
    assert lag.min() >= 0
    assert lag.max() <= bound
    assert run["steps"]["staleness_max"].max() == lag.max()


def test_sync_policies_are_on_policy_and_async_ones_are_not(policy_runs):
    stale = {p: policy_runs[p]["steps"]["staleness_max"].max() for p in POLICIES}
    assert stale["colocated_sync"] == stale["disaggregated_sync"] == 0
    assert stale["one_step_off"] == 1
    assert stale["fully_async"] >= 1


@pytest.mark.parametrize("policy", POLICIES)
def test_idle_plus_busy_is_wall_for_trainer_and_generator(policy_runs, policy):
    m = policy_runs[policy]["manifest"]
    for resource in ("trainer", "generator"):
        busy, idle = m["resources"][resource]["busy_s"], m["resources"][resource]["idle_s"]
        assert busy >= 0 and idle >= -1e-6
        assert busy + idle == pytest.approx(m["wall_s"], rel=1e-9)
    steps = policy_runs[policy]["steps"]
    per_step = steps["wait_s"] + steps["logprob_s"] + steps["compute_s"] + steps["sync_s"]
    np.testing.assert_allclose(per_step, steps["step_s"], rtol=1e-9)
    assert steps["t_end_s"].iloc[-1] == pytest.approx(m["wall_s"])


def test_colocated_generator_is_idle_while_training(policy_runs):
    m = policy_runs["colocated_sync"]["manifest"]
    steps = policy_runs["colocated_sync"]["steps"]
    trainer_busy = (steps["logprob_s"] + steps["compute_s"] + steps["sync_s"]).sum()
    # generator and trainer time-share the GPUs: their busy times never overlap
    assert m["resources"]["generator"]["busy_s"] + trainer_busy <= m["wall_s"] * (1 + 1e-9)


def test_oversampling_with_cancel_discards_the_surplus(policy_runs):
    # 2x oversampling: a sync round dispatches 128 groups for 64 -> about half is discarded
    steps = policy_runs["disaggregated_sync"]["steps"]
    waste = steps["discarded_samples"].sum() / steps["dispatched_samples"].sum()
    assert 0.45 <= waste <= 0.5


def test_partial_rollout_resumes_aborted_rollouts(policy_runs):
    r = policy_runs["partial_rollout"]["rollouts"]
    resumed = r[r["status"] == "resumed"]
    assert len(resumed) > 0
    # every resumed segment's rollout carries on in a later row of the same rollout_id
    later = r.groupby("rollout_id").size()
    assert (later[resumed["rollout_id"].unique()] >= 2).all()
    assert policy_runs["partial_rollout"]["steps"]["discarded_samples"].sum() < len(resumed)


def test_trace_token_accounting(policy_runs):
    for p in POLICIES:
        steps, r = policy_runs[p]["steps"], policy_runs[p]["rollouts"]
        used = r[r["status"] == "used"]
        if p != "partial_rollout":  # resumed samples were generated over several segments
            assert steps["response_tokens"].sum() == used["response_tokens"].sum()
        assert steps["generated_tokens"].sum() >= steps["response_tokens"].sum() * 0.999
