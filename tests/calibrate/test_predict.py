"""`bench predict` on verl's opd-benchmark run: a replay (the model's floor, reported) and a
prediction of another framework on another GPU split, each an emulated run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.__main__ import main as bench_main
from tests.calibrate.test_calibrate import VERL_SETUP, parsed_run

# the batch, from the benchmark's README (the opd_logs parse records no configuration)
SETUP = [*VERL_SETUP, "workload.group_size=16", "workload.prompts_per_step=8"]
# results/verl/run.log timing_s/step, steps 2..15 (REPORT.md: native steady step 5.05 s)
VERL_STEP_S = [5.343228, 5.307996, 5.242243, 5.013878, 5.005781, 4.964050, 4.986252, 4.974564,
               4.949350, 4.967796, 4.944064, 4.989960, 4.966839, 4.996439]  # fmt: skip


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory) -> Path:
    return parsed_run(tmp_path_factory.mktemp("pred"), "verl", "verl")


def test_replay_reports_its_error_against_the_run(verl_run, tmp_path, capsys):
    out = tmp_path / "replay"
    assert bench_main(["predict", str(verl_run), "framework=verl", *SETUP, "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["mode"] == "emulated" and m["status"] == "completed"
    p = m["predicted_from"]
    assert p["replay"] is True and p["run"] == str(verl_run.resolve()) and p["framework"] == "verl"
    assert Path(p["calibration"]) == (out / "calibration.yaml").resolve() and Path(p["calibration"]).is_file()
    assert p["measured"]["steady_step_s"] == pytest.approx(sum(VERL_STEP_S) / 14, abs=1e-5)
    err = p["replay_error"]
    assert set(err) == {"trajectories_per_s", "steady_step_s", "trainer_wait_share", "gen_s_per_step"}
    # the floor (+4% step, +13% generation): the emulator draws 256 groups at a time, so at 8 groups
    # a step the fitted length drift never applies and later steps decode the first step's lengths
    assert abs(err["steady_step_s"]) < 0.05 and abs(err["gen_s_per_step"]) < 0.2
    printed = capsys.readouterr().out
    assert "steady_step_s: predicted" in printed and "replay error" in printed
    assert (out / "metrics.json").is_file() and (out / "trace" / "steps.parquet").is_file()


def test_another_framework_on_another_split_is_a_prediction(verl_run, tmp_path):
    out = tmp_path / "prime"
    given = [*SETUP, "experiment.placement=disaggregated", "framework=prime_rl"]
    assert bench_main(["predict", str(verl_run), *given, "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    p = m["predicted_from"]
    assert (p["framework"], p["run_framework"], p["replay"]) == ("prime_rl", "verl", False)
    assert "replay_error" not in p and p["predicted"]["steady_step_s"] > 0
    assert m["config"]["experiment"]["placement"] == "disaggregated"
    assert m["emulator"]["policy"].endswith("fully_async")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["framework=verll"], "framework 'verll' not found; choose one of"),
        ([], "framework=F: give exactly one"),
        (["framework=slime", "model=qwen3_0_6b"], "does not say hardware, experiment.placement"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(verl_run, tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert bench_main(["predict", str(verl_run), *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


def test_no_trace_and_existing_out_are_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"framework": "verl", "mode": "native"}))
    out = tmp_path / "out"
    assert bench_main(["predict", str(run), "framework=verl", *SETUP, "--out", str(out)]) == 2
    assert "no trace/steps.parquet" in capsys.readouterr().err and not out.exists()
    out.mkdir()
    (out / "x").write_text("")
    assert bench_main(["predict", str(run), "framework=verl", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_given_calibration_file_is_used_and_recorded(verl_run, tmp_path):
    cal = tmp_path / "verl.yaml"
    assert bench_main(["calibrate", str(verl_run), "--out", str(cal), *SETUP]) == 0
    out = tmp_path / "slime"
    args = ["predict", str(verl_run), "framework=slime", f"calibration={cal}", *SETUP, "--out", str(out)]
    assert bench_main(args) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["predicted_from"]["calibration"] == str(cal.resolve())
    assert not (out / "calibration.yaml").exists()  # nothing fitted: the given file is the calibration
    fitted = {k: v["value"] for k, v in yaml.safe_load(cal.read_text())["values"].items()}
    assert m["config"]["emulator"]["decode_step_floor_s"] == fitted["emulator.decode_step_floor_s"]
    # slime's sleep + wake is its conf's, neither fitted on verl's run nor logged by it: said so
    assert m["predicted_from"]["chosen"] == [
        "framework.handoff_fixed_s = 5.98 (slime's conf: its sleep + wake)"
    ]
    assert m["config"]["emulator"]["trainer_mfu"] == fitted["emulator.trainer_mfu"]
