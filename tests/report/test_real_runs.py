"""The report on real pipeline output: `bench emulate` smoke runs (emulated) and the
opd-benchmark logs ingested by `bench ingest` (measured). Every shown number must be the one
in the run's metrics.json, with the right badge."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from bench.report.load import METRIC_KEYS

pytestmark = pytest.mark.slow  # emulates three smoke runs and ingests three real log sets

FRAMEWORKS = ("verl", "slime", "prime_rl")  # smoke_report / opd_report: tests/report/conftest.py


def csv_rows(report: Path) -> dict[str, dict[str, str]]:
    return {r["framework"]: r for r in csv.DictReader((report / "summary.csv").open())}


def assert_csv_matches_metrics(root: Path) -> None:
    rows = csv_rows(root / "report")
    for fw in FRAMEWORKS:
        metrics = json.loads((root / "results" / fw / "metrics.json").read_text())
        for key in METRIC_KEYS:
            want, got = metrics.get(key), rows[fw][key]
            if want is None:
                assert got == "", f"{fw} {key}: null in metrics.json but {got!r} in the report"
                assert f"{key}: " in rows[fw]["missing"]
            else:
                assert math.isclose(float(got), want, rel_tol=1e-12), (fw, key, got, want)


def test_smoke_report_shows_metrics_json_values_as_emulated(smoke_report):
    assert_csv_matches_metrics(smoke_report)
    html = (smoke_report / "report" / "index.html").read_text()
    assert 'class="badge measured"' not in html.split('<h2 id="summary">')[1].split("</table>")[0]
    assert {r["mode"] for r in csv_rows(smoke_report / "report").values()} == {"emulated"}
    assert "Queue health over time (emulated: datasheet hardware)" in html  # whose physics: the datasheet


def test_smoke_report_draws_the_trace_figures(smoke_report):
    figs = {p.stem for p in (smoke_report / "report" / "figures").glob("*.png")}
    # The emulator writes steps and rollouts but no GPU telemetry and this is not a sweep.
    assert figs == {"queue_health", "step_breakdown", "idle", "staleness", "waste", "response_length", "cost"}


def test_opd_report_shows_ingested_values_as_measured(opd_report):
    assert_csv_matches_metrics(opd_report)
    assert {r["mode"] for r in csv_rows(opd_report / "report").values()} == {"native"}
    html = (opd_report / "report" / "index.html").read_text()
    assert "GPU utilisation and energy (measured)" in html  # opd logs carry gpu.csv telemetry


def test_opd_report_carries_parser_warnings_into_run_details(opd_report):
    manifest = json.loads((opd_report / "results" / "verl" / "manifest.json").read_text())
    assert manifest["warnings"], "the verl ingest is expected to warn about inferred step times"
    html = (opd_report / "report" / "index.html").read_text()
    for w in manifest["warnings"]:
        assert w.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in html


def queue_and_waste_figures(results: Path):
    """The queue-health and waste figures as the report draws them, with the summary they sit beside."""
    from bench.report import _with_evidence
    from bench.report.figures import Ctx, _colors, fig_queue_health, fig_waste
    from bench.report.load import load
    from bench.report.series import load_series

    runs, df = load([results])
    series = [load_series(r) for r in runs]
    ctx = Ctx(runs, series, _with_evidence(df, series), _colors(runs))
    return runs, df, fig_queue_health(ctx), fig_waste(ctx)


def window_rate(y, samples, lo, hi, steps):
    """Σ_W samples / Σ_W (samples / y): the window rate a per-step rate series implies."""
    sel = (steps >= lo) & (steps <= hi)
    return samples[sel].sum() / (samples[sel] / y[sel]).sum()


def test_plotted_production_consumption_and_zero_advantage_equal_the_table(smoke_report):
    """The figure's lines, read back from matplotlib, give the summary table's numbers for the same run."""
    import numpy as np
    import pandas as pd

    runs, df, queue, waste = queue_and_waste_figures(smoke_report / "results")
    lines = queue.axes[0].get_lines()
    n = len(runs)
    solid, dashed = lines[:n], lines[n : 2 * n]  # production per run, then consumption per run
    assert [ln.get_linestyle() for ln in solid] == ["-"] * n and [ln.get_linestyle() for ln in dashed] == [
        "--"
    ] * n
    zero = waste.axes[1].get_lines()
    for i, run in enumerate(runs):
        steps = pd.read_parquet(run.paths.steps).sort_values("step")
        w = run.metrics["window"]
        k, s = steps["step"].to_numpy(), steps["samples"].to_numpy(float)
        prod = window_rate(solid[i].get_ydata(), s, w["first_step"], w["last_step"], k)
        cons = window_rate(dashed[i].get_ydata(), s, w["first_step"], w["last_step"], k)
        assert prod == pytest.approx(df.at[i, "production_samples_per_s"], rel=1e-9), run.label
        assert cons == pytest.approx(df.at[i, "consumption_samples_per_s"], rel=1e-9), run.label
        sel = (k >= w["first_step"]) & (k <= w["last_step"])
        assert np.mean(zero[i].get_ydata()[sel]) / 100 == pytest.approx(
            df.at[i, "zero_advantage_frac"], rel=1e-9
        )
        assert np.mean(zero[i].get_ydata()) > 0  # the panel is not flat at 0 (the bug)


def test_waste_ledger_of_each_smoke_run_adds_up_to_its_generated_tokens(smoke_report):
    html = (smoke_report / "report" / "index.html").read_text()
    assert html.count("Waste ledger: where generated response tokens went") == len(FRAMEWORKS)
    for fw in FRAMEWORKS:
        metrics = json.loads((smoke_report / "results" / fw / "metrics.json").read_text())
        block = (
            html.split(f"<summary>{fw}", 1)[1].split('<table class="ledger">', 1)[1].split("</table>", 1)[0]
        )
        cells = [c for c in block.split("<tr>")[2:] if "of the above" not in c]
        tokens = sum(int(c.split("<td>")[1].split("</td>")[0].replace(",", "")) for c in cells)
        assert tokens == metrics["generated_tokens"], fw
        assert "of the above: cut at the response cap (truncated)" in block  # smoke caps responses at 8,192


def test_opd_runs_get_their_verdicts_from_the_measured_step_times(opd_report):
    """Real 2 x H100 logs: verl (colocated) loses a third of each step to weight sync, slime (colocated)
    spends 77% of the step in the hand-off inside its 86% wait (perf/sleep_time + perf/wake_up_time),
    prime_rl (disaggregated) syncs ~40% of the step."""
    import pandas as pd

    md = (opd_report / "report" / "summary.md").read_text()
    verdicts = md.split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    want = {"verl": "sync-bound", "slime": "hand-off-bound", "prime_rl": "sync-bound"}
    for fw, label in want.items():
        metrics = json.loads((opd_report / "results" / fw / "metrics.json").read_text())
        steps = pd.read_parquet(opd_report / "results" / fw / "trace" / "steps.parquet")
        w = metrics["window"]
        steady = steps[steps["step"].between(w["first_step"], w["last_step"])]
        line = next(x for x in verdicts.splitlines() if x.startswith(f"- **{fw}**"))
        assert f"**{label}**" in line, line
        assert f"trainer idle {100 * metrics['trainer_idle_frac']:.1f}%" in line, line
        if steady["sync_s"].notna().all():
            assert f"weight sync {100 * steady['sync_s'].sum() / steady['step_s'].sum():.1f}%" in line, line
    assert "generator idle" not in next(x for x in verdicts.splitlines() if x.startswith("- **verl**"))
