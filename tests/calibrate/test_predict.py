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
    # the file gives the workload's shape; slime's costs are slime's profile's, never verl's fit
    # (tests/calibrate/test_profile.py), its hand-off too (measured on Miles): nothing chosen
    assert m["config"]["workload"]["response_len_drift"] == fitted["workload.response_len_drift"]
    assert m["config"]["emulator"]["trainer_mfu"] == 0.07831 != fitted["emulator.trainer_mfu"]
    assert m["config"]["emulator"]["decode_step_floor_s"] == 0.005913
    assert m["predicted_from"]["chosen"] == []


# corpus log A: verl GRPO on 8 GPUs colocated (`hybrid` 8, line 39); the emulator's inputs given
# as the calibration fitted on the opd-benchmark's verl run
LOG_A = "yushengsu-thu-verl_training_log/grpo_run_deepseek7b_llm.log"
A_GIVEN = ["model=qwen2_5_7b", "hardware=h100_sxm", "emulator.steps=6"]


@pytest.fixture(scope="module")
def run_a(verl_corpus, verl_run, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pred-a")
    run, cal = root / "a", root / "verl.yaml"
    assert (
        bench_main(["ingest", "--framework", "verl", "--logs", str(verl_corpus / LOG_A), "--out", str(run)])
        == 0
    )
    assert bench_main(["calibrate", str(verl_run), "--out", str(cal), *SETUP]) == 0
    return run, cal


def test_a_colocated_run_is_predicted_on_the_splits_of_its_gpus_the_target_can_run(run_a, tmp_path, capsys):
    """prime-rl cannot colocate: the run's 8 GPUs are split, never 8 trainer + 8 generator GPUs
    overlapping; each split prime-rl accepts (engines of 2 GPUs) is emulated, best first."""
    run, cal = run_a
    out = tmp_path / "prime"
    args = ["predict", str(run), "framework=prime_rl", *A_GIVEN, f"calibration={cal}", "--out", str(out)]
    assert bench_main(args) == 0
    m = json.loads((out / "manifest.json").read_text())
    p = m["predicted_from"]
    assert (p["run_gpus"], p["gpus"], m["resolved"]["total_gpus"]) == (8, 8, 8)
    assert m["config"]["experiment"]["placement"] == "disaggregated"
    splits = [(d["trainer_gpus"], d["generator_gpus"]) for d in p["splits"]]
    assert sorted(splits) == [(2, 6), (4, 4), (6, 2)]
    rates = [d["trajectories_per_s"] for d in p["splits"]]
    assert rates == sorted(rates, reverse=True)  # best first
    best = m["config"]["experiment"]
    assert (best["trainer_gpus"], best["generator_gpus"]) == splits[0]
    assert p["predicted"]["trajectories_per_s"] == pytest.approx(rates[0])
    assert p["held"].startswith(
        "prime_rl on the run's 8 GPUs: experiment.placement=colocated: prime-rl 0.8.0 runs trainer and "
        "inference on disjoint GPUs; expected disaggregated; predicted on the trainer:generator splits"
    )
    # GPU-hours: the GPUs emulated x the time emulated
    metrics = json.loads((out / "metrics.json").read_text())
    assert p["gpu_hours"] == metrics["gpu_hours"] == pytest.approx(8 * metrics["wall_s"] / 3600)
    printed = capsys.readouterr().out
    assert f"prediction (verl -> prime_rl) on 8 GPUs -> {out}" in printed


def test_a_placement_what_if_holds_the_runs_gpus(run_a, tmp_path):
    """verl disaggregated: the run's 8 GPUs split (verl's 1024 x 5 samples divide over 2 or 4
    trainer ranks, not 6), not trainer 8 + generator 8."""
    run, cal = run_a
    out = tmp_path / "split"
    given = [*A_GIVEN, f"calibration={cal}", "experiment.placement=disaggregated", "framework=verl"]
    assert bench_main(["predict", str(run), *given, "--out", str(out)]) == 0
    p = json.loads((out / "manifest.json").read_text())["predicted_from"]
    assert p["gpus"] == 8 and sorted((d["trainer_gpus"], d["generator_gpus"]) for d in p["splits"]) == [
        (2, 6),
        (4, 4),
    ]


def test_other_gpus_given_are_predicted_as_given(run_a, tmp_path):
    run, cal = run_a
    out = tmp_path / "sixteen"
    what_if = [
        "experiment.placement=disaggregated",
        "experiment.trainer_gpus=8",
        "experiment.generator_gpus=8",
    ]
    given = [*A_GIVEN, f"calibration={cal}", *what_if, "framework=prime_rl"]
    assert bench_main(["predict", str(run), *given, "--out", str(out)]) == 0
    p = json.loads((out / "manifest.json").read_text())["predicted_from"]
    assert (p["run_gpus"], p["gpus"]) == (8, 16) and "splits" not in p


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # the opd-benchmark's verl run on 1 GPU colocated: prime-rl has no split of 1 GPU
        ([*SETUP, "framework=prime_rl"],
         "error: framework=prime_rl on the run's 1 GPU: experiment.placement=colocated: prime-rl 0.8.0 runs "
         "trainer and inference on disjoint GPUs; expected disaggregated; no trainer:generator split of them "
         "passes bench validate (engines of 1 GPUs; one engine leaves no trainer GPU); pass experiment.trainer_gpus=T experiment.generator_gpus=G to predict on other GPUs"),
    ],
)  # fmt: skip
def test_no_split_the_target_can_run_is_refused_naming_it(verl_run, tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert bench_main(["predict", str(verl_run), *args, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [message]
    assert not out.exists()


def test_a_what_if_on_a_placement_the_target_cannot_run_is_refused(run_a, tmp_path, capsys):
    run, cal = run_a
    out = tmp_path / "out"
    given = [
        *A_GIVEN,
        f"calibration={cal}",
        "experiment.trainer_gpus=4",
        "experiment.generator_gpus=4",
        "framework=prime_rl",
    ]
    assert bench_main(["predict", str(run), *given, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: experiment.placement=colocated: prime-rl 0.8.0 runs trainer and inference on disjoint GPUs; "
        "expected disaggregated (framework=prime_rl); pass experiment.placement=disaggregated"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["framework=prime_rl", "experiment.placement=disaggregated", "held_out=results/nowhere"],
            "held_out=results/nowhere: conf/framework/prime_rl.yaml's profile fitted nothing on it; its runs: "
            "fixtures/opd-benchmark/opd-frameworks/results/prime",
        ),
        (
            ["framework=verl", "held_out=fixtures/opd-benchmark/opd-frameworks/results/verl"],
            "held_out=fixtures/opd-benchmark/opd-frameworks/results/verl: a replay takes its framework's "
            "costs from the run itself, not a profile",
        ),
    ],
)
def test_held_out_names_a_run_of_the_targets_profile_in_a_prediction(
    verl_run, tmp_path, capsys, args, message
):
    out = tmp_path / "out"
    assert bench_main(["predict", str(verl_run), *SETUP, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {message}"] and not out.exists()
