"""Table model, best-value marks, number formats and escaping."""

from __future__ import annotations

from bench.report.load import METRIC_COLUMNS, load
from bench.report.render import HEADLINE_KEYS, NOT_REPORTED, fmt, md_cell, table

COL = {c.key: c for c in METRIC_COLUMNS}


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


def test_headline_table_has_the_verdict_and_at_most_eight_figures(three_runs):
    runs, df = load([three_runs])
    t = table(runs, df)
    assert len(t["header"]) == len(HEADLINE_KEYS) <= 8
    assert [h["label"] for h in t["header"]] == [
        "Trajectories/s",
        "Trainer idle",
        "Generator idle",
        "MFU (suite)",
        "Token waste",
        "Staleness mean",
        "$ / M trained tokens",
        "GPU-hours",
    ]
    assert all("verdict" in r for r in t["rows"])


def test_md_cell_escapes_markup_and_column_breaks():
    assert md_cell("<script>|x\ny") == "\\<script>\\|x y"


def test_md_cell_keeps_arrows_and_placeholders_readable_without_entities():
    """Markdown is read as text too: `->` and `<name>` stay, only markup-forming characters get a
    backslash (CommonMark renders \\< as <), and a value's own backslash cannot undo it."""
    assert md_cell("verl -> prime_rl") == "verl -> prime_rl"
    assert md_cell("pass model=<conf/model name>") == "pass model=\\<conf/model name>"
    assert md_cell("a < b & R&D, x &amp; y") == "a < b & R&D, x \\&amp; y"
    assert md_cell("C:\\<b>|") == "C:\\\\\\<b>\\|"
