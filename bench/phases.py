"""Where every second goes: a trainer step split into its phases (bench.trace.step_phases) over the
steady window, and the run's wall time split into start-up, steps, gaps and teardown. The numbers of
metrics.json `phases` and `wall_breakdown` (docs/metrics.md "Phases"), read by the report."""

from __future__ import annotations

from typing import Any

import pandas as pd

from bench.trace import STEP_PHASES, step_phases

PHASE_NAMES = {
    "wait_s": "waiting for rollouts",
    "score_s": "reward and scoring",
    "ref_s": "reference log-prob",
    "old_logprob_s": "old log-prob",
    "logprob_s": "log-prob (old and reference, not split)",
    "adv_s": "advantage",
    "compute_s": "update",
    "sync_s": "weight sync",
    "handoff_s": "hand-off",
    "checkpoint_s": "checkpoint save",
    "validation_s": "validation",
    "data_s": "data loading",
    "unattributed_s": "unattributed",
}
GENERATION_PHASE = "generation (colocated: the trainer's GPUs generate)"


def colocated(manifest: dict) -> bool | None:
    """Whether trainer and generator share GPUs: the launched config's placement, or an ingested run's
    `hybrid` GPU role; None when neither says."""
    placement = ((manifest.get("config") or {}).get("experiment") or {}).get("placement")
    if placement:  # an enum's string form too ("Placement.colocated")
        return str(placement).rsplit(".", 1)[-1] == "colocated"
    gpus = (manifest.get("inferred") or {}).get("gpus") or {}
    if not gpus:
        return None
    return bool((gpus.get("hybrid") or {}).get("value"))


def phases(steps: pd.DataFrame, manifest: dict) -> dict[str, Any]:
    """Where the steady window's step time goes: per STEP_PHASES phase, mean seconds per step and
    share of Σ_W step_s (the parts sum to the step; `unattributed` closes it). wait_s is named the
    generation phase in a colocated run."""
    if steps.empty or steps["step_s"].isna().all():
        return {"missing": "the trace has no step_s"}
    ph = step_phases(steps)
    total = float(steps["step_s"].sum())
    names = dict(PHASE_NAMES)
    if colocated(manifest):
        names["wait_s"] = GENERATION_PHASE
    out = {
        col: {
            "name": names[col],
            "s_per_step": float(ph[col].sum()) / len(steps),
            "share": float(ph[col].sum()) / total if total > 0 else None,
            "steps_logged": int(ph[col].notna().sum()),
        }
        for col in STEP_PHASES
        if col in ph.columns and ph[col].notna().any()
    }
    largest = max(out, key=lambda k: out[k]["s_per_step"]) if out else None
    return {
        "window": "steady steps (metrics.json window): seconds per step and share of their summed step_s",
        "step_s": total / len(steps),
        "largest": largest,
        "parts": out,
    }


def wall_breakdown(steps: pd.DataFrame, manifest: dict, wall: float | None, window: str) -> dict[str, Any]:
    """The run's wall time `wall` (s, over `window`: metrics.json wall_window) split into start-up,
    steps, gaps between steps, overlap (steps timed concurrently) and teardown, seconds; a part the
    run does not show is null with the reason. Work logged outside the steps (checkpoint and
    validation timers no parser places between steps) is inside the gaps."""
    s = steps.dropna(subset=["t_start_s", "t_end_s"])
    out: dict[str, Any] = {"wall_s": wall, "window": window, "missing": {}}
    out["steps_s"] = float(steps["step_s"].sum()) if steps["step_s"].notna().any() else None
    if s.empty or wall is None:
        out["missing"]["startup_s"] = out["missing"]["teardown_s"] = out["missing"]["gaps_s"] = (
            "the trace does not place steps in time (t_start_s, t_end_s)" if s.empty else "wall time unknown"
        )
        return out
    timed_from_start = (manifest.get("wall_window") or {}).get("window") == "harness" or (
        manifest.get("wall_s") is not None and manifest.get("mode") == "emulated"
    )
    between = s["t_start_s"].to_numpy()[1:] - s["t_end_s"].to_numpy()[:-1]
    out["gaps_s"] = float(between[between > 0].sum())
    out["overlap_s"] = float(-between[between < 0].sum()) + 0.0  # + 0.0: no -0.0
    if timed_from_start:
        out["startup_s"] = float(s["t_start_s"].min())
        out["teardown_s"] = float(wall - s["t_end_s"].max())
    else:
        why = "the wall window starts at the first step: start-up and teardown are not seen"
        out["missing"]["startup_s"] = out["missing"]["teardown_s"] = why
    return out
