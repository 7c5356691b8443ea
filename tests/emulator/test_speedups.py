"""Published speed-up setups (conf/published/verl_areal_speedups.yaml) run end to end (short), and random configurations keep the queue
invariants (hypothesis)."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.config import compose
from bench.emulator.run import build
from bench.reproduce import sources
from bench.reproduce.spec import PUBLISHED_DIR, Context, load_case
from tests.emulator.conftest import run


def test_one_step_off_beats_colocated_sync_on_the_published_setup(tmp_path):
    # the figure as conf/published states it, run through reproduce's own speedup source, short
    case = load_case(PUBLISHED_DIR / "verl_areal_speedups.yaml")
    fig = next(f for f in case.figures if f.id == "verl_one_step_off_fsdp2")
    short = {**fig.compute, "overrides": [*fig.compute["overrides"], "emulator.steps=8"]}
    out = sources.compute(case, dataclasses.replace(fig, compute=short), Context(tmp_path, tmp_path / "runs"))
    assert 1.0 < out.value < 2.0  # published 1.23x
    assert out.used.startswith("emulated wall_s:")


def test_speedup_setups_compose_with_their_published_facts():
    fa = compose(["experiment=verl_fully_async_h20", "framework=verl"])
    assert (fa.hardware.peak_bf16_flops, fa.hardware.hbm_gb, fa.hardware.hbm_tbps) == (148e12, 96, 4.0)
    assert (fa.model.layers, fa.model.hidden, fa.model.kv_heads) == (28, 3584, 4)
    assert fa.experiment.trainer_gpus + fa.experiment.generator_gpus == 128
    _, sched, prov = build(fa)
    assert sched.name == "fully_async" and sched.surplus == "abort"  # partial rollout
    assert prov["native_mode"] == "fully_async"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    policy=st.sampled_from(["disaggregated_sync", "one_step_off", "fully_async", "partial_rollout"]),
    oversampling=st.sampled_from([1.0, 1.5, 3.0]),
    staleness=st.integers(0, 3),
    filtering=st.booleans(),
    backfill=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_queue_invariants_hold_for_random_configurations(
    tmp_path_factory, policy, oversampling, staleness, filtering, backfill, seed
):
    r = run(
        tmp_path_factory.mktemp("h"),
        [
            "experiment=smoke",
            "framework=verl",
            f"emulator.policy=bench.emulator.policies.{policy}",
            "emulator.steps=3",
            "workload.prompts_per_step=16",
            f"experiment.oversampling={oversampling}",
            f"workload.staleness_budget={staleness}",
            f"experiment.filter_zero_advantage={str(filtering).lower()}",
            f"emulator.filter_backfill={str(backfill).lower()}",
            f"experiment.seed={seed}",
        ],
    )
    rollouts, steps = r["rollouts"], r["steps"]
    last = rollouts.groupby("rollout_id", sort=False)["status"].last()
    assert set(last) <= {"used", "discarded", "aborted", "filtered"}
    used = rollouts[rollouts["status"] == "used"]
    lag = used["step_consumed"] - 1 - used["policy_version_start"]
    assert lag.max() <= r["manifest"]["emulator"]["schedule"]["staleness_bound"]
    assert len(steps) == 3 and steps["dispatched_samples"].sum() == rollouts["rollout_id"].nunique()
    for res in r["manifest"]["resources"].values():
        assert abs(res["busy_s"] + res["idle_s"] - r["manifest"]["wall_s"]) < 1e-6 * r["manifest"]["wall_s"]
