"""Run directories -> summary DataFrame: schema, values, missing reasons, sweep detection."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.report.load import SUMMARY_SCHEMA, ReportError, check_schema, discover, load


def test_summary_has_declared_schema_and_one_row_per_run(three_runs):
    runs, df = load([three_runs])
    assert list(df.columns) == list(SUMMARY_SCHEMA)
    assert len(df) == len(runs) == 4
    assert list(df["framework"]) == ["prime_rl", "slime", "verl", "verl"]
    assert list(df["mode"]) == ["native", "emulated", "emulated", "emulated"]
    assert [r.run_id for r in runs] == list(df["run_id"])


def test_values_come_from_metrics_json_and_ratios_are_derived(three_runs):
    _, df = load([three_runs])
    verl = df[df["run_id"] == "verl-0"].iloc[0]
    assert verl["trajectories_per_s"] == 3.0
    assert verl["prod_cons_ratio"] == pytest.approx(1.8 / 2.5)
    assert verl["tinker_ratio"] == pytest.approx(0.5 / 1.5)  # own cost / Tinker, as bench.metrics


def test_failed_run_without_metrics_is_null_with_the_reason_never_zero(three_runs):
    runs, df = load([three_runs])
    i = int(df.index[df["run_id"] == "verl-failed"][0])
    assert df.loc[i, ["trajectories_per_s", "mfu", "cost_per_mtok_usd"]].isna().all()
    assert runs[i].missing["mfu"].startswith("no metrics.json (run status: failed: OOM at step 3")
    assert runs[i].missing["tinker_ratio"] == runs[i].missing["cost_per_mtok_usd"]


def test_missing_metric_keeps_the_metrics_json_reason(three_runs):
    runs, df = load([three_runs])
    i = int(df.index[df["run_id"] == "slime-0"][0])
    assert math.isnan(df.loc[i, "mfu"])
    assert runs[i].missing["mfu"] == "reason for mfu"


def test_sweep_key_is_found_from_resolved_configs(sweep_runs):
    _, df = load([sweep_runs])
    assert set(df["sweep"]) == {f"generator_gpus={g}" for g in (8, 16, 24, 32, 40)}
    assert list(df[df["framework"] == "verl"]["sweep_value"]) == [8.0, 16.0, 24.0, 32.0, 40.0]


def test_discover_rejects_a_directory_without_runs(tmp_path):
    with pytest.raises(ReportError, match="no manifest.json in it or below"):
        discover([tmp_path])
    with pytest.raises(ReportError, match="not a directory"):
        discover([tmp_path / "nope"])


def test_manifest_without_mode_is_named_in_the_error(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "manifest.json").write_text('{"framework": "verl", "status": "completed"}')
    with pytest.raises(ReportError, match=r"manifest.json: key 'mode' missing"):
        load([tmp_path])


def test_schema_drift_fails_loudly(three_runs):
    _, df = load([three_runs])
    with pytest.raises(ReportError, match="mfu"):
        check_schema(df.assign(mfu=df["mfu"].astype(str)))
    with pytest.raises(ReportError, match="extra"):
        check_schema(df.assign(extra=pd.Series(1.0, index=df.index)))


def test_run_labels_are_unique_even_for_two_runs_of_one_framework(three_runs):
    runs, _ = load([three_runs])
    assert sorted(r.label for r in runs) == ["prime_rl", "slime", "verl verl-0", "verl verl-failed"]


def test_sweep_point_from_bench_run_wins_and_string_values_become_numbers(tmp_path):
    from bench.report.synthetic import make_run

    for gpus in ("8", "16"):
        make_run(
            tmp_path / f"g{gpus}",
            "verl",
            steps=3,
            rollouts=False,
            metrics={},
            sweep_point={"experiment.generator_gpus": gpus},
            config={"experiment": {"seed": int(gpus)}},
        )
    _, df = load([tmp_path])
    assert list(df["sweep"]) == [
        "generator_gpus=8",
        "generator_gpus=16",
    ]  # the seed differs too, but is not swept
    assert list(df["sweep_value"]) == [8.0, 16.0]


def test_failure_reason_comes_from_the_dispatch_block(tmp_path):
    from bench.report.synthetic import make_run

    make_run(
        tmp_path / "r",
        "slime",
        steps=3,
        status="failed",
        metrics=None,
        dispatch={"reason": "NODE_FAIL on gpu-07", "slurm_job_id": "4242"},
    )
    runs, _ = load([tmp_path])
    assert runs[0].missing["mfu"] == "no metrics.json (run status: failed: NODE_FAIL on gpu-07)"


def test_rerun_keeps_newest_completed_and_newer_failures(tmp_path):
    import os

    from bench.report.synthetic import make_run
    from tests.report.conftest import metrics

    root = tmp_path / "smoke"
    for i, (name, status) in enumerate(
        [("verl-a", "completed"), ("verl-b", "completed"), ("verl-c", "failed")]
    ):
        make_run(
            root / name, "verl", status=status, metrics=None if status == "failed" else metrics(), seed=1
        )
        os.utime(root / name / "manifest.json", (1000 + i, 1000 + i))  # a, b, c in this order
    runs, df = load([root])
    assert sorted(r.run_id for r in runs) == ["verl-b", "verl-c"]  # newest success + the failure after it
    assert df.attrs["superseded"] == ["verl-a"]
    runs, _ = load([root], all_runs=True)
    assert len(runs) == 3


def test_a_measured_run_is_never_superseded_by_a_newer_emulated_one(tmp_path):
    import os

    from bench.report.synthetic import make_run
    from tests.report.conftest import metrics

    for i, (name, mode) in enumerate([("verl-native", "native"), ("verl-emulated", "emulated")]):
        make_run(tmp_path / name, "verl", mode=mode, steps=3, rollouts=False, metrics=metrics(), seed=1)
        os.utime(tmp_path / name / "manifest.json", (1000 + i, 1000 + i))
    runs, df = load([tmp_path])
    assert sorted(zip(df["run_id"], df["mode"], strict=True)) == [
        ("verl-emulated", "emulated"),
        ("verl-native", "native"),
    ]
    assert df.attrs["superseded"] == []


def test_two_swept_keys_ending_alike_are_told_apart_and_a_conf_entry_by_its_name(tmp_path):
    """Generator and trainer TP both swept read generator.tp / trainer.tp, not tp twice; runs on two
    hardware entries read hardware=<name>, not each datasheet field that differs."""
    from bench.report.synthetic import make_run

    for tp, hw, peak in ((1, "H100-SXM", 989e12), (2, "H200", 990e12)):
        make_run(
            tmp_path / f"tp{tp}",
            "verl",
            steps=3,
            rollouts=False,
            metrics={},
            config={
                "experiment": {"trainer": {"tp": tp}, "generator": {"tp": tp}},
                "hardware": {"name": hw, "peak_bf16_flops": peak},
            },
        )
    _, df = load([tmp_path])
    assert list(df["sweep"]) == [
        "generator.tp=1, trainer.tp=1, hardware=H100-SXM",
        "generator.tp=2, trainer.tp=2, hardware=H200",
    ]
