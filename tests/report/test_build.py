"""The whole report: files written, self-contained HTML, omitted figures, escaping, CLI."""

from __future__ import annotations

import csv
import re

from bench.report import build, main
from bench.report.figures import FIGURES


def test_writes_every_output_file(three_report):
    for name in ("index.html", "summary.md", "summary.csv"):
        assert (three_report / name).stat().st_size > 0
    drawn = {p.stem for p in (three_report / "figures").glob("*.png")}
    assert drawn == {p.stem for p in (three_report / "figures").glob("*.svg")}
    assert drawn == {n for n, _, _ in FIGURES} - {"sweep"}  # not a sweep: the one omitted figure


def test_html_is_self_contained_and_embeds_each_drawn_figure(three_report):
    html = (three_report / "index.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # no network fetch
    assert html.count('<img class="figure"') == len(list((three_report / "figures").glob("*.png")))
    assert html.count("data:image/png;base64,") == html.count('<img class="figure"')
    assert (
        "Sweep: production vs consumption, idle, staleness, cost (measured + emulated)</strong>: omitted — not a sweep"
        in html
    )


def test_log_text_is_escaped_never_markup(three_report, evil):
    html = (three_report / "index.html").read_text()
    assert evil not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html  # parser warning and failure reason
    assert "<img src=x" not in html
    md = (three_report / "summary.md").read_text()
    # CommonMark keeps a backslash-escaped <script> as text: no unescaped tag, and no HTML entity to read
    assert '\\<script>alert("x")\\</script>\\<img src=x' in md
    assert not re.search(r"(?<!\\)<(script|img)", md) and "&lt;" not in md


def test_native_launch_is_collapsed_and_escaped(three_report):
    html = (three_report / "index.html").read_text()
    assert (
        "<details><summary>Native launch: command.json</summary><pre>{&#34;argv&#34;: [&#34;python&#34;, "
        in html
    )


def test_missing_values_say_not_reported_with_reason(three_report):
    html = (three_report / "index.html").read_text()
    assert '<td class="missing" title="reason for mfu">not reported</td>' in html  # headline table
    assert '<span class="missing">not reported: reason for mfu</span>' in html  # the run's details
    md = (three_report / "summary.md").read_text()
    assert re.search(r"\]: slime slime-0, MFU \(suite\): reason for mfu", md)


def test_csv_carries_values_and_reasons(three_report):
    rows = {r["run_id"]: r for r in csv.DictReader((three_report / "summary.csv").open())}
    assert rows["prime_rl-0"]["trainer_idle_frac"] == "0.25"
    assert rows["prime_rl-0"]["mode"] == "native"
    assert rows["slime-0"]["mfu"] == ""
    assert "mfu: reason for mfu" in rows["slime-0"]["missing"]


def test_markdown_table_marks_best_and_source(three_report):
    md = (three_report / "summary.md").read_text()
    verl = next(line for line in md.splitlines() if line.startswith("| verl `verl-0`"))
    assert "| **3.00** [E] |" in verl
    prime = next(line for line in md.splitlines() if line.startswith("| prime_rl `prime_rl-0`"))
    assert "| **25.0** [M] |" in prime


def test_sweep_report_marks_the_crossing_and_recommends_a_point_with_its_reason(sweep_runs, tmp_path):
    assert main([str(sweep_runs), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "figures" / "sweep.png").is_file()
    md = (tmp_path / "summary.md").read_text()
    # production ÷ consumption 0.92 at 24 GPUs, 1.00 at 32: crosses exp(-0.05) = 0.951 at 24 + 8 x 0.031/0.08
    assert (
        "- verl: production reaches consumption at generator_gpus≈27.1. Recommended: generator_gpus=8: "
        "lowest $ / M trained tokens ($0.460), with production at 0.32 of consumption (trainer idle 68%); "
        "for throughput, generator_gpus=32 is the cheapest point where production meets consumption "
        "($0.940, 3.12× the production)." in md
    )
    assert "Queue depth omitted" in (tmp_path / "index.html").read_text()  # no rollouts.parquet in the sweep


def test_cli_names_the_bad_directory(tmp_path, capsys):
    assert main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert f"report: {tmp_path}: no manifest.json" in capsys.readouterr().err


def test_a_figure_that_breaks_is_omitted_with_the_error_not_fatal(three_runs, tmp_path, monkeypatch, capsys):
    from bench.report import figures

    def broken(ctx):
        raise KeyError("t_end_s")

    monkeypatch.setattr(figures, "FIGURES", [("idle", "Idle", broken), *figures.FIGURES[-2:]])
    monkeypatch.setenv("BENCH_REPORT_JOBS", "1")
    html = build([three_runs], tmp_path).read_text()
    assert (
        "<strong>Idle (measured + emulated)</strong>: omitted — could not be drawn (KeyError: &#39;t_end_s&#39;)"
        in html
    )
    assert "figure 'idle' failed: KeyError" in capsys.readouterr().err


def test_runs_that_did_not_run_are_listed_apart_never_as_empty_rows(three_runs, tmp_path):
    from bench.report.synthetic import make_run

    root = tmp_path / "results"
    import shutil

    shutil.copytree(three_runs, root)
    make_run(
        root / "dry-run" / "slime-dry",
        "slime",
        status="running",
        metrics=None,
        steps=3,
        dispatch={"state": "DRY_RUN"},
    )
    make_run(
        root / "prime_rl-queued",
        "prime_rl",
        status="running",
        metrics=None,
        steps=3,
        dispatch={"state": "PENDING"},
    )
    html = build([root], tmp_path / "out").read_text()
    headline = html.split('<table class="headline">')[1].split("</table>")[0]
    for phantom in ("verl-failed", "slime-dry", "prime_rl-queued"):
        assert phantom not in headline
    section = html.split('<h2 id="not-ran">Runs that did not run</h2>')[1].split("</ul>")[0]
    assert 'verl-failed</span> <span class="badge emulated">emulated</span>: failed: OOM at step 3' in section
    assert (
        'slime-dry</span> <span class="badge emulated">emulated</span>: dry run: launch files written, nothing submitted'
        in section
    )
    assert "planned or running: no metrics.json yet (Slurm state PENDING)" in section
    rows = {r["run_id"]: r for r in csv.DictReader((tmp_path / "out" / "summary.csv").open())}
    assert rows["slime-dry"]["verdict"] == "did not run"  # the CSV keeps every run, with its verdict
    assert rows["verl-0"]["verdict"] in {
        "generator-bound",
        "trainer-bound",
        "balanced",
        "sync-bound",
        "scoring-bound",
        "undetermined",
    }


def test_verdict_is_the_first_thing_under_the_title(three_report):
    html = (three_report / "index.html").read_text()
    after_title = html.split("</h1>", 1)[1].lstrip()
    assert after_title.startswith('<section id="verdicts">')
    md = (three_report / "summary.md").read_text()
    assert md.split("\n\n", 2)[1] == "## Verdicts"
