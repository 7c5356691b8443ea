"""Tail latency of rollouts, where the trace has one row per rollout (trace/rollouts.parquet).

A rollout's latency is t_finish_s - t_dispatch_s (s): dispatch to the end of its generation,
tool and environment time included, queueing for a free engine slot included. Per trainer step
(the step that consumed the rollout) the p50, p95 and p99 are taken, and the straggler ratio
max / median: how much longer the slowest rollout of a step took than its typical one. A
synchronous step waits for its slowest rollout, so the ratio is the step's tail sensitivity.
Summaries are over the steady-state window's steps: the mean of each per-step figure and the
largest straggler ratio.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

COLUMNS = ["step_consumed", "t_dispatch_s", "t_finish_s", "status"]
MIN_ROLLOUTS = 2  # a step with one rollout has no distribution


def per_step(rollouts: pd.DataFrame) -> pd.DataFrame:
    """One row per step: n, p50_s, p95_s, p99_s, max_s, straggler_ratio (max / median)."""
    r = rollouts[rollouts.step_consumed.notna() & rollouts.t_dispatch_s.notna() & rollouts.t_finish_s.notna()]
    lat = (r.t_finish_s - r.t_dispatch_s).to_numpy()
    df = pd.DataFrame({"step": r.step_consumed.astype(int).to_numpy(), "lat": lat})
    rows = []
    for step, g in df.groupby("step"):
        x = g.lat.to_numpy()
        if len(x) < MIN_ROLLOUTS:
            continue
        p50, p95, p99 = np.percentile(x, [50, 95, 99])
        rows.append(
            {
                "step": int(step),
                "n": len(x),
                "p50_s": float(p50),
                "p95_s": float(p95),
                "p99_s": float(p99),
                "max_s": float(x.max()),
                "straggler_ratio": float(x.max() / p50) if p50 > 0 else None,
            }
        )
    return pd.DataFrame(rows)


def summary(rollouts: pd.DataFrame | None, first: int, last: int) -> dict[str, Any]:
    """Window summary of per_step (steps first..last), or {"missing": reason}."""
    if rollouts is None or rollouts.empty:
        return {"missing": "no per-rollout trace (trace/rollouts.parquet)"}
    if not set(COLUMNS) <= set(rollouts.columns) or rollouts.t_dispatch_s.isna().all():
        return {"missing": "the rollout trace has no dispatch/finish times"}
    steps = per_step(rollouts)
    if steps.empty:
        return {"missing": f"no step has {MIN_ROLLOUTS} or more timed rollouts"}
    w = steps[(steps.step >= first) & (steps.step <= last)]
    if w.empty:
        return {"missing": "no timed rollouts in the steady-state window"}
    ratio = w.straggler_ratio.dropna()
    return {
        "definition": "rollout latency = t_finish_s - t_dispatch_s; per step p50/p95/p99, then the window mean",
        "steps": len(w),
        "p50_s": float(w.p50_s.mean()),
        "p95_s": float(w.p95_s.mean()),
        "p99_s": float(w.p99_s.mean()),
        "straggler_ratio_mean": float(ratio.mean()) if len(ratio) else None,
        "straggler_ratio_max": float(ratio.max()) if len(ratio) else None,
    }
