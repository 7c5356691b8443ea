"""A sweep's answer: where production reaches consumption, and which point to run.

Pure functions of one framework's rows of the summary (columns sweep_value,
production_samples_per_s, consumption_samples_per_s, prod_cons_ratio, trainer_idle_frac,
cost_per_mtok_usd, ...). Several runs at one swept value (seeds) are pooled: their mean is the
point, their min-max the seed band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from bench.report.load import MATCH_TOLERANCE

MEET = math.exp(-MATCH_TOLERANCE)  # production ÷ consumption at or above this counts as met (≈ 0.95)


def points(group: pd.DataFrame) -> pd.DataFrame:
    """Mean, min and max of each numeric column per swept value (seed band), sorted by value."""
    g = group.dropna(subset=["sweep_value"]).select_dtypes("number")
    agg = g.groupby("sweep_value").agg(["mean", "min", "max"])
    agg.columns = [f"{c}_{stat}" if stat != "mean" else c for c, stat in agg.columns]
    agg["n_runs"] = g.groupby("sweep_value").size()
    return agg.reset_index()


def sweep_key(summary: pd.DataFrame) -> str:
    """The first swept key's short name ('generator_gpus'), from the summary's sweep labels."""
    return summary["sweep"].iloc[0].split(",")[0].split("=")[0]


def crossing(pts: pd.DataFrame) -> float | None:
    """Swept value where production first reaches MEET × consumption, linearly interpolated
    between the two points around it; None when no point reaches it (or the first already does:
    then the crossing lies at or below the sweep's first value, returned as that value)."""
    r = (pts["production_samples_per_s"] / pts["consumption_samples_per_s"]).to_numpy()
    x = pts["sweep_value"].to_numpy()
    for i, ratio in enumerate(r):
        if ratio == ratio and ratio >= MEET:
            if i == 0:
                return float(x[0])
            r0 = r[i - 1]
            if r0 != r0:
                return float(x[i])
            return float(x[i - 1] + (MEET - r0) / (ratio - r0) * (x[i] - x[i - 1]))
    return None


@dataclass
class Recommendation:
    """The point to run and why, in one sentence."""

    sweep_value: float
    reason: str


def recommend(pts: pd.DataFrame, key: str) -> Recommendation | None:
    """The point with the lowest $ / M trained tokens (what a GPU-hour buys), with the trade-off
    named: whether production meets consumption there, and the cheapest point where it does.
    Without costs: the first point where production meets consumption."""
    d = pts.dropna(subset=["production_samples_per_s", "consumption_samples_per_s"])
    if d.empty:
        return None
    ratio = d["production_samples_per_s"] / d["consumption_samples_per_s"]
    met = d[ratio >= MEET]
    cost = "cost_per_mtok_usd"
    if d[cost].notna().any():
        j = d[cost].idxmin()
        v = float(d.at[j, "sweep_value"])
        reason = f"{key}={v:g}: lowest $ / M trained tokens (${d.at[j, cost]:.3f})"
        if ratio[j] >= MEET:
            return Recommendation(
                v, reason + f", and production meets consumption there (ratio {ratio[j]:.2f})"
            )
        reason += f", with production at {ratio[j]:.2f} of consumption (trainer idle {_pct(d.at[j, 'trainer_idle_frac'])})"
        if met.empty:
            k = ratio.idxmax()
            reason += (
                f"; no point reaches production = consumption, {key}={d.at[k, 'sweep_value']:g} comes closest "
                f"(ratio {ratio[k]:.2f}, ${d.at[k, cost]:.3f}): extend the sweep past it for throughput"
            )
        if not met.empty and met[cost].notna().any():
            k = met[cost].idxmin()
            reason += (
                f"; for throughput, {key}={d.at[k, 'sweep_value']:g} is the cheapest point where production "
                f"meets consumption (${d.at[k, cost]:.3f}, {d.at[k, 'production_samples_per_s'] / d.at[j, 'production_samples_per_s']:.2f}× the production)"
            )
        return Recommendation(v, reason)
    if met.empty:
        j = ratio.idxmax()
        return Recommendation(
            float(d.at[j, "sweep_value"]),
            f"no $ / M tokens and no point where production meets consumption; {key}={d.at[j, 'sweep_value']:g} "
            f"comes closest (ratio {ratio[j]:.2f}): extend the sweep past it",
        )
    j = met.index[0]
    return Recommendation(
        float(d.at[j, "sweep_value"]),
        f"{key}={d.at[j, 'sweep_value']:g}: the first point where production meets consumption (no $ / M tokens to compare)",
    )


def _pct(v: float) -> str:
    return "not reported" if v != v else f"{100 * v:.0f}%"
