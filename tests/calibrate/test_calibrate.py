"""`bench calibrate` on a real run: verl's opd-benchmark run (2 x H100, Qwen3-0.6B, 15 steps), parsed
by bench/reproduce/opd_logs.py. Expected numbers are the verl run.log's own timing lines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bench import run_setup
from bench.__main__ import main as bench_main
from bench.config import compose
from bench.errors import UsageError
from bench.model import calibrate_fit
from bench.reproduce import opd_logs
from bench.reproduce.spec import Context
from tests.conftest import opd_benchmark

# The run's setup, from the benchmark's README (the opd_logs parse records no configuration).
VERL_SETUP = [
    "model=qwen3_0_6b",
    "hardware=h100_sxm",
    "experiment.placement=colocated",
    "experiment.trainer_gpus=1",
    "experiment.generator_gpus=1",
    "workload.max_response_len=128",
    "workload.max_prompt_len=512",
]
# results/verl/run.log, steps 1..15 in order
UPDATE_WEIGHTS = [1.7005266569995001, 1.709951150998677, 1.7064327810003306, 1.7160138910003297,
                  1.7093561790006788, 1.7086840400006622, 1.7057541719987057, 1.716993841000658,
                  1.716229323999869, 1.7066032870006893, 1.7047081730015634, 1.7067480349996913,
                  1.710129238999798, 1.7075411650002934, 1.7223526449997735]  # fmt: skip
OLD_LOG_PROB = [1.4823225090003689, 0.47161213100116584, 0.4689073620011186, 0.4538794370000687,
                0.3977013330004411, 0.39335699299954285, 0.39425870699960797, 0.38485850899996876,
                0.3837533300011273, 0.3786723539997183, 0.3848571369999263, 0.3807616899994173,
                0.40056841600016924, 0.3851761349997105, 0.38884754500031704]  # fmt: skip
UPDATE_ACTOR = [1.2365750530007062, 0.9966962540001987, 0.9739969469992502, 0.9129137010004342,
                0.7490343460012809, 0.7448711070010177, 0.7046182849990146, 0.7231159370003297,
                0.7155651940011012, 0.6973479529988253, 0.7112134030012385, 0.6934924769993813,
                0.7211626349999278, 0.714660505998836, 0.7262035300009302]  # fmt: skip
GEN = [4.064762541000164, 2.059530242000619, 2.059575590001259, 2.0602583340005367, 2.05958948999978,
       2.059944433000055, 2.0595690200007084, 2.059844243000043, 2.0594621599993843, 2.059630821999235,
       2.059435138000481, 2.061315660999753, 2.0595394449992455, 2.0611225809989264, 2.060028298999896]  # fmt: skip
PROMPT_LENGTH_MEAN = [54.25, 50.5, 49.25, 53.75, 48.5, 49.25, 50.375, 52.375, 52.875, 49.75, 52.375,
                      47.25, 52.375, 51.375, 52.875]  # fmt: skip
QWEN3_0_6B_PARAMS = 595_984_384  # bench.flops total (matmul weights + embeddings, tied)


def parsed_run(tmp: Path, run: str, framework: str) -> Path:
    """The run directory bench/reproduce/opd_logs.py writes for results/<run> (mode native)."""
    ctx = Context(data_root=opd_benchmark().parent, work_dir=tmp)
    return opd_logs.load_run("opd-frameworks", run, framework, ctx).run_dir.root


@pytest.fixture(scope="module")
def verl(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("cal")
    run = parsed_run(root, "verl", "verl")
    out = root / "verl.yaml"
    assert bench_main(["calibrate", str(run), "--out", str(out), *VERL_SETUP]) == 0
    return out, yaml.safe_load(out.read_text())


def test_weight_sync_is_the_logged_update_weights_minus_the_transfer(verl):
    _, doc = verl
    fit = doc["values"]["emulator.weight_sync_fixed_s"]
    steady = np.array(UPDATE_WEIGHTS[1:])
    transfer = QWEN3_0_6B_PARAMS * 2.0 / 1 / (450e9 * 0.5)  # BF16 shard / NVLink x weight_sync_eff
    assert fit["value"] == pytest.approx(steady.mean() - transfer, abs=1e-4)  # 1.7052 s
    assert fit["residual"] == pytest.approx(steady.std() / steady.mean(), abs=1e-4)
    assert "sync_s (14 steady steps)" in fit["fitted_on"]


def test_trainer_fit_passes_through_the_logged_update_actor_and_agrees_with_verls_mfu(verl):
    _, doc = verl
    v = doc["values"]
    mfu, opt = v["emulator.trainer_mfu"]["value"], v["emulator.optimizer_s"]["value"]
    # verl's own perf/mfu/actor averages 9.9% over steps 2-15 (REPORT.md): an independent check
    assert 0.09 < mfu < 0.11 and 0.0 < opt < 0.4
    # least squares passes through the centroid: mean fitted compute = mean logged update_actor
    steps = run_setup.read_run(Path(doc["calibration"]["run"]))[1].iloc[1:]
    cfg = compose(VERL_SETUP)
    f = calibrate_fit.step_flops(cfg, steps)
    pred = f / (mfu * 989e12) + opt
    assert pred.mean() == pytest.approx(np.mean(UPDATE_ACTOR[1:]), rel=2e-3)
    assert v["emulator.trainer_mfu"]["residual"] < 0.05


def test_logprob_passes_and_prompt_length(verl):
    _, doc = verl
    v = doc["values"]
    # old_log_prob 0.40 s a step against a forward pass of ~0.16 s: 2.4 passes, rounded to 2
    assert v["emulator.logprob_passes"]["value"] == 2
    assert "passes' worth, rounded" in v["emulator.logprob_passes"]["note"]
    assert v["workload.prompt_len_mean"]["value"] == round(np.mean(PROMPT_LENGTH_MEAN))  # 51


def test_small_batch_decode_fits_the_per_iteration_floor(verl):
    """verl decodes 128 sequences of <= 128 tokens in ~2 s a step: ~16 ms a decode position, where
    the HBM roofline of a 0.6B model is under 1 ms. The run is latency-bound, so calibrate fits the
    floor (the longest sequence x the per-iteration latency) and keeps the bandwidth share's default."""
    path, doc = verl
    fit = doc["values"]["emulator.decode_step_floor_s"]
    assert 0.008 < fit["value"] < 0.025
    assert fit["residual"] < 0.15 and "gen_s vs the decode roofline" in fit["fitted_on"]
    assert "latency-bound" in fit["note"]
    assert "emulator.decode_bw_eff" not in doc["values"]
    assert doc["defaults"]["emulator.decode_bw_eff"]["reason"].startswith("one decode input per run")
    cfg = compose([*VERL_SETUP, f"calibration={path}"])
    assert cfg.emulator.decode_step_floor_s == fit["value"]


def test_response_shape_and_fallbacks_are_named(verl):
    _, doc = verl
    v = doc["values"]
    assert 0.5 < v["workload.response_len_mean_frac"]["value"] <= 1.0
    assert v["workload.response_len_drift"]["value"] < 1.0  # responses shortened: 116.5 -> 55.1 tokens
    d = doc["defaults"]
    assert d["workload.response_len_sigma"]["reason"].startswith("per-step means do not identify")
    assert "no env_s" in d["workload.env_latency_mean_s"]["reason"]
    assert set(d) >= {"emulator.prefill_mfu", "emulator.weight_sync_eff"}
    for value in v.values():
        assert value["fitted_on"] and "residual" in value


def test_prime_without_generation_time_falls_back_to_the_default(tmp_path, capsys):
    run = parsed_run(tmp_path, "prime", "prime_rl")
    out = tmp_path / "prime.yaml"
    setup = [s for s in VERL_SETUP if not s.startswith("experiment.placement")]
    assert (
        bench_main(["calibrate", str(run), "--out", str(out), *setup, "experiment.placement=disaggregated"])
        == 0
    )
    err = capsys.readouterr().err
    assert "default emulator.decode_bw_eff = 0.6: no gen_s column" in err
    doc = yaml.safe_load(out.read_text())
    assert "emulator.decode_bw_eff" not in doc["values"] and "emulator.trainer_mfu" in doc["values"]
    assert "default emulator.decode_step_floor_s = 0.0: no gen_s column" in err


def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "manifest.json").write_text(json.dumps({"framework": "verl", "mode": "native"}))
    assert bench_main(["calibrate", str(empty), *VERL_SETUP]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no trace/steps.parquet" in err[0]
    assert not (tmp_path / "empty.calibration.yaml").exists() and not (empty / "calibration.yaml").exists()

    run = parsed_run(tmp_path, "verl", "verl")
    assert bench_main(["calibrate", str(run)]) == 2  # the parse records no configuration
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not say model, hardware, experiment.placement" in err[0]
    assert "pass model=<conf/model name> hardware=<b200|gb300|h100_sxm|h20|h200>" in err[0]
    assert not (tmp_path / f"{run.name}.calibration.yaml").exists()


def test_calibration_file_errors_are_one_line():
    with pytest.raises(UsageError, match=r"calibration=/no/such.yaml: no such file"):
        compose(["calibration=/no/such.yaml"])


def test_calibration_refuses_keys_outside_emulator_and_workload(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("values:\n  hardware.hbm_tbps: {value: 9}\n")
    with pytest.raises(
        UsageError, match=r"values.hardware.hbm_tbps: expected an emulator.\* or workload.\* key"
    ):
        compose([f"calibration={bad}"])


# An emulated run with known inputs: calibrate must give them back (stated tolerances).
KNOWN = {
    "emulator.trainer_mfu": 0.2,
    "emulator.optimizer_s": 0.3,
    "emulator.decode_bw_eff": 0.3,
    "emulator.weight_sync_fixed_s": 0.5,
    "emulator.logprob_passes": 1,
    "workload.response_len_mean_frac": 0.3,
    "workload.response_len_drift": 1.0,
    "workload.response_len_sigma": 0.7,
    "workload.prompt_len_mean": 256,
}


def test_calibrate_recovers_the_inputs_of_an_emulated_run(tmp_path):
    run = tmp_path / "emulated"
    setup = [
        "experiment=smoke",
        "framework=verl",
        "model=qwen3_0_6b",
        "experiment.placement=colocated",
        "experiment.trainer_gpus=1",
        "experiment.generator_gpus=1",
        "workload.max_response_len=1024",
        "workload.max_prompt_len=1024",  # prompts ~256 stay below the cap: the fit takes their mean
        "workload.prompts_per_step=8",
        "workload.steps=15",
    ]
    assert bench_main(["emulate", *setup, *(f"{k}={v}" for k, v in KNOWN.items()), "--out", str(run)]) == 0
    assert bench_main(["calibrate", str(run)]) == 0  # an emulated run's manifest holds its whole setup
    got = {
        k: v["value"]
        for k, v in yaml.safe_load((tmp_path / f"{run.name}.calibration.yaml").read_text())["values"].items()
    }
    assert got["emulator.weight_sync_fixed_s"] == pytest.approx(0.5, abs=1e-3)
    assert got["emulator.logprob_passes"] == 1
    assert got["emulator.trainer_mfu"] == pytest.approx(0.2, rel=0.05)  # FLOPs at each step's mean length
    assert got["emulator.optimizer_s"] == pytest.approx(0.3, abs=0.05)
    assert got["emulator.decode_bw_eff"] == pytest.approx(0.3, rel=0.10)  # quantiles, not the drawn lengths
    assert got["workload.response_len_mean_frac"] == pytest.approx(0.3, rel=0.10)
    assert got["workload.response_len_drift"] == pytest.approx(1.0, abs=0.15)
    assert got["workload.response_len_sigma"] == pytest.approx(0.7, rel=0.15)  # capped lengths left out
    assert got["workload.prompt_len_mean"] == pytest.approx(256, rel=0.05)
    assert "emulator.decode_step_floor_s" not in got  # bandwidth-bound: the roofline explains gen_s


def test_calibrate_recovers_a_known_decode_floor(tmp_path):
    """A latency-bound emulated run (a 0.6B model, 16 ms a decode iteration against a sub-ms
    roofline): calibrate gives the floor back."""
    run = tmp_path / "floor"
    setup = [
        "experiment=smoke", "framework=verl", "model=qwen3_0_6b", "experiment.placement=colocated",
        "experiment.trainer_gpus=1", "experiment.generator_gpus=1", "workload.max_response_len=256",
        "workload.max_prompt_len=512", "workload.prompts_per_step=8", "workload.steps=10",
        "emulator.decode_step_floor_s=0.016",
    ]  # fmt: skip
    assert bench_main(["emulate", *setup, "--out", str(run)]) == 0
    assert bench_main(["calibrate", str(run)]) == 0
    got = yaml.safe_load((tmp_path / f"{run.name}.calibration.yaml").read_text())["values"]
    assert got["emulator.decode_step_floor_s"]["value"] == pytest.approx(0.016, rel=0.10)


def test_miles_handoff_is_measured_for_slime_only(tmp_path):
    """Miles (a slime fork) colocates Megatron and SGLang: its perf/train_wait_time holds the sleep and
    wake beyond the rollout. Calibrate measures that, minus the trainer state moved over PCIe, and
    names the framework it belongs to; a verl prediction from it keeps verl's own hand-off."""
    run = parsed_run(tmp_path, "miles", "slime")
    out = tmp_path / "miles.yaml"
    assert bench_main(["calibrate", str(run), "--out", str(out), *VERL_SETUP]) == 0
    v = yaml.safe_load(out.read_text())["values"]
    steps = pd.read_parquet(run / "trace" / "steps.parquet").iloc[1:]
    moved = 2 * 595_984_384 * 16 / 64e9  # Qwen3-0.6B params x 16 bytes, out and back at 64 GB/s
    assert v["emulator.handoff_measured_on"]["value"] == "slime"
    assert v["emulator.handoff_measured_s"]["value"] == pytest.approx(
        float((steps.wait_s - steps.gen_s).mean()) - moved, abs=1e-3
    )
    assert v["emulator.handoff_measured_s"]["value"] > 5.0  # most of Miles's 11.5-s step
    cfg = compose([*VERL_SETUP, "framework=verl", f"calibration={out}"])
    from bench.model.costmodel import handoff_s
    from bench.resolve import Resolved

    assert handoff_s(cfg, Resolved.from_config(cfg)) == 0.0
