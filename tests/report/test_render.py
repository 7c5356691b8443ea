"""Table model, best-value marks, number formats and escaping."""

from __future__ import annotations

import pandas as pd

from bench.report.load import METRIC_COLUMNS, Column, load
from bench.report.render import NOT_REPORTED, _lower_first, best_rows, findings, fmt, md_cell, table

COL = {c.key: c for c in METRIC_COLUMNS}


def test_best_follows_the_column_direction():
    df = pd.DataFrame({"x": [2.0, 5.0, None, 5.0]})
    assert best_rows(df, Column("x", "x", "", "higher")) == {1, 3}  # ties all marked, null skipped
    assert best_rows(df, Column("x", "x", "", "lower")) == {0}
    assert best_rows(df, Column("x", "x", "", None)) == set()
    ratio = pd.DataFrame({"x": [0.5, 1.8, 0.9]})
    assert best_rows(ratio, Column("x", "x", "", "one")) == {2}  # |log 0.9| < |log 0.5|, |log 1.8|


def test_no_best_when_all_values_are_equal_or_single():
    assert best_rows(pd.DataFrame({"x": [3.0, 3.0]}), Column("x", "x", "", "higher")) == set()
    assert best_rows(pd.DataFrame({"x": [3.0, None]}), Column("x", "x", "", "higher")) == set()


def test_formats_use_the_display_unit():
    assert fmt(0.105, COL["mfu"]) == "10.5"
    assert fmt(12_345_678.0, COL["trained_tokens"]) == "12,345,678"
    assert fmt(0.5, COL["cost_per_mtok_usd"]) == "0.500"
    assert fmt(3.0, COL["staleness_max"]) == "3"


def test_table_cells_carry_badges_best_marks_and_missing_reasons(three_runs):
    runs, df = load([three_runs])
    t = table(runs, df)
    by_run = {
        r["run_id"]: {h["label"]: c for h, c in zip(t["header"], r["cells"], strict=True)} for r in t["rows"]
    }
    assert by_run["prime_rl-0"]["Trainer idle"] == {
        "text": "25.0",
        "reason": "",
        "missing": False,
        "badge": "measured",
        "best": True,
    }
    assert (
        by_run["verl-0"]["Trajectories/s"]["best"]
        and by_run["verl-0"]["Trajectories/s"]["badge"] == "emulated"
    )
    assert by_run["slime-0"]["MFU (suite)"] == {
        "text": NOT_REPORTED,
        "reason": "reason for mfu",
        "missing": True,
        "badge": "",
        "best": False,
    }
    failed = by_run["verl-failed"]
    assert all(c["text"] == NOT_REPORTED for c in failed.values())
    assert all(c["text"] != "0" for row in by_run.values() for c in row.values())


def test_findings_name_leaders_and_failed_runs(three_runs):
    runs, df = load([three_runs])
    text = findings(runs, df)
    assert "Highest trajectories/s: verl (emulated) at 3.00 1/s" in text
    assert "Lowest trainer idle: prime_rl (measured) at 25.0 %" in text
    assert "Lowest $ / M tokens: prime_rl (measured) at 0.400 USD" in text
    assert not any(f.startswith("Highest MFU") for f in text)  # 10.5 % twice: a tie of all values, no leader
    assert any(f.startswith("Run verl-failed (verl) is failed: OOM at step 3") for f in text)


def test_labels_inside_sentences_keep_acronyms():
    assert _lower_first("Trainer idle") == "trainer idle"
    assert _lower_first("MFU (suite)") == "MFU (suite)"


def test_md_cell_escapes_markup_and_column_breaks():
    assert md_cell("<script>|x\ny") == "&lt;script&gt;\\|x y"
