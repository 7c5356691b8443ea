"""Speed of light per phase: each phase of a run next to the seconds its GPU's hardware profile
(bench/model/hwprofile.py, docs/probe.md) needs for the same work with no framework overhead, and their
ratio ("generation 38 s a step; this GPU does that work in 9 s: 4.2x"). docs/metrics.md, "Speed of
light", states every assumption; each row repeats its own in `basis`.

The work is the steady window's mean step (metrics.json `window`; steps.parquet `samples`,
`prompt_tokens`, `response_tokens`); the physics is bench.model.hwprofile's, called, never restated:

- generation: the step's sequences spread evenly over the engines (the busiest engine holds
  ceil(sequences / engines)); one batched prefill of the mean prompt (hwprofile.prefill_s), then one
  decode iteration per token of the mean response, each at hwprofile.decode_s with the context grown
  by one token per iteration (their sum; the mean context is prompt + half the response);
- update (compute_s): the step's training FLOPs (bench.flops, suite convention, every sequence at the
  mean length) at the profile's train rate (hwprofile.eager_s "train", one launch of every layer)
  plus hwprofile.optimizer_s of one trainer GPU's shard of the parameters, plus, when the run offloads
  trainer state (experiment.trainer.offload_*), those bytes loaded and put back over the measured
  pinned host copies (hwprofile.host_roundtrip_s);
- log-prob passes (ref_s, old_logprob_s; logprob_s when not split): a forward (a third of the training
  FLOPs) per pass at the prefill rate (hwprofile.eager_s "prefill");
- weight sync (sync_s): the generator's weight bytes over the framework's path at this placement
  (framework.weight_sync): ipc a device copy on each engine GPU (read + write at the measured copy
  bandwidth), filesystem the whole model written then read back, nccl "not measured" (a one-GPU
  probe measures no link between GPUs).

Every other phase has no hardware-only counterpart and says why. Units: seconds per trainer step.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import yaml
from omegaconf import OmegaConf

from bench import flops, resolve
from bench.errors import UsageError
from bench.model import hwprofile, hwprofile_conf
from bench.phases import colocated
from bench.trace import STEP_PHASES, RunPaths, TraceError, read_manifest, read_steps

NO_PROFILE_FIX = "`bench probe` + `bench probe fit` make one (docs/probe.md)"
NOT_MEASURED = "not measured"
WORK_COLUMNS = ["step", "gen_s", "samples", "prompt_tokens", "response_tokens"]
# Phases that are not work a GPU does for the step, or work the profile does not model, and why.
NO_COUNTERPART = {
    "wait_s": "idle time, not work: the generation row is the work behind it",
    "score_s": "the reward or teacher model's work is not modelled here",
    "adv_s": "advantage computation: CPU-side bookkeeping, no hardware-only counterpart",
    "handoff_s": "the hand-off's host transfers are not modelled here",
    "checkpoint_s": "checkpoint saves are not modelled here",
    "validation_s": "validation is not modelled here",
    "data_s": "data loading: no GPU work",
    "unattributed_s": "time no timer covers: no work to price",
}


# ---------------------------------------------------------------------------------------------------
# Which profile: the one given, else the run's own config (hardware_profile, hardware.profile), else
# conf/hardware/<hw>.yaml `profile:` of the run's hardware option.


def _config(manifest: dict[str, Any]) -> dict[str, Any]:
    cfg = manifest.get("config") or manifest.get("resolved_config") or {}
    return cfg if isinstance(cfg, dict) else {}


def hardware_option(manifest: dict[str, Any]) -> str | None:
    """The run's conf/hardware option (inferred.hardware: the config's for launched runs, the logs'
    or the user's for ingested ones), or None when the run does not say."""
    hw = (manifest.get("inferred") or {}).get("hardware")
    value = hw.get("value") if isinstance(hw, dict) else None
    return str(value) if value else None


def find_profile(manifest: dict[str, Any], given: Path | None = None) -> tuple[dict, dict] | str:
    """(profile, source {profile, set_by, device, ...}) for the run, or the one line saying why there
    is none. `given` (a PROFILE.yaml) wins; one that is unreadable or measured on another GPU than the
    run's raises UsageError (hwprofile_conf.for_config: the one check); the run's own unreadable profile is
    a reason, not an error (a report still shows the run)."""
    from omegaconf import OmegaConf

    cfg = _config(manifest)
    hw = cfg.get("hardware") if isinstance(cfg.get("hardware"), dict) else {}
    option = hardware_option(manifest)
    name = hw.get("name")
    if given is not None:
        if not Path(given).is_file():
            raise UsageError(
                f"--profile {given}: no such file; expected a PROFILE.yaml written by `bench probe fit`"
            )
        chosen = {"hardware_profile": str(given), "hardware": {"name": name, "profile": None}}
    elif cfg.get("hardware_profile"):
        chosen = {"hardware_profile": cfg["hardware_profile"], "hardware": {"name": name, "profile": None}}
    elif hw.get("profile"):
        chosen = {"hardware": {"name": name, "profile": hw["profile"]}}
    elif (
        option
        and re.fullmatch(r"[\w.-]+", option)
        and (conf := hwprofile_conf.HARDWARE_CONF_DIR / f"{option}.yaml").is_file()
    ):
        shipped = (yaml.safe_load(conf.read_text()) or {}).get("profile")
        if not shipped:
            return f"no hardware profile for {option} (conf/hardware/{option}.yaml profile: null): {NO_PROFILE_FIX}"
        chosen = {"hardware": {"name": name, "profile": shipped}}
    else:
        return f"no hardware profile for {option or name or 'unknown hardware'}: {NO_PROFILE_FIX}"
    if not name:
        why = "the run's hardware is unknown (give hardware=<option> to `bench ingest`)"
        if given is not None:
            raise UsageError(f"--profile {given}: {why}")
        return why
    try:
        found = hwprofile_conf.for_config(OmegaConf.create(chosen))
    except UsageError as e:
        if given is None:
            return f"the run's profile is unusable: {e}"
        raise UsageError(str(e).replace(f"hardware_profile={given}:", f"--profile {given}:", 1)) from None
    assert found is not None  # chosen always names a file
    return found


# ---------------------------------------------------------------------------------------------------
# The work of the mean steady step, and the hardware's seconds for it.


def _row(
    phase: str,
    name: str,
    measured: float | None,
    hardware: float | None = None,
    basis: str | None = None,
    gpus: int | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """One phase: measured and hardware-only seconds per step, their ratio, what was assumed (`basis`)
    and the GPUs doing the hardware work at once (`gpus`), or the `reason` there is no number."""
    ratio = measured / hardware if measured is not None and hardware else None
    row = {"phase": phase, "name": name, "measured_s": measured, "hardware_s": hardware, "ratio": ratio}
    row |= {"basis": basis, "gpus": gpus}
    if hardware is None:
        row["reason"] = reason
    return row


def _gpus(manifest: dict[str, Any], cfg: dict[str, Any]) -> dict[str, int | None]:
    """Engine GPUs, engines, generator and trainer GPUs: the resolved layout (launched runs), else
    the config the ingest wrote (experiment.*_gpus, generator.tp)."""
    r = manifest.get("resolved") if isinstance(manifest.get("resolved"), dict) else {}
    exp = cfg.get("experiment") if isinstance(cfg.get("experiment"), dict) else {}
    gen = exp.get("generator") if isinstance(exp.get("generator"), dict) else {}

    def count(v: Any) -> int | None:
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None

    generator = count((r.get("generator") or {}).get("gpus")) or count(exp.get("generator_gpus"))
    engine = count(r.get("engine_gpus")) or count(gen.get("tp"))
    engines = count(r.get("engines")) or (generator // engine if generator and engine else None)
    trainer = count((r.get("trainer") or {}).get("gpus")) or count(exp.get("trainer_gpus"))
    return {"engine_gpus": engine, "engines": engines, "generator_gpus": generator, "trainer_gpus": trainer}


def _mean(steps, col: str) -> float | None:
    if col not in steps or steps[col].isna().any() or steps.empty:
        return None
    return float(steps[col].mean())


def compute(
    manifest: dict[str, Any], metrics: dict[str, Any], steps, profile: dict, source: dict
) -> dict[str, Any]:
    """Per phase of metrics.json `phases` (and generation): measured s per steady step, the profile's
    hardware-only seconds for the same work, their ratio, and the basis; `steps` holds the steady
    window's rows (WORK_COLUMNS)."""
    cfg = _config(manifest)
    device = str(source.get("device") or "the profiled GPU")
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else None
    g = _gpus(manifest, cfg)
    samples, prompt, response = (_mean(steps, c) for c in ("samples", "prompt_tokens", "response_tokens"))
    work = {
        "steps": len(steps),
        "samples": samples,
        "prompt_tokens": prompt,
        "response_tokens": response,
        **g,
    }
    out = {"device": device, "profile": source, "work": work, "phases": []}
    parts = (metrics.get("phases") or {}).get("parts") or {}
    measured = {col: p["s_per_step"] for col, p in parts.items()}
    names = {col: p["name"] for col, p in parts.items()}
    unknown = None
    if model is None:
        unknown = "the run's model is unknown (give model=<option> to `bench ingest`)"
    elif not samples or prompt is None or response is None:
        unknown = "steps.parquet lacks samples, prompt_tokens or response_tokens on the steady steps"
    m = SimpleNamespace(**model) if model else None
    arch = _arch(m) if m else None
    per_seq = (prompt + response) / samples if not unknown else None

    # generation: a colocated run's wait phase (its own GPUs generate: docs/metrics.md "Phases"), else
    # gen_s, the generation of the step's batch, concurrent with training on the generator's GPUs
    if colocated(manifest) and "wait_s" in measured:
        gen_measured, gen_col = measured["wait_s"], "wait_s"
    else:
        gen_measured, gen_col = _mean(steps, "gen_s"), "gen_s"
    dtype = _weight_dtype(cfg)
    out["phases"].append(
        _generation(profile, m, arch, g, samples, prompt, response, gen_measured, gen_col, unknown, dtype)
    )
    passes = _logprob_passes(cfg, manifest)
    for col in STEP_PHASES:
        if col not in measured or (col == gen_col == "wait_s"):
            continue
        name, s = names[col], measured[col]
        if col in NO_COUNTERPART:
            out["phases"].append(_row(col, name, s, reason=NO_COUNTERPART[col]))
        elif unknown:
            out["phases"].append(_row(col, name, s, reason=unknown))
        elif col == "compute_s":
            out["phases"].append(_update(profile, m, arch, g, samples, per_seq, s, cfg))
        elif col in ("ref_s", "old_logprob_s", "logprob_s"):
            n = 1 if col != "logprob_s" else passes
            out["phases"].append(_logprob(profile, m, arch, g, samples, per_seq, col, name, s, n))
        elif col == "sync_s":
            out["phases"].append(_sync(profile, m, cfg, manifest, g, s))
    return out


def _weight_dtype(cfg: dict[str, Any]) -> float | None:
    """Bytes per weight on the generator: experiment.generator.dtype_bytes (launched runs), else the
    model's `weight_bytes` (conf/model: the checkpoint's), else None."""
    gen = (cfg.get("experiment") or {}).get("generator") or {}
    dtype = gen.get("dtype_bytes") or (cfg.get("model") or {}).get("weight_bytes")
    return float(dtype) if dtype else None


def _arch(m: SimpleNamespace) -> hwprofile.Arch:
    from bench.model.costmodel import arch_of

    return arch_of(m)


def _logprob_passes(cfg: dict[str, Any], manifest: dict[str, Any]) -> int | None:
    """Forward passes inside an unsplit logprob_s: the emulator's input for an emulated run; None for
    a native one (its parser splits the passes into ref_s / old_logprob_s where it can)."""
    em = cfg.get("emulator") if isinstance(cfg.get("emulator"), dict) else None
    if manifest.get("mode") != "emulated" or not em:
        return None
    fw = (cfg.get("framework") or {}).get("name") or manifest.get("framework")
    return int((em.get("logprob_passes_by_framework") or {}).get(fw, em.get("logprob_passes", 1)))


def _generation(profile, m, arch, g, samples, prompt, response, measured, col, unknown, dtype):
    """Generation's row: prefill + the sum of hwprofile.decode_s over the step's decode iterations."""
    name = "generation"
    if measured is None:
        return _row(col, name, None, reason="the run does not time its generation (steps.parquet gen_s)")
    if unknown:
        return _row(col, name, measured, reason=unknown)
    if m.routed_experts:
        return _row(col, name, measured, reason="MoE: the profile's decode form is a dense decoder's")
    if not dtype:
        return _row(col, name, measured, reason="the generator's weight dtype is unknown")
    if not g["engines"] or not g["engine_gpus"]:
        return _row(col, name, measured, reason="the run's engines are unknown (generator GPUs, tp)")
    batch = math.ceil(samples / g["engines"])
    iterations = max(1, round(response / samples))
    first = round(prompt / samples)
    contexts = first + np.arange(iterations, dtype=np.float64)
    gpus, weights = g["engine_gpus"], dtype * arch.params  # the matmuls a token passes, LM head included
    decode = float(np.sum(hwprofile.decode_s(profile, arch, batch, contexts, weights, gpus=gpus)))
    prefill = hwprofile.prefill_s(profile, arch, batch, first, gpus=gpus)
    basis = (
        f"{samples:.0f} sequences over {g['engines']} engine(s) of {gpus} GPU(s): batch {batch} (the "
        f"busiest engine); prefill of {first} prompt tokens ({prefill:.3g} s, eager: an upper bound), then "
        f"{iterations} decode iterations (the mean response) at contexts {first}..{first + iterations - 1} "
        f"(mean: prompt + half the response), {dtype:g}-byte weights, bf16 KV ({decode:.3g} s)"
    )
    return _row(col, name, measured, prefill + decode, basis, g["generator_gpus"])


def _train_flops(m: SimpleNamespace, samples: float, per_seq: float) -> float:
    """Training (forward + backward) FLOPs of the step: `samples` sequences of the mean length."""
    return flops.flops_of_sequences(m, np.full(round(samples), per_seq))


def _update(profile, m, arch, g, samples, per_seq, measured, cfg) -> dict[str, Any]:
    gpus = g["trainer_gpus"]
    if not gpus:
        return _row("compute_s", "update", measured, reason="the run's trainer GPUs are unknown")
    f = _train_flops(m, samples, per_seq)
    params = flops.param_counts(m)["total"]
    train = hwprofile.eager_s(profile, arch, "train", f, 1, gpus)
    optimizer = hwprofile.optimizer_s(profile, params / gpus)
    basis = (
        f"{f:.3g} training FLOPs ({samples:.0f} sequences of {per_seq:.0f} tokens) over {gpus} trainer "
        f"GPU(s) at the profile's train rate, one launch of every layer ({train:.3g} s), + AdamW of "
        f"1/{gpus} of {params:.3g} parameters ({optimizer:.3g} s)"
    )
    offload, why = _offload(profile, cfg)
    return _row("compute_s", "update", measured, train + optimizer + offload, basis + why, gpus)


def _offload(profile, cfg: dict[str, Any]) -> tuple[float, str]:
    """(s, basis) of the trainer state experiment.trainer.offload_* keep in host memory, loaded onto
    each trainer GPU for the update and put back (the framework's timer counts it: bench.model.costmodel
    .offload_s) over the profile's pinned host copies; (0, "") when the run offloads nothing."""
    trainer = ((cfg.get("experiment") or {}).get("trainer")) or {}
    if not (trainer.get("offload_params") or trainer.get("offload_optimizer")):
        return 0.0, ""
    moved = resolve.trainer_offloaded_bytes_per_gpu(OmegaConf.create(cfg))
    seconds = hwprofile.host_roundtrip_s(profile, moved)
    if seconds is None:
        return (
            0.0,
            f"; the {moved / 1e9:.3g} GB per GPU the run offloads are not priced: the profile has no pinned host copies",
        )
    return seconds, (
        f", + {moved / 1e9:.3g} GB of offloaded trainer state per GPU loaded and put back over the "
        f"measured pinned host copies ({seconds:.3g} s)"
    )


def _logprob(profile, m, arch, g, samples, per_seq, col, name, measured, passes) -> dict[str, Any]:
    gpus = g["trainer_gpus"]
    if not gpus:
        return _row(col, name, measured, reason="the run's trainer GPUs are unknown")
    if passes is None:
        return _row(col, name, measured, reason="how many forward passes logprob_s holds is not logged")
    if passes == 0:
        return _row(col, name, measured, reason="the run makes no log-prob pass (emulator input 0)")
    forward = _train_flops(m, samples, per_seq) / hwprofile.TRAIN_FLOPS_MULT
    seconds = passes * hwprofile.eager_s(profile, arch, "prefill", forward, 1, gpus)
    basis = f"{passes} forward pass(es) of {forward:.3g} FLOPs over {gpus} trainer GPU(s) at the prefill rate"
    return _row(col, name, measured, seconds, basis, gpus)


def _sync(profile, m, cfg, manifest, g, measured) -> dict[str, Any]:
    name = "weight sync"
    placement = "colocated" if colocated(manifest) else "disaggregated"
    path = ((cfg.get("framework") or {}).get("weight_sync") or {}).get(placement)
    dtype = _weight_dtype(cfg)
    if not dtype:
        return _row("sync_s", name, measured, reason="the generator's weight dtype is unknown")
    total = flops.param_counts(m)["total"] * dtype
    links = profile.get("measured") or {}
    if path == "ipc":
        gpus = g["engine_gpus"]
        if not gpus:
            return _row("sync_s", name, measured, reason="the run's engine GPUs are unknown")
        seconds = 2.0 * total / gpus / links["device_copy_Bps"]
        basis = f"ipc: {total / gpus / 1e9:.3g} GB per engine GPU copied on the device (read + write)"
        fw = cfg.get("framework") or {}
        if placement == "colocated" and fw.get("handoff_logged_as", "sync") == "sync":
            basis += f"; {fw.get('name', 'the framework')} times its colocated hand-off inside this phase"
        return _row("sync_s", name, measured, seconds, basis, g["generator_gpus"])
    if path == "filesystem":
        if not links.get("filesystem_write_Bps") or not links.get("filesystem_read_Bps"):
            return _row("sync_s", name, measured, reason="filesystem: the profile has no filesystem section")
        seconds = total / links["filesystem_write_Bps"] + total / links["filesystem_read_Bps"]
        basis = (
            f"filesystem: {total / 1e9:.3g} GB written (fsync) then read back to a GPU, one after the other"
        )
        return _row("sync_s", name, measured, seconds, basis, 1)
    if path == "nccl":
        why = f"{NOT_MEASURED}: nccl between GPUs ({total / 1e9:.3g} GB); the profile holds no link between GPUs"
        return _row("sync_s", name, measured, reason=why)
    return _row("sync_s", name, measured, reason=f"framework.weight_sync.{placement} is not recorded")


# ---------------------------------------------------------------------------------------------------
# A run directory in, the result and its sentences out.


def of_run(paths: RunPaths, manifest: dict, metrics: dict, given: Path | None = None) -> dict[str, Any]:
    """Speed of light of one run: {"profile", "device", "work", "phases": [...]}, or {"missing": line}
    when there is no profile, no metrics.json or no readable steps (never a number then)."""
    found = find_profile(manifest, given)
    if isinstance(found, str):
        return {"missing": found}
    if not (metrics.get("phases") or {}).get("parts"):
        return {"missing": f"no phases in metrics.json: recompute it with `bench metrics {paths.root}`"}
    try:
        steps = read_steps(paths.steps, WORK_COLUMNS)
    except (TraceError, OSError, ValueError) as e:
        return {"missing": f"{paths.steps}: not readable ({e})"}
    window = metrics.get("window") or {}
    first, last = window.get("first_step"), window.get("last_step")
    if first is not None and last is not None:
        steps = steps[(steps["step"] >= first) & (steps["step"] <= last)]
    return compute(manifest, metrics, steps.reset_index(drop=True), *found)


def sentence(row: dict[str, Any], device: str) -> str:
    """One phase in the issue's words: "generation 38 s a step; this GPU does that work in 9 s: 4.2x"."""
    if row["measured_s"] is None:
        return f"{row['name']}: {row.get('reason')}"
    head = f"{row['name']} {row['measured_s']:.3g} s a step"
    if row["hardware_s"] is None:
        return f"{head}; {row['reason']}"
    who = f"this {device} does" if (row["gpus"] or 1) == 1 else f"{row['gpus']} x {device} do"
    return f"{head}; {who} that work in {row['hardware_s']:.3g} s: {row['ratio']:.1f}x"


def sentences(result: dict[str, Any]) -> list[str]:
    """Every phase of `result` as a sentence, or the one line saying why there is no number."""
    if "missing" in result:
        return [result["missing"]]
    return [sentence(r, result["device"]) for r in result["phases"]]


def view(result: dict[str, Any]) -> dict[str, Any]:
    """What the report shows: a title naming the profile and the rows as display strings, or the one
    line (`line`) saying why there is none."""
    if "missing" in result:
        return {"line": result["missing"], "rows": [], "title": ""}

    def num(v: float | None, spec: str) -> str:
        return "—" if v is None else format(v, spec)

    rows = [
        {
            "name": r["name"],
            "measured": num(r["measured_s"], ".3g"),
            "hardware": NOT_MEASURED
            if str(r.get("reason") or "").startswith(NOT_MEASURED)
            else num(r["hardware_s"], ".3g"),
            "ratio": "—" if r["ratio"] is None else f"{r['ratio']:.1f}x",
            "basis": r["basis"] if r["hardware_s"] is not None else r["reason"],
            "sentence": sentence(r, result["device"]),
        }
        for r in result["phases"]
    ]
    profile = Path(str(result["profile"].get("profile"))).name
    title = f"{result['device']} profile {profile}, the steady window's mean step ({result['work']['steps']} steps)"
    return {"line": "", "rows": rows, "title": title}


def main(argv: list[str] | None = None) -> int:
    """CLI: `python -m bench sol RUN_DIR [--profile FILE] [--json]`."""
    from bench.cli import command_parser

    p = command_parser(
        "sol",
        "Speed of light per phase: each phase of a run's steady step next to the seconds its GPU's "
        "hardware profile needs for the same work with no framework overhead, and their ratio "
        "(docs/metrics.md, 'Speed of light').",
        "RUN_DIR/manifest.json, RUN_DIR/metrics.json (phases, window), RUN_DIR/trace/steps.parquet and "
        "the hardware profile (--profile, else the run's hardware.profile, else conf/hardware/<hw>.yaml's).",
        "nothing: one sentence per phase on stdout (--json: the numbers and their basis).",
        [
            "python -m bench sol results/smoke/verl-0",
            "python -m bench sol results/smoke/verl-0 --profile conf/hardware/profiles/h200.yaml --json",
        ],
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory with metrics.json")
    p.add_argument("--profile", type=Path, metavar="FILE", help="a PROFILE.yaml of the run's GPU")
    p.add_argument("--json", action="store_true", help="the result as JSON")
    args = p.parse_args(argv)
    paths = RunPaths(args.run_dir)
    try:
        manifest = read_manifest(paths)
        metrics = json.loads(paths.metrics.read_text())
    except (TraceError, OSError, ValueError) as e:
        raise UsageError(
            f"{args.run_dir}: not a readable run directory ({e}); expected manifest.json and metrics.json "
            f"(`bench metrics {args.run_dir}` writes it)"
        ) from None
    result = {"run": str(args.run_dir), **of_run(paths, manifest, metrics, args.profile)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(sentences(result)))
    return 0
