"""Summary table model, key findings and the Jinja2 rendering of index.html and summary.md.

Everything a log or config contributes is text passed to templates with autoescape on, so a
`<script>` in a parser warning shows as text. Markdown cells are escaped by `md_cell`.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from bench import speed_of_light
from bench.cli import counted
from bench.model.hwprofile_conf import source_label
from bench.report.diagnose import Verdict
from bench.report.evidence import LedgerRow
from bench.report.findings import leader_rows
from bench.report.load import (
    METRIC_COLUMNS,
    REPORT_COLUMNS,
    Column,
    Run,
    dispatch,
    failure_reason,
    resolved_config,
)
from bench.report.series import Series
from bench.trace import redact_text

NOT_REPORTED = "not reported"
LAUNCH_FILE_MAX = 20_000  # characters of one launch file shown in the report; the rest is cut
MODE_BADGE = {"native": "measured", "emulated": "emulated"}


def badge(mode: str) -> str:
    """'measured' for native runs, 'emulated' for emulator runs (the label every number carries)."""
    return MODE_BADGE.get(mode, mode)


def fmt(value: float, col: Column) -> str:
    """Display string of one metric value in the column's unit (percent, thousands separators)."""
    v = value * col.scale
    if col.digits == 0 or abs(v) >= 1e5:
        return f"{v:,.0f}"
    return f"{v:,.{col.digits}f}"


# The headline table: the verdict and at most eight figures a reader needs first; every other
# column is in the run's details and in summary.csv.
HEADLINE_KEYS = [
    "trajectories_per_s",
    "trainer_idle_frac",
    "generator_idle_frac",
    "mfu",
    "token_waste",
    "staleness_mean",
    "cost_per_mtok_usd",
    "gpu_hours",
]
ALL_COLUMNS = {c.key: c for c in METRIC_COLUMNS + REPORT_COLUMNS}


def _cell(run: Run, df: pd.DataFrame, i: int, c: Column, lead: set[int]) -> dict[str, Any]:
    v = df.at[i, c.key] if c.key in df else float("nan")
    if pd.isna(v):
        reason = run.missing.get(c.key, "not in the trace")
        return {"text": NOT_REPORTED, "reason": reason, "missing": True, "badge": "", "best": False}
    return {
        "text": fmt(float(v), c),
        "reason": "",
        "missing": False,
        "badge": badge(str(df.at[i, "mode"])),
        "best": i in lead,
    }


def table(runs: list[Run], df: pd.DataFrame, verdicts: list[Verdict] | None = None) -> dict[str, Any]:
    """The headline table: per run the verdict and HEADLINE_KEYS cells (value, badge, a lead mark
    only when the lead exceeds the noise, or the reason a value is missing)."""
    cols = [ALL_COLUMNS[k] for k in HEADLINE_KEYS]
    lead = {c.key: leader_rows(df, c) for c in cols}
    rows = []
    for i, run in enumerate(runs):
        v = verdicts[i] if verdicts else None
        rows.append(
            {
                "run_id": df.at[i, "run_id"],
                "framework": df.at[i, "framework"],
                "sweep": df.at[i, "sweep"],
                "mode": badge(str(df.at[i, "mode"])),
                "status": df.at[i, "status"],
                "verdict": v.label if v else "",
                "cells": [_cell(run, df, i, c, lead[c.key]) for c in cols],
                "anchor": f"run-{i}",
            }
        )
    better = {"higher": "↑ higher is better", "lower": "↓ lower is better", "one": "closest to 1 is best"}
    header = [
        {"label": c.label, "unit": c.unit, "better": better.get(c.better or "", "not ranked")} for c in cols
    ]
    return {"header": header, "rows": rows, "has_sweep": bool(df["sweep"].str.len().gt(0).any())}


def full_table(runs: list[Run], df: pd.DataFrame) -> dict[str, Any]:
    """Every column (metrics.json and the report's), for summary.md's "All metrics" table."""
    cols = METRIC_COLUMNS + REPORT_COLUMNS
    rows = [
        {
            "run_id": df.at[i, "run_id"],
            "framework": df.at[i, "framework"],
            "sweep": df.at[i, "sweep"],
            "anchor": f"all-{i}",
            "cells": [_cell(r, df, i, c, set()) for c in cols],
        }
        for i, r in enumerate(runs)
    ]
    return {"header": [{"label": c.label, "unit": c.unit} for c in cols], "rows": rows}


def all_metrics(run: Run, df: pd.DataFrame, i: int) -> list[dict[str, Any]]:
    """Every metric of one run (metrics.json and the report's trace columns) for its details."""
    out = []
    for c in METRIC_COLUMNS + REPORT_COLUMNS:
        cell = _cell(run, df, i, c, set())
        out.append({"label": c.label, "unit": c.unit, **cell})
    return out


def _launch_files(run: Run) -> list[dict[str, str]]:
    files = []
    if run.paths.launch.is_dir():
        for p in sorted(run.paths.launch.iterdir()):
            if p.is_file():
                text = redact_text(p.read_text(errors="replace"))  # launch/ written before redaction too
                if len(text) > LAUNCH_FILE_MAX:
                    text = text[:LAUNCH_FILE_MAX] + f"\n… cut at {LAUNCH_FILE_MAX} of {len(text)} characters"
                files.append({"name": p.name, "text": text})
    return files


def _warnings(run: Run, series: Series) -> list[str]:
    """Metric checks (bench.metrics folds manifest warnings into them), then any parser warning
    not already among them, then the report's own trace problems."""
    m = run.manifest
    checks = [str(w) for w in run.metrics.get("checks") or []]
    parse = m.get("parse") if isinstance(m.get("parse"), dict) else {}
    parser = [str(w) for key in ("warnings", "parse_warnings") for w in m.get(key) or []]
    parser += [str(w) for w in parse.get("warnings") or []]
    out = [f"check: {w}" for w in checks] + [f"parser: {w}" for w in dict.fromkeys(parser) if w not in checks]
    return out + [f"report: {w}" for w in series.warnings]


def ledger_rows(rows: list[LedgerRow]) -> list[dict[str, str]]:
    """Waste-ledger rows as display strings (tokens, share, GPU-hours, dollars)."""

    def num(v: float | None, spec: str) -> str:
        return NOT_REPORTED if v is None else format(v, spec)

    return [
        {
            "fate": r.fate,
            "tokens": f"{r.tokens:,.0f}",
            "share": f"{100 * r.share:.1f}",
            "gpu_hours": num(r.gpu_hours, ",.2f"),
            "usd": num(r.usd, ",.2f"),
        }
        for r in rows
    ]


def did_not_run(runs: list[Run]) -> list[dict[str, str]]:
    """Runs with no numbers (dry-run, planned or queued, failed at launch): one line each."""
    out = []
    for r in runs:
        m = r.manifest
        state = str(dispatch(m).get("state") or "")
        if state == "DRY_RUN":
            why = "dry run: launch files written, nothing submitted"
        elif m["status"] == "running":
            why = "planned or running: no metrics.json yet" + (f" (Slurm state {state})" if state else "")
        else:
            why = f"{m['status']}: {failure_reason(m) or 'no reason recorded'}"
        out.append(
            {
                "framework": str(m["framework"]),
                "run_id": r.run_id,
                "mode": badge(m["mode"]),
                "why": why,
                "path": str(r.paths.root),
            }
        )
    return out


def phases_text(phases: dict | None) -> str:
    """metrics.json `phases` as one line: each phase's seconds per steady step and share, then the
    step they sum to (the numbers the step-breakdown figure draws)."""
    parts = (phases or {}).get("parts") or {}
    if not parts:
        return str((phases or {}).get("missing") or "")
    each = "; ".join(
        f"{p['name']} {p['s_per_step']:.3g} s ({round(100 * (p['share'] or 0), 1) + 0.0:.1f}%)"
        for p in parts.values()
    )
    return f"{each} = {phases['step_s']:.4g} s per step"


def wall_text(b: dict | None) -> str:
    """metrics.json `wall_breakdown` as one line: start-up, steps, gaps, overlap, teardown (s) of the
    wall time and its window; a part the run does not show, with its reason."""
    if not b or b.get("wall_s") is None:
        return ""
    names = {
        "startup_s": "start-up",
        "steps_s": "steps",
        "gaps_s": "gaps between steps",
        "overlap_s": "overlap",
        "teardown_s": "teardown",
    }
    shown = [f"{n} {b[k]:.4g} s" for k, n in names.items() if b.get(k) is not None]
    unknown = sorted({v for v in (b.get("missing") or {}).values()})
    return f"{'; '.join(shown)} of {b['wall_s']:.4g} s ({b['window']})" + (
        f"; {'; '.join(unknown)}" if unknown else ""
    )


def run_details(
    runs: list[Run],
    series: list[Series],
    df: pd.DataFrame | None = None,
    verdicts: list[Verdict] | None = None,
    ledgers: list[tuple[list[LedgerRow], str]] | None = None,
) -> list[dict[str, Any]]:
    """Per run: verdict, every metric, waste ledger, workload, launch files, versions, cluster,
    nodes, job ids, status, window, warnings."""
    out = []
    for i, (r, s) in enumerate(zip(runs, series, strict=True)):
        m, cfg = r.manifest, resolved_config(r.manifest)
        d = dispatch(m)
        job = d.get("slurm_job_id") or m.get("slurm_job_ids") or ""
        if d.get("array_job_id") is not None:
            job = f"{job} (array {d['array_job_id']}_{d.get('array_index')})"
        emu = m.get("emulator") if isinstance(m.get("emulator"), dict) else {}
        facts = {
            "framework": f"{m['framework']} {m.get('framework_version', '')}".strip(),
            "mode": badge(m["mode"])
            + (f" (native mode {emu['native_mode']})" if emu.get("native_mode") else ""),
            "status": m["status"] + (f" — {failure_reason(m)}" if failure_reason(m) else ""),
            "emulator policy": emu.get("policy", ""),
            "emulator hardware": source_label(emu.get("hardware_source")) or "",
            "cluster": m.get("cluster") or cfg.get("cluster", {}).get("name", ""),
            "executor": d.get("executor", ""),
            "nodes": _join(d.get("node_list") or m.get("nodes") or ""),
            "GPUs": d.get("gpus") or "",
            "Slurm job id": _join(job),
            "requeues": d.get("requeues") or "",
            "submitted / started / ended": " / ".join(
                str(d.get(k) or "–") for k in ("submitted_at", "started_at", "ended_at")
            )
            if d
            else "",
            "overrides": " ".join(map(str, m.get("overrides") or [])),
            "suite revision": m.get("git_revision") or "",
            "versions": _join(m.get("versions") or ""),
            "source logs": m.get("source_logs") or "",
            "parsed files": _join(m.get("parsed_files") or ""),
            "skipped log lines": m.get("skipped_lines") or "",
            "steady-state window": _window_text(r.metrics.get("window")),
            "where a step goes (steady mean)": phases_text(r.metrics.get("phases")),
            "wall time": wall_text(r.metrics.get("wall_breakdown")),
        }
        workload = {k: cfg[k] for k in ("workload", "experiment", "model", "hardware") if k in cfg}
        out.append(
            {
                "anchor": f"run-{i}",
                "run_id": r.run_id,
                "label": r.label,
                "path": str(r.paths.root),
                "facts": {k: str(v) for k, v in facts.items() if v not in ("", None)},
                "workload": json.dumps(workload, indent=2, default=str) if workload else "",
                "provenance": {
                    name: json.dumps(m[key], indent=2, default=str)
                    for key, name in (("run_info", "Native run info"), ("emulator", "Emulator provenance"))
                    if m.get(key)
                },
                "notes": [str(n) for n in emu.get("notes") or []],
                "launch": _launch_files(r),
                "warnings": _warnings(r, s),
                "missing": sorted(r.missing.items()),
                "inferred": inferred_rows(m),
                "verdict": verdicts[i] if verdicts else None,
                "metrics": all_metrics(r, df, i) if df is not None else [],
                "ledger": ledger_rows(ledgers[i][0]) if ledgers else [],
                "ledger_note": ledgers[i][1] if ledgers else "",
                "speed_of_light": speed_of_light.view(speed_of_light.of_run(r.paths, m, r.metrics)),
            }
        )
    return out


def inferred_rows(manifest: dict[str, Any]) -> list[dict[str, str]]:
    """manifest `inferred` (what ran, read from the logs by ingest) as rows: value, and its
    source (file:line, "given") or the reason it is unknown. Nested roles (gpus.trainer) flatten."""
    inf = manifest.get("inferred")
    rows: list[dict[str, str]] = []
    for key, v in inf.items() if isinstance(inf, dict) else ():
        if isinstance(v, dict) and "value" not in v and "source" not in v:
            rows += [{"key": f"{key}.{k}", **_inferred_cell(x)} for k, x in v.items() if isinstance(x, dict)]
        elif isinstance(v, dict):  # an unknown model's reason is its `model_evidence`
            rows.append({"key": key, **_inferred_cell(v, inf.get(f"{key}_evidence"))})
        else:
            rows.append({"key": key, "value": str(v), "source": ""})
    return rows


def _inferred_cell(v: dict[str, Any], evidence: Any = None) -> dict[str, str]:
    value = v.get("name") or v.get("value")
    if value is None:
        return {"value": "unknown", "source": str(v.get("reason") or evidence or "no reason recorded")}
    shown = json.dumps(value, default=str) if isinstance(value, dict | list) else str(value)
    return {"value": shown, "source": str(v.get("source") or "source not recorded")}


def _join(v: Any) -> str:
    """Lists and dicts as one readable line; anything else as str."""
    if isinstance(v, dict):
        return ", ".join(f"{k} {x}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return ", ".join(map(str, v))
    return str(v)


def _window_text(w: Any) -> str:
    if not isinstance(w, dict) or w.get("first_step") is None:
        return ""
    return f"steps {w['first_step']}–{w.get('last_step')} ({w.get('rule', 'rule not stated')})"


# CommonMark reads `<` before a letter, `/`, `!` or `?` as raw HTML (or an autolink) and `&name;`
# as an entity; a backslash before them keeps them text. `->`, `a < b` and `R&D` need nothing.
_MD_MARKUP = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?\w+;)")


def md_cell(text: Any) -> str:
    """Escape a value for Markdown (a table cell, a list item): no raw HTML, no column breaks, one
    line, and no HTML entities, so the page reads the same as plain text and rendered. Backslashes
    are doubled first, so a value's own backslash cannot undo an escape."""
    s = str(text).replace("\\", "\\\\")
    s = _MD_MARKUP.sub(lambda m: "\\" + m.group(0), s)
    return s.replace("|", "\\|").replace("\n", " ").replace("`", "\\`")


def environment() -> jinja2.Environment:
    """Jinja2 environment over bench/report/templates.

    HTML templates autoescape; the Markdown template does not (HTML entities would show
    literally) and instead passes every value through the `md` filter, which escapes it.
    """
    loader = jinja2.FileSystemLoader(str(resources.files("bench.report") / "templates"))
    autoescape = jinja2.select_autoescape(
        enabled_extensions=("html.j2",), disabled_extensions=("md.j2",), default=True
    )
    env = jinja2.Environment(
        loader=loader,
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["md"] = md_cell
    env.filters["counted"] = counted
    return env


def write(out_dir: Path, context: dict[str, Any]) -> tuple[Path, Path]:
    """Render index.html and summary.md into out_dir; return both paths."""
    env = environment()
    html = out_dir / "index.html"
    md = out_dir / "summary.md"
    html.write_text(env.get_template("index.html.j2").render(**context))
    md.write_text(env.get_template("summary.md.j2").render(**context))
    return html, md
