"""`bench calibrate RUN_DIR [--out FILE] [key=value ...]`: fit the emulator's inputs to one measured run.

Reads RUN_DIR's trace (trace/steps.parquet, trace/rollouts.parquet when present) and the run's
configuration (manifest `config` / `inferred`, written by `bench ingest`; key=value fills what the
logs lack, e.g. `hardware=h100_sxm`). Writes a calibration YAML (default RUN_DIR/calibration.yaml)
that `calibration=FILE` applies to any emulate / run / predict command (bench.config.compose).
Every fitted value carries `fitted_on` (which columns of which run) and its residual; a value the
run cannot support falls back to its documented default (docs/emulator.md), listed under
`defaults:` with the reason.

Fits (steady steps = every step after the first, which holds start-up and compilation):
  workload.response_len_mean_frac, response_len_drift, response_len_sigma, prompt_len_mean
      per-step mean response length (response_tokens / samples, or rollouts.parquet) against the
      emulator's capped lognormal whose mean drifts linearly over the steps
  emulator.trainer_mfu, optimizer_s
      compute_s = FLOPs(step tokens) / (peak x trainer GPUs x mfu) + optimizer_s (least squares)
  emulator.logprob_passes
      logprob_s / one forward pass (FLOPs / 3 at the fitted rate), rounded: the emulator counts passes
  emulator.decode_bw_eff
      gen_s against the decode roofline (bench/emulator/costmodel.py EngineModel at full bandwidth)
      summed over the step's decode positions, the batch shrinking as sequences finish
  emulator.weight_sync_fixed_s
      sync_s minus the shard transfer at weight_sync_eff (costmodel.weight_sync_s)
  workload.env_latency_mean_s
      env_s / turns of trained rollouts (rollouts.parquet), where logged
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd
import yaml

from bench.errors import UsageError

# What the fits need from the run's configuration, and how a user gives it.
NEEDS = {
    "model": "model=<conf/model name>",
    "hardware": "hardware=<conf/hardware name>",
    "experiment.placement": "experiment.placement=colocated|disaggregated",
    "experiment.trainer_gpus": "experiment.trainer_gpus=N",
    "experiment.generator_gpus": "experiment.generator_gpus=N",
    "workload.max_response_len": "workload.max_response_len=N",
}
# Config keys carried from a run's manifest `config` into the composed setup (when not null).
CARRIED = (
    "experiment.placement",
    "experiment.trainer_gpus",
    "experiment.generator_gpus",
    "experiment.generator.tp",
    "experiment.generator.dp",
    "experiment.generator.ep",
    "experiment.generator.dtype_bytes",
    "experiment.generator.gpu_memory_utilization",
    "workload.group_size",
    "workload.prompts_per_step",
    "workload.max_prompt_len",
    "workload.max_response_len",
    "workload.steps",
    "workload.staleness_budget",
)
MIN_STEADY = 3  # steady steps a regression needs


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
            "value": _plain(self.value),
            "fitted_on": self.fitted_on,
            "residual": round(float(self.residual), 4),
        }
        out["residual_unit"] = self.residual_unit
        if self.note:
            out["note"] = self.note
        return out


def _plain(v: Any) -> Any:
    """numpy scalars (and dicts of them) as Python numbers, for YAML."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
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


# ---- the run's setup --------------------------------------------------------------------------


def read_run(run_dir: Path) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame | None]:
    """(manifest, steps, rollouts or None) of a run directory; UsageError when there is no trace."""
    from bench.trace import RunPaths, read_manifest

    paths = RunPaths(Path(run_dir))
    if not paths.manifest.is_file():
        raise UsageError(f"{run_dir}: no manifest.json; expected a run directory (bench ingest / emulate)")
    if not paths.steps.is_file():
        raise UsageError(
            f"{run_dir}: no trace/steps.parquet; nothing to calibrate on (ingest the run's logs first)"
        )
    steps = pd.read_parquet(paths.steps).sort_values("step").reset_index(drop=True)
    if steps.empty:
        raise UsageError(f"{paths.steps}: no steps; nothing to calibrate on")
    rollouts = pd.read_parquet(paths.rollouts) if paths.rollouts.is_file() else None
    return read_manifest(paths), steps, rollouts


def _conf_name(group: str, name: str | None) -> str | None:
    """conf/<group>/<stem>.yaml whose `name` is `name` (one match), else None."""
    if not name:
        return None
    if group == "model":
        from bench.infer import conf_models

        hits = [stem for stem, m in conf_models().items() if m.get("name") == name]
    else:
        from bench.config import CONF_DIR

        hits = [
            p.stem
            for p in sorted((CONF_DIR / group).glob("*.yaml"))
            if (yaml.safe_load(p.read_text()) or {}).get("name") == name
        ]
    return hits[0] if len(hits) == 1 else None


def known_setup(manifest: dict[str, Any]) -> dict[str, str]:
    """The run's configuration as override values (key -> value), from manifest inferred/config."""
    inferred, config = manifest.get("inferred") or {}, manifest.get("config") or {}
    out: dict[str, str] = {}
    for group in ("model", "hardware"):
        stem = (inferred.get(group) or {}).get("value") or _conf_name(
            group, (config.get(group) or {}).get("name")
        )
        if stem:
            out[group] = str(stem)
    for key in CARRIED:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            out[key] = str(node).split(".")[-1] if key == "experiment.placement" else str(node)
    return out


def compose_setup(
    manifest: dict[str, Any], given: list[str], extra: list[str] = ()
) -> tuple[Any, dict[str, str]]:
    """(composed config, known keys -> value) of the run: manifest first, `given` key=value over it,
    then `extra` (a predict's framework and calibration). Keys neither holds keep compose defaults,
    so callers check `missing()` before trusting any of NEEDS."""
    from bench.config import compose

    known = known_setup(manifest)
    for o in given:
        key, _, value = o.partition("=")
        known[key.lstrip("+")] = value
    framework = known.pop("framework", None) or str(manifest.get("framework", ""))
    overrides = [f"framework={framework}"] if framework else []
    overrides += [f"{k}={v}" for k, v in known.items() if k in ("model", "hardware")]
    overrides += [f"{k}={v}" for k, v in known.items() if k not in ("model", "hardware")]
    return compose([*overrides, *extra]), known


def missing(known: dict[str, str], needs: dict[str, str] = NEEDS) -> list[str]:
    return [how for key, how in needs.items() if key not in known]


# ---- fits -------------------------------------------------------------------------------------


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
    """Lognormal mean fraction and linear drift of response length against per-step means, for the
    shape `sigma` (from rollouts.parquet when logged: then also a fit; else the workload's)."""
    m, source = response_means(steps, rollouts)
    n = len(m)
    k = np.arange(n) / max(n - 1, 1)
    fitted_sigma = (
        rollout_sigma(rollouts, cap) if rollouts is not None and "step_consumed" in rollouts else None
    )
    sigma = fitted_sigma or sigma
    # the emulator's pre-cap mean at progress k: start x (1 + (drift - 1) k); start <= cap (validate)
    start = np.linspace(0.02, 1.0, 99)[:, None, None] * cap
    drift = np.linspace(0.05, 3.0, 119)[None, :, None]
    pred = capped_mean(np.maximum(start * (1 + (drift - 1) * k[None, None, :]), 1e-3), sigma, cap)
    res = np.sqrt(np.mean(((pred - m) / m) ** 2, axis=2))
    i, j = np.unravel_index(np.argmin(res), res.shape)
    on = f"{run} {source}, steps 1-{n} (cap workload.max_response_len={cap}, sigma {sigma:.2f})"
    note = "least squares on the capped means; the emulator's drift is linear in the step"
    fits = [
        Fit(
            "workload.response_len_mean_frac",
            round(float(start[i, 0, 0]) / cap, 4),
            on,
            float(res[i, j]),
            note=note,
        ),
        Fit("workload.response_len_drift", round(float(drift[0, j, 0]), 4), on, float(res[i, j]), note=note),
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


def _step_flops(cfg: Any, steady: pd.DataFrame) -> np.ndarray:
    """Training FLOPs (fwd+bwd, suite convention) per step: `samples` sequences of the step's mean
    length (prompt + response tokens / samples); exact for equal lengths, and the attention term
    that depends on the spread is small against the dense one at these lengths."""
    from bench import flops
    from bench.emulator.costmodel import plain_model

    m = plain_model(cfg.model)
    seq = ((steady.prompt_tokens + steady.response_tokens) / steady.samples).to_numpy(float)
    fpt = np.array([flops.flops_per_token(m, max(int(round(s)), 1), "suite") for s in seq])
    return steady.samples.to_numpy(float) * seq * fpt


def _complete(df: pd.DataFrame, cols: list[str]) -> bool:
    return all(c in df.columns and df[c].notna().all() for c in cols)


def fit_trainer(cfg: Any, r: Any, steady: pd.DataFrame, run: str) -> tuple[list[Fit], float]:
    """trainer_mfu and optimizer_s from compute_s = F / rate + optimizer_s; returns the fits and the
    achieved FLOP rate (FLOP/s) the log-prob fit reuses."""
    f, t = _step_flops(cfg, steady), steady.compute_s.to_numpy(float)
    slope, intercept = np.linalg.lstsq(np.c_[f, np.ones_like(f)], t, rcond=None)[0]
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
    one = _step_flops(cfg, steady) / 3.0 / rate
    t = steady.logprob_s.to_numpy(float)
    passes = max(int(round(float(np.mean(t / one)))), 0)
    res = abs(passes * one.mean() - t.mean()) / t.mean()
    note = f"{np.mean(t / one):.2f} passes' worth, rounded (the emulator counts whole passes)"
    if framework in cfg.emulator.logprob_passes_by_framework:
        note += f"; logprob_passes_by_framework.{framework} still overrides it for {framework}"
    return Fit(
        "emulator.logprob_passes", passes, f"{run} trace/steps.parquet logprob_s", float(res), note=note
    )


def _decode_time(engine: Any, lengths: np.ndarray, prompt: float, eff: float) -> float:
    """Seconds to decode `lengths` sequences started together on one engine at bandwidth share eff:
    one decode step per position, the batch being the sequences still running (the roofline of
    costmodel.EngineModel: bytes over bandwidth x eff, or compute when the batch is large)."""
    pos = np.arange(1, int(lengths.max()) + 1, dtype=float)
    batch = (lengths[None, :] >= pos[:, None]).sum(axis=1).astype(float)
    mem = replace(engine, compute=math.inf).decode_step_s(batch, prompt + pos)  # at full bandwidth
    comp = 2.0 * engine.active_params * batch / engine.compute
    return float(np.maximum(mem / eff, comp).sum())


def step_lengths(
    resp: list[Fit], sigma: float, n: int, k: float, cap: int, rollouts: pd.DataFrame | None, step: int
) -> np.ndarray:
    """Response lengths of one step's `n` sequences: the step's trained rollouts when logged, else
    n evenly spaced quantiles of the fitted capped lognormal at that step (deterministic)."""
    if rollouts is not None and "step_consumed" in rollouts:
        got = rollouts.loc[rollouts.step_consumed == step, "response_tokens"].dropna().to_numpy(float)
        if len(got):
            return got
    v = {f.key.split(".")[-1]: f.value for f in resp}
    mean = v["response_len_mean_frac"] * cap * (1 + (v["response_len_drift"] - 1) * k)
    z = np.array([NormalDist().inv_cdf((j + 0.5) / n) for j in range(n)])
    return np.clip(np.exp(math.log(mean) - 0.5 * sigma * sigma + sigma * z), 1, cap).round()


def fit_decode(cfg: Any, r: Any, steps: pd.DataFrame, resp: list[Fit], rollouts, run: str) -> Fit:
    """decode_bw_eff: the share of full-bandwidth roofline decode speed that makes the modelled
    generation time of every steady step add up to the logged gen_s (bisection)."""
    from bench.emulator.costmodel import engine_model

    engine = engine_model(cfg, r)
    engine = replace(engine, bw=engine.gpus * float(cfg.hardware.hbm_tbps) * 1e12)  # eff = 1
    cap, n_all = int(cfg.workload.max_response_len), len(steps)
    sent = "dispatched_samples" if _complete(steps, ["dispatched_samples"]) else "samples"
    cases = []
    for i in range(1, n_all):
        row = steps.iloc[i]
        n = math.ceil(float(row[sent]) / r.engines)
        sigma = next(
            (f.value for f in resp if f.key.endswith("sigma")), float(cfg.workload.response_len_sigma)
        )
        lengths = step_lengths(resp, sigma, n, i / max(n_all - 1, 1), cap, rollouts, int(row.step))
        prompt = float(row.prompt_tokens) / float(row.samples)
        prefill = float(engine.prefill_s(float(row.prompt_tokens) / r.engines))
        cases.append((lengths, prompt, prefill, float(row.gen_s)))

    def total(eff: float) -> np.ndarray:
        return np.array([_decode_time(engine, ln, pr, eff) + pf for ln, pr, pf, _ in cases])

    logged = np.array([c[3] for c in cases])
    lo, hi, note = 1e-4, 1.0, ""
    if total(hi).sum() > logged.sum():
        eff, note = hi, "the roofline at full bandwidth is slower than logged: capped at 1"
    else:
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if total(mid).sum() > logged.sum() else (lo, mid)
        eff = math.sqrt(lo * hi)
    res = float(np.sqrt(np.mean(((total(eff) - logged) / logged) ** 2)))
    on = (
        f"{run} trace/steps.parquet gen_s vs the decode roofline of {sent} sequences per engine "
        f"({r.engines} engine(s) of {r.engine_gpus} GPU(s)), steady steps"
    )
    return Fit("emulator.decode_bw_eff", round(eff, 5), on, res, note=note)


def fit_sync(cfg: Any, r: Any, steady: pd.DataFrame, run: str) -> Fit:
    """weight_sync_fixed_s: mean logged sync_s minus the shard transfer the emulator adds at
    weight_sync_eff (costmodel.weight_sync_s with no fixed part)."""
    from omegaconf import OmegaConf

    from bench.emulator.costmodel import weight_sync_s

    t = steady.sync_s.dropna().to_numpy(float)
    bare = OmegaConf.merge(cfg, {"emulator": {"weight_sync_fixed_s": 0.0}})
    transfer = weight_sync_s(bare, r)
    fixed, note = float(t.mean()) - transfer, ""
    if fixed < 0:
        fixed, note = 0.0, f"the transfer alone ({transfer:.3g} s) exceeds the logged mean: fixed part 0"
    on = f"{run} trace/steps.parquet sync_s ({len(t)} steady steps) - {transfer:.3g} s transfer"
    return Fit("emulator.weight_sync_fixed_s", round(fixed, 4), on, float(t.std() / t.mean()), "cv", note)


def fit_env(rollouts: pd.DataFrame, run: str) -> Fit:
    """Environment (tool, reward, scoring) seconds per turn of the trained rollouts."""
    used = rollouts.dropna(subset=["env_s", "turns"])
    per_turn = (used.env_s / used.turns.clip(lower=1)).to_numpy(float)
    on = f"{run} trace/rollouts.parquet env_s / turns ({len(per_turn)} rollouts)"
    return Fit(
        "workload.env_latency_mean_s",
        round(float(per_turn.mean()), 4),
        on,
        float(per_turn.std() / per_turn.mean()),
        "cv",
    )


def fit_prompt(steps: pd.DataFrame, run: str) -> Fit:
    """Mean prompt tokens per sample (the emulator draws prompts around it)."""
    per = (steps.prompt_tokens / steps.samples).to_numpy(float)
    on = f"{run} trace/steps.parquet prompt_tokens / samples, steps 1-{len(per)}"
    return Fit("workload.prompt_len_mean", int(round(per.mean())), on, float(per.std() / per.mean()), "cv")


# ---- the whole calibration ---------------------------------------------------------------------


def calibrate(run_dir: Path, given: list[str] = ()) -> tuple[list[Fit], list[Fallback], dict[str, Any]]:
    """Fit every input RUN_DIR supports: (fits, fallbacks, header). UsageError (one line) when the
    run has no trace or its configuration lacks what the fits need."""
    from bench.resolve import Resolved

    manifest, steps, rollouts = read_run(run_dir)
    cfg, known = compose_setup(manifest, list(given))
    lacking = missing(known)
    if lacking:
        raise UsageError(
            f"{run_dir}: the run's configuration does not say {', '.join(k.split('=')[0] for k in lacking)} "
            f"(manifest inferred/config); pass {' '.join(lacking)}"
        )
    r = Resolved.from_config(cfg)
    fw, run = str(manifest.get("framework")), str(Path(run_dir))
    steady = steps.iloc[1:]
    fits: list[Fit] = []
    falls: list[Fallback] = []

    def fallback(keys: list[str], why: str) -> None:
        from omegaconf import OmegaConf

        falls.extend(
            Fallback(k, OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, k)}))["v"], why)
            for k in keys
        )

    enough = len(steady) >= MIN_STEADY
    cap = int(cfg.workload.max_response_len)
    resp: list[Fit] = []
    try:
        resp = fit_response(steps, rollouts, cap, float(cfg.workload.response_len_sigma), run)
        fits += resp
        if not any(f.key.endswith("sigma") for f in resp):
            fallback(
                ["workload.response_len_sigma"],
                "per-step means do not identify the spread (no rollouts.parquet)",
            )
    except ValueError as e:
        fallback(
            ["workload.response_len_mean_frac", "workload.response_len_drift", "workload.response_len_sigma"],
            str(e),
        )
    if _complete(steps, ["prompt_tokens", "samples"]):
        fits.append(fit_prompt(steps, run))
    else:
        fallback(["workload.prompt_len_mean"], "prompt_tokens or samples missing on some steps")
    rate = None
    if enough and _complete(steady, ["compute_s", "prompt_tokens", "response_tokens", "samples"]):
        trainer, rate = fit_trainer(cfg, r, steady, run)
        fits += trainer
    else:
        fallback(
            ["emulator.trainer_mfu", "emulator.optimizer_s"],
            f"needs compute_s and token counts on {MIN_STEADY}+ steady steps",
        )
    if rate and _complete(steady, ["logprob_s"]):
        fits.append(fit_logprob(cfg, steady, rate, fw, run))
    else:
        fallback(["emulator.logprob_passes"], "no logprob_s column (or no fitted trainer rate)")
    if resp and enough and _complete(steady, ["gen_s", "prompt_tokens", "samples"]):
        fits.append(fit_decode(cfg, r, steps, resp, rollouts, run))
    else:
        fallback(["emulator.decode_bw_eff"], "no gen_s column (generation time per step is not logged)")
    if "sync_s" in steady and steady.sync_s.notna().sum() >= max(len(steady) // 2, 1):
        fits.append(fit_sync(cfg, r, steady, run))
    else:
        fallback(["emulator.weight_sync_fixed_s"], "sync_s logged on fewer than half the steady steps")
    if rollouts is not None and _complete(rollouts, ["env_s", "turns"]):
        fits.append(fit_env(rollouts, run))
    else:
        fallback(
            ["workload.env_latency_mean_s"],
            "no env_s in trace/rollouts.parquet (environment, reward and teacher-scoring time per "
            "rollout are not logged; the emulator has no scoring stage)",
        )
    fallback(
        ["emulator.prefill_mfu", "emulator.weight_sync_eff"],
        "not separable from the logged times (a default by design)",
    )
    header = {
        "run": str(Path(run_dir).resolve()),
        "framework": fw,
        "mode": manifest.get("mode"),
        "setup": known,
        "steady_steps": f"{len(steady)} (every step after the first)",
    }
    return fits, falls, header


def to_yaml(fits: list[Fit], falls: list[Fallback], header: dict[str, Any]) -> str:
    doc = {
        "calibration": header,
        "values": {f.key: f.as_yaml() for f in fits},
        "defaults": {f.key: {"value": f.default, "reason": f.reason} for f in falls},
    }
    head = (
        "# Emulator calibration fitted by `bench calibrate` (bench/calibrate.py); apply it with\n"
        "# calibration=THIS_FILE on bench emulate / run / predict. `values` are fitted (fitted_on, residual);\n"
        "# `defaults` keep their documented default (docs/emulator.md) for the reason given.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, width=120)


def main(argv: list[str]) -> int:
    """`python -m bench calibrate RUN_DIR [--out FILE] [key=value ...]`: fit, write the YAML."""
    from bench.trace import atomic_path

    ap = argparse.ArgumentParser(prog="python -m bench calibrate", description=main.__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="a measured (or emulated) run directory")
    ap.add_argument("--out", type=Path, help="calibration YAML to write (default RUN_DIR/calibration.yaml)")
    args, given = ap.parse_known_args(argv)
    out = args.out or args.run_dir / "calibration.yaml"
    if out.exists():
        raise UsageError(
            f"--out {out}: already exists; a calibration is never overwritten, choose a new --out"
        )
    bad = [g for g in given if "=" not in g]
    if bad:
        raise UsageError(f"unexpected argument {bad[0]!r}; expected key=value (e.g. hardware=h100_sxm)")
    fits, falls, header = calibrate(args.run_dir, given)
    if not fits:
        raise UsageError(
            f"{args.run_dir}: no input could be fitted: " + "; ".join(f"{f.key}: {f.reason}" for f in falls)
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tmp.write_text(to_yaml(fits, falls, header))
    for f in fits:
        print(f"fitted {f.key} = {f.value} (residual {f.residual:.3g} {f.residual_unit})")
    for f in falls:
        print(f"default {f.key} = {f.default}: {f.reason}", file=sys.stderr)
    print(f"{out}: {len(fits)} fitted, {len(falls)} default(s)")
    return 0
