"""`bench compare`: a run against its own copy changes nothing; a run whose one phase grew is flagged in
that phase and only it; runs of different models are refused; `--baseline` gates on regressions."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.trace import RunPaths, read_steps, write_steps

REPO = Path(__file__).resolve().parents[1]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two emulated smoke runs on verl (seeds 0 and 1) and one of another model."""
    root = tmp_path_factory.mktemp("compare")
    out = {}
    for name, extra in {"a": [], "seed1": ["experiment.seed=1"], "small": ["model=qwen3_0_6b"]}.items():
        r = bench("emulate", "experiment=smoke", "framework=verl", *extra, "--out", str(root / name))
        assert r.returncode == 0, r.stderr
        out[name] = root / name
    return out


def grown(src: Path, dst: Path, phase: str, seconds: float) -> Path:
    """A copy of src whose every step spent `seconds` more in `phase` (and so in the step)."""
    shutil.copytree(src, dst)
    steps = read_steps(RunPaths(dst).steps)
    steps[phase] += seconds
    steps["step_s"] += seconds
    write_steps(RunPaths(dst).steps, steps)
    return dst


def compare_json(*args: str) -> dict:
    r = bench("compare", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_run_against_its_own_copy_changes_nothing(runs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(runs["a"], copy)
    result = compare_json(str(runs["a"]), str(copy))
    rows = result["phases"] + result["figures"]
    assert {r.get("phase") or r.get("figure") for r in rows} >= {
        "step_s",
        "wait_s",
        "compute_s",
        "trainer_idle_frac",
        "mfu",
    }
    assert all(r["delta"] == 0 and r["beyond_noise"] is False for r in rows if r["a"] is not None)
    assert result["not_comparable"] == []


def test_another_seed_is_within_noise(runs):
    """Seeds 0 and 1 of one emulated workload differ by a fraction of a percent: noise, not change."""
    result = compare_json(str(runs["a"]), str(runs["seed1"]))
    step = next(f for f in result["figures"] if f["figure"] == "step_s")
    assert step["delta"] != 0 and step["beyond_noise"] is False
    assert step["noise"]["method"].startswith("bootstrap of steady steps")


def test_one_grown_phase_is_flagged_and_only_it(runs, tmp_path):
    slow = grown(runs["a"], tmp_path / "slow", "sync_s", 20.0)
    result = compare_json(str(runs["a"]), str(slow))
    flagged = [p["phase"] for p in result["phases"] if p["beyond_noise"]]
    assert flagged == ["sync_s"]
    sync = next(p for p in result["phases"] if p["phase"] == "sync_s")
    assert sync["delta"] == pytest.approx(20.0)
    step = next(f for f in result["figures"] if f["figure"] == "step_s")
    assert step["beyond_noise"] and step["regressed"]


def test_different_models_are_refused_unless_forced(runs):
    r = bench("compare", str(runs["a"]), str(runs["small"]))
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"error: {runs['a']} and {runs['small']} are not comparable (model: Qwen/Qwen3-8B vs "
        "Qwen/Qwen3-0.6B); pass --force to compare anyway"
    )
    forced = compare_json(str(runs["a"]), str(runs["small"]), "--force")
    assert forced["not_comparable"] == ["model: Qwen/Qwen3-8B vs Qwen/Qwen3-0.6B"]


def test_baseline_gates_on_a_regression(runs, tmp_path):
    slow = grown(runs["a"], tmp_path / "slow", "compute_s", 30.0)
    same = tmp_path / "same"
    shutil.copytree(runs["a"], same)
    assert bench("compare", "--baseline", str(runs["a"]), str(same)).returncode == 0
    r = bench("compare", "--baseline", str(runs["a"]), str(slow))
    assert r.returncode == 1
    assert "regressed beyond noise" in r.stderr and "step_s" in r.stderr


def test_out_writes_a_page_with_both_distributions(runs, tmp_path):
    out = tmp_path / "page"
    assert bench("compare", str(runs["a"]), str(runs["seed1"]), "--out", str(out)).returncode == 0
    assert (out / "index.md").read_text().startswith("# Compare: A = ")
    assert "<svg" in (out / "step_time.svg").read_text()
    r = bench("compare", str(runs["a"]), str(runs["seed1"]), "--out", str(out))
    assert r.returncode == 2 and "already exists" in r.stderr


@pytest.fixture(scope="module")
def seed_sets(runs, tmp_path_factory) -> dict[str, Path]:
    """Three seeds of the smoke workload on verl, and the same three with 20 s more weight sync a step."""
    root = tmp_path_factory.mktemp("seeds")
    base, slow = root / "base", root / "slow"
    base.mkdir()
    slow.mkdir()
    for seed in (0, 1, 2):
        out = base / f"seed{seed}"
        r = bench(
            "emulate", "experiment=smoke", "framework=verl", f"experiment.seed={seed}", "--out", str(out)
        )
        assert r.returncode == 0, r.stderr
        grown(out, slow / f"seed{seed}", "sync_s", 20.0)
    return {"base": base, "slow": slow}


def test_seed_sets_are_compared_by_their_seed_bands(seed_sets):
    result = compare_json(str(seed_sets["base"]), str(seed_sets["slow"]))
    flagged = [p["phase"] for p in result["phases"] if p["beyond_noise"]]
    assert flagged == ["sync_s"]
    sync = next(p for p in result["phases"] if p["phase"] == "sync_s")
    assert sync["noise"]["method"].startswith("seed bands (A 3 seed(s), B 3 seed(s))")
    assert sync["b"] - sync["a"] == pytest.approx(20.0)
    wait = next(p for p in result["phases"] if p["phase"] == "wait_s")
    lo, hi = wait["noise"]["a_band"]
    assert lo < hi and wait["beyond_noise"] is False  # seeds differ; the same seeds do not move


def test_a_folder_of_different_configurations_is_not_a_seed_set(runs, tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copytree(runs["a"], mixed / "a")
    shutil.copytree(runs["small"], mixed / "small")
    r = bench("compare", str(mixed), str(runs["a"]))
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: {mixed}: not one configuration's seeds (a and small differ: model: ")
