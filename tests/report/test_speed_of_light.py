"""Speed of light per phase (bench/speed_of_light.py, docs/metrics.md "Speed of light").

Specification: for an emulated smoke run on hardware=h200 with the shipped profile
(conf/hardware/profiles/h200.yaml), generation's hardware seconds are the batched prefill plus the
sum of hwprofile.decode_s over the step's decode iterations (the mean response length, contexts
growing from the mean prompt, batch = the busiest engine's share of the step's sequences), the
update's are hwprofile.eager_s "train" of the step's training FLOPs plus hwprofile.optimizer_s, and
every ratio is measured / hardware; a colocated run's ipc sync is a device copy; NCCL between GPUs
is "not measured". A run without a profile gets one line naming its hardware and how to make one,
never a number; the report shows both; `bench sol` prints the sentences and refuses a profile of
another GPU in one line.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import flops
from bench.model import hwprofile, hwprofile_conf
from bench.model.costmodel import arch_of
from bench.report import build
from bench.speed_of_light import of_run, sentences
from bench.trace import RunPaths, read_steps
from tests.conftest import REPO

H200 = REPO / "conf" / "hardware" / "profiles" / "h200.yaml"
WITH_PROFILE = ["hardware=h200", "hardware.profile=profiles/h200.yaml"]


def emulate(out: Path, *overrides: str) -> Path:
    from bench.emulator.run import main

    assert main(["experiment=smoke", "workload.steps=6", *overrides, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """verl disaggregated (NCCL sync), colocated (ipc sync) and offloading its optimizer on an H200
    with its profile, and verl on an H200 without one (conf/hardware/h200.yaml says profile: null)."""
    root = tmp_path_factory.mktemp("sol") / "results"
    return {
        "disaggregated": emulate(root / "verl-profile", "framework=verl", *WITH_PROFILE),
        "colocated": emulate(
            root / "verl-colocated", "framework=verl", "experiment.placement=colocated", *WITH_PROFILE
        ),
        "no_profile": emulate(root / "verl-datasheet", "framework=verl", "hardware=h200"),
        "offload": emulate(
            root / "verl-offload",
            "framework=verl",
            "experiment.trainer.offload_optimizer=true",
            *WITH_PROFILE,
        ),
    }


def result(run: Path, given: Path | None = None) -> dict:
    paths = RunPaths(run)
    return of_run(paths, json.loads(paths.manifest.read_text()), json.loads(paths.metrics.read_text()), given)


def steady(run: Path):
    """The steady steps (metrics.json window) and the run's manifest."""
    metrics = json.loads((run / "metrics.json").read_text())
    w = metrics["window"]
    steps = read_steps(run / "trace" / "steps.parquet")
    steps = steps[(steps["step"] >= w["first_step"]) & (steps["step"] <= w["last_step"])]
    return steps, json.loads((run / "manifest.json").read_text()), metrics


def phase(res: dict, name: str) -> dict:
    return next(r for r in res["phases"] if r["name"] == name)


def test_generation_is_prefill_plus_the_sum_of_decode_iterations(runs):
    run = runs["disaggregated"]
    steps, manifest, _ = steady(run)
    profile = hwprofile_conf.load_profile(H200)
    arch = arch_of(SimpleNamespace(**manifest["config"]["model"]))
    engines = manifest["resolved"]["engines"]  # 8 engines of 1 GPU (smoke: generator tp 1)
    samples = steps["samples"].mean()
    batch = math.ceil(samples / engines)
    first = round(steps["prompt_tokens"].mean() / samples)
    iterations = round(steps["response_tokens"].mean() / samples)
    decode = sum(hwprofile.decode_s(profile, arch, batch, first + i) for i in range(iterations))
    prefill = hwprofile.prefill_s(profile, arch, batch, first)

    gen = phase(result(run), "generation")
    assert gen["hardware_s"] == pytest.approx(prefill + decode, rel=1e-12)
    assert gen["measured_s"] == pytest.approx(steps["gen_s"].mean(), rel=1e-12)
    assert gen["ratio"] == gen["measured_s"] / gen["hardware_s"]
    assert f"batch {batch} (the busiest engine)" in gen["basis"]
    assert (
        f"{iterations} decode iterations (the mean response) at contexts {first}..{first + iterations - 1}"
        in gen["basis"]
    )


def training_and_adamw_s(run: Path) -> float:
    """The steady step's training FLOPs at the profile's train rate on the 8 trainer GPUs, plus AdamW of
    1/8 of the parameters (s)."""
    steps, manifest, _ = steady(run)
    profile = hwprofile_conf.load_profile(H200)
    model = SimpleNamespace(**manifest["config"]["model"])
    samples = steps["samples"].mean()
    per_seq = (steps["prompt_tokens"].mean() + steps["response_tokens"].mean()) / samples
    f = flops.flops_of_sequences(model, [per_seq] * round(samples))
    return hwprofile.eager_s(profile, arch_of(model), "train", f, 1, 8) + hwprofile.optimizer_s(
        profile, flops.param_counts(model)["total"] / 8
    )


def test_update_is_training_flops_at_the_train_rate_plus_adamw(runs):
    run = runs["disaggregated"]
    _, _, metrics = steady(run)
    update = phase(result(run), "update")
    assert update["hardware_s"] == pytest.approx(training_and_adamw_s(run), rel=1e-12)
    assert update["measured_s"] == metrics["phases"]["parts"]["compute_s"]["s_per_step"]
    assert update["ratio"] == update["measured_s"] / update["hardware_s"]


def test_an_offloading_run_adds_its_offloaded_state_over_the_pinned_host_copies(runs):
    """FSDP over 8 GPUs, AdamW state offloaded: 12 bytes a parameter / 8 per GPU, loaded at the probe's
    pinned host-to-device rate and put back at its device-to-host rate, on top of the update above."""
    run = runs["offload"]
    model = SimpleNamespace(**steady(run)[1]["config"]["model"])
    moved = flops.param_counts(model)["total"] * 12 / 8
    links = hwprofile_conf.load_profile(H200)["measured"]
    transfer = moved / links["host_h2d_pinned_Bps"] + moved / links["host_d2h_pinned_Bps"]
    update = phase(result(run), "update")
    assert transfer > 0
    assert update["hardware_s"] == pytest.approx(training_and_adamw_s(run) + transfer, rel=1e-12)
    assert f"+ {moved / 1e9:.3g} GB of offloaded trainer state per GPU" in update["basis"]
    assert "offloaded" not in phase(result(runs["disaggregated"]), "update")["basis"]


def test_sync_is_a_device_copy_colocated_and_not_measured_over_nccl(runs):
    profile = hwprofile_conf.load_profile(H200)
    _, manifest, _ = steady(runs["colocated"])
    model_bytes = flops.param_counts(SimpleNamespace(**manifest["config"]["model"]))["total"] * 2.0
    ipc = phase(result(runs["colocated"]), "weight sync")
    assert ipc["hardware_s"] == pytest.approx(
        2 * model_bytes / profile["measured"]["device_copy_Bps"], rel=1e-12
    )
    assert "verl times its colocated hand-off inside this phase" in ipc["basis"]

    nccl = phase(result(runs["disaggregated"]), "weight sync")
    assert (nccl["hardware_s"], nccl["ratio"]) == (None, None)
    assert (
        nccl["reason"] == "not measured: nccl between GPUs (16.4 GB); the profile holds no link between GPUs"
    )


def test_colocated_generation_is_the_wait_phase(runs):
    _, _, metrics = steady(runs["colocated"])
    res = result(runs["colocated"])
    gen = phase(res, "generation")
    assert (gen["phase"], gen["measured_s"]) == ("wait_s", metrics["phases"]["parts"]["wait_s"]["s_per_step"])
    assert [r["phase"] for r in res["phases"]].count("wait_s") == 1


def test_a_run_without_a_profile_gets_one_line_and_no_number(runs):
    res = result(runs["no_profile"])
    assert res == {
        "missing": "no hardware profile for h200 (conf/hardware/h200.yaml profile: null): "
        "`bench probe` + `bench probe fit` make one (docs/probe.md)"
    }
    assert sentences(res) == [res["missing"]]
    given = result(runs["no_profile"], H200)  # the same run with the shipped profile given
    assert phase(given, "generation")["hardware_s"] > 0


def test_report_shows_the_section_and_the_no_profile_line(runs, tmp_path):
    out = tmp_path / "report"
    build([runs["disaggregated"].parent], out)
    html = (out / "index.html").read_text()
    assert (
        "Speed of light: each phase next to what the hardware allows (NVIDIA H200 profile h200.yaml" in html
    )
    assert re.search(
        r"<li>generation \S+ s a step; 8 x NVIDIA H200 do that work in \S+ s: \d+\.\dx</li>", html
    )
    assert "Speed of light: no hardware profile for h200 (conf/hardware/h200.yaml profile: null)" in html
    md = (out / "summary.md").read_text()
    assert re.search(r"  - update \S+ s a step; 8 x NVIDIA H200 do that work in \S+ s: \d+\.\dx\n", md)


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_cli_prints_a_sentence_per_phase_and_json(runs):
    p = bench("sol", str(runs["disaggregated"]))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert re.fullmatch(r"generation \S+ s a step; 8 x NVIDIA H200 do that work in \S+ s: \d+\.\dx", lines[0])
    assert lines == sentences(result(runs["disaggregated"]))
    data = json.loads(bench("sol", str(runs["disaggregated"]), "--json").stdout)
    assert {r["phase"] for r in data["phases"]} >= {"gen_s", "compute_s", "logprob_s", "sync_s"}


def test_cli_refuses_a_profile_of_another_gpu_in_one_line(opd_results, tmp_path):
    """The 2 x H100 campaign's verl run ingested as a user would, then given the H200's profile."""
    from bench.ingest import main as ingest

    run = tmp_path / "verl"
    assert (
        ingest(
            [
                "--framework",
                "verl",
                "--logs",
                str(opd_results / "verl"),
                "--out",
                str(run),
                "hardware=h100_sxm",
            ]
        )
        == 0
    )
    p = bench("sol", str(run))
    assert (p.returncode, p.stdout.strip()) == (
        0,
        "no hardware profile for h100_sxm (conf/hardware/h100_sxm.yaml profile: null): "
        "`bench probe` + `bench probe fit` make one (docs/probe.md)",
    )
    p = bench("sol", str(run), "--profile", str(H200))
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (
        f"error: --profile {H200}: measured on NVIDIA H200 but hardware.name=H100-SXM; expected a profile "
        "measured on a H100-SXM (`bench probe` on one, then `bench probe fit`) or the hardware option of the "
        "NVIDIA H200 GPU\n"
    )
    p = bench("sol", str(run), "--profile", str(tmp_path / "none.yaml"))
    assert p.stderr == (
        f"error: --profile {tmp_path / 'none.yaml'}: no such file; expected a PROFILE.yaml written by `bench probe fit`\n"
    )
