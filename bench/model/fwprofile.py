"""A framework profile: what framework F adds above the hardware, pooled over measured runs of F
(fit_runs, the inverse `bench profile fit` runs: bench/profile_fit.py), and read back for a
prediction (profile_overrides).

A profile holds the emulator inputs that belong to the framework, not to the workload or the GPU:
the trainer's efficiency against the hardware's peak (`trainer_mfu`) and fixed cost a step
(`optimizer_s`), its extra forward passes (`logprob_passes`), the inference engine's per-iteration
floor (`decode_step_floor_s`) or bandwidth share (`decode_bw_eff`), the weight sync's fixed cost
(`weight_sync_fixed_s`, beyond the bytes over the path) and the colocated hand-off
(`handoff_measured_s`). Each run is fitted by `bench calibrate` (bench/model/calibrate_fit.py) against its
own hardware's conf (peak FLOP/s, HBM bandwidth, links: the hardware part), so runs of F on any
hardware pool; each value is the median over the runs that support it, its residual the spread
between them ((max - min) / median), or the one run's own fit residual, and `fitted_on` names the runs.
Inputs no run supports are listed under `not_fitted` with each run's reason: a prediction keeps their
documented default and says so (bench.model.inputs.chosen_inputs).

The shipped profiles are the `profile:` blocks of conf/framework/<F>.yaml. `bench predict` takes the
framework-specific inputs of a prediction from the target framework's profile and only the workload's
shape from the source run (bench.model.inputs.prediction_inputs).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import yaml

from bench.errors import UsageError

# The framework's own costs (emulator.<key>), in the order a profile lists them. Everything else a
# calibration fits (workload.*: lengths, prompt length, environment latency) is the workload's shape.
PROFILE_KEYS = (
    "trainer_mfu",
    "optimizer_s",
    "logprob_passes",
    "decode_step_floor_s",
    "decode_bw_eff",
    "weight_sync_fixed_s",
    "handoff_measured_s",
)


def run_id(manifest: dict[str, Any], run_dir: Path) -> str:
    """A run's name in `fitted_on`: where its native logs are (an ingested run's `source_logs`),
    relative to the shared fixtures or corpus folder when under one (the same name on every
    checkout), else the run directory."""
    from bench.fixtures import roots

    where = Path(str(manifest.get("source_logs") or Path(run_dir).resolve()))
    for name, root in roots().items():
        try:
            return f"{name}/{where.resolve().relative_to(root.resolve())}"
        except ValueError:
            continue
    return str(where)


def fit_runs(run_dirs: list[Path], framework: str, given: list[str] = ()) -> dict[str, Any]:
    """The profile of `framework` pooled over `run_dirs` (each calibrated as `bench calibrate` does,
    `given` filling what a run's manifest lacks). UsageError (one line) on a run of another
    framework, before any fit."""
    from bench.model.calibration import calibrate
    from bench.run_setup import read_run

    manifests = [read_run(d)[0] for d in run_dirs]
    for d, m in zip(run_dirs, manifests, strict=True):
        if str(m.get("framework")) != framework:
            raise UsageError(
                f"{d}: a run of {m.get('framework')!r}, not {framework!r}; a profile pools runs of one "
                f"framework: pass only {framework} runs, or framework={m.get('framework')}"
            )
    per: dict[str, list[tuple[str, Any, float, str]]] = {}  # key -> (run, value, residual, unit)
    why: dict[str, dict[str, str]] = {}
    runs: dict[str, Any] = {}
    for d, m in zip(run_dirs, manifests, strict=True):
        fits, falls, header = calibrate(d, list(given))
        rid = run_id(m, d)
        setup = header["setup"]
        runs[rid] = {k: setup.get(k) for k in ("hardware", "model", "experiment.placement")}
        for f in fits:
            key = f.key.removeprefix("emulator.")
            if key in PROFILE_KEYS:
                per.setdefault(key, []).append((rid, f.value, float(f.residual), f.residual_unit))
        for f in falls:
            key = f.key.removeprefix("emulator.")
            if key in PROFILE_KEYS:
                why.setdefault(key, {})[rid] = f.reason
    values = {k: pooled(per[k]) for k in PROFILE_KEYS if k in per}
    none = "no run logs it apart (a colocated run whose framework's own timers hold the hand-off)"
    not_fitted = {k: why.get(k) or dict.fromkeys(runs, none) for k in PROFILE_KEYS if k not in per}
    return {"framework": framework, "runs": runs, "values": values, "not_fitted": not_fitted}


def pooled(fits: list[tuple[str, Any, float, str]]) -> dict[str, Any]:
    """One input over several runs: the median value, the runs it was fitted on, and the residual:
    the spread between the runs ((max - min) / median, relative) when there are several, else the
    one run's own fit residual in its unit."""
    from bench.model.calibrate_fit import plain

    fits = [(r, plain(v), res, unit) for r, v, res, unit in fits]  # numpy scalars as numbers, for YAML
    vals = [float(v) for _, v, _, _ in fits]
    med = statistics.median(vals)
    if isinstance(fits[0][1], int) and not isinstance(fits[0][1], bool):
        med = int(round(med))  # whole forward passes
    out: dict[str, Any] = {"value": round(med, 6) if isinstance(med, float) else med}
    out["fitted_on"] = [r for r, _, _, _ in fits]
    if len(fits) > 1:
        spread = (max(vals) - min(vals)) / abs(med) if med else 0.0
        out["residual"], out["residual_unit"] = round(spread, 4), "relative spread across runs"
        out["per_run"] = {r: v for r, v, _, _ in fits}
    else:
        out["residual"], out["residual_unit"] = round(fits[0][2], 4), fits[0][3]
    return out


def profile_overrides(framework: str, held_out: str = "") -> tuple[list[str], dict[str, Any]]:
    """(emulator.* overrides, provenance) of conf/framework/<framework>.yaml's profile: what a
    prediction of `framework` takes from it. Provenance: {framework, inputs: {key: {value, fitted_on,
    residual}}, not_fitted: {key: reasons}}. `held_out`: a run (as `fitted_on` names it) the profile
    is taken without: every value fitted on it is left out (not refitted on the value's other runs),
    so the input keeps its documented default and is listed as not fitted, held out."""
    from bench.config import CONF_DIR

    conf = yaml.safe_load((CONF_DIR / "framework" / f"{framework}.yaml").read_text()) or {}
    prof = conf.get("profile") or {}
    values = prof.get("values") or {}
    not_fitted = {f"emulator.{k}": v for k, v in (prof.get("not_fitted") or {}).items()}
    if held_out:
        out = [k for k, v in values.items() if held_out in (v.get("fitted_on") or [])]
        if not out:
            from bench.errors import UsageError

            runs = sorted({r for v in values.values() for r in v.get("fitted_on") or []})
            raise UsageError(
                f"held_out={held_out}: conf/framework/{framework}.yaml's profile fitted nothing on it; "
                f"its runs: {', '.join(runs) or 'none'}"
            )
        values = {k: v for k, v in values.items() if k not in out}
        not_fitted |= {f"emulator.{k}": {held_out: "held out: fitted on the run predicted"} for k in out}
    overrides = [f"emulator.{k}={v['value']}" for k, v in values.items() if k in PROFILE_KEYS]
    if "handoff_measured_s" in values:  # the hand-off applies to the framework it was measured on
        overrides.append(f"emulator.handoff_measured_on={framework}")
    inputs = {
        f"emulator.{k}": {"value": v["value"], "fitted_on": list(v.get("fitted_on") or [])}
        for k, v in values.items()
    }
    return overrides, {
        "framework": framework,
        "inputs": inputs,
        "not_fitted": not_fitted,
        "held_out": held_out,
    }


def is_framework_cost(override: str) -> bool:
    """Whether a calibration's `key=value` is a framework cost (an emulator.* input), not the
    workload's shape (workload.*)."""
    return override.lstrip("+").startswith("emulator.")
