"""`python -m bench reproduce`: recompute every published figure in conf/published/ and compare.

    python -m bench reproduce [published=NAME[,NAME]] [--data-root DIR] [--strict] [--out DIR]
                              [--published-dir DIR]

Prints one table (case, figure, published, ours, error %, tolerance, status, ours from) and
writes it to DIR (default reports/reproduce/) as index.html, reproduce.md and reproduce.csv.
Exits 2 when a figure could not be computed at all (status error, e.g. a missing input), and with
--strict also 1 when any figure is out of tolerance (fail); pending and n/a rows stay visible only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.fixtures import fixtures_dir
from bench.outdir import check_out, staged
from bench.reproduce import sources, table
from bench.reproduce.spec import PUBLISHED_DIR, SpecError, load_cases

REPO = Path(__file__).resolve().parents[2]
# The SemiAnalysis opd-benchmark files among the real-log fixtures ($RLBENCH_FIXTURES, `make fixtures`).
DEFAULT_DATA_ROOT = fixtures_dir() / "opd-benchmark"


def run(
    names: list[str] | None = None,
    data_root: Path | str = DEFAULT_DATA_ROOT,
    out: Path | str = "reports/reproduce",
    published_dir: Path | str = PUBLISHED_DIR,
) -> list[table.Row]:
    """Evaluate the named cases (all when empty), write the table into `out`, return the rows."""
    cases = load_cases(names, published_dir)
    ctx = sources.Context(data_root=Path(data_root), work_dir=Path(out) / "runs")
    sources.prefetch_emulations(cases, ctx)
    rows = table.evaluate(cases, ctx)
    table.write(rows, cases, out)
    return rows


def print_table(rows: list[table.Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    style = {
        "pass": "green",
        "fail": "red",
        "contradicted": "dark_orange",
        "calibrated": "blue",
        "derived": "purple",
        "pending": "yellow",
        "n/a": "dim",
        "error": "magenta",
    }
    t = Table(title="Published figures, reproduced", show_lines=False)
    for col, just in [
        ("case", "left"),
        ("figure", "left"),
        ("published", "right"),
        ("ours", "right"),
        ("error", "right"),
        ("tol", "right"),
        ("status", "left"),
        ("ours from", "left"),
    ]:
        t.add_column(col, justify=just)
    for r in rows:
        t.add_row(
            r.case,
            f"{r.figure} ({r.unit})" if r.unit else r.figure,
            table.fmt(r.published),
            table.fmt(r.ours),
            table.fmt_err(r.error_pct),
            f"±{r.tolerance_pct:g}%",
            f"[{style[r.status]}]{r.status}[/]",
            r.ours_from,
        )
    console = Console(width=160)
    console.print(t)
    for r in rows:  # every row's note, pass rows too: a pass may rest on stated assumptions
        if r.note:
            console.print(f"[{style[r.status]}]{r.case}/{r.figure_id}[/]: {r.note}", highlight=False)


def main(argv: list[str]) -> int:
    """Exit 0 when every figure was computed (pass, fail, contradicted, calibrated; pending and n/a
    are known gaps, shown but not failing); 2 when a figure could not be computed at all (status
    error: missing input, bad spec), or the data root the selected cases read does not exist
    (refused before anything is written); with --strict, also 1 on any fail."""
    from bench.cli import command_parser

    ap = command_parser(
        "reproduce",
        "Recompute every published figure of conf/published/ (or the selected files) from its inputs and "
        "compare it with the published value and its tolerance; exit 2 when a figure cannot be computed, "
        "and with --strict also 1 when one is out of tolerance.",
        "conf/published/*.yaml, conf/ for the emulated figures, and the opd-benchmark logs under "
        "--data-root for the figures measured from real runs.",
        "the directory --out (new, empty, or an earlier reproduce's, replaced whole): index.html, reproduce.md "
        "and reproduce.csv, and runs/ with the run directories the figures were computed from; the table goes "
        "to stdout.",
        ["python -m bench reproduce published=opd_frameworks --strict"],
    )
    ap.add_argument(
        "selection",
        nargs="*",
        metavar="published=NAME[,NAME]",
        help="only these files of conf/published/ (default: all)",
    )
    ap.add_argument(
        "--data-root",
        type=Path,
        default=DEFAULT_DATA_ROOT,
        help="checkout of SemiAnalysisAI/opd-benchmark (default: $RLBENCH_FIXTURES/opd-benchmark, "
        "here %(default)s; `make fixtures` fetches it)",
    )
    ap.add_argument(
        "--out", type=Path, default=Path("reports/reproduce"), help="output directory (default: %(default)s)"
    )
    ap.add_argument(
        "--published-dir", type=Path, default=PUBLISHED_DIR, help="figures to check (default: %(default)s)"
    )
    ap.add_argument("--strict", action="store_true", help="also exit 1 if any figure fails")
    args = ap.parse_args(argv)
    names: list[str] = []
    for item in args.selection:
        if not item.startswith("published="):
            ap.error(f"unexpected argument {item!r}; expected published=NAME[,NAME]")
        names += [n for n in item.split("=", 1)[1].split(",") if n]
    # --out is refused like report's (a run directory, another command's files); an earlier
    # reproduce there is replaced whole, the new one written aside and renamed into place
    check_out(args.out, "reproduce", replace_own=True)
    try:
        readers = [
            c.name
            for c in load_cases(names, args.published_dir)
            if any(f.report_cell or f.compute.get("benchmark") for f in c.figures)
        ]
        if readers and not args.data_root.is_dir():
            print(
                f"error: --data-root {args.data_root}: no such directory; {', '.join(readers)} read the "
                "opd-benchmark logs there (a checkout of SemiAnalysisAI/opd-benchmark)",
                file=sys.stderr,
            )
            return 2
        with staged(args.out, "reproduce") as tmp:
            rows = run(names, args.data_root, tmp, args.published_dir)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_table(rows)
    print(f"{table._summary_line(rows)}; written to {args.out}/index.html and reproduce.md")
    errors = [f"{r.case}/{r.figure_id}" for r in rows if r.status == "error"]
    if errors:
        shown = ", ".join(errors[:4]) + (f" and {len(errors) - 4} more" if len(errors) > 4 else "")
        print(
            f"error: {len(errors)} figure(s) could not be computed (notes in the table): {shown}",
            file=sys.stderr,
        )
        return 2
    return 1 if args.strict and any(r.status == "fail" for r in rows) else 0
