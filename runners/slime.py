"""slime (THUDM/slime) runner: the native launch of a workload, and its logs -> trace rows.

Pinned version and site paths live in conf/framework/slime.yaml; facts behind every translation
are in ../shared/reference/slime.md. slime is launched as a Ray job: Ray head + workers on every
node (runners/slurm.py), then `python3 train.py` (synchronous, colocated or not) or
`python3 train_async.py` (one-step-off, never colocated) on node 0 with one long flag list.
Flags are checked against runners/schemas/slime-v0.3.1.json, derived from slime's, Megatron-LM's
and SGLang's sources by runners/schemas/derive_slime.py. Logs are parsed by runners/slime_logs.py.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.trace import read_env_file
from runners import data_paths, slime_logs, slime_opd
from runners.base import NOT_INSTALLED, Build, Launch, ParseResult, Process, Runner, enum_value
from runners.batch_rules import mini_batch_dp_problem
from runners.schemas.slime import SCHEMA_FILE, check_values, load_schema, unknown_flags
from runners.slurm import ray_processes, render_sbatch

# Log formats the parser accepts, per version (runners/slime_logs.py).
PARSER_FORMATS: list[dict[str, str]] = [
    {"source": "slime v0.2.0 .. v0.3.1 (a6272da0d4f3)",
     "line": "(MegatronTrainRayActor pid=N) [YYYY-MM-DD HH:MM:SS] train_metric_utils.py:L - perf N: {...}",
     "notes": "rollout side from (RolloutManager pid=N) ... rollout.py:L - perf N: {...}"},
    {"source": "slime HEAD 624b824a (slime/observability/)", "line": "same payloads, other file:line prefixes",
     "notes": "records are keyed on `<kind> <id>: {` and payload keys, never on file:line"},
    {"source": "slime before 2025-10-30 (PR #629)", "line": "'perf/total_train_time'",
     "notes": "read as perf/step_time"},
    {"source": "Miles 862ac1ea (radixark/miles)",
     "line": "(MegatronTrainRayActor pid=N) [YYYY-MM-DD HH:MM:SS.mmm actor_cell0_rank0] train_metric_utils.py:L - perf N: {...}",
     "notes": "step dicts printed twice (log_utils.py and model.py); rollout/weight_version/* gives staleness"},
    {"source": "any", "line": "Ray prefix `(Actor pid=N, ip=...)`, suffix ` [repeated Nx across cluster]`",
     "notes": "bare nan/inf and np.float64(...) in payloads; Megatron argument dump gives the batch shape"},
]  # fmt: skip

# Megatron-LM and SGLang flags this runner can emit; derive_slime.py verifies each in their sources.
MEGATRON_FLAGS = [
    "--accumulate-allreduce-grads-in-fp32", "--adam-beta1", "--adam-beta2", "--add-qkv-bias",
    "--attention-backend", "--attention-dropout", "--attention-softmax-in-fp32", "--context-parallel-size",
    "--disable-bias-linear", "--enable-experimental", "--expert-model-parallel-size",
    "--expert-tensor-parallel-size", "--ffn-hidden-size", "--group-query-attention", "--hidden-dropout",
    "--hidden-size", "--kv-channels", "--kv-lora-rank", "--lr-decay-style", "--make-vocab-size-divisible-by",
    "--moe-aux-loss-coeff", "--moe-ffn-hidden-size", "--moe-grouped-gemm", "--moe-layer-freq",
    "--moe-permute-fusion", "--moe-router-bias-update-rate", "--moe-router-dtype",
    "--moe-router-enable-expert-bias", "--moe-router-load-balancing-type", "--moe-router-pre-softmax",
    "--moe-router-score-function", "--moe-router-topk", "--moe-router-topk-scaling-factor",
    "--moe-shared-expert-intermediate-size", "--moe-token-dispatcher-type", "--moe-token-drop-policy",
    "--multi-latent-attention", "--no-position-embedding", "--norm-epsilon", "--normalization",
    "--num-attention-heads", "--num-experts", "--num-layers", "--num-query-groups", "--optimizer",
    "--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d", "--pipeline-model-parallel-size",
    "--position-embedding-type", "--q-lora-rank", "--qk-head-dim", "--qk-layernorm", "--qk-pos-emb-head-dim",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--rotary-base",
    "--rotary-percent", "--sequence-parallel", "--spec", "--swiglu", "--tensor-model-parallel-size",
    "--untie-embeddings-and-output-weights", "--use-precision-aware-optimizer",
    "--use-rotary-position-embeddings", "--v-head-dim", "--vocab-size", "--weight-decay",
]  # fmt: skip
SGLANG_FLAGS = [
    "--sglang-dp-size", "--sglang-enable-dp-attention", "--sglang-ep-size", "--sglang-kv-cache-dtype",
    "--sglang-mem-fraction-static",
]  # fmt: skip

DYNAMIC_FILTER = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"
# slime's own model code per config.json model_type: a Megatron layer spec from slime_plugins and the
# flags its scripts/models/<m>.sh add for it. The model's facts (rope_theta, eps, router...) are in
# conf/model/*.yaml (ModelConf).
MODEL_SPECS: dict[str, dict[str, Any]] = {
    "glm_moe_dsa": {"spec": ["slime_plugins.models.glm5.glm5", "get_glm5_spec"],
                    # DSA attention gathers the whole sequence under CP (slime's glm5-744B-A40B.sh)
                    "extra": [("--allgather-cp", None), ("--make-vocab-size-divisible-by", 16)]},
}  # fmt: skip
# ModelConf fields model_flags needs (router_score only for MoE models).
MODEL_FACTS = ("rope_theta", "rms_norm_eps", "partial_rotary_factor", "qk_norm", "qkv_bias")


def missing_model_facts(model: Any) -> list[str]:
    """ModelConf fields model_flags needs that this model's YAML leaves unknown (None)."""
    needed = [*MODEL_FACTS, *(["router_score"] if model.routed_experts else [])]
    return [k for k in needed if model.get(k) is None]


def _eps(value: float) -> str:
    """rms_norm_eps as slime's model scripts write it: 1e-06 -> "1e-6"."""
    mantissa, exponent = f"{float(value):e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def model_flags(model: Any) -> list[tuple[str, Any]]:
    """Megatron MODEL_ARGS for cfg.model (what slime's scripts/models/<m>.sh spell by hand)."""
    spec = MODEL_SPECS.get(str(model.model_type), {})
    f: list[tuple[str, Any]] = []
    if spec.get("spec"):
        f.append(("--spec", spec["spec"]))
    f += [("--num-layers", model.layers), ("--hidden-size", model.hidden),
          ("--ffn-hidden-size", model.ffn_dense or model.ffn_expert), ("--num-attention-heads", model.q_heads)]  # fmt: skip
    if enum_value(model.attention) == "mla":
        f += [("--multi-latent-attention", None), ("--q-lora-rank", model.q_lora_rank),
              ("--kv-lora-rank", model.kv_lora_rank), ("--qk-head-dim", model.qk_nope_head_dim),
              ("--qk-pos-emb-head-dim", model.qk_rope_head_dim), ("--v-head-dim", model.v_head_dim),
              ("--kv-channels", model.qk_nope_head_dim), ("--no-position-embedding", None),
              ("--enable-experimental", None)]  # fmt: skip
    else:
        f += [("--group-query-attention", None), ("--num-query-groups", model.kv_heads),
              ("--kv-channels", model.head_dim), ("--use-rotary-position-embeddings", None)]  # fmt: skip
    f += [("--position-embedding-type", "rope"), ("--rotary-base", int(model.rope_theta)),
          ("--rotary-percent", str(float(model.partial_rotary_factor))), ("--normalization", "RMSNorm"),
          ("--norm-epsilon", _eps(model.rms_norm_eps)), ("--swiglu", None), ("--disable-bias-linear", None),
          ("--vocab-size", model.vocab)]  # fmt: skip
    if model.qk_norm:
        f.append(("--qk-layernorm", None))
    if model.qkv_bias:
        f.append(("--add-qkv-bias", None))
    if not model.tied_embeddings:
        f.append(("--untie-embeddings-and-output-weights", None))
    f += spec.get("extra", [])
    if model.routed_experts:
        moe_layers = model.layers - model.dense_layers
        f += [("--num-experts", model.routed_experts), ("--moe-router-topk", model.top_k),
              ("--moe-ffn-hidden-size", model.ffn_expert),
              ("--moe-layer-freq", f"[0]*{model.dense_layers}+[1]*{moe_layers}" if model.dense_layers else f"[1]*{moe_layers}"),
              ("--moe-router-score-function", model.router_score), ("--moe-token-dispatcher-type", "alltoall"),
              ("--moe-grouped-gemm", None), ("--moe-permute-fusion", None), ("--moe-router-dtype", "fp32"),
              ("--moe-aux-loss-coeff", "0")]  # fmt: skip
        if model.shared_experts:
            f.append(("--moe-shared-expert-intermediate-size", model.ffn_expert * model.shared_experts))
        if model.router_score == "sigmoid":  # DeepSeek-style router with expert bias (GLM)
            f += [("--moe-router-pre-softmax", None), ("--moe-router-enable-expert-bias", None),
                  ("--moe-router-bias-update-rate", "0"), ("--moe-router-load-balancing-type", "seq_aux_loss"),
                  ("--moe-router-topk-scaling-factor", "2.5")]  # fmt: skip
        else:
            f.append(("--moe-token-drop-policy", "probs"))
    return f


def _native(cfg: Any) -> dict[str, Any]:
    native = cfg.framework.native
    return dict(native) if native is not None else {}


def layout(cfg: Any) -> dict[str, int]:
    """GPU split: trainer nodes x GPUs, generator GPUs, engine size, and nodes for the whole job."""
    exp, gpn = cfg.experiment, int(cfg.cluster.gpus_per_node)
    colocated = enum_value(exp.placement) == "colocated"
    trainer, generator = int(exp.trainer_gpus), int(exp.generator_gpus)
    actor_gpn = min(trainer, gpn)
    total = max(trainer, generator) if colocated else trainer + generator
    return {
        "actor_num_nodes": max(1, trainer // actor_gpn),
        "actor_num_gpus_per_node": actor_gpn,
        "rollout_num_gpus": trainer if colocated else generator,
        "gpus_per_engine": int(exp.generator.tp) * max(1, int(exp.generator.dp)),
        "gpus_per_node": gpn,
        "nodes": math.ceil(total / gpn),
        "colocated": colocated,
    }


def _model_paths(cfg: Any, native: dict[str, Any]) -> tuple[str, str]:
    """(--hf-checkpoint, --load): generation reads the FP8 release when generator.dtype_bytes == 1."""
    bf16 = str(data_paths.model_dir(cfg))  # written by `bench prepare`
    fp8 = float(cfg.experiment.generator.dtype_bytes) == 1.0
    return (f"{bf16}{native.get('fp8_suffix', '-FP8')}" if fp8 else bf16), bf16


def driver_flags(cfg: Any, mode: str) -> list[tuple[str, Any]]:
    """slime's flag list for this workload, as (flag, value|None) pairs in a fixed order."""
    w, exp, native = cfg.workload, cfg.experiment, _native(cfg)
    lay = layout(cfg)
    samples = int(w.prompts_per_step) * int(w.group_size)
    hf_ckpt, load = _model_paths(cfg, native)
    algorithm = enum_value(w.algorithm)
    f: list[tuple[str, Any]] = [
        ("--actor-num-nodes", lay["actor_num_nodes"]),
        ("--actor-num-gpus-per-node", lay["actor_num_gpus_per_node"]),
        ("--num-gpus-per-node", lay["gpus_per_node"]),
    ]
    f.append(("--colocate", None) if lay["colocated"] else ("--rollout-num-gpus", lay["rollout_num_gpus"]))
    f += [
        ("--rollout-num-gpus-per-engine", lay["gpus_per_engine"]),
        ("--hf-checkpoint", hf_ckpt),
        ("--load", load),
    ]
    ref_kl = float(w.kl_coef) > 0 and algorithm != "opd"  # with opd, kl_coef is the teacher's (--opd-kl-coef)
    if ref_kl:
        # The reference model is a Megatron torch_dist checkpoint (tools/convert_hf_to_torch_dist.py).
        ref = f"{data_paths.model_dir(cfg)}_torch_dist"
        f.append(("--ref-load", ref))
    f += model_flags(cfg.model)
    f += [("--prompt-data", str(data_paths.slime_prompt_file(cfg))),  # written by `bench prepare`
          ("--input-key", native.get("input_key", "prompt")), ("--label-key", native.get("label_key", "label")),
          ("--apply-chat-template", None), ("--rollout-shuffle", None)]  # fmt: skip
    task = dict((native.get("tasks") or {}).get(w.task) or {})
    if (
        task.get("rm_type") and slime_opd.teacher_mode(cfg) != "sglang"
    ):  # the teacher's reward function replaces it
        f.append(("--rm-type", task["rm_type"]))
    for item in task.get("args") or []:  # task harness flags (e.g. the SWE agent's generate function)
        flag, _, value = str(item).partition(" ")
        f.append((flag, value or None))
    f += [("--num-rollout", w.steps), ("--rollout-batch-size", w.prompts_per_step),
          ("--n-samples-per-prompt", w.group_size), ("--rollout-max-prompt-len", w.max_prompt_len),
          ("--rollout-max-response-len", w.max_response_len), ("--rollout-temperature", w.temperature),
          ("--global-batch-size", samples // int(w.mini_batches_per_step)),
          ("--seed", exp.seed), ("--rollout-seed", exp.seed)]  # fmt: skip
    if float(exp.oversampling) > 1:
        f.append(("--over-sampling-batch-size", math.ceil(int(w.prompts_per_step) * float(exp.oversampling))))
    if exp.filter_zero_advantage or algorithm == "dapo":
        f.append(("--dynamic-sampling-filter-path", DYNAMIC_FILTER))
    if native.get(
        "rollout_function_path"
    ):  # e.g. slime.rollout.fully_async_rollout.generate_rollout_fully_async
        f.append(("--rollout-function-path", native["rollout_function_path"]))
    if exp.partial_rollout or mode == "partial_rollout":
        f.append(("--partial-rollout", None))
    if mode in ("async", "partial_rollout"):
        f.append(("--update-weights-interval", max(1, int(w.staleness_budget))))
    f.append(("--advantage-estimator", "gspo" if algorithm == "gspo" else "grpo"))
    if algorithm == "gspo":
        f.append(("--eps-clip", "4e-4"))
    elif algorithm == "dapo":
        f += [("--eps-clip", "0.2"), ("--eps-clip-high", "0.28")]
    if not w.std_normalize:
        f.append(("--disable-grpo-std-normalization", None))
    if ref_kl:
        f += [("--use-kl-loss", None), ("--kl-loss-coef", w.kl_coef), ("--kl-loss-type", "low_var_kl")]
    f += slime_opd.flags(cfg)
    f += [("--optimizer", "adam"), ("--lr", w.lr), ("--lr-decay-style", "constant"),
          ("--weight-decay", native.get("weight_decay", 0.1)), ("--adam-beta1", "0.9"), ("--adam-beta2", "0.98")]  # fmt: skip
    f += _megatron_flags(exp.trainer) + _sglang_flags(exp.generator)
    if native.get("wandb"):
        # Offline: local metric capture never needs the network; slime requires a group name.
        f += [("--use-wandb", None), ("--wandb-mode", "offline"), ("--wandb-project", native.get("wandb_project", "rl-bench")),
              ("--wandb-group", f"{exp.name}-{cfg.framework.name}"), ("--wandb-dir", "{run_dir}/logs/wandb")]  # fmt: skip
    for item in native.get("extra_args") or []:
        flag, _, value = str(item).partition(" ")
        f.append((flag, value or None))
    return f


def _megatron_flags(tr: Any) -> list[tuple[str, Any]]:
    """The trainer's Megatron flags: CPU Adam, parallel sizes, full recompute, dynamic batching."""
    f: list[tuple[str, Any]] = []
    if tr.offload_optimizer:
        f += [("--optimizer-cpu-offload", None), ("--overlap-cpu-optimizer-d2h-h2d", None),
              ("--use-precision-aware-optimizer", None)]  # fmt: skip
    f += [("--tensor-model-parallel-size", tr.tp)]
    if int(tr.tp) > 1:
        f.append(("--sequence-parallel", None))
    f += [("--pipeline-model-parallel-size", tr.pp), ("--context-parallel-size", tr.cp),
          ("--expert-model-parallel-size", tr.ep), ("--expert-tensor-parallel-size", 1),
          ("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1),
          ("--use-dynamic-batch-size", None), ("--max-tokens-per-gpu", tr.micro_batch_tokens),
          ("--attention-dropout", "0.0"), ("--hidden-dropout", "0.0"), ("--accumulate-allreduce-grads-in-fp32", None),
          ("--attention-softmax-in-fp32", None), ("--attention-backend", "flash")]  # fmt: skip
    return f


def _sglang_flags(gen: Any) -> list[tuple[str, Any]]:
    """The SGLang engines' flags: memory fraction, in-flight cap, EP, DP attention, FP8 KV cache."""
    f: list[tuple[str, Any]] = []
    f += [("--sglang-mem-fraction-static", gen.gpu_memory_utilization),
          ("--sglang-server-concurrency", gen.max_concurrency)]  # fmt: skip
    if int(gen.ep) > 1:
        f.append(("--sglang-ep-size", gen.ep))
    if int(gen.dp) > 1:
        f += [("--sglang-enable-dp-attention", None), ("--sglang-dp-size", gen.dp)]
    if float(gen.kv_dtype_bytes) == 1.0:
        f.append(("--sglang-kv-cache-dtype", "fp8_e4m3"))
    return f


def _word(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def flatten(flags: list[tuple[str, Any]]) -> list[str]:
    """(flag, value) pairs -> argv words."""
    return [w for flag, value in flags for w in (flag, *_word(value))]


def flags_text(flags: list[tuple[str, Any]]) -> str:
    """flags.txt: one flag and its value(s) per line, each word shell-quoted (slime's bash-array style;
    a flag of framework.native.extra_args is user text too)."""
    return "".join(" ".join(shlex.quote(w) for w in [flag, *_word(value)]) + "\n" for flag, value in flags)


class SlimeRunner(Runner):
    """slime at the version pinned in conf/framework/slime.yaml (also reads Miles logs)."""

    name = "slime"

    def auto_mode(self, cfg: Any) -> str:
        """colocated -> colocate_sync; partial rollout -> partial_rollout; staleness >= 1 -> async; else sync."""
        if enum_value(cfg.experiment.placement) == "colocated":
            return "colocate_sync"
        if cfg.experiment.partial_rollout:
            return "partial_rollout"
        return "async" if int(cfg.workload.staleness_budget) >= 1 else "sync"

    def validate(self, cfg: Any) -> list[str]:
        """Problems that would make slime refuse the launch or change the workload."""
        problems = self.mode_problems(cfg)
        if problems:
            return problems
        mode = self.resolve_mode(cfg)
        exp, w, lay = cfg.experiment, cfg.workload, layout(cfg)
        if lay["colocated"] and mode in ("async", "partial_rollout"):
            problems.append(
                f"framework.mode={mode!r} with experiment.placement=colocated: train_async.py refuses --colocate; "
                "use colocate_sync or placement=disaggregated"
            )
        if not lay["colocated"] and mode == "colocate_sync":
            problems.append("framework.mode='colocate_sync' needs experiment.placement=colocated")
        trainer, gpn = int(exp.trainer_gpus), lay["gpus_per_node"]
        if trainer > gpn and trainer % gpn:
            problems.append(
                f"experiment.trainer_gpus={trainer}: slime places whole trainer nodes; expected a multiple of cluster.gpus_per_node={gpn}"
            )
        tr = exp.trainer
        model_parallel = int(tr.tp) * int(tr.pp) * int(tr.cp)
        if trainer % model_parallel:
            problems.append(
                f"experiment.trainer_gpus={trainer} is not divisible by trainer tp*pp*cp={model_parallel} (Megatron data parallel)"
            )
        if lay["rollout_num_gpus"] % lay["gpus_per_engine"]:
            problems.append(
                f"experiment.generator_gpus={lay['rollout_num_gpus']} is not divisible by the engine size "
                f"generator.tp*dp={lay['gpus_per_engine']} (--rollout-num-gpus-per-engine)"
            )
        # Megatron splits each optimizer step's batch evenly over the data-parallel ranks: slime
        # initialises its num-microbatches calculator with --global-batch-size (samples per step)
        # and --micro-batch-size 1 (slime/backends/megatron_utils/initialize.py at a6272da0), whose
        # ConstantNumMicroBatchesCalculator asserts global batch % (micro batch x DP) == 0
        # (megatron/core/num_microbatches_calculator.py).
        if (line := mini_batch_dp_problem(cfg)) is not None:
            problems.append(line)
        samples = int(w.prompts_per_step) * int(w.group_size)
        if samples % int(w.mini_batches_per_step):
            problems.append(
                f"workload: prompts_per_step*group_size={samples} is not divisible by mini_batches_per_step={w.mini_batches_per_step}"
            )
        if float(exp.oversampling) < 1:
            problems.append(
                f"experiment.oversampling={exp.oversampling}; slime asserts --over-sampling-batch-size >= --rollout-batch-size (expected >= 1)"
            )
        if float(w.temperature) <= 0:
            problems.append(f"workload.temperature={w.temperature}; slime requires --rollout-temperature > 0")
        for key in missing_model_facts(cfg.model):
            problems.append(
                f"model.{key} is unknown for {cfg.model.name}: slime passes it to Megatron; "
                "add it from the model's config.json to its conf/model YAML"
            )
        problems += slime_opd.problems(cfg, lay["colocated"])
        # an SGLang OPD teacher's reward function is the reward: no task mapping is read
        if w.task not in (_native(cfg).get("tasks") or {}) and slime_opd.teacher_mode(cfg) != "sglang":
            problems.append(f"workload.task={w.task!r}: no reward/harness mapping in framework.native.tasks")
        if not problems:
            flags = driver_flags(cfg, mode)
            problems += [
                f"flag {f} is not accepted by slime {cfg.framework.version}"
                for f in unknown_flags(flatten(flags))
            ]
            problems += check_values(flags)
        return problems

    def notes(self, cfg: Any, mode: str) -> list[str]:
        """Translation caveats for this workload (written to command.json)."""
        exp, w = cfg.experiment, cfg.workload
        out = [f"mode {mode}: {'train_async.py' if mode in ('async', 'partial_rollout') else 'train.py'}"]
        if exp.trainer.sharding == "fsdp":
            out.append(
                "trainer.sharding=fsdp: slime 0.3.1 trains with Megatron only; FSDP is approximated by Megatron DP + distributed optimizer"
            )
        if exp.trainer.offload_activations or exp.trainer.offload_params:
            out.append(
                "offload_activations/offload_params have no slime flag; full recompute is used instead"
            )
        if exp.partial_rollout and float(exp.oversampling) <= 1 and not exp.filter_zero_advantage:
            out.append(
                "partial rollout without over-sampling or a filter leaves nothing pending: it has no effect"
            )
        if float(exp.generator.dtype_bytes) == 1.0:
            out.append(
                "FP8 generation: --hf-checkpoint points at the <model>-FP8 release; training stays BF16"
            )
        if w.task == "swe":
            out.append(
                "SWE harness: slime's examples/coding_agent_rl generate function, not the harness of the published run"
            )
        if enum_value(w.algorithm) == "gspo":
            out.append("GSPO clip range --eps-clip 4e-4 follows slime's run-qwen3-235B-A22B.sh")
        if int(exp.generator.dp) > 1:
            out.append(
                "generator dp > 1: one SGLang engine with DP attention; prefill/decode disaggregation is not rendered"
            )
        return out + slime_opd.notes(cfg)

    def build(self, cfg: Any, mode: str) -> Build:
        """Ray head/workers on every node, then train.py / train_async.py on node 0 (job.sbatch)."""
        native, lay = _native(cfg), layout(cfg)
        flags = driver_flags(cfg, mode)
        script = "train_async.py" if mode in ("async", "partial_rollout") else "train.py"
        slime_dir = str(native.get("slime_dir", "/root/slime")).rstrip("/")
        argv = ["python3", f"{slime_dir}/{script}", *flatten(flags)]
        env = {
            "PYTHONPATH": f"{native.get('megatron_dir', '/root/Megatron-LM')}:{slime_dir}",
            "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            "RAY_DEDUP_LOGS": "0",  # every actor's record line reaches the log, none folded
            "PYTHONUNBUFFERED": "1",
        }
        if native.get("wandb"):
            env["WANDB_MODE"] = "offline"
        secrets = sorted(native.get("secret_env") or [])
        processes = ray_processes(lay["nodes"], lay["gpus_per_node"])
        processes.append(Process(role="driver", node_rank=0, argv=argv, env=env, secret_env=secrets))
        sbatch = render_sbatch(
            cfg.cluster,
            job_name=f"{cfg.experiment.name}-slime",
            nodes=lay["nodes"],
            gpus_per_node=lay["gpus_per_node"],
            driver_argv=argv,
            env=env,
            secret_env=secrets,
            container_image=str(cfg.framework.container or ""),
        )
        return Build(
            nodes=lay["nodes"],
            gpus_per_node=lay["gpus_per_node"],
            processes=processes,
            files={"flags.txt": flags_text(flags)},
            sbatch=sbatch,
            notes=self.notes(cfg, mode),
        )

    def validate_native(self, cfg: Any, launch: Launch, timeout_s: float = 600.0) -> list[str]:
        """Run slime's own parser (slime.utils.arguments.parse_args) on the rendered driver argv.

        Needs slime, Megatron-LM and SGLang importable (the slime container) and the model's HF
        config at --hf-checkpoint (slime checks the architecture flags against it). Runs in a child
        process: slime reads sys.argv and imports torch.
        """
        if importlib.util.find_spec("slime") is None:
            return [f"slime is {NOT_INSTALLED}"]
        driver = next(p for p in launch.processes if p.role == "driver")
        code = (
            "import sys; from slime.utils.arguments import parse_args; sys.argv = sys.argv[1:]; parse_args()"
        )
        try:
            out = subprocess.run(
                [sys.executable, "-c", code, *driver.argv[1:]],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env={**os.environ, **driver.env},
            )
        except subprocess.TimeoutExpired:
            return [f"slime's parse_args did not finish in {timeout_s:.0f} s"]
        if out.returncode != 0:
            tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
            return [f"slime's parse_args rejected the flags (exit {out.returncode}): {tail}"]
        return []

    def schema_problems(self, launch: Launch, schema_root: Path | None = None) -> list[str]:
        """flags.txt read back (shell words) must be the driver's argv, and every flag must be one
        slime, Megatron-LM or SGLang accepts at the pinned version, with a value of its type
        (runners/schemas/slime-v0.3.1.json, or schema_root/slime-v0.3.1.json)."""
        schema = load_schema(str(Path(schema_root) / SCHEMA_FILE)) if schema_root else load_schema()
        driver = next(p for p in launch.processes if p.role == "driver")
        lines = [shlex.split(line) for line in launch.files["flags.txt"].splitlines()]
        problems = []
        if [w for words in lines for w in words] != driver.argv[2:]:
            problems.append("flags.txt does not read back as the driver's argv")
        pairs = [(w[0], None if len(w) == 1 else (w[1] if len(w) == 2 else w[1:])) for w in lines]
        problems += [
            f"flag {f} is not accepted by slime {launch.version}" for f in unknown_flags(driver.argv, schema)
        ]
        return problems + check_values(pairs, schema)

    def native_settings(self, launch: Launch) -> dict[str, str]:
        """flags.txt as `flag -> value` ("" for a switch); a repeated flag keeps its last value."""
        lines = launch.files["flags.txt"].splitlines()
        return {flag: value for flag, _, value in (line.partition(" ") for line in lines)}

    def parse(self, log_dir: Path, peak_flops: float | None = None, **options: Any) -> ParseResult:
        """slime/Miles console logs under log_dir -> steps rows (rollouts are not logged per sample).

        peak_flops: the GPU's dense BF16 peak (FLOP/s) for native_mfu; defaults to
        framework.native.peak_flops (conf/framework/slime.yaml: the composed hardware's peak).
        """
        if peak_flops is None:
            peak_flops = (self.conf.get("native") or {}).get("peak_flops")
        files = [log_dir] if log_dir.is_file() else slime_logs.log_files(log_dir)
        env_files = (
            {p.name: read_env_file(p) for p in sorted(log_dir.rglob("*.env"))} if log_dir.is_dir() else {}
        )
        # wall_time.env of the opd-benchmark launchers: epoch seconds and wall time for the manifest
        epochs = {
            k: v[k]
            for v in env_files.values()
            for k in ("start_epoch", "end_epoch", "wall_seconds")
            if isinstance(v.get(k), int | float)
        }
        state = slime_logs.scan(files)
        rows, warnings, run_info = slime_logs.build_steps(state, peak_flops, t0=epochs.get("start_epoch"))
        run_info.update(epochs)
        if env_files:
            run_info["env_files"] = env_files
        if not files:
            warnings.append(f"{log_dir}: no .log/.out/.err/.txt files")
        elif not rows:
            warnings.append(f"{log_dir}: no slime perf records in {len(files)} file(s)")
        if peak_flops is None and rows:
            warnings.append("native_mfu null: pass peak_flops (hardware.peak_bf16_flops) to parse_logs")
        return ParseResult(
            steps=rows,
            warnings=warnings,
            skipped_lines=state.skipped,
            files=[str(p) for p in files],
            run_info=run_info,
        )
