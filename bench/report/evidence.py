"""Trace -> the report's own per-run numbers that bench.metrics does not compute: generator idle,
weight-sync share, scoring share, response-length tail, and the waste ledger (where generated
tokens went).

Pure functions of trace frames; bench.report.series calls them while it reads each run once.
Every share here is over the steady-state window (steps) or the whole run (rollouts, ledger),
as docs/metrics.md ("Verdict", "Waste ledger") states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

TAIL_QUANTILE = 0.99  # long-tail test: p99 response length over the median


def step_evidence(steady: pd.DataFrame) -> dict[str, float | None]:
    """Window shares from steps.parquet rows of the steady-state window (float columns).

    generator_idle_frac = 1 − Σ gen_s / Σ step_s; sync_share = Σ sync_s / Σ step_s (fractions).
    None when a column is absent on any window step (never filled with 0).
    """
    step = float(steady["step_s"].sum()) if steady["step_s"].notna().all() else 0.0
    out: dict[str, float | None] = {"generator_idle_frac": None, "sync_share": None}
    if step <= 0:
        return out
    if steady["gen_s"].notna().all():
        out["generator_idle_frac"] = float(min(1.0, max(0.0, 1.0 - steady["gen_s"].sum() / step)))
    if steady["sync_s"].notna().all():
        out["sync_share"] = float(steady["sync_s"].sum() / step)
    return out


# Phases of the trainer's own work (bench.trace.STEP_PHASES): log-prob passes and the update
TRAINER_WORK = ("ref_s", "old_logprob_s", "logprob_s", "adv_s", "compute_s")


def phase_evidence(phases: dict | None) -> dict[str, float | None]:
    """Window shares of the step from metrics.json `phases` (the same numbers the breakdown draws):
    checkpoint_share, validation_share, handoff_share, wait_share (the generation phase when colocated) and
    trainer_work_share (log-prob passes + advantage + update), fractions of Σ_W step_s. A phase the
    run never timed is None (unknown), not 0."""
    parts = (phases or {}).get("parts") or {}

    def share(*cols: str) -> float | None:
        vals = [parts[c]["share"] for c in cols if c in parts and parts[c].get("share") is not None]
        return float(sum(vals)) if vals else None

    return {
        "checkpoint_share": share("checkpoint_s"),
        "validation_share": share("validation_s"),
        "handoff_share": share("handoff_s"),
        "wait_share": share("wait_s"),
        "trainer_work_share": share(*TRAINER_WORK),
    }


def cap_evidence(steady: pd.DataFrame, max_response_len: float | None) -> float | None:
    """Share of responses that reach the response cap over the window, from the framework's own
    counters: verl's response_length/clip_ratio (mean), else 0.0 when its response_length/max stays
    below the cap on every step (no response reached it); None when neither is logged."""
    if "native_response_clip_ratio" in steady and steady["native_response_clip_ratio"].notna().any():
        return float(steady["native_response_clip_ratio"].mean())
    top = steady.get("native_response_length_max")
    if top is not None and top.notna().all() and max_response_len and float(top.max()) < max_response_len:
        return 0.0
    return None


@dataclass
class LedgerRow:
    """One fate of generated response tokens: tokens, and the run's GPU-hours and dollars
    apportioned by token share (an allocation, not a measurement; docs/metrics.md)."""

    fate: str
    tokens: float
    share: float  # of generated response tokens
    gpu_hours: float | None
    usd: float | None


# Fates in ledger order; the first is the only useful one.
FATES = {
    "trained": "trained (with advantage signal)",
    "zero_advantage": "trained, zero-advantage group (no gradient)",
    "filtered": "filtered as zero-advantage (dropped before training)",
    "oversampling": "discarded by oversampling (surplus or cancelled at batch fill)",
    "stale": "dropped as stale (over the staleness budget)",
    "in_flight": "in flight at the end of the run",
    "resumed": "partial segment resumed later",
}


def rollout_evidence(
    ro: pd.DataFrame, step_ends: np.ndarray, max_response_len: float | None, staleness_budget: float | None
) -> tuple[dict[str, float | None], dict[str, float]]:
    """(evidence, tokens per fate) from rollouts.parquet over the whole run.

    `step_ends`: sorted t_end_s of every trainer step; the policy version at time t is the number
    of steps ended by t. A discarded rollout whose generating version is more than
    `staleness_budget` behind at its finish was dropped as stale, else it was oversampling surplus.
    `aborted` rollouts unfinished, or finished after the last step, were in flight at the end.
    """
    ev: dict[str, float | None] = {
        "tail_ratio": None,
        "truncated_frac": None,
        "scoring_share": None,
        "stale_drop_frac": None,
        "truncated_tokens": None,
    }
    tok = ro["response_tokens"].astype(float)
    used = ro["status"].eq("used")
    if used.any():
        med = float(tok[used].median())
        if med > 0:
            ev["tail_ratio"] = float(tok[used].quantile(TAIL_QUANTILE)) / med
    if max_response_len and len(ro) and tok.notna().any():
        ev["truncated_tokens"] = float(tok[tok >= max_response_len].sum())
        ev["truncated_frac"] = ev["truncated_tokens"] / max(float(tok.sum()), 1.0)
    life = (ro["t_finish_s"] - ro["t_dispatch_s"]).where(ro["t_finish_s"].notna())
    if "env_s" in ro and ro["env_s"].notna().any() and life.sum() > 0:
        ok = life.notna() & ro["env_s"].notna()
        ev["scoring_share"] = float(ro.loc[ok, "env_s"].sum() / life[ok].sum())
    fates = _fates(ro, tok, used, step_ends, staleness_budget)
    total = sum(fates.values())
    if staleness_budget is not None and total > 0:
        ev["stale_drop_frac"] = fates["stale"] / total
    return ev, fates


def _fates(
    ro: pd.DataFrame, tok: pd.Series, used: pd.Series, step_ends: np.ndarray, budget: float | None
) -> dict[str, float]:
    status = ro["status"]
    last_end = float(step_ends[-1]) if len(step_ends) else np.inf
    fin = ro["t_finish_s"]
    in_flight = status.eq("aborted") & (fin.isna() | (fin >= last_end))
    cancelled = status.eq("aborted") & ~in_flight
    stale = pd.Series(False, index=ro.index)
    disc = status.eq("discarded")
    if budget is not None and len(step_ends) and disc.any():
        version = np.searchsorted(step_ends, fin[disc].fillna(last_end).to_numpy(float), side="right")
        lag = version - ro.loc[disc, "policy_version_start"].to_numpy(float)
        stale.loc[disc] = lag > budget
    zero = pd.Series(False, index=ro.index)
    if used.any() and ro.loc[used, "reward"].notna().all():
        rewards = ro.loc[used, ["group_id", "reward"]]
        flat = rewards.groupby("group_id")["reward"].transform("nunique").eq(1)
        zero.loc[used] = flat.to_numpy()
    return {
        "trained": float(tok[used & ~zero].sum()),
        "zero_advantage": float(tok[used & zero].sum()),
        "filtered": float(tok[status.eq("filtered")].sum()),
        "oversampling": float(tok[(disc & ~stale) | cancelled].sum()),
        "stale": float(tok[stale].sum()),
        "in_flight": float(tok[in_flight].sum()),
        "resumed": float(tok[status.eq("resumed")].sum()),
    }


def ledger(
    fates: dict[str, float] | None,
    trained_response: float | None,
    generated: float | None,
    gpu_hours: float | None,
    usd_per_gpu_hour: float | None,
    truncated: float | None = None,
) -> tuple[list[LedgerRow], str]:
    """Ledger rows and a one-line note on how they were split.

    With per-rollout fates, every generated response token lands in one row; `truncated` tokens
    (responses cut at the response cap, any fate) follow as an "of which" row outside the sum.
    Without fates, only trained vs not trained is known (steps.parquet response_tokens vs
    generated_tokens).
    """
    note = "Split by rollouts.parquet status, per generated response token."
    if not fates:
        if trained_response is None or not generated:
            return [], "No ledger: the trace has neither rollouts.parquet nor generated_tokens per step."
        fates = {"trained_all": trained_response, "not_split": max(0.0, generated - trained_response)}
        note = "No rollouts.parquet: only trained vs not trained is known (steps.parquet)."
    names = FATES | {
        "trained_all": "trained (zero-advantage share not split)",
        "not_split": "not trained (discarded, filtered or in flight; not split)",
    }
    total = sum(fates.values())
    rows = []
    for key, tokens in fates.items():
        if tokens <= 0 and key not in ("trained", "trained_all"):
            continue
        share = tokens / total if total > 0 else 0.0
        gh = share * gpu_hours if gpu_hours is not None else None
        usd = gh * usd_per_gpu_hour if gh is not None and usd_per_gpu_hour is not None else None
        rows.append(LedgerRow(names[key], tokens, share, gh, usd))
    if truncated and total > 0:
        share = truncated / total
        gh = share * gpu_hours if gpu_hours is not None else None
        usd = gh * usd_per_gpu_hour if gh is not None and usd_per_gpu_hour is not None else None
        rows.append(LedgerRow("of the above: cut at the response cap (truncated)", truncated, share, gh, usd))
    return rows, note + " GPU-hours and dollars: the run's totals apportioned by token share."
