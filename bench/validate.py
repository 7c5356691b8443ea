"""Pre-flight checks: find what would fail before anything is submitted.

`validate(cfg) -> list[str]` returns every problem of one composed config (one framework), one
line each naming the key, the value and what was expected; it never mutates the config.
`python -m bench validate <overrides>` checks each framework of the experiment: exit 0 with a
one-screen summary, or exit 2 with one line per problem.
"""

from __future__ import annotations

import sys
from typing import Any

from omegaconf import OmegaConf

from bench.config import compose, expected_range, for_framework
from bench.errors import EXIT_USAGE, UsageError
from bench.resolve import Resolved

GB = 1e9


def _check_workload(cfg: Any) -> list[str]:
    w, m = cfg.workload, cfg.model
    out = []
    if w.group_size < 2:
        out.append(
            f"workload.group_size={w.group_size}: expected >= 2 (GRPO with one rollout per prompt has zero "
            "advantage on every sample; prime-rl's default group_size is exactly this trap)"
        )
    if w.prompts_per_step < 1:
        out.append(f"workload.prompts_per_step={w.prompts_per_step}: expected >= 1")
    elif w.mini_batches_per_step >= 1 and w.prompts_per_step % w.mini_batches_per_step:
        out.append(
            f"workload.mini_batches_per_step={w.mini_batches_per_step}: expected a divisor of "
            f"workload.prompts_per_step={w.prompts_per_step} (mini-batches hold whole groups)"
        )
    if w.max_prompt_len + w.max_response_len > m.max_context:
        out.append(
            f"workload.max_response_len={w.max_response_len}: max_prompt_len + max_response_len = "
            f"{w.max_prompt_len + w.max_response_len} exceeds model.max_context={m.max_context} ({m.name})"
        )
    if w.staleness_budget < 0:
        out.append(f"workload.staleness_budget={w.staleness_budget}: expected >= 0 policy versions")
    if want := expected_range(cfg.experiment.oversampling, 1, True):
        out.append(f"experiment.oversampling={cfg.experiment.oversampling}: {want} (dispatched / needed)")
    return out


def _check_gpus(cfg: Any, r: Resolved) -> list[str]:
    e, c, m = cfg.experiment, cfg.cluster, cfg.model
    t, g = e.trainer, e.generator
    out = []
    colocated = r.colocated
    if colocated and e.generator_gpus != e.trainer_gpus:
        out.append(
            f"experiment.generator_gpus={e.generator_gpus}: expected = experiment.trainer_gpus={e.trainer_gpus} "
            "when placement=colocated (trainer and generator share the GPUs)"
        )
    total = r.total_gpus
    if total > c.nodes * c.gpus_per_node:
        out.append(
            f"experiment.trainer_gpus + generator_gpus = {total}: exceeds cluster {c.name}: "
            f"{c.nodes} nodes x {c.gpus_per_node} GPUs = {c.nodes * c.gpus_per_node}"
        )
    for key, n in (("trainer_gpus", e.trainer_gpus), ("generator_gpus", e.generator_gpus)):
        if n < 1:
            out.append(f"experiment.{key}={n}: expected >= 1")
        elif not colocated and n > c.gpus_per_node and n % c.gpus_per_node:
            out.append(
                f"experiment.{key}={n}: expected a multiple of cluster.gpus_per_node={c.gpus_per_node} "
                "(roles get whole nodes)"
            )
    mp = t.tp * t.pp * t.cp
    if e.trainer_gpus % mp:
        out.append(
            f"experiment.trainer: tp x pp x cp = {mp}: expected a divisor of experiment.trainer_gpus={e.trainer_gpus}"
        )
    # Whether a mini-batch's samples must divide by the trainer's data-parallel size is each
    # framework's own rule (verl and slime/Megatron split it evenly; prime-rl pads its micro-batch
    # count instead): runners/batch_rules.py, called from those runners' validate.
    if m.q_heads % t.tp:
        out.append(f"experiment.trainer.tp={t.tp}: expected a divisor of model.q_heads={m.q_heads}")
    if t.pp < 1 or (e.trainer_gpus // t.pp) % t.ep:
        out.append(
            f"experiment.trainer.ep={t.ep}: expected a divisor of trainer GPUs per pipeline stage "
            f"({e.trainer_gpus} / pp {t.pp})"
        )
    engine = r.engine_gpus
    if e.generator_gpus % engine:
        out.append(
            f"experiment.generator: tp x dp = {engine} GPUs per engine: expected a divisor of "
            f"experiment.generator_gpus={e.generator_gpus}"
        )
    if engine % g.ep:
        out.append(
            f"experiment.generator.ep={g.ep}: expected a divisor of tp x dp = {engine} (GPUs per engine)"
        )
    if g.dp == 1 and m.q_heads % g.tp:
        out.append(f"experiment.generator.tp={g.tp}: expected a divisor of model.q_heads={m.q_heads}")
    for key, ep in (("trainer", t.ep), ("generator", g.ep)):
        if ep > 1 and not m.routed_experts:
            out.append(f"experiment.{key}.ep={ep}: expected 1 for a dense model ({m.name} has no experts)")
        elif m.routed_experts and m.routed_experts % ep:
            out.append(
                f"experiment.{key}.ep={ep}: expected a divisor of model.routed_experts={m.routed_experts}"
            )
    return out


def _check_memory(cfg: Any, s: Resolved) -> list[str]:
    hw, g, w = cfg.hardware, cfg.experiment.generator, cfg.workload
    out = []
    if s.trainer_bytes_per_gpu / GB > hw.hbm_gb:
        t = cfg.experiment.trainer
        out.append(
            f"experiment.trainer: weights + grads + optimizer need {s.trainer_bytes_per_gpu / GB:.0f} GB per GPU under "
            f"sharding={t.sharding} (tp {t.tp}, pp {t.pp}, ep {t.ep}, offload_optimizer={t.offload_optimizer}); "
            f"expected <= hardware.hbm_gb={hw.hbm_gb:g} ({hw.name}), before activations"
        )
    budget = s.engine_gpus * hw.hbm_gb * g.gpu_memory_utilization
    max_seq = w.max_prompt_len + w.max_response_len
    if s.engine_weight_bytes / GB >= budget:
        out.append(
            f"experiment.generator.tp={g.tp}: engine weights {s.engine_weight_bytes / GB:.0f} GB exceed "
            f"{s.engine_gpus} GPU(s) x {hw.hbm_gb:g} GB x gpu_memory_utilization {g.gpu_memory_utilization}"
            f" = {budget:.0f} GB; expected room for the KV cache (raise tp/dp or lower dtype_bytes)"
        )
    elif s.kv_tokens_per_engine < max_seq:
        out.append(
            f"workload.max_response_len={w.max_response_len}: one max-length sequence ({max_seq} tokens) needs "
            f"more KV cache than an engine holds ({s.kv_tokens_per_engine:.0f} tokens)"
        )
    return out


def _check_teachers(cfg: Any, r: Resolved) -> list[str]:
    """experiment.teachers against workload.algorithm (opd needs a teacher for every domain; other
    algorithms have none), each teacher's model option, GPUs by placement, and engine size."""
    from bench.config import group_options
    from bench.resolve import load_model

    w, e, c = cfg.workload, cfg.experiment, cfg.cluster
    teachers = list(e.get("teachers") or ())
    algorithm = str(getattr(w.algorithm, "value", w.algorithm))
    if algorithm != "opd":
        if teachers:
            return [
                f"experiment.teachers: {len(teachers)} teacher(s) but workload.algorithm={algorithm}; expected "
                "workload.algorithm=opd (GRPO-style algorithms score with a task reward, not a teacher) or "
                "experiment.teachers=[]"
            ]
        return []
    if not teachers:
        return [
            "workload.algorithm=opd: experiment.teachers is empty; expected at least one teacher, e.g. "
            "experiment.teachers=[{model:qwen3_0_6b,gpus:1}]"
        ]
    out = []
    for i, (t, tr) in enumerate(zip(teachers, r.teachers, strict=True)):
        key = f"experiment.teachers[{i}]"
        if load_model(str(t.model)) is None:
            out.append(
                f"{key}.model={t.model}: no conf/model/{t.model}.yaml; choose one of {', '.join(group_options('model'))}"
            )
        if t.tp < 1:
            out.append(f"{key}.tp={t.tp}: expected >= 1 (GPUs per teacher engine)")
            continue
        if tr.placement == "dedicated":
            if t.gpus < 1:
                out.append(
                    f"{key}.gpus={t.gpus}: expected >= 1 with placement=dedicated (or placement=with_generator)"
                )
            elif t.gpus % t.tp:
                out.append(
                    f"{key}.tp={t.tp}: expected a divisor of {key}.gpus={t.gpus} (whole teacher engines)"
                )
            elif tr.weight_bytes / t.tp / GB >= cfg.hardware.hbm_gb:
                out.append(
                    f"{key}.tp={t.tp}: {t.model} weights {tr.weight_bytes / GB:.0f} GB do not fit {t.tp} x "
                    f"{cfg.hardware.hbm_gb:g} GB ({cfg.hardware.name}); expected a larger tp"
                )
        else:
            if t.gpus != 0:
                out.append(
                    f"{key}.gpus={t.gpus}: expected 0 with placement=with_generator (served on the generator's GPUs)"
                )
            if e.generator_gpus % t.tp:
                out.append(
                    f"{key}.tp={t.tp}: expected a divisor of experiment.generator_gpus={e.generator_gpus} "
                    "(placement=with_generator: teacher engines on the generator's GPUs)"
                )
    if r.teacher.gpus > c.gpus_per_node and r.teacher.gpus % c.gpus_per_node:
        out.append(
            f"experiment.teachers: {r.teacher.gpus} dedicated GPUs: expected a multiple of "
            f"cluster.gpus_per_node={c.gpus_per_node} (roles get whole nodes)"
        )
    if not any(t.scores(str(w.task)) for t in r.teachers):
        domains = sorted({d for t in r.teachers for d in t.domains})
        out.append(
            f"experiment.teachers: no teacher scores workload.task={w.task} (domains {domains}); expected one "
            f"with domains: [] (every domain) or including {w.task}"
        )
    return out


def _check_framework(cfg: Any) -> list[str]:
    from runners.base import load_runner

    f = cfg.framework
    if f.mode != "auto" and f.mode not in f.modes:
        return [f"framework.mode={f.mode}: expected one of {sorted(f.modes)} or auto ({f.name} {f.version})"]
    try:
        runner = load_runner(f)
    except Exception as e:  # noqa: BLE001 - a broken runner is itself a pre-flight problem
        return [f"framework._target_={f._target_}: cannot load the runner ({type(e).__name__}: {e})"]
    return list(runner.validate(cfg))


# (key, lowest, lowest allowed?, highest (included)): every number of the schema that has a
# range, checked by bench.config.expected_range (NaN and inf are outside every range). Keys
# _check_workload names itself (group_size, prompts_per_step, staleness_budget, oversampling) and
# hardware.tco (bench.cost.TCO_RANGES) are not repeated here.
RANGES = [
    *[(f"experiment.{k}", 1, True, None) for k in ("trainer_gpus", "generator_gpus")],
    *[(f"experiment.trainer.{k}", 1, True, None) for k in ("tp", "pp", "cp", "ep", "micro_batch_tokens")],
    *[(f"experiment.generator.{k}", 1, True, None) for k in ("tp", "ep", "dp", "max_concurrency")],
    *[(f"experiment.generator.{k}", 0, False, None) for k in ("dtype_bytes", "kv_dtype_bytes")],
    ("experiment.generator.gpu_memory_utilization", 0, False, 1),
    ("workload.response_len_mean_frac", 0, False, 1),
    ("workload.lr", 0, False, None),  # learning rate: 0 would train nothing
    *[(f"workload.{k}", 0, True, None) for k in ("kl_coef", "response_len_drift_steps")],
    *[
        (f"workload.{k}", 1, True, None)
        for k in ("mini_batches_per_step", "max_prompt_len", "max_response_len")
    ],
    *[(f"workload.{k}", 1, True, None) for k in ("steps", "turns_mean", "prompt_len_mean")],
    *[
        (f"workload.{k}", 0, False, None)
        for k in ("solve_rate_alpha", "solve_rate_beta", "response_len_drift")
    ],
    *[(f"workload.{k}", 0, True, None) for k in ("response_len_sigma", "env_latency_sigma", "temperature")],
    *[
        (f"workload.{k}", 0, True, None)
        for k in ("env_latency_mean_s", "env_startup_s", "tool_output_tokens_mean")
    ],
    *[
        (f"model.{k}", 1, True, None)
        for k in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "vocab")
    ],
    ("model.max_context", 1, True, None),
    *[
        (f"model.{k}", 0, True, None)
        for k in ("ffn_dense", "ffn_expert", "routed_experts", "shared_experts", "top_k", "dense_layers")
    ],
    *[
        (f"model.{k}", 0, True, None)
        for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    ],
    *[(f"model.{k}", 0, True, None) for k in ("dsa_topk", "dsa_index_heads", "dsa_index_dim")],
    *[(f"model.{k}", 0, False, None) for k in ("weight_bytes", "rope_theta", "rms_norm_eps")],
    ("model.partial_rotary_factor", 0, False, 1),
    *[(f"hardware.{k}", 0, False, None) for k in ("peak_bf16_flops", "hbm_gb", "hbm_tbps", "nvlink_gbps")],
    *[(f"hardware.{k}", 0, False, None) for k in ("network_gbps", "tdp_w")],
    ("hardware.host_gbps", 0, True, None),  # 0: unknown (docs: conf/hardware)
    ("hardware.gpus_per_node", 1, True, None),
    *[(f"cluster.{k}", 1, True, None) for k in ("nodes", "gpus_per_node", "time_min")],
    ("cluster.cpus_per_task", 0, True, None),  # 0: Slurm decides
    ("framework.handoff_fixed_s", 0, True, None),
    *[
        (f"emulator.{k}", 0, False, 1)
        for k in ("trainer_mfu", "prefill_mfu", "decode_bw_eff", "weight_sync_eff")
    ],
    *[(f"emulator.{k}", 0, True, None) for k in ("logprob_passes", "optimizer_s", "weight_sync_fixed_s")],
    *[(f"emulator.{k}", 0, True, None) for k in ("async_lag", "steps", "pace")],
    *[
        (f"emulator.{k}", 0, True, None)
        for k in ("decode_step_floor_s", "handoff_fixed_s", "handoff_measured_s", "score_fixed_s")
    ],
    ("emulator.filesystem_gbps", 0, False, None),
]


def _check_ranges(cfg: Any) -> list[str]:
    """Counts, sizes, rates and fractions outside their range (a negative GPU count, tp=0, a memory
    utilisation of 1.5, a NaN learning rate), named before any arithmetic divides by them; then the
    TCO inputs (bench.cost.tco_problems), which every run's cost figures are computed from."""
    from bench.cost import tco_problems

    out = []
    for key, lo, lo_ok, hi in RANGES:
        v = OmegaConf.select(cfg, key)
        if v is None or isinstance(v, bool):  # None: not recorded (optional model facts)
            continue
        if want := expected_range(v, lo, lo_ok, hi):
            out.append(f"{key}={v}: {want}")
    return out + tco_problems(cfg.hardware)


def _check_mode(cfg: Any) -> list[str]:
    """`mode` is emulate or native, and a native run needs a Slurm cluster to run on."""
    c = cfg.cluster
    executor = str(getattr(c.executor, "value", c.executor))
    if cfg.mode not in ("emulate", "native"):
        return [f"mode={cfg.mode}: expected emulate or native"]
    if cfg.mode == "native" and executor != "slurm":
        return [
            f"mode=native: cluster={c.name} has no Slurm (cluster.executor={executor} in "
            f"conf/cluster/{c.name}.yaml); expected a Slurm cluster (cluster=testbed after make testbed-up, "
            "or a site's conf/cluster/<site>.yaml), or mode=emulate on this machine"
        ]
    return []


def validate_workload(cfg: Any, r: Resolved | None = None) -> list[str]:
    """Framework-neutral problems: value ranges, mode vs cluster, workload, GPU layout, memory (of
    cfg's resolved layout `r`)."""
    ranges = _check_ranges(cfg)
    if ranges:  # the layout and memory arithmetic divides by these values: name them alone
        return ranges + _check_mode(cfg) + _check_workload(cfg)
    r = r or Resolved.from_config(cfg)
    problems = _check_mode(cfg) + _check_workload(cfg) + _check_gpus(cfg, r) + _check_teachers(cfg, r)
    if not any(p.startswith("experiment.generator: tp x dp") for p in problems):
        problems += _check_memory(cfg, r)
    return problems


def validate(cfg: Any, r: Resolved | None = None) -> list[str]:
    """Every problem of one composed config, one line each (key, value, expected)."""
    from runners.shell import script_value_problems  # a #SBATCH value with a line break

    problems = validate_workload(cfg, r) + script_value_problems(cfg)
    if _check_ranges(cfg):  # the runners' own checks divide by these values too
        return problems
    return problems + _check_framework(cfg)


def frameworks_of(overrides: list[str]) -> list[str]:
    """The frameworks a command covers: an explicit framework=X, else experiment.frameworks."""
    explicit = [o.split("=", 1)[1] for o in overrides if o.startswith("framework=")]
    if explicit:
        return explicit[0].split(",")
    return list(compose(overrides).experiment.frameworks)


def summary_lines(cfg: Any, s: Resolved) -> list[str]:
    e, hw = cfg.experiment, cfg.hardware
    return [
        f"  trainer {e.trainer_gpus} x {hw.name}: {s.trainer_bytes_per_gpu / GB:.1f} GB/GPU weights+grads+optimizer",
        f"  generator {e.generator_gpus} GPUs = {s.engines} engines x {s.engine_gpus} GPU: weights "
        f"{s.engine_weight_bytes / GB:.1f} GB, KV {s.kv_tokens_per_engine / 1e3:.0f}K tokens "
        f"({s.kv_bytes_per_token / 1e3:.0f} KB/token), concurrency ceiling {s.concurrency_ceiling:.0f} "
        f"rollouts/engine at {s.mean_seq_tokens:.0f} tokens mean",
    ] + [
        f"  teacher {t.model} ({t.weights}), {t.placement}: {t.engines} engines x {t.engine_gpus} GPU"
        f"{f' on {t.gpus} own GPUs' if t.gpus else ' on the generator GPUs'}, scores "
        f"{', '.join(t.domains) if t.domains else 'every domain'}; job total {s.total_gpus} GPUs"
        for t in s.teachers
    ]


def main(argv: list[str]) -> int:
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "validate",
        "Check each framework of an experiment before anything is submitted: exit 0 with a one-screen "
        "summary, or exit 2 with one line per problem naming the key, the value and what was expected.",
        "conf/ and the overrides (with --native, also the installed frameworks).",
        "nothing.",
        ["python -m bench validate experiment=smoke workload.group_size=8"],
    )
    add_overrides(ap)
    ap.add_argument(
        "--native", action="store_true", help="also ask each installed framework to parse its launch"
    )
    args = ap.parse_args(argv)
    problems: list[str] = []
    lines: list[str] = []
    try:
        frameworks = frameworks_of(args.overrides)
        first = for_framework(args.overrides, frameworks[0])
        problems += validate_workload(first)
        for fw in [] if _check_ranges(first) else frameworks:  # runners divide by those values too
            cfg = for_framework(args.overrides, fw)
            problems += [f"[{fw}] {p}" for p in _check_framework(cfg)]
            if not problems:  # the runner loads and accepts the config: show its mode
                from runners.base import load_runner

                runner = load_runner(cfg.framework)
                lines.append(f"  {fw} {cfg.framework.version}: mode {runner.resolve_mode(cfg)}")
                if args.native:  # the installed framework's own verdict on the rendered launch
                    from runners.base import NOT_INSTALLED

                    native = runner.validate_native(cfg, runner.render_launch(cfg))
                    unchecked = [p for p in native if p.endswith(NOT_INSTALLED)]
                    lines += [f"  {fw} native: {p} (not checked)" for p in unchecked]
                    problems += [f"[{fw}] native: {p}" for p in native if p not in unchecked]
    except UsageError as e:  # composition: unknown group option or key, wrong type (one line)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    cfg = compose(args.overrides)
    e, w, r = cfg.experiment, cfg.workload, Resolved.from_config(cfg)
    print(
        f"experiment {e.name}: {cfg.model.name}, {w.algorithm.name if hasattr(w.algorithm, 'name') else w.algorithm} "
        f"{w.prompts_per_step} prompts x group {w.group_size} = {w.prompts_per_step * w.group_size} samples/step, "
        f"{w.max_prompt_len}+{w.max_response_len} tokens, staleness budget {w.staleness_budget}, "
        f"placement {r.placement}, cluster {cfg.cluster.name}"
    )
    print("\n".join(summary_lines(cfg, r) + lines))
    print("OK: no problems found")
    return 0


def to_container(cfg: Any) -> dict:
    """Resolved config as plain data (enums as strings), for manifests."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
