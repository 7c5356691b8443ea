"""Findings name a difference only beyond the noise; ties are ties; constant inputs are named.
Sweeps: where production reaches consumption and which point to run."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.report.findings import COLS, compare, constant_input, leader_rows
from bench.report.load import Run
from bench.report.sweep import crossing, points, recommend


def frame(rows: list[tuple[str, str, float]], key: str = "trajectories_per_s") -> pd.DataFrame:
    """(framework, sweep label, value) rows of emulated runs."""
    return pd.DataFrame([{"framework": f, "sweep": s, "mode": "emulated", key: v} for f, s, v in rows])


def test_a_gap_beyond_the_five_percent_floor_is_a_lead():
    df = frame([("verl", "", 7.46), ("slime", "", 8.81), ("prime_rl", "", 8.01)])
    assert compare(df, COLS["trajectories_per_s"]) == (
        "slime (emulated) has the highest trajectories/s: 8.81 samples/s vs 8.01 samples/s for "
        "prime_rl (emulated) (gap 0.80 samples/s, beyond the noise floor of 0.44 samples/s)"
    )
    assert leader_rows(df, COLS["trajectories_per_s"]) == {1}


def test_values_within_the_floor_are_a_tie_never_a_leader():
    # consumption 2.76 vs 2.66-2.76: the example of a star within noise
    df = frame([("verl", "", 2.76), ("slime", "", 2.66), ("prime_rl", "", 2.72)])
    text = compare(df, COLS["trajectories_per_s"])
    assert text.startswith("Trajectories/s: tie — verl (emulated), prime_rl (emulated), slime (emulated)")
    assert "noise ±0.14 samples/s" in text  # 5% of 2.76
    assert leader_rows(df, COLS["trajectories_per_s"]) == set()


def test_a_seed_band_wider_than_the_gap_makes_a_tie():
    # verl at two seeds spans 7.0-8.0; slime's 8.3 is 0.8 above verl's mean 7.5, inside the 1.0 band
    df = frame([("verl", "", 7.0), ("verl", "", 8.0), ("slime", "", 8.3)])
    assert compare(df, COLS["trajectories_per_s"]).startswith("Trajectories/s: tie")
    df = frame([("verl", "", 7.0), ("verl", "", 7.2), ("slime", "", 8.3)])
    # band 0.2 < floor 5% x 8.3 = 0.415: the floor decides
    assert compare(df, COLS["trajectories_per_s"]).endswith(
        "(gap 1.20 samples/s, beyond the noise floor of 0.42 samples/s)"
    )
    df = frame([("verl", "", 6.0), ("verl", "", 7.0), ("slime", "", 8.3)])
    assert compare(df, COLS["trajectories_per_s"]).endswith("beyond the seed band of 1.00 samples/s)")


def test_lower_is_better_columns_rank_the_smallest():
    df = frame([("verl", "", 0.447), ("slime", "", 0.328)], key="trainer_idle_frac")
    assert compare(df, COLS["trainer_idle_frac"]).startswith(
        "slime (emulated) has the lowest trainer idle: 32.8% vs 44.7% for verl (emulated)"
    )


def test_mfu_of_emulated_runs_with_one_trainer_mfu_input_is_named_as_that_input(tmp_path):
    df = frame([("verl", "", 0.3368), ("slime", "", 0.3366)], key="mfu")
    runs = [
        Run(
            tmp_path,
            {"framework": f, "mode": "emulated", "config": {"emulator": {"trainer_mfu": 0.35}}},
            {},
            {},
        )
        for f in ("verl", "slime")
    ]
    assert constant_input(runs, df, "mfu") == (
        "MFU (suite) (33.7%) is set by the emulator's input emulator.trainer_mfu = 0.35 on every run: "
        "not a difference between frameworks"
    )
    runs[1].manifest["config"]["emulator"]["trainer_mfu"] = 0.30
    assert constant_input(runs, df, "mfu") is None  # different inputs: a real comparison


def sweep(prod: list[float], cost: list[float], idle: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "sweep_value": [8.0, 16.0, 24.0, 32.0, 40.0],
            "production_samples_per_s": prod,
            "consumption_samples_per_s": [2.5] * 5,
            "trainer_idle_frac": idle,
            "cost_per_mtok_usd": cost,
        }
    )


def test_crossing_is_interpolated_where_production_reaches_consumption():
    pts = points(sweep([0.8, 1.55, 2.3, 2.5, 2.5], [0.5] * 5, [0.6] * 5))
    # ratio 0.92 at 24, 1.00 at 32; met at exp(-0.05) = 0.9512: 24 + 8 x (0.9512 - 0.92) / 0.08
    assert crossing(pts) == pytest.approx(24 + 8 * (0.951229 - 0.92) / 0.08, rel=1e-5)
    assert crossing(points(sweep([0.8, 1.0, 1.2, 1.3, 1.4], [0.5] * 5, [0.6] * 5))) is None


def test_recommended_point_is_the_cheapest_and_names_the_throughput_trade_off():
    pts = points(
        sweep([0.8, 1.55, 2.3, 2.5, 2.5], [0.46, 0.62, 0.78, 0.94, 1.10], [0.68, 0.4, 0.1, 0.0, 0.0])
    )
    rec = recommend(pts, "generator_gpus")
    assert rec.sweep_value == 8.0
    assert rec.reason == (
        "generator_gpus=8: lowest $ / M trained tokens ($0.460), with production at 0.32 of consumption "
        "(trainer idle 68%); for throughput, generator_gpus=32 is the cheapest point where production meets "
        "consumption ($0.940, 3.12× the production)"
    )


def test_recommended_point_where_cheapest_also_meets_consumption():
    pts = points(sweep([0.8, 1.55, 2.5, 2.5, 2.5], [0.9, 0.7, 0.5, 0.6, 0.7], [0.68, 0.4, 0.0, 0.0, 0.0]))
    rec = recommend(pts, "generator_gpus")
    assert rec.sweep_value == 24.0
    assert rec.reason.endswith("and production meets consumption there (ratio 1.00)")


def test_seeds_at_one_swept_value_make_a_band():
    df = sweep([1.0, 2.0, 2.5, 2.5, 2.5], [0.5] * 5, [0.1] * 5)
    df = pd.concat([df, df.assign(production_samples_per_s=df["production_samples_per_s"] + 0.2)])
    pts = points(df)
    assert list(pts["n_runs"]) == [2] * 5
    assert pts.loc[0, "production_samples_per_s_min"] == 1.0
    assert pts.loc[0, "production_samples_per_s_max"] == pytest.approx(1.2)
    assert pts.loc[0, "production_samples_per_s"] == pytest.approx(1.1)
