"""Trace files -> small per-run frames for the figures (downsampled, only needed columns).

Each run is read once and reduced at once, so a 100-run sweep never holds every trace:
steps to at most MAX_POINTS rows, rollouts to a staleness histogram and a production-rate
series. A trace that breaks the contract is skipped with a warning naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from bench.report.diagnose import run_resources
from bench.report.evidence import cap_evidence, phase_evidence, rollout_evidence, step_evidence
from bench.report.load import Run, resolved_config
from bench.trace import TraceError, read_rollouts, read_steps

MAX_POINTS = 200  # per run and series: ~3 px apart on a 7-inch figure at 90 dpi, cheap to draw

STEP_COLUMNS = [
    "step",
    "t_start_s",
    "t_end_s",
    "step_s",
    "wait_s",
    "gen_s",
    "logprob_s",
    "compute_s",
    "sync_s",
    "samples",
    "discarded_samples",
    "filtered_samples",
    "response_tokens",
    "staleness_mean",
    "generated_tokens",
    "solve_all_frac",
    "solve_none_frac",
]
ROLLOUT_COLUMNS = [
    "group_id",
    "step_consumed",
    "policy_version_start",
    "t_dispatch_s",
    "t_finish_s",
    "response_tokens",
    "env_s",
    "reward",
    "status",
]


@dataclass
class Series:
    """What the figures need from one run's trace/ directory."""

    steps: pd.DataFrame | None = None  # per step (binned to <= MAX_POINTS), derived rate columns
    # metrics.json `phases`: mean seconds per steady step by phase (bench.trace.STEP_PHASES), with
    # their names; the parts sum to the step (unattributed included)
    breakdown: dict[str, dict[str, Any]] | None = None
    production: pd.DataFrame | None = None  # t_s, production_per_s, queue_depth (from rollouts)
    staleness: pd.Series | None = None  # versions behind -> rollouts trained (from rollouts)
    staleness_source: str = ""
    gpu: pd.DataFrame | None = None  # t_s, util_pct, power_w (mean over devices, binned)
    evidence: dict[str, float | None] = field(default_factory=dict)  # bench.report.evidence shares
    fates: dict[str, float] | None = None  # generated response tokens per fate (rollouts.parquet)
    trained_response_tokens: float | None = None  # Σ response_tokens of trained samples, whole run
    generated_tokens: float | None = None  # Σ generated response tokens, whole run (steps.parquet)
    batch_samples: float | None = None  # median samples per trainer step (the batch a step waits for)
    warnings: list[str] = field(default_factory=list)


def _bin(df: pd.DataFrame, by: str, n: int = MAX_POINTS) -> pd.DataFrame:
    """Mean of every column over n equal-count bins of `by` (no-op when already short)."""
    if len(df) <= n:
        return df.reset_index(drop=True)
    groups = np.arange(len(df)) * n // len(df)
    return df.groupby(groups).mean(numeric_only=True).reset_index(drop=True)


def _window(run: Run, steps: pd.DataFrame) -> pd.DataFrame:
    w = run.metrics.get("window") or {}
    lo, hi = w.get("first_step"), w.get("last_step")
    if lo is None or hi is None:
        return steps
    sel = steps[(steps["step"] >= lo) & (steps["step"] <= hi)]
    return sel if len(sel) else steps


def _steps(run: Run, s: Series) -> None:
    if not run.paths.steps.is_file():
        return
    try:
        df = read_steps(run.paths.steps, columns=STEP_COLUMNS)
        present = _present(run, CAP_COLUMNS)
        caps = read_steps(run.paths.steps, columns=["step", *present]) if present else None
    except TraceError as e:
        s.warnings.append(f"steps.parquet skipped in figures: {e}")
        return
    df = df.sort_values("step").astype("float64")
    steady = _window(run, df)
    phases = run.metrics.get("phases") or {}
    if phases.get("parts"):
        s.breakdown = phases["parts"]
    s.evidence |= step_evidence(steady) | phase_evidence(phases)
    wl = resolved_config(run.manifest).get("workload") or {}
    cap = _pos(wl.get("max_response_len"))
    s.evidence["clip_frac"] = (
        cap_evidence(_window(run, caps.astype("float64")), cap) if caps is not None else None
    )
    if df["response_tokens"].notna().all():
        s.trained_response_tokens = float(df["response_tokens"].sum())
    if df["generated_tokens"].notna().all():
        s.generated_tokens = float(df["generated_tokens"].sum())
    if df["samples"].notna().any():
        s.batch_samples = float(df["samples"].median())
    # The table's two rates per step (docs/metrics.md): production = trained samples per second of
    # step wall time; consumption = trained samples per second of trainer compute (log-prob +
    # forward/backward/optimizer), i.e. what the trainer could take if never idle.
    step_s = df["step_s"].where(df["step_s"] > 0)
    busy = (df["logprob_s"].fillna(0) + df["compute_s"]).where(lambda b: b > 0)
    df["production_per_s"] = df["samples"] / step_s
    df["consumption_per_s"] = df["samples"] / busy
    df["trainer_idle"] = (df["wait_s"] / step_s).clip(0, 1)
    df["generator_idle"] = (1 - df["gen_s"] / step_s).clip(0, 1)
    if run_resources(run.manifest).placement == "colocated":
        # One GPU pool: gen_s is the generation phase of the step, not a separate pool's busy time.
        df["generator_idle"] = np.nan
        s.evidence["generator_idle_frac"] = None
    df["response_len"] = df["response_tokens"] / df["samples"].where(df["samples"] > 0)
    df["zero_advantage"] = df["solve_all_frac"] + df["solve_none_frac"]
    if df["staleness_mean"].notna().any():  # fallback histogram when there is no rollout trace
        s.staleness = df["staleness_mean"].dropna().round().astype("int64").value_counts().sort_index()
        s.staleness_source = "steps.parquet: staleness_mean per step (rounded); no per-rollout trace"
    s.steps = _bin(df, "step")


CAP_COLUMNS = ["native_response_clip_ratio", "native_response_length_max"]


def _present(run: Run, cols: list[str]) -> list[str]:
    """The ones of `cols` steps.parquet has (native_* columns are optional)."""
    names = set(pq.read_schema(run.paths.steps).names)
    return [c for c in cols if c in names]


def _rollouts(run: Run, s: Series, wall_s: float | None) -> None:
    if not run.paths.rollouts.is_file():
        return
    try:
        ro = read_rollouts(run.paths.rollouts, columns=ROLLOUT_COLUMNS)
    except TraceError as e:
        s.warnings.append(f"rollouts.parquet skipped in figures: {e}")
        return
    full = (
        read_steps(run.paths.steps, columns=["step", "t_start_s", "t_end_s"]) if s.steps is not None else None
    )
    step_ends = np.sort(full["t_end_s"].dropna().to_numpy(float)) if full is not None else np.array([])
    wl = resolved_config(run.manifest).get("workload") or {}
    ev, s.fates = rollout_evidence(
        ro, step_ends, _pos(wl.get("max_response_len")), _pos(wl.get("staleness_budget"), 0)
    )
    s.evidence |= ev
    used = ro[ro["step_consumed"].notna() & ro["policy_version_start"].notna()]
    if len(used):
        # The trainer at step k (1-based) holds policy version k - 1, so a rollout's staleness is
        # (k - 1) - policy_version_start: prime-rl's `(step-1) - policy.start`, and the emulator's.
        lag = (used["step_consumed"] - 1 - used["policy_version_start"]).astype("int64").clip(lower=0)
        s.staleness = lag.value_counts().sort_index()
        s.staleness_source = "rollouts.parquet: (step_consumed − 1) − policy_version_start"
    done = ro.loc[ro["status"].ne("aborted") & ro["t_finish_s"].notna(), "t_finish_s"].to_numpy(float)
    if len(done) == 0:
        return
    end = max(float(done.max()), float(wall_s or 0))
    # Bins one median trainer step wide: completions arrive in bursts, and a per-step rate is
    # what the production line beside it shows.
    step_s = s.steps["step_s"].median() if s.steps is not None else np.nan
    n_bins = int(end / step_s) if step_s == step_s and step_s > 0 else len(done) // 5
    edges = np.linspace(0.0, end, min(MAX_POINTS, max(n_bins, 2)) + 1)
    counts, _ = np.histogram(done, bins=edges)
    width = edges[1] - edges[0]
    # Finished rollouts of any fate (trained, discarded later, filtered): the generators' output,
    # which exceeds production (trained samples / s) by the discard and filter share.
    prod = pd.DataFrame({"t_s": edges[1:], "finished_per_s": counts / width if width > 0 else np.nan})
    prod["queue_depth"] = np.nan
    if full is not None and full["t_start_s"].notna().any() and len(used):
        # Depth = trained rollouts finished but not yet taken: a rollout waits from t_finish_s until
        # the start of the step that trains it (rollouts dropped later never count as waiting).
        full = full.dropna(subset=["t_start_s"])
        start_of = pd.Series(full["t_start_s"].to_numpy(float), index=full["step"].to_numpy())
        fin = used["t_finish_s"].to_numpy(float)
        take = start_of.reindex(used["step_consumed"].to_numpy()).to_numpy(float)
        ok = ~(np.isnan(fin) | np.isnan(take))
        t = prod["t_s"].to_numpy()
        finished = np.searchsorted(np.sort(fin[ok]), t, side="right")
        taken = np.searchsorted(np.sort(take[ok]), t, side="right")
        prod["queue_depth"] = np.maximum(finished - taken, 0)
    s.production = prod


def _pos(v: Any, floor: float = 1e-12) -> float | None:
    """A config number >= floor as float, else None (absent or not a number: unknown, not 0)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or v < floor:
        return None
    return float(v)


def _gpu(run: Run, s: Series) -> None:
    if not run.paths.gpu.is_file():
        return
    try:
        g = pq.read_table(run.paths.gpu, columns=["t_s", "util_pct", "power_w"]).to_pandas()
    except (OSError, KeyError, ValueError) as e:
        s.warnings.append(f"gpu.parquet skipped in figures: {run.paths.gpu}: {e}")
        return
    g = g.groupby("t_s", as_index=False).mean(numeric_only=True).sort_values("t_s")
    s.gpu = _bin(g, "t_s")


def load_series(run: Run) -> Series:
    """Read and reduce one run's trace/ files (absent files leave their field None)."""
    s = Series()
    _steps(run, s)
    wall: Any = run.metrics.get("wall_s")
    _rollouts(run, s, float(wall) if isinstance(wall, int | float) else None)
    _gpu(run, s)
    return s
