"""Framework profiles (bench/model/fwprofile.py): `bench profile fit` gives back the known inputs of emulated
runs, the shipped profiles are what it fits on the opd-benchmark runs, and `bench predict` of another
framework takes that framework's costs from its profile, never from the source run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.__main__ import main as bench_main
from bench.config import CONF_DIR
from bench.reproduce.sources import fitted_on_target
from tests.calibrate.test_calibrate import parsed_run
from tests.calibrate.test_predict import SETUP
from tests.conftest import opd_benchmark

# a latency-bound verl job (0.6B model, 256-token answers): both the trainer and the decode floor fit
EMULATED = [
    "experiment=smoke", "framework=verl", "model=qwen3_0_6b", "experiment.placement=colocated",
    "experiment.trainer_gpus=1", "experiment.generator_gpus=1", "workload.max_response_len=256",
    "workload.max_prompt_len=512", "workload.steps=10",
    "emulator.trainer_mfu=0.2", "emulator.decode_step_floor_s=0.016",
]  # fmt: skip
TEACHER = "experiment.teachers=[{model:qwen3_0_6b,gpus:1,placement:dedicated,tp:1}]"
# what each opd-benchmark run lacks in its logs (conf/published/opd_predictions.yaml `given`)
GIVEN = {
    "verl": ("verl", ["hardware=h100_sxm", TEACHER]),
    "miles": ("slime", ["hardware=h100_sxm", "workload.max_prompt_len=3968", TEACHER]),
    "prime": (
        "prime_rl",
        [
            "hardware=h100_sxm", "model=qwen3_0_6b", "workload.max_response_len=128",
            "workload.max_prompt_len=1920", "framework.weight_sync.disaggregated=filesystem",
            "experiment.teachers=[{model:qwen3_0_6b,gpus:0,placement:with_generator,tp:1}]",
        ],
    ),
}  # fmt: skip


def shipped(framework: str) -> dict:
    return yaml.safe_load((CONF_DIR / "framework" / f"{framework}.yaml").read_text())["profile"]


def ingested(tmp: Path, run: str) -> Path:
    framework, given = GIVEN[run]
    out = tmp / run
    logs = opd_benchmark() / "results" / run
    assert (
        bench_main(["ingest", "--framework", framework, "--logs", str(logs), "--out", str(out), *given]) == 0
    )
    return out


def test_profile_pools_two_emulated_runs_and_gives_back_their_inputs(tmp_path, capsys):
    runs = []
    for prompts in (8, 16):  # two batch sizes: the same framework costs under two workloads
        runs.append(tmp_path / f"p{prompts}")
        assert (
            bench_main(["emulate", *EMULATED, f"workload.prompts_per_step={prompts}", "--out", str(runs[-1])])
            == 0
        )
    out = tmp_path / "verl-profile.yaml"
    assert bench_main(["profile", "fit", *map(str, runs), "framework=verl", "--out", str(out)]) == 0
    values = yaml.safe_load(out.read_text())["profile"]["values"]
    names = [str(r.resolve()) for r in runs]  # emulated runs: named by their directory
    for key, known in (("trainer_mfu", 0.2), ("decode_step_floor_s", 0.016)):
        v = values[key]
        assert v["value"] == pytest.approx(known, rel=0.10)
        assert v["fitted_on"] == names and list(v["per_run"]) == names
        each = list(v["per_run"].values())
        assert v["residual"] == pytest.approx((max(each) - min(each)) / v["value"], abs=1e-3)
        assert v["residual_unit"] == "relative spread across runs"
    assert "fitted trainer_mfu = " in capsys.readouterr().out


def test_profile_fit_refuses_a_run_of_another_framework(tmp_path, capsys):
    miles = ingested(tmp_path, "miles")
    capsys.readouterr()  # ingest's own warnings
    out = tmp_path / "profile.yaml"
    assert bench_main(["profile", "fit", str(miles), "framework=verl", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {miles}: a run of 'slime', not 'verl'; a profile pools runs of one framework: "
        "pass only verl runs, or framework=slime"
    ]
    assert not out.exists()
    assert bench_main(["profile", "fit", str(miles), "--out", str(out)]) == 2
    assert "framework=F: give exactly one of" in capsys.readouterr().err and not out.exists()
    out.write_text("mine\n")  # an existing file is never overwritten
    assert bench_main(["profile", "fit", str(miles), "framework=slime", "--out", str(out)]) == 2
    assert "already exists (a file)" in capsys.readouterr().err and out.read_text() == "mine\n"


@pytest.mark.parametrize("run", ["verl", "miles", "prime"])
def test_shipped_profiles_are_the_fit_on_the_opd_benchmark_runs(tmp_path, run):
    framework, _ = GIVEN[run]
    out = tmp_path / "profile.yaml"
    assert (
        bench_main(
            ["profile", "fit", str(ingested(tmp_path, run)), f"framework={framework}", "--out", str(out)]
        )
        == 0
    )
    fitted = yaml.safe_load(out.read_text())["profile"]
    ours = shipped(framework)
    assert ours["values"] == fitted["values"] and ours["not_fitted"] == fitted["not_fitted"]
    assert all(
        v["fitted_on"] == [f"fixtures/opd-benchmark/opd-frameworks/results/{run}"]
        for v in ours["values"].values()
    )


def test_shipped_values_the_2xH100_campaign_measured():
    """The trainer's efficiency and the engine's per-iteration floor of each framework on the same
    model and GPU (docs/reproduce.md): verl 0.101 / 16 ms (vLLM), Miles 0.078 / 6 ms (SGLang),
    Prime-RL 0.026 with no generation time logged."""
    verl, slime, prime = shipped("verl")["values"], shipped("slime")["values"], shipped("prime_rl")["values"]
    assert [p["trainer_mfu"]["value"] for p in (verl, slime, prime)] == [0.10138, 0.07831, 0.02623]
    assert (verl["decode_step_floor_s"]["value"], slime["decode_step_floor_s"]["value"]) == (
        0.016092,
        0.005913,
    )
    assert "decode_step_floor_s" not in prime and "handoff_measured_s" in slime


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory) -> Path:
    return parsed_run(tmp_path_factory.mktemp("prof"), "verl", "verl")


def test_a_verl_to_slime_prediction_takes_slimes_costs_and_verls_shape(verl_run, tmp_path):
    out = tmp_path / "slime"
    assert bench_main(["predict", str(verl_run), "framework=slime", *SETUP, "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    em, p = m["config"]["emulator"], m["predicted_from"]
    cal = {k: v["value"] for k, v in yaml.safe_load((out / "calibration.yaml").read_text())["values"].items()}
    slime = shipped("slime")["values"]
    assert em["trainer_mfu"] == slime["trainer_mfu"]["value"] == 0.07831 != cal["emulator.trainer_mfu"]
    assert em["decode_step_floor_s"] == 0.005913 and em["handoff_measured_s"] == 8.7748
    assert em["handoff_measured_on"] == "slime"
    assert m["config"]["workload"]["response_len_drift"] == cal["workload.response_len_drift"]
    src = p["inputs_from"]
    assert src["run"] == sorted(k for k in cal if k.startswith("workload."))
    assert src["left_out"] == sorted(k for k in cal if k.startswith("emulator."))
    assert src["profile"]["framework"] == "slime"
    assert src["profile"]["inputs"]["emulator.trainer_mfu"] == {
        "value": 0.07831,
        "fitted_on": ["fixtures/opd-benchmark/opd-frameworks/results/miles"],
    }


def test_a_replay_keeps_the_runs_own_costs(verl_run, tmp_path):
    out = tmp_path / "replay"
    assert bench_main(["predict", str(verl_run), "framework=verl", *SETUP, "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    cal = {k: v["value"] for k, v in yaml.safe_load((out / "calibration.yaml").read_text())["values"].items()}
    assert m["config"]["emulator"]["trainer_mfu"] == cal["emulator.trainer_mfu"]
    assert m["predicted_from"]["inputs_from"]["profile"] is None
    assert m["predicted_from"]["inputs_from"]["run"] == sorted(cal)


def test_a_prediction_into_prime_rl_names_the_inputs_its_profile_lacks(verl_run, tmp_path):
    out = tmp_path / "prime"
    given = [*SETUP, "experiment.placement=disaggregated", "framework=prime_rl"]
    assert bench_main(["predict", str(verl_run), *given, "--out", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["config"]["emulator"]["trainer_mfu"] == 0.02623
    assert m["config"]["emulator"]["decode_step_floor_s"] == 0.0  # no fit: the documented default, said so
    assert (
        "emulator.decode_step_floor_s = 0.0 (default: prime_rl's profile has no fit: no gen_s column "
        "(generation time per step is not logged))" in m["predicted_from"]["chosen"]
    )


def test_a_prediction_whose_target_profile_was_fitted_on_the_target_run_is_calibrated(verl_run, tmp_path):
    out = tmp_path / "slime"
    assert bench_main(["predict", str(verl_run), "framework=slime", *SETUP, "--out", str(out)]) == 0
    p = json.loads((out / "manifest.json").read_text())["predicted_from"]
    miles = ingested(tmp_path, "miles")
    assert fitted_on_target(p, miles).startswith(
        "slime's profile fitted emulator.trainer_mfu, emulator.optimizer_s, emulator.logprob_passes, "
        "emulator.decode_step_floor_s, emulator.weight_sync_fixed_s, emulator.handoff_measured_s on the "
        "target run fixtures/opd-benchmark/opd-frameworks/results/miles"
    )
    assert fitted_on_target(p, ingested(tmp_path, "prime")) == ""  # another run: a prediction
