"""Summary table model, key findings and the Jinja2 rendering of index.html and summary.md.

Everything a log or config contributes is text passed to templates with autoescape on, so a
`<script>` in a parser warning shows as text. Markdown cells are escaped by `md_cell`.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from bench.report.load import (
    METRIC_COLUMNS,
    Column,
    Run,
    dispatch,
    failure_reason,
    matching_point,
    resolved_config,
)
from bench.report.series import Series

NOT_REPORTED = "not reported"
LAUNCH_FILE_MAX = 20_000  # characters of one launch file shown in the report; the rest is cut
FINDING_NAMES = 3  # runs named in one finding; more ties are counted, not listed
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


def best_rows(df: pd.DataFrame, col: Column) -> set[int]:
    """Row positions holding the column's best value (ties all marked); empty when the column is
    unranked, has fewer than two values, or all values are equal (nothing to single out)."""
    s = df[col.key].astype(float)
    s = s[s.notna()]
    if col.better is None or s.nunique() < 2:
        return set()
    if col.better == "higher":
        target = s.max()
        return {i for i, v in s.items() if v == target}
    if col.better == "lower":
        target = s.min()
        return {i for i, v in s.items() if v == target}
    dist = s.map(lambda v: abs(math.log(v)) if v > 0 else math.inf)  # "one": closest to 1
    return {i for i, v in dist.items() if v == dist.min()}


def table(runs: list[Run], df: pd.DataFrame) -> dict[str, Any]:
    """Header and cells of the summary table: value, badge, best flag, or the reason it is missing."""
    best = {c.key: best_rows(df, c) for c in METRIC_COLUMNS}
    rows = []
    for i, run in enumerate(runs):
        mode = str(df.at[i, "mode"])
        cells = []
        for c in METRIC_COLUMNS:
            v = df.at[i, c.key]
            if pd.isna(v):
                reason = run.missing.get(c.key, "not in metrics.json")
                cells.append(
                    {"text": NOT_REPORTED, "reason": reason, "missing": True, "badge": "", "best": False}
                )
            else:
                cells.append(
                    {
                        "text": fmt(float(v), c),
                        "reason": "",
                        "missing": False,
                        "badge": badge(mode),
                        "best": i in best[c.key],
                    }
                )
        rows.append(
            {
                "run_id": df.at[i, "run_id"],
                "framework": df.at[i, "framework"],
                "sweep": df.at[i, "sweep"],
                "mode": badge(mode),
                "status": df.at[i, "status"],
                "cells": cells,
                "anchor": f"run-{i}",
            }
        )
    better = {"higher": "↑ higher is better", "lower": "↓ lower is better", "one": "closest to 1 is best"}
    header = [
        {"label": c.label, "unit": c.unit, "better": better.get(c.better or "", "not ranked")}
        for c in METRIC_COLUMNS
    ]
    return {"header": header, "rows": rows, "has_sweep": bool(df["sweep"].str.len().gt(0).any())}


def findings(runs: list[Run], df: pd.DataFrame) -> list[str]:
    """A few plain sentences: leaders on the ranked headline columns, failed runs, sweep matches."""
    out = []
    cols = {c.key: c for c in METRIC_COLUMNS}
    for key in ("trajectories_per_s", "trainer_idle_frac", "mfu", "staleness_mean", "cost_per_mtok_usd"):
        c, rows = cols[key], sorted(best_rows(df, cols[key]))
        if rows:
            names = [
                f"{df.at[i, 'framework']}{' ' + df.at[i, 'sweep'] if df.at[i, 'sweep'] else ''}"
                f" ({badge(str(df.at[i, 'mode']))})"
                for i in rows
            ]
            who = ", ".join(names[:FINDING_NAMES])
            if len(names) > FINDING_NAMES:
                who += f" and {len(names) - FINDING_NAMES} more runs tied"
            word = {"higher": "Highest", "lower": "Lowest"}[c.better]
            out.append(
                f"{word} {_lower_first(c.label)}: {who} at {fmt(float(df.at[rows[0], key]), c)} {c.unit}".rstrip()
            )
    for i, r in enumerate(runs):
        if r.manifest["status"] != "completed":
            why = failure_reason(r.manifest) or "no reason recorded"
            out.append(f"Run {df.at[i, 'run_id']} ({df.at[i, 'framework']}) is {r.manifest['status']}: {why}")
    sw = df.dropna(subset=["sweep_value"])
    for fw, g in sw.groupby("framework"):
        j = matching_point(g) if g["sweep_value"].nunique() >= 2 else None
        if j is not None:
            out.append(
                f"{fw}: production matches consumption best at {g.at[j, 'sweep']} "
                f"(production ÷ consumption {g.at[j, 'prod_cons_ratio']:.2f}, {badge(str(g.at[j, 'mode']))})"
            )
    n_missing = sum(df[c.key].isna().sum() for c in METRIC_COLUMNS)
    if n_missing:
        out.append(f"{n_missing} table cells are not reported; each names its reason.")
    modes = sorted({badge(m) for m in df["mode"]})
    out.append("Numbers are " + " and ".join(modes) + "; every cell carries its badge.")
    return out


def _lower_first(label: str) -> str:
    """'Trainer idle' -> 'trainer idle' inside a sentence; acronyms ('MFU (suite)') stay."""
    return label if label[:2].isupper() else label[:1].lower() + label[1:]


def _launch_files(run: Run) -> list[dict[str, str]]:
    files = []
    if run.paths.launch.is_dir():
        for p in sorted(run.paths.launch.iterdir()):
            if p.is_file():
                text = p.read_text(errors="replace")
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


def run_details(runs: list[Run], series: list[Series]) -> list[dict[str, Any]]:
    """Per run: workload, launch files, versions, cluster, nodes, job ids, status, window, warnings."""
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
            }
        )
    return out


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


def md_cell(text: Any) -> str:
    """Escape a value for a Markdown table cell: no raw HTML, no column breaks, one line."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
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
    return env


def write(out_dir: Path, context: dict[str, Any]) -> tuple[Path, Path]:
    """Render index.html and summary.md into out_dir; return both paths."""
    env = environment()
    html = out_dir / "index.html"
    md = out_dir / "summary.md"
    html.write_text(env.get_template("index.html.j2").render(**context))
    md.write_text(env.get_template("summary.md.j2").render(**context))
    return html, md
