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
    assert "Queue health over time (emulated)" in html


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
