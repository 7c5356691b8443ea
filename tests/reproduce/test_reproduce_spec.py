"""conf/published/ as data: every file loads, every figure names a known computation, and the
loader rejects bad files with the file, figure and key in the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reproduce import sources, table
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
        predicted = [f for f in c.figures if not f.contradicted and table.fit_status(c, f)[0] is None]
        # an input that names its figure is matched by id, any other published one by value
        named = {i.figure for i in c.inputs.values() if i.figure}
        used = {i.value for i in c.inputs.values() if not i.figure and i.kind == "published"}
        clash = [f.id for f in predicted if f.id in named or f.published in used]
        assert not clash, (c.name, clash)


def test_statuses_declared_in_data():
    """Issue 14 section 3: a fitted target is calibrated; case 1's idle and MFU follow from fitted
    inputs and the Tinker token-mix rows from back-solved ones (derived); cases 2 and 4 are
    predictions whose chosen load shapes are listed as assumptions."""
    cases = {c.name: c for c in load_cases()}
    sa, tinker = cases["sa_rl_systems"], cases["sa_tco_tinker"]
    status = {f.id: table.fit_status(sa, f) for f in sa.figures}
    assert {k for k, (s, _) in status.items() if s == "calibrated"} == {
        "case1_consumption",
        "case1_production",
        "case1_discarded",
    }
    assert {k for k, (s, _) in status.items() if s == "derived"} == {"case1_trainer_idle", "case1_mfu"}
    s4, notes4 = status["case4_trainer_idle"]
    assert s4 is None and "assumptions: case4_env_latency_mean_s = 6 s" in notes4[0]
    assert {f.id: table.fit_status(tinker, f)[0] for f in tinker.figures} == {
        "h200_usd_per_gpu_hour": None,
        "h200_capital_share": None,
        "tinker_q235_mix_70": "derived",
        "tinker_q235_mix_61": "derived",
    }


def _figure_configs(case, fig):
    """The composed configs a figure's computation runs on (emulations and TCO), for key checks."""
    from bench.config import compose

    c = fig.compute
    if c["source"] == "emulate":
        return [compose(c["overrides"])]
    if c["source"] == "speedup":  # the candidate: the published setup (the baseline is its sync twin)
        return [compose(c.get("overrides", []) + c["candidate"])]
    if c["source"] == "cost" and c.get("hardware"):
        return [compose([f"hardware={c['hardware']}", *c.get("overrides", [])])]
    return []


def test_chosen_inputs_match_the_configs_the_figures_run_on():
    """An assumption listed in a row's note is the value the computation used (no stale copy)."""
    from omegaconf import OmegaConf

    checked = 0
    for case in load_cases():
        for fig in case.figures:
            for cfg in _figure_configs(case, fig):
                for name in fig.depends_on:
                    inp = case.inputs[name]
                    if inp.key:
                        assert OmegaConf.select(cfg, inp.key) == pytest.approx(inp.value), (
                            case.name,
                            fig.id,
                            name,
                        )
                        checked += 1
    assert checked >= 30


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
            "inputs: {x: {value: 1, kind: guessed}}\nfigures: []\n",
            r"inputs.x: kind='guessed'; expected one of",
        ),
        (
            "inputs: {x: {value: 1, kind: fitted}}\nfigures: []\n",
            r"inputs.x: kind=fitted needs `figure`",
        ),
        (
            "inputs: {x: {value: 1, figur: a}}\nfigures: []\n",
            r"inputs.x: unknown key\(s\) \['figur'\]",
        ),
        (
            "figures:\n  - {id: a, figure: f, published: 1, depends_on: [y], compute: {source: none}}\n",
            r"figure 'a': depends_on=\['y'\]: expected a list of this case's inputs",
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
