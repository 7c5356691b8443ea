"""conf/published/opd_predictions.yaml: calibrate on one opd-benchmark run, predict the others. A
replay is derived (the model's floor), a cross-framework row is calibrated (the target's profile was
fitted on the target run) and its `_held_out` twin a prediction (that profile without the target
run), and the reference is measured from the target run's own raw logs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.reproduce import sources, table
from bench.reproduce.spec import PUBLISHED_DIR, load_case
from tests.conftest import opd_benchmark

CASE = PUBLISHED_DIR / "opd_predictions.yaml"


def test_every_row_is_a_replay_or_a_prediction_of_another_run():
    case = load_case(CASE)
    pairs = {(f.compute["calibrate_on"]["run"], f.compute["target"]["run"]) for f in case.figures}
    assert pairs == {(a, b) for a in ("verl", "prime", "miles") for b in ("verl", "prime", "miles")}
    for f in case.figures:
        assert f.measured["run"] == f.compute["target"]["run"] and f.measured["metric"] == f.compute["metric"]
        assert (
            table.fit_status(case, f)[0] is None
        )  # nothing fitted in the data: replays are derived at run time


@pytest.fixture(scope="module")
def verl_rows(tmp_path_factory) -> dict[str, table.Row]:
    case = load_case(CASE)
    case = replace(case, figures=[f for f in case.figures if f.compute["calibrate_on"]["run"] == "verl"])
    work = tmp_path_factory.mktemp("runs")
    ctx = sources.Context(data_root=opd_benchmark().parent, work_dir=work)
    rows = {r.figure_id: r for r in table.evaluate([case], ctx)}
    rows["work_dir"] = work
    return rows


def test_replay_is_derived_with_its_error_shown(verl_rows):
    r = verl_rows["verl_to_verl_steady_step_s"]
    assert r.status == "derived" and "a replay of the run the calibration was fitted on (verl)" in r.note
    # results/verl/run.log timing_s/step, steps 2-15
    steps = [5.343228, 5.307996, 5.242243, 5.013878, 5.005781, 4.964050, 4.986252, 4.974564,
             4.949350, 4.967796, 4.944064, 4.989960, 4.966839, 4.996439]  # fmt: skip
    assert r.published == pytest.approx(sum(steps) / 14, abs=1e-5)
    assert abs(r.error_pct) < 5 and r.ours_from == "emulated"


def test_cross_framework_rows_are_calibrated_by_the_targets_profile(verl_rows):
    """The target framework's costs come from its shipped profile (conf/framework/*.yaml), fitted on
    the target run itself: a calibration, not a prediction (bench.model.fwprofile)."""
    for target, fw in (("prime", "prime_rl"), ("miles", "slime")):
        r = verl_rows[f"verl_to_{target}_steady_step_s"]
        assert r.status == "calibrated" and r.ours is not None, r
        assert (
            f"calibrated, not a prediction: {fw}'s profile fitted emulator.trainer_mfu, emulator.optimizer_s"
            in r.note
        )
        assert f"on the target run fixtures/opd-benchmark/opd-frameworks/results/{target}" in r.note
    miles = verl_rows["verl_to_miles_trainer_wait_share"]
    assert miles.published == pytest.approx(85.61, abs=0.01)  # REPORT.md: Miles waits 85.6% of its step
    n = verl_rows["verl_to_prime_gen_s_per_step"]
    assert n.status == "n/a" and "prime's logs have no gen_s_per_step" in n.note


def test_prediction_runs_are_written(verl_rows):
    import json

    r = verl_rows["verl_to_prime_trajectories_per_s"]
    assert "verl calibration, prime_rl policy on prime's GPU split" in r.used
    run = verl_rows["work_dir"] / "predicted" / "verl-to-prime"
    p = json.loads((run / "manifest.json").read_text())["predicted_from"]
    assert (p["run_framework"], p["framework"], p["replay"]) == ("verl", "prime_rl", False)
    assert p["given"][-5:] == [  # the target's GPU split and its weight-sync path (prime.toml: filesystem)
        "experiment.placement=disaggregated",
        "experiment.trainer_gpus=1",
        "experiment.generator_gpus=1",
        "framework.weight_sync.colocated=ipc",
        "framework.weight_sync.disaggregated=filesystem",
    ]


def test_a_held_out_row_is_a_prediction_with_the_targets_fitted_values_at_their_defaults(verl_rows):
    """`held_out: true`: Prime-RL's profile without what it fitted on the prime run (every value: its
    only run), so its trainer efficiency, optimizer step and sync fixed cost keep
    conf/emulator/default.yaml's values, each named as chosen; nothing was fitted on the target, so the row passes or fails. The
    defaults (trainer_mfu 0.35 against the 0.026 fitted) make the step less than half the run's."""
    import json

    r = verl_rows["verl_to_prime_steady_step_s_held_out"]
    assert r.status == "fail" and r.error_pct < -40, r
    assert "prime_rl's profile without what it fitted on prime" in r.used
    run = verl_rows["work_dir"] / "predicted" / "verl-to-prime-held-out"
    p = json.loads((run / "manifest.json").read_text())["predicted_from"]
    profile = p["inputs_from"]["profile"]
    assert (
        profile["inputs"] == {}
        and profile["held_out"] == "fixtures/opd-benchmark/opd-frameworks/results/prime"
    )
    held = "(default: prime_rl's profile has no fit: held out: fitted on the run predicted)"
    for key, default in (("trainer_mfu", "0.35"), ("optimizer_s", "1.0"), ("weight_sync_fixed_s", "1.0")):
        assert f"emulator.{key} = {default} {held}" in p["chosen"]
    calibrated = verl_rows["verl_to_prime_steady_step_s"]  # its twin, with the profile fitted on prime
    assert calibrated.status == "calibrated" and abs(calibrated.error_pct) < 5
