"""Comparison report: run directories -> index.html, summary.md, summary.csv and figures.

`python -m bench report RESULT_DIRS... --out DIR` (Makefile: `make report EXP=...`). Reads only
the run-directory contract; every number says whether it was measured or emulated.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path

import pandas as pd

from bench.report.diagnose import diagnose, run_resources
from bench.report.load import ReportError, load_attempts

__all__ = ["ReportError", "build", "main"]


def build(result_dirs: list[Path | str], out_dir: Path | str, all_runs: bool = False) -> Path:
    """Build the report for every run under `result_dirs` into `out_dir`; return index.html's path.

    Writes index.html (self-contained: figures embedded), summary.md, summary.csv and
    figures/<name>.{png,svg}. Runs without metrics.json (dry-run, planned, failed at launch) are
    listed apart, never as empty rows. Raises ReportError when no run directory is found, and
    UsageError for an `out_dir` it may not write (bench.outdir.check_out: a report replaces only its
    own earlier report). Everything is written into a temporary directory beside `out_dir` and
    renamed into place (bench.outdir.staged): a failure leaves `out_dir` as it was.
    """
    from bench.outdir import check_out, staged

    out = check_out(out_dir, "report", replace_own=True)
    every, full, superseded = load_attempts(result_dirs, all_runs=all_runs)
    with staged(out, "report") as tmp:
        html = _write(tmp, every, full, superseded)
    for line in full.attrs.get("skipped", []):
        print(f"report: skipped {line}", file=sys.stderr)
    if full.attrs.get("superseded"):
        print(
            f"report: left out {len(full.attrs['superseded'])} older run(s) of the same points (--all-runs)"
        )
    return out / html.name


def _write(out: Path, every: list, full: pd.DataFrame, superseded: list) -> Path:
    """Every file of the report into `out` (build's temporary directory); returns index.html."""
    from bench.report import figures, render
    from bench.report.experience import experience
    from bench.report.findings import VERDICT_LINES, findings, verdict_groups
    from bench.report.overview import overview, what_ran
    from bench.report.pool import fork_map
    from bench.report.series import load_series

    ran = [i for i, r in enumerate(every) if r.metrics]
    runs = [every[i] for i in ran]
    not_ran = [r for r in every if not r.metrics]
    summary = full.iloc[ran].reset_index(drop=True)
    series = fork_map(load_series, runs)
    summary = _with_evidence(summary, series, runs)
    verdicts = [diagnose(_numbers(summary, i), run_resources(r.manifest)) for i, r in enumerate(runs)]
    ledgers = [_ledger(summary, i, s) for i, s in enumerate(series)]
    figs = figures.render_all(runs, series, summary, out) if runs else []
    csv = full.merge(summary[["path", *EVIDENCE_KEYS]], on="path", how="left")
    verdict_of = {summary.at[i, "path"]: v.label for i, v in enumerate(verdicts)}
    csv["verdict"] = [verdict_of.get(p, "did not run") for p in csv["path"]]
    csv["missing"] = ["; ".join(f"{k}: {v}" for k, v in sorted(r.missing.items())) for r in every]
    csv.to_csv(out / "summary.csv", index=False)
    experiments = sorted({e for e in full["experiment"] if e})
    table = render.table(runs, summary, verdicts)
    context = {
        "title": ", ".join(experiments) or "runs",
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": runs,
        "verdicts": [{"run": table["rows"][i], "v": v} for i, v in enumerate(verdicts)],
        "verdict_groups": verdict_groups(summary, verdicts) if len(verdicts) > VERDICT_LINES else [],
        "table": table,
        "full": render.full_table(runs, summary),
        "findings": findings(runs, summary, not_ran),
        "overview": overview(runs),
        "what_ran": what_ran(runs),
        "experience": experience(every + superseded),
        "sweep": _sweep_text(summary),
        "figures": figs,
        "details": render.run_details(runs, series, summary, verdicts, ledgers),
        "not_ran": render.did_not_run(not_ran),
    }
    html, _ = render.write(out, context)
    return html


EVIDENCE_KEYS = ["generator_idle_frac", "sync_share", "trained_response_tokens"]
DIAGNOSIS_EXTRA = ["tail_ratio", "truncated_frac", "scoring_share", "stale_drop_frac"]
# step phase shares (metrics.json phases) and the share of responses at the cap (bench.report.evidence)
DIAGNOSIS_EXTRA += [
    "checkpoint_share",
    "validation_share",
    "handoff_share",
    "wait_share",
    "trainer_work_share",
]
DIAGNOSIS_EXTRA += ["clip_frac"]


REPORT_MISSING = {
    "generator_idle_frac": "steps.parquet has no gen_s on every window step",
    "sync_share": "steps.parquet has no sync_s on every window step",
    "trained_response_tokens": "steps.parquet has no response_tokens on every step",
}
COLOCATED = "colocated placement: generation and training share the GPUs, so generator idle is not defined"


def _with_evidence(summary, series, runs=None):
    """The summary plus the report's trace columns (bench.report.evidence), NaN when unknown;
    with `runs`, each NaN gets its reason in the run's `missing` (colocated runs have no
    generator idle)."""
    cols = {
        k: [s.evidence.get(k) for s in series]
        for k in ("generator_idle_frac", "sync_share", *DIAGNOSIS_EXTRA)
    }
    cols["trained_response_tokens"] = [s.trained_response_tokens for s in series]
    for i, r in enumerate(runs or []):
        if run_resources(r.manifest).placement == "colocated":
            cols["generator_idle_frac"][i] = None
            r.missing["generator_idle_frac"] = COLOCATED
        for k, why in REPORT_MISSING.items():
            if cols[k][i] is None:
                r.missing.setdefault(k, why)
    return summary.assign(**{k: pd.Series(v, dtype="float64") for k, v in cols.items()})


def _numbers(summary, i: int) -> dict:
    """One row of the summary as {metric: float or None} for bench.report.diagnose."""
    row = summary.iloc[i]
    return {k: (None if pd.isna(v) else float(v)) for k, v in row.items() if isinstance(v, float | int)}


def _ledger(summary, i: int, s):
    from bench.report.evidence import ledger

    row = _numbers(summary, i)
    return ledger(
        s.fates,
        s.trained_response_tokens,
        s.generated_tokens,
        row.get("gpu_hours"),
        row.get("usd_per_gpu_hour"),
        s.evidence.get("truncated_tokens"),
    )


def _sweep_text(summary) -> list[str]:
    """Per framework of a sweep: where production reaches consumption and the recommended point."""
    from bench.report.sweep import crossing, points, recommend, sweep_key

    df = summary.dropna(subset=["sweep_value"])
    df = df[df.groupby("framework")["sweep_value"].transform("nunique") >= 2]
    out = []
    for fw, g in df.groupby("framework"):
        key, pts = sweep_key(summary), points(g)
        x = crossing(pts)
        rec = recommend(pts, key)
        where = (
            f"production reaches consumption at {key}≈{x:.3g}"
            if x is not None
            else "production never reaches consumption"
        )
        out.append(f"{fw}: {where}. Recommended: {rec.reason}." if rec else f"{fw}: {where}.")
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: `python -m bench report RESULT_DIRS... --out DIR`."""
    from bench.cli import command_parser

    p = command_parser(
        "report",
        "Build the comparison report of a set of runs: verdicts, tables and figures side by side, every "
        "number marked measured or emulated; by default the newest run per framework and configuration.",
        "only the run directories (manifest.json, metrics.json, trace/) under each RUN_OR_DIR.",
        "the directory --out: index.html (figures embedded), summary.md, summary.csv and figures/; a "
        "report replaces only its own earlier report there, and a failure leaves --out as it was.",
        ["python -m bench report results/smoke --out reports/smoke"],
    )
    p.add_argument(
        "result_dirs",
        nargs="+",
        type=Path,
        metavar="RUN_OR_DIR",
        help="run directories or results/<experiment> folders",
    )
    p.add_argument("--out", type=Path, required=True, help="output directory (created)")
    p.add_argument(
        "--all-runs",
        action="store_true",
        help="every run, not only the newest per framework and configuration",
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    try:
        html = build(args.result_dirs, args.out, all_runs=args.all_runs)
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    print(f"report: {html} ({time.perf_counter() - t0:.1f} s)")
    return 0
