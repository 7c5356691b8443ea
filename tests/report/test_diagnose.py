"""Verdict rules (docs/metrics.md "Verdict"): a run's numbers in, verdict and reason out."""

from __future__ import annotations

import json

import pytest

from bench.report.diagnose import Resources, diagnose, resources, run_resources

SPLIT = Resources("disaggregated", trainer_gpus=8, generator_gpus=8, staleness_budget=1)


def test_trainer_waiting_and_generators_busy_is_generator_bound_with_a_gpu_target():
    v = diagnose(
        {
            "trainer_idle_frac": 0.447,
            "generator_idle_frac": 0.0,
            "sync_share": 0.012,
            "production_samples_per_s": 7.58,
            "consumption_samples_per_s": 14.0,
        },
        SPLIT,
    )
    assert v.label == "generator-bound" and v.rule == "V3"
    assert v.numbers_text() == "trainer idle 44.7% · generator idle 0.0% · weight sync 1.2%"
    assert v.cause == "the 8 generator GPUs deliver 7.58 trained samples/s; the trainer could consume 14"
    # ceil(8 x 14.0 / 7.58) = 15
    assert v.action.startswith("move GPUs to generation: at 7.58 produced vs 14 consumable samples/s, ")
    assert "production meets consumption near 15 generator GPUs (now 8;" in v.action


def test_discards_are_named_as_the_cause_when_a_fifth_of_rollouts_is_dropped():
    v = diagnose(
        {"trainer_idle_frac": 0.45, "generator_idle_frac": 0.02, "oversampling_waste": 0.26},
        SPLIT,
    )
    assert v.label == "generator-bound"
    assert "26.0% of dispatched rollouts are discarded" in v.cause
    assert "decode 1.35× the rollouts trained" in v.cause  # 1 / (1 - 0.26)


def test_staleness_drops_call_for_a_larger_in_flight_cap():
    v = diagnose({"trainer_idle_frac": 0.4, "generator_idle_frac": 0.05, "stale_drop_frac": 0.3}, SPLIT)
    assert "staleness-bound drops: 30.0% of generated tokens" in v.cause
    assert "raise the staleness budget (in-flight cap)" in v.action


def test_long_tail_is_a_cause_only_when_generators_sit_partly_idle():
    busy = diagnose({"trainer_idle_frac": 0.4, "generator_idle_frac": 0.0, "tail_ratio": 3.7}, SPLIT)
    assert "long-tail" not in busy.cause  # generators never idle: the tail does not starve them
    starved = diagnose({"trainer_idle_frac": 0.4, "generator_idle_frac": 0.15, "tail_ratio": 3.7}, SPLIT)
    assert starved.label == "generator-bound"
    assert "long-tail responses (99th percentile 3.7× the median)" in starved.cause
    assert starved.action.endswith("; or use partial rollouts to cut the tail")  # cap reach unknown
    clipped = diagnose(
        {"trainer_idle_frac": 0.4, "generator_idle_frac": 0.15, "tail_ratio": 3.7, "clip_frac": 0.08}, SPLIT
    )
    assert clipped.action.endswith("; or use partial rollouts to cut the tail / lower the response cap")


def test_generators_waiting_and_trainer_busy_is_trainer_bound():
    v = diagnose(
        {"trainer_idle_frac": 0.05, "generator_idle_frac": 0.40, "sync_share": 0.02, "staleness_max": 1.0},
        SPLIT,
    )
    assert v.label == "trainer-bound" and v.rule == "V5"
    assert "staleness reaches its budget (1 of 1 versions)" in v.cause
    assert v.action.startswith("move GPUs to training: about 3 of 8 generator GPUs' time is idle")


def test_weight_sync_over_a_fifth_of_the_step_is_sync_bound_whatever_the_idle():
    v = diagnose({"trainer_idle_frac": 0.3, "generator_idle_frac": 0.0, "sync_share": 0.34}, SPLIT)
    assert v.label == "sync-bound" and v.rule == "V1"
    assert v.cause.startswith("weight sync takes 34.0% of every trainer step")


def test_scoring_taking_most_of_a_rollout_is_scoring_bound():
    v = diagnose({"trainer_idle_frac": 0.5, "generator_idle_frac": 0.6, "scoring_share": 0.7}, SPLIT)
    assert v.label == "scoring-bound"
    assert v.deciding["scoring share"] == 0.7
    assert "more generator GPUs would not help" in v.action


def test_both_sides_busy_is_balanced():
    v = diagnose({"trainer_idle_frac": 0.08, "generator_idle_frac": 0.12, "sync_share": 0.03}, SPLIT)
    assert v.label == "balanced" and v.rule == "V6"


def test_both_sides_waiting_is_not_forced_into_a_label():
    v = diagnose({"trainer_idle_frac": 0.35, "generator_idle_frac": 0.30, "sync_share": 0.05}, SPLIT)
    assert v.label == "undetermined" and v.rule == "V4"
    assert "both sides wait (trainer idle 35.0%, generator idle 30.0%)" in v.cause


def test_colocated_runs_have_no_generator_idle_and_trainer_idle_is_generation():
    v = diagnose({"trainer_idle_frac": 0.6, "generator_idle_frac": 0.9}, Resources("colocated", 8, 8, 1))
    assert v.label == "generator-bound"
    assert "generator idle" not in v.deciding
    # no premise for "lower the response cap": the run does not say its responses reach it
    assert v.action == "generation dominates each step on the shared GPUs: move to a disaggregated placement"


def test_unknown_idle_is_undetermined_never_a_default():
    v = diagnose({"trainer_idle_frac": None, "generator_idle_frac": 0.1}, SPLIT)
    assert v.label == "undetermined" and v.rule == "V0"
    assert v.numbers_text().startswith("trainer idle not reported")


def test_unknown_gpu_counts_give_no_gpu_target():
    v = diagnose(
        {"trainer_idle_frac": 0.4, "production_samples_per_s": 1.0, "consumption_samples_per_s": 2.0},
        Resources("disaggregated"),
    )
    assert v.action.startswith("move GPUs to generation (GPU counts not recorded")


def test_resources_come_from_the_resolved_config():
    cfg = {
        "experiment": {"placement": "disaggregated", "trainer_gpus": 8, "generator_gpus": 24},
        "workload": {"staleness_budget": 2},
    }
    assert resources(cfg) == Resources("disaggregated", 8, 24, 2.0)
    assert resources({}) == Resources()


def _manifest(tmp_path, overrides):
    """The manifest a launched run starts with (bench.rundir.run_identity: config + resolved)."""
    from bench.config import compose
    from bench.rundir import run_identity
    from bench.trace import RunPaths

    return run_identity(compose(["experiment=smoke", *overrides]), RunPaths(tmp_path / "run"), "emulated")


def test_resources_come_from_the_manifests_resolved_layout(tmp_path):
    m = _manifest(tmp_path, ["experiment.trainer_gpus=2", "experiment.generator_gpus=6"])
    assert m["resolved"]["trainer"]["gpus"] == 2 and m["resolved"]["generator"]["gpus"] == 6
    budget = float(m["config"]["workload"]["staleness_budget"])
    assert run_resources(m) == Resources("disaggregated", 2, 6, budget)
    # the recorded layout is what the run had: a config edited afterwards does not change it
    m["config"]["experiment"]["generator_gpus"] = 30
    assert run_resources(m).generator_gpus == 6


def test_colocated_layout_gives_the_generator_the_trainers_gpus(tmp_path):
    m = _manifest(tmp_path, ["experiment.placement=colocated", "experiment.trainer_gpus=4"])
    r = run_resources(m)
    assert (r.placement, r.trainer_gpus, r.generator_gpus) == ("colocated", 4, 4)


def test_manifests_without_a_resolved_layout_fall_back_to_the_config(tmp_path):
    """Run directories from before the layout was recorded, and ingested runs, have no `resolved`."""
    m = _manifest(tmp_path, ["experiment.trainer_gpus=2", "experiment.generator_gpus=6"])
    del m["resolved"]
    assert run_resources(m) == resources(m["config"])
    assert (run_resources(m).trainer_gpus, run_resources(m).generator_gpus) == (2, 6)
    assert run_resources({}) == Resources()


@pytest.mark.slow
def test_smoke_runs_are_all_generator_bound_with_their_deciding_numbers(smoke_report):
    """Emulated smoke runs (tests/report/conftest.py): generators never idle, trainer idle 33-55%."""
    md = (smoke_report / "report" / "summary.md").read_text()
    first = md.split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    for fw in ("verl", "slime", "prime_rl"):
        metrics = json.loads((smoke_report / "results" / fw / "metrics.json").read_text())
        idle = f"trainer idle {100 * metrics['trainer_idle_frac']:.1f}%"
        line = next(x for x in first.splitlines() if x.startswith(f"- **{fw}**"))
        assert "**generator-bound**" in line and idle in line and "generator idle 0.0%" in line, line
    assert md.index("## Verdicts") < md.index("## Key findings") < md.index("## Summary")
