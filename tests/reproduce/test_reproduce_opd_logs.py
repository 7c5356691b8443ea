"""`source: opd_logs` beyond the report's table: windows, bench.metrics keys, bad specs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.reproduce import sources, table
from bench.reproduce.spec import parse_case


def _rows(opd_results: Path, tmp_path: Path, computes: list[dict]) -> dict[str, table.Row]:
    figures = [
        {
            "id": f"f{i}",
            "figure": "x",
            "published": 1.0,
            "compute": {"source": "opd_logs", "benchmark": "opd-frameworks", **c},
        }
        for i, c in enumerate(computes)
    ]
    case = parse_case(
        {"title": "t", "source_url": "https://x", "ours": "raw logs", "tolerance_pct": 3, "figures": figures},
        tmp_path / "t.yaml",
    )
    ctx = sources.Context(opd_results.parents[1], tmp_path / "runs")
    return {r.figure_id: r for r in table.evaluate([case], ctx)}


def test_active_window_and_suite_metrics(opd_results: Path, tmp_path: Path):
    verl = {"run": "verl", "framework": "verl"}
    rows = _rows(
        opd_results,
        tmp_path,
        [
            {**verl, "metric": "trajectories_per_s", "window": "active"},
            {**verl, "metric": "active_step_s"},
            {**verl, "metric": "suite:wall_s"},
            {**verl, "metric": "suite:trajectories_per_s"},
        ],
    )
    steps = pd.read_parquet(
        tmp_path / "runs" / "ingested" / "opd-frameworks" / "verl" / "trace" / "steps.parquet"
    )
    active = float(steps["step_s"].sum())
    assert rows["f1"].ours == pytest.approx(active)
    assert rows["f0"].ours == pytest.approx(1920 / active)  # 15 x 128 trajectories over the step timers
    # bench.metrics reads the ingested run (manifest wall_s = the harness's 229 s)
    assert rows["f2"].ours == 229.0
    assert rows["f3"].ours == pytest.approx(1920 / 229)


def test_bad_opd_specs_are_errors_naming_the_key(opd_results: Path, tmp_path: Path):
    rows = _rows(
        opd_results,
        tmp_path,
        [
            {"run": "verl", "framework": "verl", "metric": "wall_s", "window": "weekly"},
            {"run": "verl", "framework": "verl", "metric": "no_such_metric"},
            {"run": "nope", "framework": "verl", "metric": "wall_s"},
            {"run": "verl", "metric": "wall_s"},
        ],
    )
    assert rows["f0"].status == "error" and "window='weekly'" in rows["f0"].note
    assert rows["f1"].status == "error" and "metric 'no_such_metric' unknown" in rows["f1"].note
    assert rows["f2"].status == "error" and "nope/wall_time.env: missing" in rows["f2"].note
    assert rows["f3"].status == "error" and "key 'framework' missing" in rows["f3"].note
