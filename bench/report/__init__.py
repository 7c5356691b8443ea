"""Comparison report: run directories -> index.html, summary.md, summary.csv and figures.

`python -m bench report RESULT_DIRS... --out DIR` (Makefile: `make report EXP=...`). Reads only
the run-directory contract; every number says whether it was measured or emulated.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from bench.report.load import ReportError, load

__all__ = ["ReportError", "build", "main"]


def build(result_dirs: list[Path | str], out_dir: Path | str, all_runs: bool = False) -> Path:
    """Build the report for every run under `result_dirs` into `out_dir`; return index.html's path.

    Writes index.html (self-contained: figures embedded), summary.md, summary.csv and
    figures/<name>.{png,svg}. Raises ReportError when no run directory is found.
    """
    from bench.report import figures, render
    from bench.report.pool import fork_map
    from bench.report.series import load_series

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs, summary = load(result_dirs, all_runs=all_runs)
    series = fork_map(load_series, runs)
    figs = figures.render_all(runs, series, summary, out)
    csv = summary.assign(missing=["; ".join(f"{k}: {v}" for k, v in sorted(r.missing.items())) for r in runs])
    csv.to_csv(out / "summary.csv", index=False)
    experiments = sorted({e for e in summary["experiment"] if e})
    context = {
        "title": ", ".join(experiments) or "runs",
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": runs,
        "table": render.table(runs, summary),
        "findings": render.findings(runs, summary),
        "figures": figs,
        "details": render.run_details(runs, series),
    }
    html, _ = render.write(out, context)
    if summary.attrs.get("superseded"):
        print(
            f"report: left out {len(summary.attrs['superseded'])} older run(s) of the same points (--all-runs)"
        )
    return html


def main(argv: list[str] | None = None) -> int:
    """CLI: `python -m bench report RESULT_DIRS... --out DIR`."""
    p = argparse.ArgumentParser(prog="python -m bench report", description=__doc__.splitlines()[0])
    p.add_argument(
        "result_dirs", nargs="+", type=Path, help="run directories or results/<experiment> folders"
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
