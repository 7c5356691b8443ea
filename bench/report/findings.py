"""Key findings: differences that exceed the noise, ties said to be ties, constant inputs named.

A finding compares the leader of a ranked column with the runner-up. It names a difference only
when the gap exceeds the noise: the wider of the seed band (min-max over runs at one point that
differ only in seed) and NOISE_FLOOR of the larger value (for a point with one run). A column
whose values all come from one emulator input (MFU of emulated runs = `emulator.trainer_mfu`)
is reported as that input, never ranked. docs/metrics.md ("Findings") states the same rules.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from bench.report.load import METRIC_COLUMNS, REPORT_COLUMNS, Column, Run, failure_reason, resolved_config

# Relative noise floor for a point measured once: the seed-to-seed spread of the smoke runs'
# window rates (docs/metrics.md "Findings" gives the measurement).
NOISE_FLOOR = 0.05
RANKED = (
    "trajectories_per_s",
    "trainer_idle_frac",
    "mfu",
    "token_waste",
    "staleness_mean",
    "cost_per_mtok_usd",
)
# Metrics an emulated run takes from one config input rather than from its schedule.
EMULATOR_INPUT = {"mfu": "emulator.trainer_mfu"}
COLS = {c.key: c for c in METRIC_COLUMNS + REPORT_COLUMNS}


def _name(df: pd.DataFrame, i: int) -> str:
    sweep = f" {df.at[i, 'sweep']}" if df.at[i, "sweep"] else ""
    mode = "measured" if df.at[i, "mode"] == "native" else "emulated"
    return f"{df.at[i, 'framework']}{sweep} ({mode})"


def _fmt(v: float, c: Column) -> str:
    unit = "%" if c.unit.startswith("%") else (" " + c.unit if c.unit else "")
    return f"{v * c.scale:,.{c.digits}f}{unit}"


def _config_value(run: Run, dotted: str) -> Any:
    node: Any = resolved_config(run.manifest)
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def points(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per point (framework, sweep label, mode): mean value, seed band (max - min), runs, first row."""
    d = df.dropna(subset=[key]).reset_index().rename(columns={"index": "row"})
    g = d.groupby(["framework", "sweep", "mode"], sort=False)[key]
    out = pd.DataFrame({"value": g.mean(), "band": g.max() - g.min(), "n": g.size()})
    out["row"] = d.groupby(["framework", "sweep", "mode"], sort=False)["row"].first()
    return out.reset_index()


def _top2(df: pd.DataFrame, col: Column) -> tuple[pd.DataFrame, pd.Series, pd.Series, float] | None:
    """Points sorted best first, the best two, and the noise their gap must exceed; None when the
    column is unranked, absent or has fewer than two points."""
    if col.key not in df:
        return None
    pts = points(df, col.key)
    if len(pts) < 2 or col.better not in ("higher", "lower"):
        return None
    pts = pts.sort_values("value", ascending=col.better == "lower").reset_index(drop=True)
    a, b = pts.iloc[0], pts.iloc[1]
    return pts, a, b, max(NOISE_FLOOR * max(abs(a.value), abs(b.value)), a.band, b.band)


def compare(df: pd.DataFrame, col: Column) -> str | None:
    """One sentence on column `col`: the leader beyond noise, or a tie; None with < 2 points."""
    top = _top2(df, col)
    if top is None:
        return None
    pts, a, b, noise = top
    label = col.label[:1].lower() + col.label[1:] if not col.label[:2].isupper() else col.label
    if pts["value"].nunique() == 1:
        return f"{col.label}: tie — {_fmt(a.value, col)} on all {len(pts)} points that report it"
    if abs(a.value - b.value) <= noise:
        tied = pts[(pts["value"] - a.value).abs() <= noise]
        names = ", ".join(_name(df, int(r)) for r in tied["row"][:4])
        more = f" and {len(tied) - 4} more" if len(tied) > 4 else ""
        lo, hi = tied["value"].min(), tied["value"].max()
        return (
            f"{col.label}: tie — {names}{more} lie within the noise "
            f"({_fmt(lo, col)} to {_fmt(hi, col)}; noise ±{_fmt(noise, col)})"
        )
    why = (
        "seed band" if max(a.band, b.band) >= NOISE_FLOOR * max(abs(a.value), abs(b.value)) else "noise floor"
    )
    word = "highest" if col.better == "higher" else "lowest"
    return (
        f"{_name(df, int(a.row))} has the {word} {label}: {_fmt(a.value, col)} vs {_fmt(b.value, col)} for "
        f"{_name(df, int(b.row))} (gap {_fmt(abs(a.value - b.value), col)}, beyond the {why} of {_fmt(noise, col)})"
    )


def constant_input(runs: list[Run], df: pd.DataFrame, key: str) -> str | None:
    """When every run is emulated with one value of the input that sets `key`, say so."""
    dotted = EMULATOR_INPUT.get(key)
    if not dotted or not len(df) or (df["mode"] != "emulated").any():
        return None
    values = {repr(_config_value(r, dotted)) for r in runs}
    if len(values) != 1 or "None" in values:
        return None
    c = COLS[key]
    shown = df[key].dropna()
    span = _fmt(shown.min(), c) if len(shown) else "not reported"
    if len(shown) and _fmt(shown.max(), c) != span:
        span += f"–{_fmt(shown.max(), c)}"
    return (
        f"{c.label} ({span}) is set by the emulator's input {dotted} = {values.pop()} on every run: "
        "not a difference between frameworks"
    )


def findings(runs: list[Run], df: pd.DataFrame, not_ran: list[Run]) -> list[str]:
    """Plain sentences: per ranked column a lead beyond noise or a tie; sweeps are in the sweep section."""
    out = []
    for key in RANKED:
        note = constant_input(runs, df, key)
        sentence = note or compare(df, COLS[key])
        if sentence:
            out.append(sentence)
    for r in runs:
        if r.manifest["status"] != "completed":
            why = failure_reason(r.manifest) or "no reason recorded"
            out.append(f"Run {r.run_id} ({r.manifest['framework']}) is {r.manifest['status']}: {why}")
    if not_ran:
        out.append(f"{len(not_ran)} run(s) did not run; they are listed under “Runs that did not run”.")
    modes = sorted({"measured" if m == "native" else "emulated" for m in df["mode"]})
    out.append(
        "Numbers are "
        + " and ".join(modes)
        + f"; differences under the noise (seed band, or {NOISE_FLOOR:.0%} "
        "of the value for a single run) are called ties."
    )
    return out


def leader_rows(df: pd.DataFrame, col: Column) -> set[int]:
    """Rows of the column's leading point when its lead exceeds the noise (else empty: a tie)."""
    top = _top2(df, col)
    if top is None or abs(top[1].value - top[2].value) <= top[3]:
        return set()
    a = top[1]
    same = (df["framework"] == a.framework) & (df["sweep"] == a.sweep) & (df["mode"] == a["mode"])
    return set(df.index[same & df[col.key].notna()])


VERDICT_LINES = 6  # more runs than this: one verdict line per label, each run's in the table


def verdict_groups(df: pd.DataFrame, verdicts: list) -> list[dict[str, str]]:
    """One line per verdict label: how many runs, which, the range of the deciding numbers, and
    the cause and action of the first run with that label (a sweep's verdicts read at a glance)."""
    out = []
    for label in dict.fromkeys(v.label for v in verdicts):
        idx = [i for i, v in enumerate(verdicts) if v.label == label]
        names = [
            f"{df.at[i, 'framework']}{' ' + df.at[i, 'sweep'] if df.at[i, 'sweep'] else ''}" for i in idx
        ]
        names = list(dict.fromkeys(names))
        shown = ", ".join(names[:3]) + (f" … {names[-1]}" if len(names) > 3 else "")
        ranges = []
        for name in verdicts[idx[0]].deciding:
            vals = [verdicts[i].deciding.get(name) for i in idx]
            vals = [v for v in vals if v is not None]
            if vals:
                lo, hi = 100 * min(vals), 100 * max(vals)
                ranges.append(f"{name} {lo:.1f}%" + (f"–{hi:.1f}%" if f"{hi:.1f}" != f"{lo:.1f}" else ""))
        first = verdicts[idx[0]]
        out.append(
            {
                "label": label,
                "runs": f"{len(idx)} run{'s' if len(idx) != 1 else ''}: {shown}",
                "numbers": " · ".join(ranges),
                "cause": first.cause,
                "action": first.action,
                "example": names[0],
            }
        )
    return out
