"""The fits of `bench calibrate` (bench/calibrate.py): pure functions of a run's trace and its
composed configuration, each returning a Fit (config key, value, which columns of which run, residual).
Units: seconds, tokens, FLOPs; residuals are relative (fraction) unless `residual_unit` says otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from bench.cli import counted

MIN_STEADY = 3  # steady steps a regression needs
# A decode that would need less than this share of HBM bandwidth is latency-bound (a decision:
# bandwidth-bound decode batches reach tens of percent of it; the opd runs would imply 2-7%)
MIN_DECODE_BW_EFF = 0.15


@dataclass
class Fit:
    """One fitted input: its config key, value, provenance and residual."""

    key: str
    value: Any
    fitted_on: str
    residual: float  # relative (fraction) unless residual_unit says otherwise
    residual_unit: str = "relative rms"
    note: str = ""

    def as_yaml(self) -> dict[str, Any]:
        out = {
            "value": plain(self.value),
            "fitted_on": self.fitted_on,
            "residual": round(float(self.residual), 4),
        }
        out["residual_unit"] = self.residual_unit
        if self.note:
            out["note"] = self.note
        return out


def plain(v: Any) -> Any:
    """numpy scalars (and dicts of them) as Python numbers, for YAML."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


@dataclass
class Fallback:
    """An input the run cannot support: it keeps its documented default."""

    key: str
    default: Any
    reason: str


def _phi(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF, vectorised (Abramowitz & Stegun 7.1.26 erf, |error| < 1.5e-7)."""
    z = np.asarray(x, dtype=float) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * np.abs(z))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(z) * erf)


def capped_mean(mean: np.ndarray, sigma: float, cap: float) -> np.ndarray:
    """E[min(X, cap)] of a lognormal X with arithmetic mean `mean` and log-space `sigma` (tokens)."""
    mean = np.asarray(mean, dtype=float)
    mu = np.log(np.maximum(mean, 1e-9)) - 0.5 * sigma * sigma
    z = (math.log(cap) - mu) / sigma
    return mean * _phi(z - sigma) + cap * (1.0 - _phi(z))


def _invert_capped(m: float, sigma: float, cap: float) -> float:
    """Pre-cap mean whose capped mean is m (bisection in log space); inf when m >= the reachable."""
    lo, hi = 1e-3, cap * 1e3
    if capped_mean(hi, sigma, cap) < m:
        return math.inf
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if capped_mean(mid, sigma, cap) < m else (lo, mid)
    return math.sqrt(lo * hi)


def response_means(steps: pd.DataFrame, rollouts: pd.DataFrame | None) -> tuple[np.ndarray, str]:
    """Mean response tokens per trained sample, per step, and which columns they came from."""
    if rollouts is not None and {"step_consumed", "response_tokens"} <= set(rollouts.columns):
        used = rollouts.dropna(subset=["step_consumed"])
        by = used.groupby("step_consumed")["response_tokens"].mean()
        if len(by) == len(steps):
            return by.to_numpy(float), "trace/rollouts.parquet response_tokens of trained rollouts, per step"
    if steps[["response_tokens", "samples"]].isna().any().any():
        raise ValueError("response_tokens or samples missing on some steps")
    return (steps.response_tokens / steps.samples).to_numpy(
        float
    ), "trace/steps.parquet response_tokens / samples"


def rollout_sigma(rollouts: pd.DataFrame, cap: int) -> float | None:
    """Log-space spread of response length around each step's mean, from uncapped trained rollouts
    (capped ones are left out: they would shrink it); None when too few."""
    used = rollouts.dropna(subset=["step_consumed", "response_tokens"])
    used = used[(used.response_tokens > 0) & (used.response_tokens < cap)]
    if len(used) < 30:
        return None
    logs = np.log(used.response_tokens.astype(float))
    return float((logs - logs.groupby(used.step_consumed).transform("mean")).std())


def fit_response(
    steps: pd.DataFrame, rollouts: pd.DataFrame | None, cap: int, sigma: float, run: str
) -> list[Fit]:
    """Lognormal mean fraction and drift of response length against per-step means, for the shape
    `sigma` (from rollouts.parquet when logged: then also a fit; else the workload's). The drift is
    the emulator's: linear over `response_len_drift_steps` steps, flat after (bench.emulator.draws)."""
    m, source = response_means(steps, rollouts)
    n = len(m)
    fitted_sigma = (
        rollout_sigma(rollouts, cap) if rollouts is not None and "step_consumed" in rollouts else None
    )
    sigma = fitted_sigma or sigma
    # the emulator's pre-cap mean at step i: start x (1 + (drift - 1) min(i / D, 1)); start <= cap
    start = np.linspace(0.02, 1.0, 99)[:, None, None] * cap
    drift = np.linspace(0.05, 3.0, 119)[None, :, None]
    best = (math.inf, 0, 0, n - 1)
    for d_steps in np.unique(np.geomspace(1, max(n - 1, 1), 24).round().astype(int)):
        k = np.minimum(np.arange(n) / d_steps, 1.0)
        pred = capped_mean(np.maximum(start * (1 + (drift - 1) * k[None, None, :]), 1e-3), sigma, cap)
        res = np.sqrt(np.mean(((pred - m) / m) ** 2, axis=2))
        i, j = np.unravel_index(np.argmin(res), res.shape)
        if res[i, j] < best[0] - 1e-9:  # ties: the longest drift (the earlier, shorter D loses)
            best = (float(res[i, j]), i, j, int(d_steps))
    err, i, j, d_steps = best
    d_steps = 0 if d_steps >= n - 1 else d_steps  # 0: over the whole run (the workload default)
    on = f"{run} {source}, steps 1-{n} (cap workload.max_response_len={cap}, sigma {sigma:.2f})"
    note = "least squares on the capped means; the emulator's drift is linear over response_len_drift_steps, then flat"
    fits = [
        Fit("workload.response_len_mean_frac", round(float(start[i, 0, 0]) / cap, 4), on, err, note=note),
        Fit("workload.response_len_drift", round(float(drift[0, j, 0]), 4), on, err, note=note),
        Fit("workload.response_len_drift_steps", d_steps, on, err, note=note),
    ]
    if fitted_sigma:
        fits.append(
            Fit(
                "workload.response_len_sigma",
                round(fitted_sigma, 3),
                f"{run} trace/rollouts.parquet log response_tokens (uncapped) around each step's mean",
                0.0,
                "none",
            )
        )
    return fits


def step_flops(cfg: Any, steady: pd.DataFrame) -> np.ndarray:
    """Training FLOPs (fwd+bwd, suite convention) per step: `samples` sequences of the step's mean
    length (prompt + response tokens / samples); exact for equal lengths, and the attention term
    that depends on the spread is small against the dense one at these lengths."""
    from bench import flops
    from bench.model.costmodel import plain_model

    m = plain_model(cfg.model)
    seq = ((steady.prompt_tokens + steady.response_tokens) / steady.samples).to_numpy(float)
    fpt = np.array([flops.flops_per_token(m, max(int(round(s)), 1), "suite") for s in seq])
    return steady.samples.to_numpy(float) * seq * fpt


def complete(df: pd.DataFrame, cols: list[str]) -> bool:
    return all(c in df.columns and df[c].notna().all() for c in cols)


def fit_trainer(cfg: Any, r: Any, steady: pd.DataFrame, run: str) -> tuple[list[Fit], float]:
    """trainer_mfu and optimizer_s from compute_s = F / rate + optimizer_s + offload_s; returns the
    fits and the achieved FLOP rate (FLOP/s) the log-prob fit reuses. offload_s (the offloaded
    trainer state over the host link, costmodel.offload_s) is the cost model's own term, taken out
    before the fit so a replay does not count it twice (once fitted into optimizer_s, once added)."""
    from bench.model.costmodel import offload_s

    f = step_flops(cfg, steady)
    t = steady.compute_s.to_numpy(float) - offload_s(cfg, r)
    scale = float(f.mean())  # FLOPs ~1e14: scaled to ~1, or lstsq drops the intercept column as noise
    slope, intercept = np.linalg.lstsq(np.c_[f / scale, np.ones_like(f)], t, rcond=None)[0]
    slope /= scale
    note = ""
    if slope <= 0 or intercept < 0:  # noise swamps the token spread: through the origin instead
        slope, intercept = float(f @ t / (f @ f)), 0.0
        note = "intercept forced to 0 (the free fit was not physical)"
    pred = f * slope + intercept
    res = float(np.sqrt(np.mean((pred - t) ** 2)) / t.mean())
    rate = 1.0 / slope
    mfu = rate / (float(cfg.hardware.peak_bf16_flops) * r.trainer.gpus)
    on = (
        f"{run} trace/steps.parquet compute_s ~ FLOPs(prompt_tokens + response_tokens, samples), steady steps"
    )
    return [
        Fit("emulator.trainer_mfu", round(mfu, 5), on, res, note=note),
        Fit("emulator.optimizer_s", round(float(intercept), 4), on, res, note=note),
    ], rate


def fit_logprob(cfg: Any, steady: pd.DataFrame, rate: float, framework: str, run: str) -> Fit:
    """Log-prob forward passes per step: logprob_s over one forward pass (FLOPs / 3 at `rate`)."""
    one = step_flops(cfg, steady) / 3.0 / rate
    t = steady.logprob_s.to_numpy(float)
    passes = max(int(round(float(np.mean(t / one)))), 0)
    res = abs(passes * one.mean() - t.mean()) / t.mean()
    note = f"{np.mean(t / one):.2f} passes' worth, rounded (the emulator counts whole passes)"
    if framework in cfg.emulator.logprob_passes_by_framework:
        note += f"; logprob_passes_by_framework.{framework} still overrides it for {framework}"
    return Fit(
        "emulator.logprob_passes", passes, f"{run} trace/steps.parquet logprob_s", float(res), note=note
    )


def _decode_time(engine: Any, lengths: np.ndarray, prompt: float) -> float:
    """Seconds to decode `lengths` sequences started together on one `engine`: one decode step per
    position, the batch being the sequences still running (costmodel.EngineModel.decode_step_s: the
    roofline, never below the engine's floor). The live context is the emulator's own convention
    (bench/emulator/loop.py): prompt + half the mean response, so a fitted value means in the
    emulator what it meant here."""
    pos = np.arange(1, int(lengths.max()) + 1, dtype=float)
    batch = (lengths[None, :] >= pos[:, None]).sum(axis=1).astype(float)
    return float(engine.decode_step_s(batch, prompt + 0.5 * float(lengths.mean())).sum())


def step_lengths(
    resp: list[Fit], sigma: float, n: int, k: float, cap: int, rollouts: pd.DataFrame | None, step: int
) -> np.ndarray:
    """Response lengths of one step's `n` sequences: the step's trained rollouts when logged, else
    n evenly spaced quantiles of the fitted capped lognormal at drift progress `k` (0..1)."""
    if rollouts is not None and "step_consumed" in rollouts:
        got = rollouts.loc[rollouts.step_consumed == step, "response_tokens"].dropna().to_numpy(float)
        if len(got):
            return got
    v = {f.key.split(".")[-1]: f.value for f in resp}
    mean = v["response_len_mean_frac"] * cap * (1 + (v["response_len_drift"] - 1) * k)
    z = np.array([NormalDist().inv_cdf((j + 0.5) / n) for j in range(n)])
    return np.clip(np.exp(math.log(mean) - 0.5 * sigma * sigma + sigma * z), 1, cap).round()


def fit_decode(cfg: Any, r: Any, steps: pd.DataFrame, resp: list[Fit], rollouts, run: str) -> Fit:
    """One decode input, whichever bounds the logged generation time of the steady steps:

    - `decode_bw_eff`, the share of full-bandwidth roofline speed (a large batch), floor 0;
    - `decode_step_floor_s` at the configured `decode_bw_eff` instead, when that share would be
      below MIN_DECODE_BW_EFF (a small batch: generation ~ the longest sequence x the per-iteration
      latency, which no bandwidth share describes at other batch sizes).
    Both by bisection on the sum of modelled against logged gen_s; with a teacher, each step's
    modelled generation ends with one scoring batch of an engine's share of the step's tokens
    (bench.emulator.scoring), as the emulator's batch fill does."""
    from bench.model.costmodel import engine_model, teacher_models

    engine = replace(engine_model(cfg, r), floor_s=0.0)
    full_bw = engine.gpus * float(cfg.hardware.hbm_tbps) * 1e12
    cap, n_all = int(cfg.workload.max_response_len), len(steps)
    sent = "dispatched_samples" if complete(steps, ["dispatched_samples"]) else "samples"
    sigma = next((f.value for f in resp if f.key.endswith("sigma")), float(cfg.workload.response_len_sigma))
    drift_steps = next(f.value for f in resp if f.key.endswith("drift_steps")) or n_all - 1
    teacher = next((t for t in teacher_models(cfg, r) if t.scores(str(cfg.workload.task))), None)
    cases = []
    for i in range(1, n_all):
        row = steps.iloc[i]
        n = math.ceil(float(row[sent]) / r.engines)
        lengths = step_lengths(
            resp, sigma, n, min(i / max(drift_steps, 1), 1.0), cap, rollouts, int(row.step)
        )
        prompt = float(row.prompt_tokens) / float(row.samples)
        prefill = float(engine.prefill_s(prompt))  # the emulator's: a rollout's prefill, before decoding
        # a group joins the batch once scored: the step's generation ends with a scoring batch
        tokens = float(row.prompt_tokens + row.response_tokens) / max(r.engines, 1)
        score = teacher.batch_s(tokens) if teacher is not None else 0.0
        cases.append((lengths, prompt, prefill + score, float(row.gen_s)))
    logged = np.array([c[3] for c in cases])

    def total(e: Any) -> np.ndarray:
        return np.array([_decode_time(e, ln, pr) + pf for ln, pr, pf, _ in cases])

    def residual(e: Any) -> float:
        return float(np.sqrt(np.mean(((total(e) - logged) / logged) ** 2)))

    def bisect(modelled, lo: float, hi: float, rising: bool) -> float:
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            short = modelled(mid).sum() < logged.sum()
            lo, hi = (mid, hi) if short == rising else (lo, mid)
        return math.sqrt(lo * hi)

    on = (
        f"{run} trace/steps.parquet gen_s vs the decode roofline of {sent} sequences per engine "
        f"({r.engines} engine(s) of {r.engine_gpus} GPU(s)), steady steps"
    )
    note = ""
    if total(replace(engine, bw=full_bw)).sum() > logged.sum():
        eff, note = 1.0, "the roofline at full bandwidth is slower than logged: capped at 1"
    else:
        eff = bisect(lambda x: total(replace(engine, bw=full_bw * x)), 1e-4, 1.0, rising=False)
    if eff >= MIN_DECODE_BW_EFF:
        return Fit(
            "emulator.decode_bw_eff",
            round(eff, 5),
            on,
            residual(replace(engine, bw=full_bw * eff)),
            note=note,
        )
    # latency-bound: no engine decodes at so small a share of its bandwidth; the per-iteration floor
    # explains the time at the configured share instead
    at_eff = replace(engine, bw=full_bw * float(cfg.emulator.decode_bw_eff))
    floor = bisect(lambda f: total(replace(at_eff, floor_s=f)), 1e-6, 10.0, rising=True)
    res = residual(replace(at_eff, floor_s=floor))
    note = (
        f"latency-bound: a bandwidth share of {eff:.3f} (< {MIN_DECODE_BW_EFF}) would be needed; "
        f"the floor is fitted at decode_bw_eff {cfg.emulator.decode_bw_eff}"
    )
    return Fit("emulator.decode_step_floor_s", round(floor, 6), on, res, note=note)


def fit_sync(cfg: Any, r: Any, steady: pd.DataFrame, run: str) -> Fit:
    """weight_sync_fixed_s: mean logged sync_s minus what the emulator adds on the framework's path
    (costmodel.weight_sync_s with no fixed part, plus the colocated hand-off it counts in sync_s)."""
    from omegaconf import OmegaConf

    from bench.model.costmodel import handoff_s, sync_path, weight_sync_s

    t = steady.sync_s.dropna().to_numpy(float)
    bare = OmegaConf.merge(cfg, {"emulator": {"weight_sync_fixed_s": 0.0}})
    transfer = weight_sync_s(bare, r) + handoff_s(cfg, r)
    fixed, note = float(t.mean()) - transfer, ""
    if fixed < 0:
        fixed, note = 0.0, f"the modelled path alone ({transfer:.3g} s) exceeds the logged mean: fixed part 0"
    on = (
        f"{run} trace/steps.parquet sync_s ({len(t)} steady steps) - {transfer:.3g} s modelled "
        f"({sync_path(cfg, r)} path{' + hand-off' if r.colocated else ''})"
    )
    return Fit("emulator.weight_sync_fixed_s", round(fixed, 4), on, float(t.std() / t.mean()), "cv", note)


def fit_handoff(cfg: Any, r: Any, steady: pd.DataFrame, framework: str, run: str) -> list[Fit]:
    """The framework's colocated sleep + wake (s), where its own timers count it in the wait: mean
    wait beyond generation minus the bytes the emulator moves (costmodel.handoff_s with no fixed
    part). It describes this framework's hand-off, not another's: `handoff_measured_on` names it."""
    from omegaconf import OmegaConf

    from bench.model.costmodel import handoff_s

    none = {"handoff_fixed_s": 0.0, "handoff_measured_s": None}
    moved = handoff_s(OmegaConf.merge(cfg, {"framework": {"handoff_fixed_s": 0.0}, "emulator": none}), r)
    beyond = (steady.wait_s - steady.gen_s).to_numpy(float)
    fixed, note = (
        float(beyond.mean()) - moved,
        f"applies to {framework} only (another framework keeps its own)",
    )
    if fixed < 0:
        fixed, note = (
            0.0,
            f"the bytes moved alone ({moved:.3g} s) exceed the wait beyond generation: 0; " + note,
        )
    on = f"{run} trace/steps.parquet wait_s - gen_s ({len(beyond)} steady steps) - {moved:.3g} s moved to host and back"
    cv = float(beyond.std() / beyond.mean()) if beyond.mean() > 0 else 0.0
    return [
        Fit("emulator.handoff_measured_s", round(fixed, 4), on, cv, "cv", note),
        Fit("emulator.handoff_measured_on", framework, on, 0.0, "none", note),
    ]


def fit_env(rollouts: pd.DataFrame, run: str) -> Fit:
    """Environment (tool, reward, scoring) seconds per turn of the trained rollouts."""
    used = rollouts.dropna(subset=["env_s", "turns"])
    per_turn = (used.env_s / used.turns.clip(lower=1)).to_numpy(float)
    on = f"{run} trace/rollouts.parquet env_s / turns ({counted(len(per_turn), 'rollout')})"
    return Fit(
        "workload.env_latency_mean_s",
        round(float(per_turn.mean()), 4),
        on,
        float(per_turn.std() / per_turn.mean()) if per_turn.mean() > 0 else 0.0,
        "cv",
    )


def fit_prompt(steps: pd.DataFrame, run: str) -> Fit:
    """Mean prompt tokens per sample (the emulator draws prompts around it)."""
    per = (steps.prompt_tokens / steps.samples).to_numpy(float)
    on = f"{run} trace/steps.parquet prompt_tokens / samples, steps 1-{len(per)}"
    return Fit("workload.prompt_len_mean", int(round(per.mean())), on, float(per.std() / per.mean()), "cv")
