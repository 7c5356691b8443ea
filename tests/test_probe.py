"""`bench probe`: the measurement end to end on this machine's CPU (tiny shapes, the same code a GPU
node runs), and `probe fit` / `probe check` on a real H200's measurements: fitted on two model sizes,
the third is predicted within the issue's targets (decode 10% median and 25% worst, prefill and train
15% median)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.model import hwprofile

REPO = Path(__file__).resolve().parents[1]
SIZES = ["qwen3_0_6b", "qwen3_1_7b", "qwen3_4b"]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True)


@pytest.fixture(scope="module")
def h200(h200_probe: Path) -> list[tuple[str, dict]]:
    return [
        (name, hwprofile.load_probe(h200_probe / name))
        for name in ("probe-sizes.json", "probe-primitives.json")
    ]


def test_probe_runs_end_to_end_on_the_cpu(tmp_path):
    try:
        import torch  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("PyTorch is not installed: CI installs '.[probe]'")
        pytest.skip("PyTorch is not installed: pip install -e '.[probe]'")
    out = tmp_path / "probe"
    r = bench("probe", "--out", str(out))
    assert r.returncode == 0, r.stderr
    probe = json.loads((out / "probe.json").read_text())
    sections = probe["sections"]
    assert probe["device"] == "cpu" and sections["env"]["name"] == "cpu"
    assert set(sections) == {
        "env",
        "matmul",
        "hbm",
        "host",
        "alloc",
        "filesystem",
        "decode",
        "prefill",
        "train",
        "nccl",
        "telemetry",
    }
    assert not [name for name, s in sections.items() if "error" in s]
    assert sections["host"]["skipped"] == "no GPU: host <-> device copies need one"
    assert sections["nccl"]["skipped"] == "0 GPU(s): NCCL needs two or more"
    # the grids of the CPU: three model widths, each over the same batch x context points
    assert set(sections["decode"]) - {"section_wall_s"} == set(SIZES)
    assert [(r["batch"], r["context"]) for r in sections["decode"]["qwen3_4b"]["rows"]] == [
        (1, 64),
        (4, 64),
        (16, 128),
    ]
    assert sections["train"]["qwen3_0_6b"]["rows"][-1]["optimizer_step_only"] is True
    # the file fits and checks (CPU timings on a shared machine are noise: the form is what is tested)
    assert bench("probe", "fit", str(out / "probe.json"), "--out", str(tmp_path / "cpu.yaml")).returncode == 0
    check = bench(
        "probe", "check", str(out / "probe.json"), "--profile", str(tmp_path / "cpu.yaml"), "--json"
    )
    assert len(json.loads(check.stdout)["rows"]) == 9 + 6 + 6
    again = bench("probe", "--out", str(out))
    assert (
        again.returncode == 2
        and again.stderr == f"error: --out {out}: already holds probe.json; choose a new directory\n"
    )


# Every proper subset of the three sizes: fitted on it, checked on the others (issue 22 §2's target:
# decode within 10% median and 25% worst, prefill and train within 15% median).
SUBSETS = [list(c) for k in (1, 2) for c in itertools.combinations(SIZES, k)]


@pytest.mark.parametrize("fit_on", SUBSETS, ids=["+".join(c) for c in SUBSETS])
def test_fitted_on_some_sizes_the_others_are_predicted(h200, fit_on):
    profile = hwprofile.fit(h200, fit_on)
    errors: dict[str, list[float]] = {}
    for name, probe in h200:
        for row in hwprofile.check(probe, profile, name)["rows"]:
            if row["model"] not in fit_on:
                errors.setdefault(row["section"], []).append(abs(row["predicted_s"] / row["measured_s"] - 1))
    median = {s: sorted(e)[len(e) // 2] for s, e in errors.items()}
    assert set(errors) == {"decode", "prefill", "train"}
    assert median["decode"] <= 0.10 and max(errors["decode"]) <= 0.25
    assert median["prefill"] <= 0.15
    assert median["train"] <= 0.15


def test_one_model_reads_the_weight_stream_at_the_copy_bandwidth(h200):
    """One size's grid cannot separate launches from weight bytes (both constant over it): the
    weight stream is read from the probe, the launch term fitted; two sizes fit both."""
    one = hwprofile.fit(h200, ["qwen3_1_7b"])["decode"]
    copy = hwprofile.measured_links(h200[1][1])["device_copy_Bps"]
    assert one["weight_Bps"]["value"] == copy and "read" in one["weight_Bps"]
    assert one["launch_s_per_kernel"]["value"] > 0
    two = hwprofile.fit(h200, ["qwen3_1_7b", "qwen3_4b"])["decode"]
    assert "fitted_on" in two["weight_Bps"] and 0.85 < two["weight_Bps"]["value"] / copy < 1.15


def test_links_are_read_from_the_probe_not_fitted(h200):
    measured = hwprofile.measured_links(h200[1][1])
    assert measured["gemm_peak_flops"] == pytest.approx(802.857e12, rel=1e-4)  # 8192x12288x4096
    assert measured["device_copy_Bps"] == pytest.approx(4.2448e12, rel=1e-4)
    assert measured["host_h2d_pinned_Bps"] == pytest.approx(55.41e9, rel=1e-3)
    # read_cold_s returns before reading (mmap): the read bandwidth is the copy to the GPU's
    assert measured["filesystem_read_Bps"] == pytest.approx(
        8589934592 / ((5.034038530999993 + 4.621437967000006) / 2)
    )
    assert measured["device"] == "NVIDIA H200"


def test_the_optimizer_step_is_predicted_from_the_copy_bandwidth(h200):
    """Nothing is fitted on it: AdamW's 16 B/param read and written at the measured device copy rate."""
    profile = {"measured": hwprofile.measured_links(h200[1][1])}
    train = h200[1][1]["sections"]["train"]["qwen3_0_6b"]
    measured = next(r for r in train["rows"] if r.get("optimizer_step_only"))["median_s"]
    assert hwprofile.optimizer_s(profile, train["params"]) == pytest.approx(measured, rel=0.10)


def test_check_json_has_the_documented_shape(h200_probe, tmp_path):
    profile = tmp_path / "h200.yaml"
    sizes = h200_probe / "probe-sizes.json"
    fit = bench(
        "probe",
        "fit",
        str(sizes),
        str(h200_probe / "probe-primitives.json"),
        "--out",
        str(profile),
        "--models",
        "qwen3_0_6b,qwen3_4b",
    )
    assert fit.returncode == 0, fit.stderr
    result = json.loads(bench("probe", "check", str(sizes), "--profile", str(profile), "--json").stdout)
    assert set(result) >= {"rows", "median_abs_error", "max_abs_error"}
    first = result["rows"][0]
    assert set(first) == {"section", "model", "batch", "context", "measured_s", "predicted_s"}
    assert {r["model"] for r in result["rows"]} == set(SIZES)
    assert bench("probe", "fit", str(sizes), "--out", str(profile)).returncode == 2  # never overwritten


def test_a_file_that_is_not_a_probe_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    r = bench("probe", "fit", str(bad), "--out", str(tmp_path / "p.yaml"))
    assert r.returncode == 2
    assert r.stderr == f"error: {bad}: no 'sections' object; expected a probe.json written by `bench probe`\n"


def test_eager_work_overlaps_launches_and_gemms_by_an_exponent_fitted_on_the_fitted_rows(h200):
    assert hwprofile.overlap(1.0, 1.0, 1.0) == 2.0  # p = 1: launches and GEMMs add
    assert hwprofile.overlap(3.0, 4.0, None) == 4.0  # a profile from before the exponent: the longer
    assert 4.0 < hwprofile.overlap(3.0, 4.0, 4.0) < 7.0
    dense = hwprofile.fit(h200, ["qwen3_1_7b"])["dense"]["overlap_p"]
    assert dense["value"] in hwprofile.OVERLAP_P_GRID
    assert dense["fitted_on"] == ["probe-sizes.json:prefill.qwen3_1_7b", "probe-sizes.json:train.qwen3_1_7b"]
