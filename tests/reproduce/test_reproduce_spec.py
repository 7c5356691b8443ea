"""conf/published/ as data: every file loads, every figure names a known computation, and the
loader rejects bad files with the file, figure and key in the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reproduce import sources
from bench.reproduce.spec import OURS_KINDS, PUBLISHED_DIR, SpecError, load_case, load_cases


def test_every_published_file_loads_with_known_sources():
    cases = load_cases()
    assert {c.name for c in cases} >= {"opd_frameworks", "sa_rl_systems", "sa_tco_tinker", "sa_cost_ratios"}
    for c in cases:
        assert c.ours in OURS_KINDS and c.source_url.startswith("https://")
        for f in c.figures:
            assert f.compute["source"] in sources.SOURCES, (c.name, f.id)
            # the case's declared kind matches how its figures are computed
            assert sources.SOURCES[f.compute["source"]][1] in (c.ours, "-"), (c.name, f.id)


def test_no_published_figure_is_both_input_and_prediction_of_a_case():
    for c in load_cases():
        ids = {f.id for f in c.figures}
        assert not ids & set(c.inputs), c.name
        predicted = [f for f in c.figures if not (f.contradicted or f.calibrated)]
        # an input that names its figure is matched by id, any other by value
        named = {i.figure for i in c.inputs.values() if i.figure}
        used = {i.value for i in c.inputs.values() if not i.figure}
        clash = [f.id for f in predicted if f.id in named or f.published in used]
        assert not clash, (c.name, clash)
        # a calibration target is declared as an input of its case
        for f in c.figures:
            if f.calibrated:
                assert f.id in named or f.published in used, (c.name, f.id)


def test_case1_figures_are_the_report_table(opd_results: Path):
    """Every figure of REPORT.md's 'Comparable results' table is a case-1 figure (6 x 3), plus
    verl's MFU, Miles's wait ratio and Prime-RL's framework-window rate from the text."""
    case = load_case(PUBLISHED_DIR / "opd_frameworks.yaml")
    cells = [f.report_cell for f in case.figures if f.report_cell]
    assert len(cells) == 18
    assert {(c["row"], c["column"]) for c in cells} == {
        (row, col)
        for row in ("Prime-RL", "verl", "Miles")
        for col in (
            "End-to-end",
            "Trajectories/s",
            "Generated response tokens/s",
            "First update",
            "Native steady step",
            "GPU energy",
        )
    }
    published = {f.id: f.published for f in case.figures}
    assert published["verl_actor_mfu"] == 9.9
    assert published["miles_wait_ratio"] == 85.6
    assert published["prime_framework_trajectories_per_s"] == 8.93
    assert case.tolerance_pct == 3


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return p


HEAD = "title: t\nsource_url: https://x\nours: computed\ntolerance_pct: 1\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("figures: []\nextra: 1\n", r"unknown key\(s\) \['extra'\]"),
        ("figures:\n  - {id: a, figure: f, compute: {source: none}}\n", r"figure 'a': give `published`"),
        (
            "figures:\n  - {id: a, figure: f, published: x, compute: {source: none}}\n",
            r"figure 'a': key 'published'",
        ),
        (
            "figures:\n  - {id: a, figure: f, published: 1, compute: {}}\n",
            r"figure 'a': compute: key 'source' missing",
        ),
        (
            "figures:\n  - {id: a, figure: f, published: 1, compute: {source: none}, tol: 3}\n",
            r"unknown key\(s\) \['tol'\]",
        ),
        (
            "figures:\n  - {id: a, figure: f, published: 1, compute: {source: none}}\n"
            "  - {id: a, figure: g, published: 2, compute: {source: none}}\n",
            r"figure 'a': duplicate id",
        ),
        (
            "inputs: {x: {value: 1, figure: b}}\nfigures:\n"
            "  - {id: a, figure: f, published: 1, compute: {source: none}}\n",
            r"inputs.x.figure='b': expected a figure id of this case",
        ),
    ],
)
def test_bad_files_name_file_figure_and_key(tmp_path: Path, body: str, message: str):
    with pytest.raises(SpecError, match=message) as e:
        load_case(_write(tmp_path, HEAD + body))
    assert "bad.yaml" in str(e.value)


def test_ours_kind_and_selection_errors(tmp_path: Path):
    with pytest.raises(SpecError, match=r"ours='guessed'; expected one of"):
        load_case(_write(tmp_path, HEAD.replace("computed", "guessed") + "figures: []\n"))
    with pytest.raises(SpecError, match=r"published='nope'.*available: \["):
        load_cases(["nope"])
