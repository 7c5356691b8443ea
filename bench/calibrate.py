"""`bench calibrate RUN_DIR [--out FILE] [key=value ...]`: fit the emulator's inputs to one measured run.

Reads RUN_DIR's trace (trace/steps.parquet, trace/rollouts.parquet when present) and the run's
configuration (manifest `config` / `inferred`, written by `bench ingest`; key=value fills what the
logs lack, e.g. `hardware=h100_sxm`). Writes a calibration YAML (default RUN_DIR.calibration.yaml, beside the run: a run directory is written only by its run)
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

import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from bench.calibrate_fit import (
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
from bench.config import CONF_DIR
from bench.errors import UsageError

# What the fits need from the run's configuration, and how a user gives it.
NEEDS = {
    "model": "model=<conf/model name>",
    "hardware": "hardware=<" + "|".join(sorted(p.stem for p in (CONF_DIR / "hardware").glob("*.yaml"))) + ">",
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
    "experiment.trainer.tp",
    "experiment.trainer.pp",
    "experiment.trainer.ep",
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
    "workload.algorithm",
    "experiment.teachers",
)


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
    for group, entry in (("model", "model_arch"), ("hardware", "hardware")):  # the conf entries
        stem = (inferred.get(entry) or {}).get("value") or _conf_name(
            group, (config.get(group) or {}).get("name")
        )
        if stem:
            out[group] = str(stem)
    for key in CARRIED:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            out[key] = override_value(node)
    return out


def override_value(node: Any) -> str:
    """A manifest config value as a Hydra override value: enums by member name (the manifest holds
    'Placement.colocated'), lists and dicts as Hydra literals (experiment.teachers), strings with
    anything but name characters quoted."""
    if isinstance(node, dict):
        return (
            "{"
            + ",".join(f"{k}:{override_value(v)}" for k, v in node.items() if v not in ("", [], None))
            + "}"
        )
    if isinstance(node, list):
        return "[" + ",".join(override_value(v) for v in node) + "]"
    text = str(node)
    if isinstance(node, str) and text.split(".")[0] in ENUM_REPRS:
        return text.split(".", 1)[1]
    return text if not isinstance(node, str) or re.fullmatch(r"[\w./-]+", text) else repr(text)


# the enum classes whose members the manifest writes as 'Class.member'
ENUM_REPRS = ("Placement", "TeacherPlacement", "Algorithm")


def compose_setup(
    manifest: dict[str, Any], given: list[str], extra: list[str] = ()
) -> tuple[Any, dict[str, str]]:
    """(composed config, known keys -> value) of the run. Override order: the run's framework and
    its manifest setup, then `extra` (e.g. a calibration), then `given` key=value, which wins.
    Keys none of them holds keep compose defaults, so callers check `missing()` before trusting
    any of NEEDS."""
    from bench.config import compose

    run = known_setup(manifest)
    known = dict(run)
    for o in given:
        key, _, value = o.partition("=")
        known[key.lstrip("+")] = value
    framework = known.pop("framework", None) or str(manifest.get("framework", ""))
    groups = [f"{k}={v}" for k, v in run.items() if k in ("model", "hardware")]
    keys = [f"{k}={v}" for k, v in run.items() if k not in ("model", "hardware")]
    head = [f"framework={framework}"] if framework else []
    rest = [o for o in given if not o.startswith("framework=")]
    return compose([*head, *groups, *keys, *extra, *rest]), known


def missing(known: dict[str, str], needs: dict[str, str] = NEEDS) -> list[str]:
    return [how for key, how in needs.items() if key not in known]


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
    else:
        fallback(decode, "no gen_s column (generation time per step is not logged)")
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


def main(argv: list[str]) -> int:
    """`python -m bench calibrate RUN_DIR [--out FILE] [key=value ...]`: fit, write the YAML."""
    from bench.cli import add_overrides, command_parser
    from bench.trace import atomic_path

    ap = command_parser(
        "calibrate",
        "Fit the emulator's inputs (response-length shape, trainer MFU, log-prob passes, decode bandwidth, "
        "weight-sync time, environment latency) to a measured run; an input the run cannot support keeps "
        "its documented default, with the reason.",
        "RUN_DIR (manifest.json, trace/, metrics.json: a run from bench ingest, run or emulate), conf/ "
        "and the overrides.",
        "the calibration YAML --out (new; default RUN_DIR.calibration.yaml, beside the run directory, never "
        "inside it), applied with "
        "calibration=FILE on bench emulate, run and predict.",
        ["python -m bench calibrate results/opd/verl hardware=h100_sxm --out /tmp/verl-calibration.yaml"],
    )
    ap.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a measured (or emulated) run directory")
    ap.add_argument("--out", type=Path, help="calibration YAML to write (default RUN_DIR.calibration.yaml)")
    add_overrides(ap, "what the run's manifest lacks, e.g. hardware=h100_sxm")
    args = ap.parse_intermixed_args(argv)
    given = args.overrides
    # a run directory is written only by its run: the default sits beside it
    out = args.out or args.run_dir.parent / f"{args.run_dir.name}.calibration.yaml"
    if args.out is not None:
        from bench.outdir import check_out

        check_out(out, "calibrate", is_file=True)
    elif out.exists():  # the default, beside the run directory
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
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp:
            tmp.write_text(to_yaml(fits, falls, header))
    except OSError as e:  # a full or read-only disk: one line naming --out
        from bench.outdir import os_refusal

        raise os_refusal(out, e) from None
    for f in fits:
        print(f"fitted {f.key} = {f.value} (residual {f.residual:.3g} {f.residual_unit})")
    for f in falls:
        print(f"default {f.key} = {f.default}: {f.reason}", file=sys.stderr)
    for k, v in header["unexplained"].items():
        if k != "parts" and abs(v) > 0.05:
            print(f"unexplained {k} = {v} s a step: no emulator input represents it", file=sys.stderr)
    print(f"{out}: {len(fits)} fitted, {len(falls)} default(s)")
    return 0
