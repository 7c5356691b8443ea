"""The table: error %, pass / fail / contradicted / n/a, Markdown + HTML output, and --strict."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reproduce import main, run, sources, table

CASE = """\
title: "Check <b>arithmetic</b>"
source_url: https://example.org/paper
ours: computed
tolerance_pct: 3
inputs:
  consumption: {value: 2.75, unit: samples/s, source: paper}
  idle: {value: 0.30, unit: fraction, source: paper}
  idle2: {value: 0.74, unit: fraction, source: paper}
  shape: {value: 0.4, kind: chosen, source: not published}
  mix: {value: 0.7, kind: back-solved, figure: solved, source: the mix the price implies}
figures:
  - id: production
    figure: consumption x (1 - idle)
    unit: samples/s
    published: 1.95
    depends_on: [shape]
    compute: {source: arithmetic, op: product, args: [consumption, {op: complement, args: [idle]}]}
  - id: ratio
    figure: 1 / (1 - idle)
    unit: x
    published: 5
    contradicted: 74% idle implies 3.8x
    compute: {source: arithmetic, op: reciprocal, args: [{op: complement, args: [idle2]}]}
  - id: miss
    figure: a plain miss
    unit: "%"
    published: 50
    note: "<script>alert(1)</script>"
    compute: {source: arithmetic, op: product, args: [idle, 1]}
  - id: fitted
    figure: a calibration target
    published: 2.75
    calibrated: an efficiency was fitted to it
    compute: {source: arithmetic, op: product, args: [consumption, 1.01]}
  - id: solved
    figure: a price from a back-solved mix
    published: 0.7
    compute: {source: arithmetic, op: product, args: [mix, 1]}
  - id: never
    figure: not reproducible
    published: 1
    compute: {source: none, reason: the logs were never published}
"""


@pytest.fixture()
def published_dir(tmp_path: Path) -> Path:
    d = tmp_path / "published"
    d.mkdir()
    (d / "check.yaml").write_text(CASE)
    return d


def test_rows_error_and_status(published_dir: Path, tmp_path: Path):
    rows = {r.figure_id: r for r in run([], tmp_path, tmp_path / "out", published_dir)}
    p = rows["production"]
    assert p.ours == pytest.approx(1.925)  # 2.75 x 0.70
    assert p.error_pct == pytest.approx(-1.2820513, rel=1e-6)  # (1.925 - 1.95) / 1.95
    assert (p.status, p.ours_from, p.tolerance_pct) == ("pass", "computed", 3.0)
    assert p.note == "assumptions: shape = 0.4 (not published)"  # a pass that rests on a chosen input
    d = rows["solved"]  # exact, but it was back-solved into its own input: never a pass
    assert (d.status, d.error_pct) == ("derived", 0.0)
    assert d.note.startswith("derived, not a prediction: follows from mix = 0.7 (back-solved on solved)")
    r = rows["ratio"]
    assert r.ours == pytest.approx(1 / 0.26) and r.status == "contradicted"
    assert r.note.startswith("source contradicts itself: 74% idle implies 3.8x")
    m = rows["miss"]
    assert m.ours == pytest.approx(30.0)  # unit "%": the fraction 0.30 shown x100
    assert (m.error_pct, m.status) == (pytest.approx(-40.0), "fail")
    f = rows["fitted"]  # 1% off, but a fit is never a pass or a fail
    assert (f.status, f.error_pct) == ("calibrated", pytest.approx(1.0))
    assert f.note.startswith("calibration target, not a prediction: an efficiency was fitted")
    n = rows["never"]
    assert (n.status, n.ours, n.ours_from) == ("n/a", None, "-")
    assert "the logs were never published" in n.note


def test_outputs_are_written_and_html_is_escaped(published_dir: Path, tmp_path: Path):
    out = tmp_path / "out"
    run([], tmp_path, out, published_dir)
    html = (out / "index.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert "Check &lt;b&gt;arithmetic&lt;/b&gt;" in html
    md = (out / "reproduce.md").read_text()
    assert (
        "| check | consumption x (1 - idle) (samples/s) | 1.95 | 1.925 | -1.3% | ±3% | pass | computed |"
        in md
    )
    assert "6 figures: 1 pass, 1 fail, 1 contradicted, 1 calibrated, 1 derived, 1 n/a" in md
    assert "- `idle` = 0.3 fraction (paper)" in md
    assert (out / "reproduce.csv").read_text().count("\n") == 7


def test_strict_exits_nonzero_only_on_fail(published_dir: Path, tmp_path: Path):
    args = ["--data-root", str(tmp_path), "--out", str(tmp_path / "o"), "--published-dir", str(published_dir)]
    assert main(args) == 0
    assert main([*args, "--strict"]) == 1  # the plain miss
    text = (published_dir / "check.yaml").read_text()
    (published_dir / "check.yaml").write_text(text.replace("published: 50", "published: 30"))
    assert main([*args, "--strict"]) == 0  # contradicted, calibrated, derived, n/a do not fail --strict


def test_bad_selection_exits_2(capsys):
    assert main(["published=no_such_case"]) == 2
    assert "published='no_such_case'" in capsys.readouterr().err


def test_arithmetic_rejects_unknown_ops_and_inputs():
    with pytest.raises(sources.SpecError, match="op 'pow' unknown"):
        sources.evaluate({"op": "pow", "args": [2, 3]}, {}, "w")
    with pytest.raises(sources.SpecError, match="input 'x' not declared"):
        sources.evaluate({"op": "sum", "args": ["x"]}, {"y": 1.0}, "w")
    with pytest.raises(sources.SpecError, match="'ratio' takes 2 argument"):
        sources.evaluate({"op": "ratio", "args": [1]}, {}, "w")
    assert sources.evaluate({"op": "difference", "args": [5, {"op": "sum", "args": [1, 2]}]}, {}, "w") == 2.0


def test_error_pct_and_format():
    assert table.error_pct(8.93, 8.93) == 0.0
    assert table.error_pct(1.0, 0.0) == float("inf")
    assert table.fmt(147864.0) == "147,864" and table.fmt(0.1051) == "0.1051" and table.fmt(None) == "-"


def test_console_shows_notes_on_pass_rows_too(published_dir: Path, tmp_path: Path, capsys):
    args = ["--data-root", str(tmp_path), "--out", str(tmp_path / "o"), "--published-dir", str(published_dir)]
    main(args)
    out = capsys.readouterr().out
    assert "check/production: assumptions: shape = 0.4 (not published)" in out
    assert "check/solved: derived, not a prediction" in out
