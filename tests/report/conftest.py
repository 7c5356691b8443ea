"""Synthetic run directories (bench.report.synthetic, stamped emulated/synthetic) for report tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report import build
from bench.report.synthetic import make_run

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'

BASE = {
    "wall_s": 1000.0,
    "trajectories_per_s": 2.0,
    "production_samples_per_s": 1.8,
    "consumption_samples_per_s": 2.5,
    "trainer_idle_frac": 0.3,
    "mfu": 0.105,
    "mfu_native": None,
    "oversampling_waste": 0.1,
    "zero_advantage_frac": 0.2,
    "staleness_mean": 1.1,
    "staleness_max": 3.0,
    "trained_tokens": 1.0e7,
    "generated_tokens": 1.2e7,
    "gpu_hours": 4.0,
    "cost_per_mtok_usd": 0.5,
    "tinker_equiv_per_mtok_usd": 1.5,
    "window": {"first_step": 3, "last_step": 40, "rule": "skip 2 warm-up steps"},
    "checks": [],
}


def metrics(**over):
    """BASE metrics with overrides; a None value gets a reason in `missing`."""
    m = BASE | over
    m["missing"] = {k: f"reason for {k}" for k, v in m.items() if v is None}
    m["missing"]["mfu_native"] = "emulated runs have no native MFU"
    return m


@pytest.fixture(scope="session")
def evil() -> str:
    """Markup a hostile log line could carry."""
    return EVIL


@pytest.fixture(scope="session")
def three_runs(tmp_path_factory) -> Path:
    """verl (emulated), slime (emulated, MFU missing, an evil parser warning), prime_rl (native,
    GPU telemetry) and a failed verl run without metrics.json."""
    root = tmp_path_factory.mktemp("results") / "synthetic"
    make_run(root / "verl-0", "verl", metrics=metrics(trajectories_per_s=3.0), seed=1)
    make_run(
        root / "slime-0",
        "slime",
        metrics=metrics(mfu=None, staleness_mean=0.4, checks=[f"idle identity violated {EVIL}"]),
        seed=2,
        warnings=[f"unparsed line: {EVIL}"],
    )
    make_run(
        root / "prime_rl-0",
        "prime_rl",
        mode="native",
        metrics=metrics(trainer_idle_frac=0.25, mfu_native=0.21, cost_per_mtok_usd=0.4),
        gpu=True,
        seed=3,
    )
    (root / "slime-0" / "launch" / "command.json").write_text(json.dumps({"argv": ["python", EVIL]}))
    make_run(
        root / "verl-failed", "verl", status="failed", metrics=None, reason=f"OOM at step 3 {EVIL}", steps=3
    )
    return root


@pytest.fixture(scope="session")
def three_report(three_runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    build([three_runs], out)
    return out


@pytest.fixture(scope="session")
def sweep_runs(tmp_path_factory) -> Path:
    """Two frameworks x five generator GPU counts; production catches up with consumption at 24."""
    root = tmp_path_factory.mktemp("sweep") / "sweep"
    for fw in ("verl", "slime"):
        for i, gpus in enumerate((8, 16, 24, 32, 40)):
            prod = min(2.5, 0.8 + 0.75 * i)  # 0.8, 1.55, 2.3, 2.5, 2.5 samples/s
            cfg = {"experiment": {"name": "sweep", "trainer_gpus": 8, "generator_gpus": gpus}}
            make_run(
                root / f"{fw}-g{gpus}",
                fw,
                steps=20,
                samples_per_step=16,
                rollouts=False,
                config=cfg,
                seed=i,
                metrics=metrics(
                    production_samples_per_s=prod,
                    trainer_idle_frac=1 - prod / 2.5,
                    cost_per_mtok_usd=0.3 + 0.02 * gpus,
                    staleness_mean=0.1 * i,
                ),
            )
    return root


OPD_DIRS = {"verl": "verl", "slime": "miles", "prime_rl": "prime"}  # slime's fork Miles ran the opd run


@pytest.fixture(scope="session")
def smoke_report(tmp_path_factory) -> Path:
    from bench.emulator.run import main as emulate

    root = tmp_path_factory.mktemp("smoke")
    for fw in OPD_DIRS:
        assert emulate(["experiment=smoke", f"framework={fw}", "--out", str(root / "results" / fw)]) == 0
    build([root / "results"], root / "report")
    return root


@pytest.fixture(scope="session")
def opd_report(tmp_path_factory, opd_results) -> Path:
    from bench.ingest import main as ingest

    root = tmp_path_factory.mktemp("opd")
    for fw, d in OPD_DIRS.items():
        rc = ingest(["--framework", fw, "--logs", str(opd_results / d), "--out", str(root / "results" / fw)])
        assert rc == 0, f"ingest {fw} failed"
    build([root / "results"], root / "report")
    return root


@pytest.fixture(scope="session")
def sweep_report(sweep_runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep_report")
    build([sweep_runs], out)
    return out


# The 2 x H100 campaign's hardware is not in its logs (gpu.csv has no `name` column; the fixture's
# README says 2 x H100 80GB) and prime-rl prints no architecture: both are given, and marked so.
CAMPAIGN_GIVEN = {"verl": ["hardware=h100_sxm"], "slime": ["hardware=h100_sxm"],
                  "prime_rl": ["hardware=h100_sxm", "model=qwen3_0_6b"]}  # fmt: skip


@pytest.fixture(scope="session")
def campaign_report(tmp_path_factory, opd_results) -> Path:
    """The 2 x H100 campaign ingested with its hardware (and prime-rl's model) given: MFU is computed."""
    from bench.ingest import main as ingest

    root = tmp_path_factory.mktemp("campaign")
    for fw, d in OPD_DIRS.items():
        out = str(root / "results" / fw)
        assert (
            ingest(["--framework", fw, "--logs", str(opd_results / d), "--out", out, *CAMPAIGN_GIVEN[fw]])
            == 0
        )
    build([root / "results"], root / "report")
    return root
