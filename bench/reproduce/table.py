"""Evaluate every published figure into one table row, and write the table as Markdown and HTML.

Columns: case, figure, published, ours, error %, tolerance, status, ours from (raw logs |
emulated | computed), plus what ours was computed from and any note. Status is one of
pass | fail (only for a figure independent of every input fitted or back-solved on it: a
prediction) | contradicted (a miss on a figure the source's own other figures contradict;
the table says how) | calibrated (an input was fitted to this figure: a fit, not a
prediction) | derived (the figure follows from fitted or back-solved inputs of its own setup,
e.g. an MFU from a fitted efficiency, or a replay of the run a calibration was fitted on) |
pending (a stage of the suite is not there yet) | n/a (cannot be reproduced; the reason is in
the note) | error (the computation raised; the message is in the note). Inputs chosen where
the source is silent are listed in each dependent row's note as "assumptions".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from jinja2 import Environment, select_autoescape

from bench.reproduce import opd, sources
from bench.reproduce.spec import UNITS_PERCENT, Case, Figure, SpecError
from bench.trace import atomic_path

STATUSES = ("pass", "fail", "contradicted", "calibrated", "derived", "pending", "n/a", "error")


def fit_status(case: Case, fig: Figure) -> tuple[str | None, list[str]]:
    """("calibrated" | "derived" | None, notes) from what the case declares about its inputs.

    calibrated: an input was fitted to this figure (`inputs.X.figure` with kind fitted, or the
    figure's own `calibrated` text); derived: the figure was back-solved into an input, or depends
    on a fitted / back-solved input; None: a prediction (pass / fail). Notes name the inputs and
    list the chosen ones the figure depends on as assumptions.
    """
    notes: list[str] = []
    fitted = [i for i in case.inputs.values() if i.figure == fig.id and i.kind == "fitted"]
    solved = [i for i in case.inputs.values() if i.figure == fig.id and i.kind == "back-solved"]
    deps = [case.inputs[n] for n in fig.depends_on]
    status = None
    if fig.calibrated or fitted:
        what = fig.calibrated or "; ".join(f"{i.name} = {i.value:g} ({i.source})" for i in fitted)
        notes.append(f"calibration target, not a prediction: {what}")
        status = "calibrated"
    else:
        follows = [i for i in deps if i.kind in ("fitted", "back-solved")] + solved
        if follows:
            shown = ", ".join(
                f"{i.name} = {i.value:g} ({i.kind} on {i.figure})" for i in dict.fromkeys(follows)
            )
            notes.append(f"derived, not a prediction: follows from {shown}")
            status = "derived"
    chosen = [i for i in deps if i.kind == "chosen"]
    if chosen:
        notes.append(
            "assumptions: "
            + "; ".join(
                f"{i.name} = {i.value:g}{' ' + i.unit if i.unit else ''} ({i.source})" for i in chosen
            )
        )
    return status, notes


@dataclass
class Row:
    case: str
    figure_id: str
    figure: str
    unit: str
    published: float | None
    ours: float | None
    error_pct: float | None  # (ours - published) / published x 100
    tolerance_pct: float
    status: str  # one of STATUSES
    ours_from: str  # raw logs | emulated | computed | -
    used: str  # what ours was computed from
    note: str  # the figure's note, then any reason / warning
    source_url: str


def error_pct(ours: float, published: float) -> float:
    """Signed relative error of ours against published, in percent (inf when published is 0)."""
    if published == 0:
        return 0.0 if ours == 0 else math.inf
    return (ours - published) / abs(published) * 100.0


def published_value(case: Case, fig: Figure, ctx: sources.Context) -> tuple[float, str]:
    """The published number: from the YAML, or read from the benchmark's REPORT.md cell.

    When both are given they must agree (to the YAML's precision); a mismatch is returned as a note.
    """
    if fig.measured is not None:  # the reference is itself computed from raw data
        out = sources.compute(case, replace(fig, compute=fig.measured), ctx)
        scale = 100.0 if fig.unit in UNITS_PERCENT else 1.0
        return out.value * scale, f"reference measured on {out.used}"
    if fig.report_cell is None:
        return fig.published, ""
    bench = fig.compute.get("benchmark")
    if not bench:
        raise SpecError(f"{case.path}: figure {fig.id!r}: report_cell needs compute.benchmark")
    report = opd.resolve_benchmark(ctx.data_root, bench) / "REPORT.md"
    value = opd.report_value(report, **fig.report_cell)
    if fig.published is not None and not math.isclose(value, fig.published, rel_tol=1e-9, abs_tol=1e-9):
        return fig.published, f"REPORT.md says {value:g}, the YAML {fig.published:g}"
    return value, ""


def evaluate_figure(case: Case, fig: Figure, ctx: sources.Context) -> Row:
    """One table row; never raises for a figure's own failure (it becomes status error / n/a)."""
    tol = case.tolerance(fig)
    notes = [fig.note] if fig.note else []
    ours_from = sources.SOURCES.get(fig.compute.get("source"), (None, "-"))[1]
    row = Row(
        case.name,
        fig.id,
        fig.figure,
        fig.unit,
        fig.published,
        None,
        None,
        tol,
        "error",
        ours_from,
        "",
        "",
        fig.source_url or case.source_url,
    )
    try:
        row.published, mismatch = published_value(case, fig, ctx)
        if mismatch:
            notes.append(mismatch)
        out = sources.compute(case, fig, ctx)
        scale = 100.0 if fig.unit in UNITS_PERCENT else 1.0
        row.ours, row.used = out.value * scale, out.used
        notes += out.checks
        row.error_pct = error_pct(row.ours, row.published)
        row.status = "pass" if abs(row.error_pct) <= tol else "fail"
        fitted, fit_notes = fit_status(case, fig)
        if out.calibrated_on and fitted is None:
            fitted, fit_notes = (
                "calibrated",
                [f"calibrated, not a prediction: {out.calibrated_on}", *fit_notes],
            )
        if out.derived_from and fitted is None:
            fitted, fit_notes = "derived", [f"derived, not a prediction: {out.derived_from}", *fit_notes]
        notes[:0] = fit_notes
        if fitted:
            row.status = fitted
        elif fig.contradicted:
            notes.insert(0, f"source contradicts itself: {fig.contradicted}")
            if row.status == "fail":
                row.status = "contradicted"
    except sources.Pending as e:
        row.status = "pending"
        notes.append(str(e))
    except sources.NotReproducible as e:
        row.status, row.ours_from = "n/a", "-"
        notes.append(f"not reproducible: {e}")
    except (SpecError, opd.OpdDataError) as e:
        row.status = "error"
        notes.append(str(e))
    except Exception as e:  # a stage's own bug: show it in the table, keep the other rows
        row.status = "error"
        notes.append(f"{type(e).__name__}: {e}")
    row.note = " | ".join(n for n in notes if n)
    return row


def evaluate(cases: list[Case], ctx: sources.Context) -> list[Row]:
    return [evaluate_figure(c, f, ctx) for c in cases for f in c.figures]


def fmt(x: float | None, unit: str = "") -> str:
    """Human number: 4 significant digits, thousands separators, no trailing zeros."""
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    if x != 0 and abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def fmt_err(x: float | None) -> str:
    return "-" if x is None else ("inf" if math.isinf(x) else f"{x:+.1f}%")


def summary(rows: list[Row]) -> dict[str, int]:
    return {s: sum(r.status == s for r in rows) for s in STATUSES}


def to_markdown(rows: list[Row], cases: list[Case]) -> str:
    """The table as GitHub Markdown, then each case's setup, inputs and notes."""
    head = "| case | figure | published | ours | error | tolerance | status | ours from | note |"
    lines = ["# Published figures, reproduced", "", _summary_line(rows), "", head, "|" + "---|" * 9]
    for r in rows:
        cells = [
            r.case,
            f"{r.figure} ({r.unit})" if r.unit else r.figure,
            fmt(r.published),
            fmt(r.ours),
            fmt_err(r.error_pct),
            f"±{r.tolerance_pct:g}%",
            r.status,
            r.ours_from,
            r.note,
        ]
        lines.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    lines += ["", "## Cases", ""]
    for c in cases:
        lines += [f"### {c.name}: {c.title}", "", f"Source: {c.source_url}", "", f"Ours: {c.ours}.", ""]
        if c.setup:
            lines += [f"Setup: {c.setup}", ""]
        if c.inputs:
            lines.append("Inputs used:")
            lines += [f"- `{i.name}` = {i.value:g} {i.unit} ({i.source})" for i in c.inputs.values()]
            lines.append("")
        lines.append("Figures predicted: " + ", ".join(f"`{f.id}`" for f in c.figures))
        lines.append("")
        if c.notes:
            lines += [c.notes, ""]
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _summary_line(rows: list[Row]) -> str:
    s = summary(rows)
    from bench.cli import counted

    return f"{counted(len(rows), 'figure')}: " + ", ".join(f"{n} {k}" for k, n in s.items() if n)


HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Published figures, reproduced</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:110em}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.3em .5em;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{background:#e6f4e6}.contradicted{background:#fde9d0}.calibrated{background:#e3ecfb}.fail{background:#fbe3e3}.derived{background:#ecebfa}.pending{background:#fff6d6}.na{background:#eee}.error{background:#f6d0f6}
.emulated{font-style:italic}
</style></head><body>
<h1>Published figures, reproduced</h1>
<p>{{ summary }}. Every "ours" says whether it was computed from raw logs, emulated, or computed by arithmetic.</p>
<table><thead><tr><th>case</th><th>figure</th><th>published</th><th>ours</th><th>error</th><th>tolerance</th>
<th>status</th><th>ours from</th><th>computed from</th><th>note</th></tr></thead><tbody>
{% for r in rows %}<tr class="{{ r.css }}">
<td>{{ r.case }}</td><td><a href="{{ r.source_url }}">{{ r.figure }}</a>{% if r.unit %} ({{ r.unit }}){% endif %}</td>
<td class="num">{{ r.published_s }}</td><td class="num {{ r.from_css }}">{{ r.ours_s }}</td>
<td class="num">{{ r.error_s }}</td><td class="num">±{{ r.tol_s }}%</td><td>{{ r.status }}</td>
<td class="{{ r.from_css }}">{{ r.ours_from }}</td><td>{{ r.used }}</td><td>{{ r.note }}</td></tr>
{% endfor %}</tbody></table>
{% for c in cases %}<h2>{{ c.name }}: {{ c.title }}</h2>
<p>Source: <a href="{{ c.source_url }}">{{ c.source_url }}</a>. Ours: {{ c.ours }}. Tolerance ±{{ "%g"|format(c.tolerance_pct) }}%.</p>
{% if c.setup %}<p>Setup: {{ c.setup }}</p>{% endif %}
{% if c.inputs %}<p>Inputs used:</p><ul>{% for i in c.inputs.values() %}<li><code>{{ i.name }}</code> = {{ i.value }} {{ i.unit }} ({{ i.source }})</li>{% endfor %}</ul>{% endif %}
<p>Figures predicted: {% for f in c.figures %}<code>{{ f.id }}</code>{% if not loop.last %}, {% endif %}{% endfor %}</p>
{% if c.notes %}<p>{{ c.notes }}</p>{% endif %}
{% endfor %}
</body></html>
"""


def to_html(rows: list[Row], cases: list[Case]) -> str:
    """The table as a standalone HTML page (Jinja2 with autoescape: notes may hold any text)."""
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    view = [
        asdict(r)
        | {
            "published_s": fmt(r.published),
            "ours_s": fmt(r.ours),
            "error_s": fmt_err(r.error_pct),
            "tol_s": f"{r.tolerance_pct:g}",
            "css": "na" if r.status == "n/a" else r.status,
            "from_css": "emulated" if r.ours_from == "emulated" else "",
        }
        for r in rows
    ]
    return env.from_string(HTML).render(rows=view, cases=cases, summary=_summary_line(rows))


def write(rows: list[Row], cases: list[Case], out_dir: Path | str) -> list[Path]:
    """Write index.html, reproduce.md and reproduce.csv into out_dir (atomically); return the paths."""
    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("index.html", to_html(rows, cases)), ("reproduce.md", to_markdown(rows, cases))):
        with atomic_path(out / name) as tmp:
            tmp.write_text(text)
        written.append(out / name)
    with atomic_path(out / "reproduce.csv") as tmp:
        pd.DataFrame([asdict(r) for r in rows]).to_csv(tmp, index=False)
    written.append(out / "reproduce.csv")
    return written
