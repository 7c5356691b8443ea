"""The inverse of the cost model on one run: every emulator input a measured run supports, fitted
(bench/model/calibrate_fit.py), every other named with its documented default and why. `bench
calibrate` (bench/calibrate.py) writes the result; `bench predict` and `bench profile fit` call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from bench.errors import UsageError
from bench.model.calibrate_fit import (
    MIN_STEADY,
    Fallback,
    Fit,
    complete,
    fit_decode,
    fit_env,
    fit_handoff,
    fit_logprob,
    fit_prompt,
    fit_response,
    fit_sync,
    fit_trainer,
)
from bench.run_setup import compose_setup, missing, read_run


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
    fw, run = str(manifest.get("framework")), str(Path(run_dir))
    fits, falls = fit_all(cfg, Resolved.from_config(cfg), steps, rollouts, fw, run)
    header = {
        "run": str(Path(run_dir).resolve()),
        "framework": fw,
        "mode": manifest.get("mode"),
        "setup": known,
        "steady_steps": f"{len(steps) - 1} (every step after the first)",
        "unexplained": unexplained(steps.iloc[1:]),
    }
    return fits, falls, header


def fit_all(
    cfg: Any, r: Any, steps: pd.DataFrame, rollouts: pd.DataFrame | None, fw: str, run: str
) -> tuple[list[Fit], list[Fallback]]:
    """Each fit the trace's columns support; every other input named with its default and why."""
    from omegaconf import OmegaConf

    steady = steps.iloc[1:]
    fits: list[Fit] = []
    falls: list[Fallback] = []

    def fallback(keys: list[str], why: str) -> None:
        for k in keys:  # the composed value: conf/emulator or conf/workload's documented default
            falls.append(
                Fallback(
                    k, OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, k)}))["v"], why
                )
            )

    enough = len(steady) >= MIN_STEADY
    resp: list[Fit] = []
    try:
        resp = fit_response(
            steps, rollouts, int(cfg.workload.max_response_len), float(cfg.workload.response_len_sigma), run
        )
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
    if complete(steps, ["prompt_tokens", "samples"]):
        fits.append(fit_prompt(steps, run))
    else:
        fallback(["workload.prompt_len_mean"], "prompt_tokens or samples missing on some steps")
    rate = None
    if enough and complete(steady, ["compute_s", "prompt_tokens", "response_tokens", "samples"]):
        trainer, rate = fit_trainer(cfg, r, steady, run)
        fits += trainer
    else:
        fallback(
            ["emulator.trainer_mfu", "emulator.optimizer_s"],
            f"needs compute_s and token counts on {MIN_STEADY}+ steady steps",
        )
    if rate and complete(steady, ["logprob_s"]):
        fits.append(fit_logprob(cfg, steady, rate, fw, run))
    else:
        fallback(["emulator.logprob_passes"], "no logprob_s column (or no fitted trainer rate)")
    decode = ["emulator.decode_bw_eff", "emulator.decode_step_floor_s"]
    if resp and enough and complete(steady, ["gen_s", "prompt_tokens", "samples"]):
        fits.append(fit_decode(cfg, r, steps, resp, rollouts, run))
        other = next(k for k in decode if k != fits[-1].key)
        fallback([other], f"one decode input per run: {fits[-1].key} bounds this run's generation time")
    elif not complete(steady, ["gen_s"]):
        fallback(decode, "no gen_s column (generation time per step is not logged)")
    else:  # generation is timed, but what it generated is not counted
        fallback(
            decode,
            f"needs gen_s and token counts (samples, prompt and response tokens) on {MIN_STEADY}+ steady steps",
        )
    if "sync_s" in steady and steady.sync_s.notna().sum() >= max(len(steady) // 2, 1):
        fits.append(fit_sync(cfg, r, steady, run))
    else:
        fallback(["emulator.weight_sync_fixed_s"], "sync_s logged on fewer than half the steady steps")
    if r.colocated and str(cfg.framework.get("handoff_logged_as", "sync")) == "wait":
        if enough and complete(steady, ["wait_s", "gen_s"]):
            fits += fit_handoff(cfg, r, steady, fw, run)
        else:
            fallback(["emulator.handoff_measured_s"], "needs wait_s and gen_s on the steady steps")
    if rollouts is not None and complete(rollouts, ["env_s", "turns"]):
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
    return fits, falls


def unexplained(steady: pd.DataFrame) -> dict[str, Any]:
    """Step time no emulator input can represent, mean over steady steps (s): the trainer's wait
    beyond generation (a colocated hand-off, teacher scoring, anything between rollout and train),
    and the step beyond wait + logprob + compute + sync. Large values bound how close a replay can get."""
    out: dict[str, Any] = {}
    if complete(steady, ["wait_s", "gen_s"]):
        out["wait_beyond_generation_s"] = round(float((steady.wait_s - steady.gen_s).mean()), 4)
    parts = ["step_s", "wait_s", "logprob_s", "compute_s", "sync_s"]
    have = [c for c in parts[1:] if c in steady and steady[c].notna().any()]
    if complete(steady, ["step_s"]) and have:
        rest = steady.step_s - steady[have].fillna(0.0).sum(axis=1)
        out["step_beyond_logged_parts_s"] = round(float(rest.mean()), 4)
        out["parts"] = have
    return out


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
