"""Structured configs: the typed schema of every conf/ group, registered in Hydra's ConfigStore.

Each YAML under conf/<group>/ names its schema in `defaults:` (e.g. `- /schema/model@_here_`),
so a misspelled key or a wrong type fails at composition: `compose()` turns Hydra's errors into
one UsageError line ("did you mean ..."). Keys the schema does not type are refused even with
Hydra's `+key=`, except under `framework.native` (framework-native passthrough, docs/bad-input.md).
Cross-field checks live in bench/validate.py; this module never mutates a config.

Units are in the field names: `_gb` (1e9 bytes), `_tbps` (1e12 bytes/s), `_gbps` (1e9 bytes/s),
`_flops` (FLOP/s), `_s` (seconds), `_usd`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_origin, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from bench.cli import number_arg  # noqa: F401  (re-exported for old callers: the one numeric flag type)
from bench.errors import UsageError
from bench.model import hwprofile_conf
from bench.overrides import Schema

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


class Attention(str, Enum):
    gqa = "gqa"
    mla = "mla"


@dataclass
class ModelConf:
    """Architecture facts from the model's config.json (source URL in each YAML)."""

    name: str = MISSING  # Hugging Face repo id
    model_type: str = MISSING  # config.json model_type: qwen3 | qwen3_moe | glm4_moe | glm_moe_dsa
    layers: int = MISSING
    hidden: int = MISSING
    q_heads: int = MISSING
    kv_heads: int = MISSING
    head_dim: int = MISSING  # GQA head dim; for MLA, the v head dim
    ffn_dense: int = 0  # intermediate size of dense MLP layers (0: no dense layers)
    ffn_expert: int = 0  # intermediate size of one routed/shared expert (0: dense model)
    routed_experts: int = 0
    shared_experts: int = 0
    top_k: int = 0
    dense_layers: int = 0  # leading dense layers of an MoE model (all layers for a dense model)
    vocab: int = MISSING
    tied_embeddings: bool = False
    attention: Attention = Attention.gqa
    # MLA (DeepSeek-style) dimensions; 0 for GQA models
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek Sparse Attention: keys attended per query (0 = dense attention)
    dsa_topk: int = 0
    dsa_index_heads: int = 0  # DSA indexer heads and head dim (its scoring is real compute)
    dsa_index_dim: int = 0
    max_context: int = MISSING  # max_position_embeddings
    weight_bytes: float = 2.0  # BF16 training weights
    # Layer details a trainer must be told (Megatron's model flags; slime checks them against
    # config.json). None = not recorded for this model: a runner that needs one says so.
    rope_theta: float | None = None  # config.json rope_theta: RoPE base frequency (dimensionless)
    rms_norm_eps: float | None = None  # config.json rms_norm_eps: epsilon inside RMSNorm
    partial_rotary_factor: float | None = None  # share of each head's dims rotated by RoPE (1.0 = all)
    qk_norm: bool | None = None  # RMSNorm on each head's q and k (Qwen3 always; GLM: use_qk_norm)
    qkv_bias: bool | None = None  # config.json attention_bias: bias on the q/k/v projections
    router_score: str | None = None  # MoE router scoring: softmax | sigmoid (sigmoid: with expert bias)


@dataclass
class TCOConf:
    """Total-cost-of-ownership inputs. SemiAnalysis's own values are paywalled: these are
    documented, overridable defaults (sources in conf/hardware/*.yaml)."""

    server_capex_usd: float = MISSING  # one server (all its GPUs), excluding networking
    gpus_per_server: int = 8
    networking_capex_frac: float = 0.15  # networking as a share of total capex
    depreciation_years: float = 5.0
    cost_of_capital: float = 0.10  # annual rate
    power_usd_per_kwh: float = 0.08
    pue: float = 1.3
    colo_usd_per_kw_month: float = 150.0
    server_power_kw: float = MISSING  # IT load of one server at typical utilisation
    opex_other_usd_per_gpu_hour: float = 0.0  # support, software, staff


@dataclass
class HardwareConf:
    name: str = MISSING
    peak_bf16_flops: float = MISSING  # dense, no sparsity, FLOP/s per GPU
    hbm_gb: float = MISSING
    hbm_tbps: float = MISSING
    tdp_w: float = MISSING
    nvlink_gbps: float = MISSING  # unidirectional per GPU, GB/s
    network_gbps: float = MISSING  # scale-out per GPU, GB/s (e.g. 400 Gb/s IB = 50 GB/s)
    host_gbps: float = 0.0  # GPU <-> host memory per GPU, one way, GB/s (PCIe / C2C); 0: unknown
    gpus_per_node: int = 8
    tco: TCOConf = field(default_factory=TCOConf)
    # measured hardware profile (`bench probe fit`) the emulator's physics read, relative to
    # conf/hardware/; None: the datasheet figures above (top-level `hardware_profile=FILE` wins)
    profile: str | None = None


class Algorithm(str, Enum):
    grpo = "grpo"
    gspo = "gspo"
    dapo = "dapo"
    # On-policy distillation: every finished rollout is scored by a teacher (one prefill-only
    # forward over prompt + response returning per-token log-probs); the loss is the sampled-token
    # reverse KL against the teacher, with coefficient workload.kl_coef. No task reward is needed.
    opd = "opd"
    # Advantage estimators an ingested run may have logged (verl's algorithm.adv_estimator), kept
    # by name so calibrate / predict / plan carry what ran; the emulator models them as grpo does
    # (a task reward, no teacher; gae's critic update is not modelled separately).
    gae = "gae"
    gpg = "gpg"
    rloo = "rloo"
    remax = "remax"
    reinforce_plus_plus = "reinforce_plus_plus"
    reinforce_plus_plus_baseline = "reinforce_plus_plus_baseline"
    opo = "opo"
    grpo_passk = "grpo_passk"


@dataclass
class WorkloadConf:
    """One RL job, framework-neutral. Counts: a prompt has `group_size` rollouts (samples)."""

    name: str = MISSING
    task: str = MISSING  # math | swe | ...
    dataset: str = MISSING  # HF dataset id or path the frameworks read
    algorithm: Algorithm = Algorithm.grpo
    group_size: int = MISSING  # rollouts per prompt
    prompts_per_step: int = MISSING  # prompts per trainer step
    mini_batches_per_step: int = 1  # optimizer updates per step (PPO epochs split)
    max_prompt_len: int = MISSING  # tokens
    max_response_len: int = MISSING  # tokens, over all turns
    staleness_budget: int = 0  # max policy versions a sample may lag (0 = on-policy)
    steps: int = MISSING
    lr: float = 1e-6
    kl_coef: float = 0.0
    temperature: float = 1.0
    std_normalize: bool = True  # GRPO advantage divided by group std
    # Load shape: what the emulator draws from, and what native runs are compared against
    turns_mean: float = 1.0  # model turns per episode (multi-turn tool use > 1)
    response_len_mean_frac: float = 0.35  # mean response / max_response_len
    response_len_sigma: float = 0.8  # lognormal shape of the response-length tail
    response_len_drift: float = 1.0  # mean length at the end of the drift / at the first step
    response_len_drift_steps: int = 0  # steps over which the drift is linear, flat after (0: the whole run)
    prompt_len_mean: int = 256  # tokens
    solve_rate_alpha: float = 1.0  # per-prompt solve rate ~ Beta(alpha, beta)
    solve_rate_beta: float = 1.0
    env_latency_mean_s: float = 0.0  # per turn: sandbox/tool execution
    env_startup_s: float = 0.0  # per episode: sandbox start-up
    env_latency_sigma: float = 1.0  # lognormal tail of env latency
    tool_output_tokens_mean: int = 0  # tokens the environment returns per turn after the first (prefilled)


class Placement(str, Enum):
    colocated = "colocated"  # trainer and generator time-share the same GPUs
    disaggregated = "disaggregated"  # separate GPU pools


@dataclass
class TrainerParallelConf:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    sharding: str = "fsdp"  # fsdp | megatron
    offload_optimizer: bool = False
    offload_params: bool = False
    offload_activations: bool = False
    micro_batch_tokens: int = 16384  # tokens per GPU per micro-batch (dynamic batching)


@dataclass
class GeneratorParallelConf:
    tp: int = 1
    ep: int = 1
    dp: int = 1  # attention DP inside one engine
    dtype_bytes: float = 2.0  # weights: 2 BF16, 1 FP8
    kv_dtype_bytes: float = 2.0
    max_concurrency: int = 1024  # per engine
    gpu_memory_utilization: float = 0.85


class TeacherPlacement(str, Enum):
    dedicated = "dedicated"  # its own GPUs (verl and Miles in the opd-benchmark: GPU 1)
    with_generator = "with_generator"  # served on the generator's GPUs (Prime-RL's opd run)


@dataclass
class TeacherConf:
    """A teacher (or reward model / judge) that scores finished rollouts with a prefill-only pass."""

    model: str = MISSING  # a conf/model option name (e.g. qwen3_0_6b), loaded with the ModelConf schema
    gpus: int = 0  # dedicated teacher GPUs (0 with placement=with_generator)
    placement: TeacherPlacement = TeacherPlacement.dedicated
    tp: int = 1  # GPUs per teacher engine
    domains: list[str] = field(default_factory=list)  # workload.task values it scores; [] = every domain
    checkpoint: str = ""  # HF repo id / path of the teacher weights when it differs from model.name


@dataclass
class ExperimentConf:
    name: str = MISSING
    frameworks: list[str] = field(default_factory=lambda: ["verl", "slime", "prime_rl"])
    placement: Placement = Placement.disaggregated
    trainer_gpus: int = MISSING
    generator_gpus: int = MISSING  # equals trainer_gpus when colocated
    trainer: TrainerParallelConf = field(default_factory=TrainerParallelConf)
    generator: GeneratorParallelConf = field(default_factory=GeneratorParallelConf)
    oversampling: float = 1.0  # dispatched prompts / prompts a step needs
    partial_rollout: bool = False
    filter_zero_advantage: bool = False
    seed: int = 0
    notes: str = ""
    teachers: list[TeacherConf] = field(default_factory=list)  # scoring stage (workload.algorithm=opd)


@dataclass
class FrameworkConf:
    """One framework at one pinned version. `_target_` is its runner class (runners/<name>.py)."""

    _target_: str = MISSING
    name: str = MISSING
    version: str = MISSING
    commit: str = ""  # source commit the version was read at
    install: str = MISSING  # how a site installs it
    container: str = ""  # container image a site would run
    # The framework's own mode name for this run (e.g. verl "separate_async"); "auto" lets the
    # runner pick from the experiment's placement, staleness budget and partial-rollout flag.
    mode: str = "auto"
    # Modes this version supports -> the emulator policy that models each (dotted path).
    modes: dict[str, str] = field(default_factory=dict)
    needs_ray: bool = False
    # Whether the framework discards samples older than workload.staleness_budget policy versions
    # (prime-rl max_off_policy_steps, verl's staleness threshold). slime has no such bound: its
    # budget is the weight-update interval and buffered partial rollouts wait without limit.
    drops_stale: bool = True
    # How new weights reach the engines, per placement: ipc (CUDA IPC / in-place, same GPUs or node),
    # nccl (broadcast over the scale-out network), filesystem (checkpoint written, then reloaded).
    weight_sync: dict[str, str] = field(default_factory=lambda: {"colocated": "ipc", "disaggregated": "nccl"})
    offloads_trainer: bool = False  # colocated: params + grads + optimizer go to host memory while generating
    # colocated sleep + wake per step (s), None: emulator.handoff_fixed_s; and which of the framework's
    # own step timers holds the hand-off (sync | wait)
    handoff_fixed_s: float | None = None
    handoff_logged_as: str = "sync"
    # What the framework adds above the hardware (bench/model/fwprofile.py): {engine, trainer_backend, sources,
    # runs, values: {emulator input: {value, fitted_on, residual}}, not_fitted}; {} when never fitted
    profile: dict[str, Any] = field(default_factory=dict)
    native: dict[str, Any] = field(default_factory=dict)  # framework-only knobs, passed through


class Executor(str, Enum):
    local = "local"
    slurm = "slurm"


@dataclass
class ContainerConf:
    kind: str = "none"  # none | pyxis | apptainer
    image: str = ""
    mounts: list[str] = field(default_factory=list)


@dataclass
class ClusterConf:
    name: str = MISSING
    executor: Executor = Executor.local
    nodes: int = MISSING  # nodes available to one job
    gpus_per_node: int = 8
    gpu_type: str = ""  # GRES type, e.g. h100
    partition: str = ""
    account: str = ""
    qos: str = ""
    constraint: str = ""
    time_min: int = 240
    exclusive: bool = True
    cpus_per_task: int = 0  # 0: let Slurm decide
    container: ContainerConf = field(default_factory=ContainerConf)
    setup: list[str] = field(default_factory=list)  # shell lines run before each job
    slurm_conf: str = ""  # SLURM_CONF for a private cluster (the testbed)
    # Shared filesystem paths every compute node sees (at the same path inside a container):
    # `bench prepare` writes datasets and model weights there and the rendered launch reads them.
    # Absolute on a site; relative paths are resolved against the repository root (local, testbed).
    data_root: str = MISSING  # <data_root>/<org>__<name>/<framework>/... + prepared.json
    model_root: str = MISSING  # <model_root>/<org>/<name>/ (Hugging Face snapshot) + <name>.prepared.json


@dataclass
class EmulatorConf:
    """Calibration inputs of the emulator: explicit, documented, never fitted silently."""

    trainer_mfu: float = 0.35  # fraction of peak achieved in forward+backward
    logprob_passes: int = 1  # extra forward passes (old policy; +1 with a reference model)
    logprob_passes_by_framework: dict[str, int] = field(default_factory=dict)  # overrides logprob_passes
    optimizer_s: float = 1.0  # optimizer step + misc per trainer step, seconds
    decode_bw_eff: float = 0.6  # fraction of HBM bandwidth achieved in decode
    prefill_mfu: float = 0.4  # fraction of peak in prefill
    weight_sync_eff: float = 0.5  # fraction of link bandwidth achieved in weight broadcast
    weight_sync_fixed_s: float = 1.0  # per-sync fixed cost (pause, reload, cache flush)
    decode_step_floor_s: float = 0.0  # shortest decode iteration (launches, scheduling), s; 0: roofline
    filesystem_gbps: float = 2.0  # site input: weight-sync checkpoint write / read bandwidth, GB/s
    # colocated sleep + wake per step beyond the bytes moved (s); a framework's own value wins, and a
    # value measured on one framework's run (bench calibrate) wins for that framework only
    handoff_fixed_s: float = 0.0
    handoff_measured_s: float | None = None  # measured sleep + wake (s) of framework handoff_measured_on
    handoff_measured_on: str = ""  # the framework whose run it was measured on
    policy: str = ""  # dotted path of the emulator policy; "" = the framework mode's (conf/framework modes:)
    surplus: str = ""  # in-flight rollouts when a batch fills: carry | cancel | abort; "" = the policy's
    filter_backfill: bool = True  # zero-advantage filtering replaces dropped groups (DAPO dynamic sampling)
    async_lag: int = 1  # batches a fully-async generator may run ahead (prime-rl fixes it at 1)
    steps: int = 0  # trainer steps to emulate; 0 = workload.steps
    pace: float = 0.0  # wall seconds per emulated step: >0 streams steps into the trace as a run would
    score_fixed_s: float = 0.1  # per scoring batch on a teacher engine: request round trip + scheduling (s)


@dataclass
class BenchConf:
    model: ModelConf = MISSING
    hardware: HardwareConf = MISSING
    workload: WorkloadConf = MISSING
    framework: FrameworkConf = MISSING
    cluster: ClusterConf = MISSING
    experiment: ExperimentConf = MISSING
    emulator: EmulatorConf = field(default_factory=EmulatorConf)
    mode: str = "emulate"  # emulate | native
    results_dir: str = "results"
    # a PROFILE.yaml from `bench probe fit` (relative to the working directory) whose measured physics
    # the emulator uses instead of the datasheet; None: hardware.profile, else the datasheet
    hardware_profile: str | None = None


def register() -> None:
    """Register every schema under `schema/<group>` (used in each YAML's defaults list)."""
    cs = ConfigStore.instance()
    cs.store(name="bench_schema", node=BenchConf)
    for group, node in [
        ("model", ModelConf),
        ("hardware", HardwareConf),
        ("workload", WorkloadConf),
        ("framework", FrameworkConf),
        ("cluster", ClusterConf),
        ("experiment", ExperimentConf),
        ("emulator", EmulatorConf),
    ]:
        cs.store(group="schema", name=group, node=node)


register()


def compose(overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """Compose conf/config.yaml with Hydra overrides (no job, no working-dir change).

    Raises UsageError (bench/errors.py), one line naming the key and the fix, for an unknown
    group option (`framework=verll`), a key the schema does not know (with or without `+`; `+`
    adds keys only under framework.native), a wrong type or an override that does not parse.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = expand_calibration(list(overrides))
    SCHEMA.check(overrides)
    bare_list_check(overrides)
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise UsageError(SCHEMA.error_line(e)) from e
    if problems := value_problems(cfg):
        raise UsageError("\n".join(problems))
    return cfg


def non_finite(data: Any, prefix: str, strings: bool = False) -> list[str]:
    """`key=value: expected a finite number` for every NaN or infinite number in `data` (plain
    dicts, lists and scalars), keys dotted from `prefix` (list items as `[i]`). With `strings`, a
    string that reads as a float ("nan", "inf", "-Infinity") counts too: where only numbers belong
    (a calibration's values), YAML hands those over as text."""
    if isinstance(data, dict):
        return [
            p for k, v in data.items() for p in non_finite(v, f"{prefix}.{k}" if prefix else str(k), strings)
        ]
    if isinstance(data, list | tuple):
        return [p for i, v in enumerate(data) for p in non_finite(v, f"{prefix}[{i}]", strings)]
    number = data
    if strings and isinstance(data, str):
        try:
            number = float(data)
        except ValueError:
            return []
    if isinstance(number, float) and not math.isfinite(number):
        return [f"{prefix}={data}: expected a finite number"]
    return []


def expected_range(v: Any, lo: float, lo_ok: bool, hi: float | None = None, hi_ok: bool = True) -> str | None:
    """`expected ...` when `v` is not a finite number in the range (lo and hi included when
    lo_ok / hi_ok; hi None: no upper bound), None when it is. Written as "inside" tests, so NaN
    (every comparison false) is outside: an "outside" test (`v < lo`) would let NaN through."""
    inside = (
        isinstance(v, int | float)
        and math.isfinite(v)
        and (v >= lo if lo_ok else v > lo)
        and (hi is None or (v <= hi if hi_ok else v < hi))
    )
    if inside:
        return None
    if hi is None:
        return f"expected {'>=' if lo_ok else '>'} {lo}"
    return f"expected in {'[' if lo_ok else '('}{lo}, {hi}{']' if hi_ok else ')'}"


# experiment.name names results/<experiment>/ (and Slurm job names): one path segment, never `..`,
# `/`, empty or a leading `-` (read as a flag by sbatch and shells)
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NAME_RULE = (
    "expected one path segment of at most 100 letters, digits, '.', '_' or '-', starting with a "
    "letter or digit (it names results/<experiment>/)"
)


def value_problems(cfg: Any) -> list[str]:
    """What the schema's types cannot say, for every command that composes: every number is
    finite (NaN and inf pass every range check and reach native launches), experiment.name is one
    path segment, experiment.frameworks lists each framework once. Ranges: bench/validate.py."""
    from omegaconf import OmegaConf

    # unresolved: an interpolation is checked where its value lives, and an unset one fails later, named
    out = non_finite(OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False), "")
    e = cfg.experiment
    name = OmegaConf.select(e, "name", throw_on_missing=False)
    if not isinstance(name, str) or not EXPERIMENT_NAME.fullmatch(name):
        out.append(f"experiment.name={name!r}: {NAME_RULE}, e.g. experiment.name=smoke_lr_sweep")
    frameworks = [str(f) for f in e.frameworks]
    shown = f"experiment.frameworks=[{','.join(frameworks)}]"
    if not frameworks:
        out.append(
            f"{shown}: expected at least one framework, e.g. experiment.frameworks=[verl] "
            f"(choose from {', '.join(group_options('framework'))})"
        )
    elif twice := sorted({f for f in frameworks if frameworks.count(f) > 1}):
        once = ",".join(dict.fromkeys(frameworks))
        out.append(
            f"{shown}: {', '.join(twice)} listed twice; list each framework once: experiment.frameworks=[{once}]"
        )
    try:  # the file is read and matched to hardware.name here, before any command writes
        hwprofile_conf.for_config(cfg)
    except UsageError as e:
        out.append(str(e))
    return out


def bare_list_check(overrides: list[str]) -> None:
    """UsageError for a list-typed key given one bare value (`experiment.frameworks=verl`), with
    the fix (`=[verl]`); Hydra's own words ("str is not a ListConfig") do not say it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in overrides:
        o = parser.parse_override(text)  # SCHEMA.check parsed each already: this cannot fail
        if o.is_sweep_override() or o.package is not None or not _is_list_field(o.key_or_group):
            continue
        value = o.value()
        if value is not None and not isinstance(value, list | dict):
            key = o.key_or_group
            raise UsageError(
                f"{key}={o.get_value_element_as_str()}: expected a list; write {key}=[{o.get_value_element_as_str()}]"
            )


def _is_list_field(key: str) -> bool:
    """Whether the dotted `key` is a list-typed field of the schema (BenchConf)."""
    t: Any = BenchConf
    for part in key.lstrip("+").split("."):
        hints = get_type_hints(t) if is_dataclass(t) else {}
        if part not in hints:
            return False
        t = hints[part]
    return get_origin(t) is list


CALIBRATION = "calibration"  # calibration=FILE: a `bench calibrate` YAML, applied as overrides
CALIBRATED_GROUPS = ("emulator.", "workload.")  # what a calibration may set


def expand_calibration(overrides: list[str]) -> list[str]:
    """Replace each `calibration=FILE` by the overrides its fitted `values:` stand for, in place,
    so a later key=value still wins. FILE is a `bench calibrate` YAML (bench/calibrate.py): each
    `values.<key>.value` becomes `<key>=<value>`; only emulator.* and workload.* keys are taken
    (a calibration describes how fast and what shape, never what hardware or model)."""
    import yaml

    out: list[str] = []
    for text in overrides:
        key, sep, path = text.partition("=")
        if key != CALIBRATION or not sep:
            out.append(text)
            continue
        file = Path(path)
        if not file.is_file():
            raise UsageError(
                f"calibration={path}: no such file; write one with `bench calibrate RUN_DIR --out FILE`"
            )
        try:
            values = (yaml.safe_load(file.read_text()) or {}).get("values")
        except (yaml.YAMLError, AttributeError) as e:
            raise UsageError(
                f"calibration={path}: not a calibration YAML ({str(e).splitlines()[0]})"
            ) from None
        if not isinstance(values, dict) or not values:
            raise UsageError(f"calibration={path}: no `values:` mapping; expected `bench calibrate` output")
        for k, v in values.items():
            if not str(k).startswith(CALIBRATED_GROUPS) or not isinstance(v, dict) or "value" not in v:
                raise UsageError(
                    f"calibration={path}: values.{k}: expected an emulator.* or workload.* key with a `value`"
                )
            val = v["value"]
            if bad := non_finite(val, str(k), strings=True):  # named here: the override hides the file
                raise UsageError(f"calibration={path}: values.{bad[0]}")
            shown = "{" + ",".join(f"{a}:{b}" for a, b in val.items()) + "}" if isinstance(val, dict) else val
            out.append(f"{k}={shown}")
    return out


def for_framework(overrides: list[str] | tuple[str, ...], framework: str) -> Any:
    """Compose the experiment for one framework (replacing any `framework=` override)."""
    kept = [o for o in overrides if not o.startswith(("framework=", "+framework="))]
    return compose([*kept, f"framework={framework}"])


# Overrides are checked against BenchConf, and Hydra's errors turned into one line, by bench/overrides.py.
SCHEMA = Schema(BenchConf, CONF_DIR)
group_options = SCHEMA.group_options  # names `group=NAME` accepts: conf/<group>/*.yaml
