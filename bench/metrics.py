"""Trace -> metrics.json. Each metric is a small pure function of the trace; docs/metrics.md has
every formula, its units and its source. A metric whose inputs are missing is null, with the
reason in `missing`; it is never a made-up number.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from bench import cost, flops, latency, telemetry
from bench.phases import phases, wall_breakdown
from bench.trace import RunPaths, TraceError, read_gpu, read_manifest, read_rollouts, read_steps, write_json

IDENTITY_TOLERANCE = 0.10  # consumption x (1 - idle) vs production (SemiAnalysis case 1: 1.93 vs 1.95)

METRIC_KEYS = (
    "wall_s",
    "steady_step_s",
    "trajectories_per_s",
    "trajectories_per_s_steps",
    "production_samples_per_s",
    "consumption_samples_per_s",
    "trainer_idle_frac",
    "mfu",
    "mfu_wall",
    "mfu_native",
    "oversampling_waste",
    "token_waste",
    "zero_advantage_frac",
    "staleness_mean",
    "staleness_max",
    "trained_tokens",
    "generated_tokens",
    "gpu_hours",
    "usd_per_gpu_hour",
    "cost_per_mtok_usd",
    "cost_per_mtok_generated_usd",
    "tinker_equiv_per_mtok_usd",
    "tinker_ratio",
    "goodput_tokens_per_s",
    "energy_wh",
)


class Missing(Exception):
    """Raised by a metric function when an input is absent; the message is the reason."""


@dataclass
class Window:
    """Steady-state window: steps [first, last]; warm-up steps before `first` are skipped."""

    first: int
    last: int
    rule: str


def steady_window(steps: pd.DataFrame) -> Window:
    """Skip warm-up: the first ceil(10%) of steps, at least 1 when there are >= 3 steps.

    Step 1 carries compile/graph capture, cache warm-up and, in async modes, an empty queue;
    a fixed fraction keeps long runs' windows long and short runs' windows non-empty.
    """
    n = len(steps)
    skip = 0 if n < 3 else max(1, math.ceil(0.1 * n))
    ordered = steps["step"].sort_values().to_numpy()
    return Window(
        first=int(ordered[skip]) if n else 0,
        last=int(ordered[-1]) if n else -1,
        rule=f"skip first {skip} of {n} steps (ceil 10%, min 1 when n >= 3)",
    )


def _sum(df: pd.DataFrame, col: str) -> float:
    s = df[col]
    if s.isna().all():
        raise Missing(f"the trace has no '{col}'")
    if s.isna().any():
        raise Missing(f"'{col}' is missing on {int(s.isna().sum())} of {len(s)} steps")
    return float(s.sum())


def _ratio(num: float, den: float, what: str) -> float:
    if den <= 0:
        raise Missing(f"{what} is zero")
    return num / den


# --- the metrics: each takes the context and returns a number or raises Missing ---------------


def _wall_window(manifest: dict) -> str:
    w = manifest.get("wall_window") or {}
    if w.get("window"):
        return f"{w['window']}: {w['definition']}"
    if manifest.get("wall_s") is not None:
        return "manifest wall_s: run directory start to end as the suite recorded it"
    return "trace: first step start to last step end"


def wall_s(c: Context) -> float:
    """End-to-end wall time (s): manifest start/end when recorded, else the trace's time span."""
    if c.manifest.get("wall_s") is not None:
        return float(c.manifest["wall_s"])
    s = c.steps
    if s["t_end_s"].notna().any() and s["t_start_s"].notna().any():
        return float(s["t_end_s"].max() - min(0.0, s["t_start_s"].min()))
    return _sum(s, "step_s")


def steady_step_s(c: Context) -> float:
    """Mean trainer step wall time over the window (s)."""
    return _sum(c.w, "step_s") / len(c.w)


def trajectories_per_s(c: Context) -> float:
    """Trained samples over the whole run / end-to-end wall time, `wall_window` (samples/s)."""
    return _ratio(_sum(c.steps, "samples"), c.get("wall_s"), "wall time")


def trajectories_per_s_steps(c: Context) -> float:
    """Trained samples over the whole run / the sum of its step windows (samples/s): the rate while
    steps ran, start-up, gaps and teardown excluded, the same way for every framework."""
    return _ratio(_sum(c.steps, "samples"), _sum(c.steps, "step_s"), "step time")


def production_samples_per_s(c: Context) -> float:
    """Delivered (trained) samples / window wall time (samples/s)."""
    return _ratio(_sum(c.w, "samples"), _sum(c.w, "step_s"), "window wall time")


def _busy_s(df: pd.DataFrame) -> float:
    logprob = float(df["logprob_s"].fillna(0).sum())
    return _sum(df, "compute_s") + logprob


def consumption_samples_per_s(c: Context) -> float:
    """Samples / trainer compute time (log-prob + forward/backward/optimizer; idle and sync excluded)."""
    return _ratio(_sum(c.w, "samples"), _busy_s(c.w), "trainer compute time")


def trainer_idle_frac(c: Context) -> float:
    """Trainer idle over time that passed: Σ_W wait / Σ_W step (fraction of the window's wall time).

    The one definition (docs/metrics.md): the share of the steady steps' wall time the trainer had
    nothing to train (waiting for rollouts; in a colocated run, the generation phase on its GPUs)."""
    return _ratio(_sum(c.w, "wait_s"), _sum(c.w, "step_s"), "window wall time")


def _unknown(c: Context, what: str, default: str) -> str:
    """The reason an ingested run's model or hardware is unknown (manifest `inferred`), else default."""
    entry = (c.manifest.get("inferred") or {}).get(what) or {}
    if what == "model":
        return c.manifest["inferred"]["model_evidence"] if entry else default
    return entry.get("reason") or default


def _step_flops(c: Context, df: pd.DataFrame) -> float:
    if c.model is None:
        raise Missing(_unknown(c, "model", "the manifest has no resolved model config"))
    tokens = df["prompt_tokens"].fillna(0) + df["response_tokens"]
    if df["response_tokens"].isna().any() or df["samples"].isna().any():
        raise Missing("response_tokens or samples missing on some steps")
    mean_seq = (tokens / df["samples"].clip(lower=1)).clip(lower=1)
    return float(
        sum(
            t * flops.flops_per_token(c.model, int(s), "suite") for t, s in zip(tokens, mean_seq, strict=True)
        )
    )


def _peak_trainer(c: Context) -> float:
    if c.cfg is None:
        raise Missing("the manifest has no resolved config (hardware, trainer GPUs)")
    if c.cfg.get("hardware") is None:
        raise Missing(_unknown(c, "hardware", "the manifest names no hardware"))
    if OmegaConf.select(c.cfg, "experiment.trainer_gpus") is None:
        raise Missing("trainer GPU count unknown: pass experiment.trainer_gpus=<n>")
    return float(c.cfg.hardware.peak_bf16_flops) * int(c.cfg.experiment.trainer_gpus)


def mfu(c: Context) -> float:
    """Suite FLOPs of trained tokens / (forward+backward+optimizer time x peak x trainer GPUs)."""
    return _ratio(_step_flops(c, c.w), _sum(c.w, "compute_s") * _peak_trainer(c), "compute time")


def mfu_wall(c: Context) -> float:
    """Suite FLOPs of trained tokens / (step wall time x peak x trainer GPUs)."""
    return _ratio(_step_flops(c, c.w), _sum(c.w, "step_s") * _peak_trainer(c), "step time")


def mfu_native(c: Context) -> float:
    """Mean over the window of the framework's own MFU (fraction), as it logged it."""
    if "native_mfu" not in c.w or c.w["native_mfu"].isna().all():
        raise Missing("the framework did not report MFU")
    return float(c.w["native_mfu"].mean())


def oversampling_waste(c: Context) -> float:
    """Discarded / dispatched rollouts over the whole run (fraction).

    Whole run, not the window: in async modes a step trains rollouts dispatched during earlier
    steps, so per-window ratios mix generations; over the run every dispatch is counted once.
    """
    return _ratio(
        _sum(c.steps, "discarded_samples"), _sum(c.steps, "dispatched_samples"), "dispatched rollouts"
    )


def token_waste(c: Context) -> float:
    """1 - trained response tokens / generated response tokens over the whole run (fraction)."""
    return 1.0 - _ratio(
        _sum(c.steps, "response_tokens"), _sum(c.steps, "generated_tokens"), "generated tokens"
    )


def zero_advantage_frac(c: Context) -> float:
    """Share of groups whose rollouts all passed or all failed (no advantage signal), window mean."""
    w = c.w
    if w["solve_all_frac"].notna().all() and w["solve_none_frac"].notna().all():
        return float((w["solve_all_frac"] + w["solve_none_frac"]).mean())
    return _ratio(_sum(w, "filtered_samples"), _sum(w, "dispatched_samples"), "dispatched rollouts")


def staleness_mean(c: Context) -> float:
    """Policy versions between a sample's generation and its training step, sample-weighted mean."""
    w = c.w
    if w["staleness_mean"].isna().all():
        raise Missing("the framework did not report staleness")
    weights = w["samples"].fillna(1).clip(lower=1)
    ok = w["staleness_mean"].notna()
    return float(np.average(w.loc[ok, "staleness_mean"], weights=weights[ok]))


def staleness_max(c: Context) -> float:
    """Largest staleness of any trained sample in the window (policy versions)."""
    if c.w["staleness_max"].isna().all():
        raise Missing("the framework did not report staleness")
    return float(c.w["staleness_max"].max())


def trained_tokens(c: Context) -> float:
    """Prompt + response tokens of every trained sample, whole run (tokens)."""
    if c.steps["prompt_tokens"].isna().all():
        raise Missing("the trace has no prompt token counts")
    return _sum(c.steps, "response_tokens") + float(c.steps["prompt_tokens"].fillna(0).sum())


def generated_tokens(c: Context) -> float:
    """Response tokens generated, trained or not, whole run (tokens)."""
    return _sum(c.steps, "generated_tokens")


def _total_gpus(c: Context) -> int:
    if c.cfg is None:
        raise Missing("the manifest has no resolved config (GPU counts)")
    from bench.resolve import Resolved

    return (c.resolved or Resolved.from_config(c.cfg)).total_gpus


def _ingested_gpus(c: Context) -> int:
    """Every GPU an ingested run's logs name, by role (trainer, rollout, hybrid, teacher, reward)."""
    gpus = c.manifest["inferred"].get("gpus") or {}
    counts = [v.get("value") for v in gpus.values() if isinstance(v, dict)]
    if not counts or None in counts:
        raise Missing("GPU roles unknown: pass experiment.trainer_gpus=<n> experiment.generator_gpus=<n>")
    return int(sum(counts))


def gpu_hours(c: Context) -> float:
    """Wall time x every GPU of the run (trainer + generator; once when colocated) / 3600. An
    ingested run counts every role its logs name, teacher and reward GPUs included."""
    if c.manifest.get("inferred"):
        return c.get("wall_s") * _ingested_gpus(c) / 3600.0
    return c.get("wall_s") * _total_gpus(c) / 3600.0


def usd_per_gpu_hour(c: Context) -> float:
    """TCO $/GPU-hour of the run's hardware (bench.cost.gpu_hour_usd)."""
    if c.cfg is None or c.cfg.get("hardware") is None:
        raise Missing(_unknown(c, "hardware", "the manifest has no resolved hardware config"))
    return cost.gpu_hour_usd(c.cfg.hardware)["total"]


def cost_per_mtok_usd(c: Context) -> float:
    """$ per million trained tokens (prompt + response of trained samples)."""
    v = cost.usd_per_mtok(c.get("gpu_hours"), c.get("usd_per_gpu_hour"), c.get("trained_tokens"))
    if v is None:
        raise Missing("no trained tokens")
    return v


def cost_per_mtok_generated_usd(c: Context) -> float:
    """$ per million generated response tokens."""
    v = cost.usd_per_mtok(c.get("gpu_hours"), c.get("usd_per_gpu_hour"), c.get("generated_tokens"))
    if v is None:
        raise Missing("no generated tokens")
    return v


def tinker_equiv_per_mtok_usd(c: Context) -> float:
    """Tinker's price for the same token mix, $ per million trained tokens (prefill once per sample)."""
    if c.model is None:
        raise Missing(_unknown(c, "model", "the manifest has no resolved model config"))
    prompt = float(c.steps["prompt_tokens"].fillna(0).sum())
    response = _sum(c.steps, "response_tokens")
    gen = c.values.get("generated_tokens")
    p = cost.tinker_price_per_mtok(
        c.model.name, prompt, gen if gen is not None else response, prompt + response
    )
    if p is None:
        raise Missing(f"Tinker lists no price for {c.model.name}")
    return p["per_mtok_usd"]


def tinker_ratio(c: Context) -> float:
    """Our $/M trained tokens over Tinker's (> 1: Tinker is cheaper)."""
    return c.get("cost_per_mtok_usd") / c.get("tinker_equiv_per_mtok_usd")


def goodput_tokens_per_s(c: Context) -> float:
    """Useful trained tokens per second of window wall time: tokens of trained samples that carry an
    advantage (not in an all-pass/all-fail group) and lie within the staleness budget."""
    w = c.w
    if w["solve_all_frac"].isna().all():
        raise Missing("the trace has no group solve fractions (zero-advantage share unknown)")
    budget = OmegaConf.select(c.cfg, "workload.staleness_budget") if c.cfg is not None else None
    if c.rollouts is not None and budget is not None:
        r = c.rollouts
        used = r[(r.status == "used") & r.step_consumed.between(c.window.first, c.window.last)]
        # step s (1-based) trains from policy version s - 1 (bench/trace.py, policy versions)
        fresh = used[(used.step_consumed - 1 - used.policy_version_start) <= budget]
        frac_fresh = (fresh.prompt_tokens + fresh.response_tokens).sum() / max(
            1, (used.prompt_tokens + used.response_tokens).sum()
        )
    elif budget is not None and w["staleness_max"].notna().all() and (w["staleness_max"] <= budget).all():
        frac_fresh = 1.0
    else:
        raise Missing("staleness per sample unknown: cannot tell which tokens lie within the budget")
    tokens = (w["prompt_tokens"].fillna(0) + w["response_tokens"]) * (
        1.0 - w["solve_all_frac"] - w["solve_none_frac"]
    )
    return _ratio(float(tokens.sum()) * float(frac_fresh), _sum(w, "step_s"), "window wall time")


def energy_wh(c: Context) -> float:
    """GPU energy (Wh) from telemetry: per device the trapezoidal integral of power over its samples
    (bench.telemetry.energy_j), summed over devices."""
    from bench.telemetry import energy_j

    if c.gpu is None or c.gpu.empty:
        raise Missing("no GPU telemetry (trace/gpu.parquet)")
    gpu = c.gpu.dropna(subset=["power_w"]).sort_values("t_s")
    return sum(energy_j(g["t_s"], g["power_w"]) for _, g in gpu.groupby(["node", "gpu"])) / 3600.0


METRICS = {name: globals()[name] for name in METRIC_KEYS}


class Context:
    """What the metric functions see: the trace, the window, the resolved config, computed values."""

    def __init__(
        self, manifest: dict, steps: pd.DataFrame, rollouts, gpu, cfg: Any = None, resolved: Any = None
    ):
        """`cfg` and its bench.resolve.Resolved: the composed config and its layout when the caller
        holds them (bench.plan's points: rebuilding them was 4% of a point), else cfg is built from
        manifest["config"] and the layout worked out from it when a metric needs it."""
        self.manifest = manifest
        self.resolved = resolved
        self.steps = steps.sort_values("step").reset_index(drop=True)
        self.window = steady_window(self.steps)
        self.w = self.steps[(self.steps.step >= self.window.first) & (self.steps.step <= self.window.last)]
        self.rollouts, self.gpu = rollouts, gpu
        built = OmegaConf.create(manifest["config"]) if cfg is None and manifest.get("config") else None
        self.cfg = cfg if cfg is not None else built
        # A plain namespace: flops_per_token on an OmegaConf node costs ~5 ms a call (1,000-step runs).
        model = manifest["config"].get("model") if manifest.get("config") else None
        self.model = SimpleNamespace(**model) if model else None
        self.values: dict[str, float | None] = {}
        self.missing: dict[str, str] = {}

    def get(self, name: str) -> float:
        """A metric computed earlier; Missing (with its reason) if it was null."""
        if self.values.get(name) is None:
            raise Missing(f"needs {name}: {self.missing.get(name, 'not computed')}")
        return self.values[name]


def identity_check(values: dict[str, Any], busy_s: float | None = None, sync_s: float = 0.0) -> str | None:
    """Flag runs where consumption x (1 - idle) x busy / (busy + sync) and production differ > 10%.

    With step = wait + busy + sync the two are equal exactly; the busy/(busy + sync) factor is
    SemiAnalysis's identity (consumption x (1 - idle) = production) made exact for weight-sync time,
    which is not small on every setup (verl colocated: 1.7 s of a 5-s step). A violation means
    the step's wall time is not explained by wait + compute + sync: time the trace does not see.
    """
    cons, idle, prod = (
        values.get(k) for k in ("consumption_samples_per_s", "trainer_idle_frac", "production_samples_per_s")
    )
    if None in (cons, idle, prod) or not prod:
        return None
    implied = cons * (1 - idle) * (busy_s / (busy_s + sync_s) if busy_s else 1.0)
    err = abs(implied - prod) / prod
    if err > IDENTITY_TOLERANCE:
        return (
            f"idle identity violated: consumption x (1 - idle) x busy/(busy + sync) = {implied:.4g} samples/s vs "
            f"production {prod:.4g} samples/s ({err:.0%} apart, tolerance {IDENTITY_TOLERANCE:.0%}): "
            "step time not explained by wait + compute + sync"
        )
    return None


def compute(run_dir: Path | str) -> dict[str, Any]:
    """All metrics of one run directory (flat dict; see METRIC_KEYS, `missing`, `checks`)."""
    paths = RunPaths(Path(run_dir))
    manifest = read_manifest(paths)
    steps = read_steps(paths.steps)
    rollouts = (
        read_rollouts(
            paths.rollouts,
            ["status", "step_consumed", "policy_version_start", "prompt_tokens", "response_tokens"]
            + ["t_dispatch_s", "t_finish_s"],
        )
        if paths.rollouts.exists()
        else None
    )
    gpu = read_gpu(paths.gpu) if paths.gpu.exists() else None
    c = Context(manifest, steps, rollouts, gpu)
    for name, fn in METRICS.items():
        try:
            if c.w.empty:
                raise Missing("the trace has no steps")
            v = fn(c)
            c.values[name] = None if v is None or not math.isfinite(v) else float(v)
            if c.values[name] is None:
                c.missing[name] = "not a finite number"
        except Missing as e:
            c.values[name], c.missing[name] = None, str(e)
    busy = sync = None
    if not c.w.empty and c.w["compute_s"].notna().all():
        busy, sync = _busy_s(c.w), float(c.w["sync_s"].fillna(0).sum())
    checks = [msg for msg in (identity_check(c.values, busy, sync or 0.0),) if msg]
    checks += manifest.get("warnings", [])
    return {
        "experiment": manifest.get("experiment"),
        "run_id": manifest.get("run_id"),
        "framework": manifest.get("framework"),
        "mode": manifest.get("mode"),
        "status": manifest.get("status"),
        **c.values,
        "window": {"first_step": c.window.first, "last_step": c.window.last, "rule": c.window.rule},
        # which wall clock wall_s, trajectories_per_s and the cost figures use (docs/metrics.md)
        "wall_window": _wall_window(manifest),
        "phases": phases(c.w, manifest),
        "wall_breakdown": wall_breakdown(c.steps, manifest, c.values.get("wall_s"), _wall_window(manifest)),
        "latency": latency.summary(rollouts, c.window.first, c.window.last),
        "gpu_roles": _gpu_roles(manifest, gpu),
        "missing": c.missing,
        "checks": checks,
    }


def _gpu_roles(manifest: dict, gpu: pd.DataFrame | None) -> dict[str, Any]:
    """Telemetry by role (trainer, rollout, teacher, ...) where the manifest names each role's
    devices (an ingested run's inferred.gpu_ids), else the reason it cannot be split."""
    inferred = manifest.get("inferred") or {}
    ids = inferred.get("gpu_ids") or {}
    roles = {
        r: e["value"] for r, e in ids.items() if isinstance(e, dict) and isinstance(e.get("value"), list)
    }
    # every role holding GPUs of its own must be named, or the split would leave some devices out
    held = {
        r
        for r, e in (inferred.get("gpus") or {}).items()
        if isinstance(e, dict) and (e.get("value") or 0) > 0
    }
    if gpu is None or gpu.empty:
        return {"missing": "no GPU telemetry (trace/gpu.parquet)"}
    if not roles or not held <= set(roles):
        return {"missing": "the run does not name each role's devices"}
    return telemetry.role_summary(gpu, roles)


def write_metrics(run_dir: Path | str) -> dict[str, Any]:
    """Compute and atomically write <run_dir>/metrics.json; returns it."""
    m = compute(run_dir)
    write_json(RunPaths(Path(run_dir)).metrics, m)
    return m


def main(argv: list[str]) -> int:
    """`python -m bench metrics RUN_DIR [RUN_DIR ...]`: (re)compute metrics.json from the trace."""
    from bench.cli import command_parser

    ap = command_parser(
        "metrics",
        "Recompute each run directory's metrics from its trace (every formula in docs/metrics.md); a "
        "metric whose inputs are missing is null with the reason.",
        "RUN_DIR/manifest.json and RUN_DIR/trace/*.parquet.",
        "RUN_DIR/metrics.json (replaced atomically), and the figures as JSON on stdout.",
        ["python -m bench metrics results/smoke/*/"],
    )
    ap.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="a run directory with trace/")
    args = ap.parse_args(argv)
    rc = 0
    for d in args.run_dirs:
        try:
            m = write_metrics(d)
        except TraceError as e:
            print(f"{d}: {e}", file=sys.stderr)
            rc = 2
            continue
        shown = {k: m[k] for k in METRIC_KEYS if m[k] is not None}
        print(json.dumps({"run": str(d), **shown, "missing": m["missing"], "checks": m["checks"]}, indent=2))
    return rc
