"""prime-rl runner: workload -> `rl.toml` + a multi-node job.sbatch; native logs -> trace rows.

The translation is data at the top of this module: `KEYS` (version -> dotted TOML path of every
knob the suite sets, read by rl_config; supporting another prime-rl version is adding a row) and
`PARSER_FORMATS` (log formats read per version). docs/frameworks.md shows what each workload key
sets, read off the renders (runners/docs.py). Facts: ../shared/reference/prime-rl.md; every key below was checked against
the config classes at the pinned commit (runners/schemas/prime_rl-v0.8.0.json).

Launch shape. prime-rl's own `rl` launcher splits one `rl.toml` into per-role configs and, with
`[slurm]`, renders its `multi_node_rl.sbatch.j2`, whose preamble `pkill -9`s every python/vllm
process on the allocation. The job.sbatch of runners/prime_rl_job.py keeps prime-rl's layout
(inference nodes first, trainer nodes after them, orchestrator and env servers on trainer node 0,
one vLLM server per DP rank behind a vllm-router on inference node 0) but not that preamble: it runs
`rl @ rl.toml --dry-run` to let prime-rl itself resolve and validate the per-role configs, then
starts each process as its own srun step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from runners import data_paths, opd, prime_rl_logs
from runners.base import NOT_INSTALLED, Build, Launch, ParseResult, Runner, enum_value
from runners.prime_rl_job import (
    TEACHER_PORT,
    UV,
    Layout,
    deployment,
    job_name,
    layout,
    processes,
    render_sbatch,
)
from runners.schemas.prime_rl import check_keys, is_array_of_tables, load_schema

# version -> workload concept -> dotted path in rl.toml (None: the version has no such knob)
KEYS: dict[str, dict[str, str | None]] = {
    "0.8.0": {
        "model": "model.name",
        "max_steps": "max_steps",
        "seq_len": "seq_len",
        "batch_size": "orchestrator.batch_size",
        "group_size": "orchestrator.group_size",
        "max_off_policy_steps": "orchestrator.max_off_policy_steps",
        "oversampling_factor": "orchestrator.oversampling_factor",
        "max_completion_tokens": "orchestrator.train.sampling.max_completion_tokens",
        "temperature": "orchestrator.train.sampling.temperature",
        "train_source": "orchestrator.train.source",
        "pre_batch_filters": "orchestrator.pre_batch_filters",
        "post_batch_filters": "orchestrator.post_batch_filters",
        "algo": "orchestrator.algo.type",
        "teacher": "orchestrator.algo.teacher",  # OPDAlgoConfig.teacher: a FrozenModelConfig
        "renderer": "orchestrator.renderer.name",
        "lr": "trainer.optim.lr",
        "optimizer": "trainer.optim.type",
        "trainer_ep": "trainer.model.ep",
        "trainer_cp": "trainer.model.cp",
        "optim_offload": "trainer.model.optim_cpu_offload",
        "act_offload": "trainer.model.ac_offloading",
        "max_model_len": "inference.model.max_model_len",
        "infer_tp": "inference.parallel.tp",
        "infer_dp": "inference.parallel.dp",
        "infer_ep": "inference.enable_expert_parallel",
        "infer_quantization": "inference.quantization",
        "gpu_memory_utilization": "inference.gpu_memory_utilization",
        "infer_seed": "inference.seed",
        "vllm_extra": "inference.vllm_extra",
        "weight_broadcast": "weight_broadcast.type",
        "deployment": "deployment.type",
        "gpus_per_node": "deployment.gpus_per_node",
        "num_train_nodes": "deployment.num_train_nodes",
        "num_infer_nodes": "deployment.num_infer_nodes",
        "num_infer_replicas": "deployment.num_infer_replicas",
        "num_train_gpus": "deployment.num_train_gpus",  # single_node deployment
        "num_infer_gpus": "deployment.num_infer_gpus",
        "file_monitor": "file_monitor",
        "trainer_wandb": "trainer.wandb",
        "orchestrator_wandb": "orchestrator.wandb",
        "slurm_job_name": "slurm.job_name",
        "slurm_partition": "slurm.partition",
        "slurm_account": "slurm.account",
        "slurm_time": "slurm.time",
        "output_dir": "output_dir",
        "async_level": None,  # max_async_level was removed on 2026-05-25 (#2631): lag fixed at 1
    },
}
# Fixed at this version: orchestrator.py TARGET_LAG = 1 (batches the orchestrator may run ahead).
ASYNC_LAG = {"0.8.0": 1}

# version -> log formats the parser reads (prime_rl_logs.py)
PARSER_FORMATS: dict[str, list[str]] = {
    "0.8.0": [
        "metrics.jsonl (file monitor; trainer + orchestrator rows, classified by keys)",
        "console 'Step N | 1m 18s | Loss 0.0288 | ... | Throughput 1460 tokens/s | MFU 0.6% | ...'",
        "console 'Step N | 12.0s | Reward 0.1335 | ... | Max Off-Policy 0 | ...'",
        "console 'Detected A/B rollouts (...), enforced N' (filtered samples)",
        "rollouts/step_N/train/{all,effective}/traces.jsonl (episode traces -> rollouts.parquet)",
    ],
    "0.7.0": ["metrics.jsonl in trainer and orchestrator output dirs", "console 'Key value' Step lines"],
    "0.5.0": [
        "console 'Step 5 | Time: 0.36s | Loss: ... | Throughput: 4771 tokens/s | MFU: 1.4% | ...'",
        "console 'Step 13 | Time: 72.00s | Reward: 0.3400 | ... | Max. Off-Policy Level: 0'",
    ],
}

# workload.task -> verifiers environment (taskset id, harness, runtime); framework.native.taskset
# overrides. math-env-v1 takes the HF dataset; r2e-gym-v1 is prime-rl's own SWE example taskset.
TASKSETS: dict[str, dict[str, Any]] = {
    "math": {"taskset": {"id": "math-env-v1", "dataset_name": "{dataset}"}, "harness": "null",
             "runtime": "subprocess", "secrets": []},
    "swe": {"taskset": {"id": "r2e-gym-v1"}, "harness": "bash", "runtime": "prime",
            "secrets": ["PRIME_API_KEY"]},
}  # fmt: skip

# model-name prefix -> renderer (token-in/token-out chat template). prime-rl refuses a model missing
# from renderers.MODEL_RENDERER_MAP unless a renderer is named (e.g. Qwen3-235B-A22B-Thinking-2507);
# the families below match that map's entries for their siblings. framework.native.renderer overrides.
RENDERERS = [("Qwen/Qwen3-", "qwen3"), ("zai-org/GLM-5", "glm-5"), ("zai-org/GLM-4.5", "glm-4.5")]

WANDB_PROJECT = "rl-bench"


# ---- TOML ---------------------------------------------------------------------------------------
def toml_dumps(doc: dict[str, Any]) -> str:
    """Deterministic TOML (tomli-w): keys sorted at every level, so a render is byte-stable."""
    return tomli_w.dumps(_sorted(doc))


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _set(doc: dict[str, Any], dotted: str | None, value: Any) -> None:
    if dotted is None:
        raise KeyError("this prime-rl version has no key for the requested concept")
    *parents, last = dotted.split(".")
    for p in parents:
        doc = doc.setdefault(p, {})
    doc[last] = value


# ---- translation --------------------------------------------------------------------------------
def rl_config(cfg: Any, version: str) -> tuple[dict[str, Any], list[str]]:
    """The workload as prime-rl's `rl.toml` document, plus the caveats of this translation."""
    keys, w, ex, lay = KEYS[version], cfg.workload, cfg.experiment, layout(cfg)
    doc: dict[str, Any] = {}

    def put(concept: str, value: Any) -> None:
        _set(doc, keys[concept], value)

    seq_len = int(w.max_prompt_len + w.max_response_len)
    put("model", str(data_paths.model_dir(cfg)))  # written by `bench prepare`
    put("max_steps", int(w.steps))
    put("seq_len", seq_len)
    put("batch_size", int(w.prompts_per_step * w.group_size))  # rollouts, not prompts
    put("group_size", int(w.group_size))  # default 1: always explicit
    put("max_off_policy_steps", int(w.staleness_budget))
    put("oversampling_factor", float(ex.oversampling))
    put("max_completion_tokens", int(w.max_response_len))
    put("temperature", float(w.temperature))
    put("train_source", [train_source(cfg)])
    monitor_only = [{"type": "gibberish", "enforce": False}, {"type": "repetition", "enforce": False}]
    put(
        "pre_batch_filters",
        [*monitor_only, {"type": "zero_advantage", "enforce": bool(ex.filter_zero_advantage)}],
    )
    put("post_batch_filters", [*monitor_only, {"type": "zero_advantage", "enforce": False}])
    put("algo", enum_value(w.algorithm) if opd.is_opd(cfg) else "grpo")
    if opd.is_opd(cfg):
        # the frozen teacher (configs/algorithm.py FrozenModelConfig: name + an explicit base_url);
        # the orchestrator's argv points base_url at the teacher's servers (prime_rl_job.teacher_urls)
        put(
            "teacher",
            {
                "name": opd.weights_dir(cfg, opd.teacher(cfg)),
                "base_url": [f"http://localhost:{TEACHER_PORT}/v1"],
            },
        )
    renderer = dict(cfg.framework.native or {}).get("renderer") or next(
        (r for prefix, r in RENDERERS if str(cfg.model.name).startswith(prefix)), None
    )
    if renderer:
        put("renderer", renderer)
    put("optimizer", "adamw")
    put("lr", float(w.lr))
    put("trainer_ep", int(ex.trainer.ep))
    put("trainer_cp", int(ex.trainer.cp))
    put("optim_offload", bool(ex.trainer.offload_optimizer))
    put("act_offload", {} if ex.trainer.offload_activations else "None")  # "None" is prime-rl's TOML null
    put("max_model_len", seq_len)
    put("infer_tp", lay.tp)
    if lay.ep:
        put("infer_ep", True)
        put("infer_dp", lay.dp)
    if ex.generator.dtype_bytes < 2:
        put("infer_quantization", "fp8")
    put("gpu_memory_utilization", float(ex.generator.gpu_memory_utilization))
    put("infer_seed", int(ex.seed))
    put("vllm_extra", {"max_num_seqs": int(ex.generator.max_concurrency)})
    put("weight_broadcast", _weight_broadcast(cfg))
    for concept, value in deployment(lay).items():
        put(concept, value)
    put("file_monitor", {})
    wandb = {"project": WANDB_PROJECT, "name": f"{ex.name}-prime_rl", "offline": True}
    put("trainer_wandb", dict(wandb))
    put("orchestrator_wandb", dict(wandb))
    if not lay.single_node:  # with [slurm], a single-node `rl` submits its own sbatch (rl.py rl_slurm)
        put("slurm_job_name", job_name(cfg))  # instead of writing the per-role configs job.sbatch runs
        if cfg.cluster.partition:
            put("slurm_partition", str(cfg.cluster.partition))
        if cfg.cluster.account:
            put("slurm_account", str(cfg.cluster.account))
        put("slurm_time", f"{int(cfg.cluster.time_min) // 60:02d}:{int(cfg.cluster.time_min) % 60:02d}:00")
    return doc, translation_notes(cfg, version, lay)


def train_source(cfg: Any) -> dict[str, Any]:
    """One `[[orchestrator.train.source]]`: the verifiers environment for workload.task."""
    w, native = cfg.workload, dict(cfg.framework.native or {})
    spec = native.get("taskset") or TASKSETS.get(str(w.task))
    if spec is None:
        raise ValueError(
            f"workload.task={w.task!r}: no prime-rl environment known; expected one of {sorted(TASKSETS)} "
            "or framework.native.taskset = {taskset: {id: ...}, harness: ..., runtime: ...}"
        )
    dataset = str(data_paths.prime_rl_dataset(cfg))  # bench prepare's copy, read by load_dataset
    taskset = {k: (str(v).replace("{dataset}", dataset) if isinstance(v, str) else v)
               for k, v in dict(spec["taskset"]).items()}  # fmt: skip
    return {
        "name": str(w.name),
        "env": {
            "taskset": taskset,
            "agent": {"harness": {"id": spec["harness"]}, "runtime": {"type": spec["runtime"]}},
        },
    }


def _source_secrets(cfg: Any) -> list[str]:
    spec = dict(cfg.framework.native or {}).get("taskset") or TASKSETS.get(str(cfg.workload.task), {})
    return list(spec.get("secrets", []))


def translation_notes(cfg: Any, version: str, lay: Layout) -> list[str]:
    """Where prime-rl cannot run the workload exactly as specified (Launch.notes)."""
    w, ex = cfg.workload, cfg.experiment
    notes = [
        f"prime-rl {version} always runs the orchestrator {ASYNC_LAG[version]} batch ahead of the trainer "
        "(async depth is not configurable); workload.staleness_budget maps to max_off_policy_steps",
        "weights are updated in flight: one rollout can span several policy versions",
    ]
    if w.std_normalize:
        notes.append(
            "workload.std_normalize=true: prime-rl GRPO cannot divide advantages by the group std "
            "(advantage = reward - group mean); the run uses mean-centred advantages"
        )
    spec = dict(cfg.framework.native or {}).get("taskset") or TASKSETS.get(str(w.task), {})
    if not any("{dataset}" in str(v) for v in dict(spec.get("taskset", {})).values()):
        notes.append(
            f"workload.dataset={w.dataset!r} is not passed to prime-rl: taskset "
            f"{dict(spec.get('taskset', {})).get('id')!r} brings its own tasks"
        )
    if w.kl_coef and not opd.is_opd(cfg):
        notes.append(f"workload.kl_coef={w.kl_coef}: prime-rl has no reference-model KL term; not rendered")
    if opd.is_opd(cfg):
        notes.append(
            "opd: the teacher is served by vLLM processes of this job (prime-rl starts no frozen model); "
            "rl.toml's teacher base_url is its single-node address, the orchestrator's argv names its nodes"
        )
    if w.turns_mean > 1:
        notes.append(
            "multi-turn: max_completion_tokens caps each model turn; the all-turn cap "
            f"{w.max_response_len} is enforced only through seq_len={w.max_prompt_len + w.max_response_len}"
        )
    if ex.generator.dtype_bytes < 2:
        notes.append(
            "FP8 generation: inference.quantization='fp8' (vLLM online quantisation of BF16 weights)"
        )
    if lay.ep_group:
        notes.append(
            f"inference: {lay.infer_replicas} replica(s) of DP{lay.dp} x TP{lay.tp} with expert parallelism over "
            f"{lay.infer_nodes_per_replica} node(s) each, without prefill/decode disaggregation"
        )
    return notes


def opd_problems(cfg: Any) -> list[str]:
    """What prime-rl 0.8.0 cannot do with an on-policy distillation workload (one line each)."""
    if not opd.is_opd(cfg):
        return []
    out, t = opd.routing_problems(cfg, "prime_rl"), opd.teacher(cfg)
    if float(cfg.workload.kl_coef) != 1.0:
        out.append(
            f"workload.kl_coef={cfg.workload.kl_coef} with workload.algorithm=opd: prime-rl 0.8.0's ref_kl loss "
            "component has a fixed weight (configs/trainer.py); expected 1.0"
        )
    gmu = float(cfg.experiment.generator.gpu_memory_utilization)
    if t is not None and enum_value(t.placement) == "with_generator" and gmu > 0.45:
        out.append(
            f"experiment.generator.gpu_memory_utilization={gmu}: a with_generator teacher is a second vLLM server "
            "on the generator's GPUs with the same share; expected <= 0.45 so both fit"
        )
    return out


# Run by PRIME_RL_CONFIGS_PYTHON: validate one rl.toml with prime-rl's RLConfig, errors to stderr.
_PYDANTIC_CHECK = """
import sys, tomllib
from prime_rl.configs.rl import RLConfig
try:
    RLConfig.model_validate(tomllib.load(open(sys.argv[1], "rb")))
except Exception as e:
    sys.exit(str(e))
"""


# ---- the runner ---------------------------------------------------------------------------------
class PrimeRLRunner(Runner):
    """prime-rl at the version pinned in conf/framework/prime_rl.yaml."""

    name = "prime_rl"

    @staticmethod
    def dp_padding_bin_tokens(cfg: Any) -> int:
        """Micro-batch length (tokens) of prime-rl's trainer, which packs a step's samples into
        micro-batches of seq_len tokens and pads their count up to a multiple of the DP size, so a
        batch need not divide by it (src/prime_rl/trainer/batch.py prepare_batch at v0.8.0: "Pad
        each group independently so its count is divisible by num_train_workers"). seq_len as
        rl_config renders it; the emulator costs the padding (bench.model.costmodel)."""
        return int(cfg.workload.max_prompt_len + cfg.workload.max_response_len)

    def auto_mode(self, cfg: Any) -> str:
        """Only "async" exists at the pinned versions (no synchronous mode since 2026-05-25)."""
        return "async"

    def validate(self, cfg: Any) -> list[str]:
        """Workloads prime-rl cannot run at this version, one message per problem."""
        v, ex, w = self.version, cfg.experiment, cfg.workload
        if v not in KEYS:
            return [f"framework.version={v!r}: no prime-rl translation table; known {sorted(KEYS)}"]
        problems = self.mode_problems(cfg)
        if enum_value(ex.placement) == "colocated":
            problems.append(
                f"experiment.placement=colocated: prime-rl {v} runs trainer and inference on disjoint GPUs; "
                "expected disaggregated"
            )
        if w.staleness_budget == 0:
            problems.append(
                f"workload.staleness_budget=0: prime-rl {v} always runs the orchestrator {ASYNC_LAG[v]} batch "
                "ahead (TARGET_LAG, not configurable), so on-policy training cannot be expressed; expected >= 1"
            )
        if ex.trainer.tp > 1 or ex.trainer.pp > 1:
            problems.append(f"experiment.trainer tp={ex.trainer.tp} pp={ex.trainer.pp}: prime-rl trains with FSDP "
                            "(+ EP/CP) only; expected tp=1, pp=1")  # fmt: skip
        if ex.trainer.sharding != "fsdp":
            problems.append(
                f"experiment.trainer.sharding={ex.trainer.sharding!r}: expected 'fsdp' for prime-rl"
            )
        if w.mini_batches_per_step != 1:
            problems.append(f"workload.mini_batches_per_step={w.mini_batches_per_step}: prime-rl takes one "
                            "optimizer step per batch; expected 1")  # fmt: skip
        algo = enum_value(w.algorithm)
        problems += opd_problems(cfg)
        if algo not in ("grpo", "opd"):
            problems.append(
                f"workload.algorithm={algo!r}: prime-rl {v} has GRPO-style advantages only; expected 'grpo'"
            )
        container = cfg.cluster.container
        if container.kind != "none" and not (container.image or cfg.framework.container):
            problems.append(
                f"cluster.container.kind={container.kind!r}: prime-rl publishes no container image; set "
                "cluster.container.image to one holding prime-rl at this version, or use kind 'none'"
            )
        try:
            layout(cfg)
            train_source(cfg)
        except ValueError as e:
            problems.append(str(e))
        return problems

    def build(self, cfg: Any, mode: str) -> Build:
        """rl.toml + job.sbatch + argv of every process for a composed config."""
        v = self.version
        doc, notes = rl_config(cfg, v)
        lay = layout(cfg)
        procs = processes(cfg, lay, _source_secrets(cfg))
        commit = str(self.conf.get("commit", ""))
        header = (f"# prime-rl {v} ({commit}) config rendered by the RL benchmark suite for experiment "
                  f"{cfg.experiment.name}.\n# Resolved per role by `uv run rl @ rl.toml --dry-run` (see job.sbatch).\n")  # fmt: skip
        notes.append(
            "argv words ${NODES[i]}, ${MASTER_ADDR}, ${CONFIG_DIR}, ${SLURM_JOB_ID} are filled in by job.sbatch"
        )
        return Build(
            nodes=lay.nodes,
            gpus_per_node=lay.gpus_per_node,
            processes=procs,
            files={"rl.toml": header + toml_dumps(doc)},
            sbatch=render_sbatch(cfg, lay, procs, v, commit),
            notes=notes,
        )

    def validate_native(self, cfg: Any, launch: Launch) -> list[str]:
        """prime-rl's own verdict on the rendered rl.toml (`python -m bench render --native`).

        PRIME_RL_DIR (a prime-rl checkout synced with uv): runs `uv run rl @ rl.toml --dry-run`, the
        launcher's full validation. Else PRIME_RL_CONFIGS_PYTHON (a Python 3.12 with prime-rl's slim
        `prime-rl-configs` package importable): validates with `RLConfig` (pydantic validators only).
        Returns prime-rl's error lines; one "... not installed here" line when neither is set.
        """
        rl_toml = launch.files["rl.toml"]
        with tempfile.TemporaryDirectory(prefix="prime_rl_native_") as tmp:
            path = Path(tmp) / "rl.toml"
            path.write_text(rl_toml)
            root, python = os.environ.get("PRIME_RL_DIR"), os.environ.get("PRIME_RL_CONFIGS_PYTHON")
            if root and shutil.which("uv"):
                argv = [*UV, "rl", "@", str(path), "--dry-run", "--output-dir", str(Path(tmp) / "out")]
                res = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=900)
            elif python:
                res = subprocess.run(
                    [python, "-c", _PYDANTIC_CHECK, str(path)], capture_output=True, text=True, timeout=900
                )
            else:
                return [f"prime-rl (PRIME_RL_DIR checkout or PRIME_RL_CONFIGS_PYTHON) {NOT_INSTALLED}"]
        if res.returncode == 0:
            return []
        lines = [ln.strip() for ln in (res.stderr + res.stdout).splitlines() if ln.strip()]
        return lines[-20:] or [f"prime-rl exited with status {res.returncode}"]

    def schema_problems(self, launch: Launch, schema_root: Path | None = None) -> list[str]:
        """rl.toml read back with tomllib, every key checked against the key schema derived from
        prime-rl's config classes at the pinned commit (runners/schemas/, or schema_root)."""
        try:
            doc = tomllib.loads(launch.files["rl.toml"])
        except tomllib.TOMLDecodeError as e:
            return [f"rl.toml is not TOML: {e}"]
        if schema_root is None:
            schema = load_schema(launch.version)
        else:
            schema = load_schema(launch.version, Path(schema_root))
        return check_keys(doc, schema)

    def native_settings(self, launch: Launch) -> dict[str, str]:
        """rl.toml as dotted `key -> value` (tables flattened, arrays of tables indexed, values as JSON)."""
        flat: dict[str, str] = {}

        def walk(d: dict[str, Any], prefix: str) -> None:
            for k, v in d.items():
                if isinstance(v, dict) and v:
                    walk(v, f"{prefix}{k}.")
                elif is_array_of_tables(v):  # [[orchestrator.train.source]], filters: one key per item
                    for i, item in enumerate(v):
                        walk(item, f"{prefix}{k}[{i}].")
                else:
                    flat[f"{prefix}{k}"] = json.dumps(v, sort_keys=True)

        walk(tomllib.loads(launch.files["rl.toml"]), "")
        return flat

    def parse(self, log_dir: Path, **options: Any) -> ParseResult:
        """Trace rows from a prime-rl output or log folder (metrics.jsonl, console logs, and
        rollout rows from rollouts/step_N/train/{all,effective}/traces.jsonl)."""
        rows, acc, run_info = prime_rl_logs.parse_dir(log_dir)
        run_info["parser_formats"] = PARSER_FORMATS.get(self.version, [])
        return ParseResult(
            steps=rows,
            rollouts=acc.rollouts,
            warnings=acc.warnings,
            skipped_lines=acc.skipped + acc.skipped_console + acc.skipped_traces,
            files=acc.files,
            run_info=run_info,
        )


def _weight_broadcast(cfg: Any) -> str:
    """prime-rl's `[weight_broadcast] type` from framework.weight_sync.disaggregated (the emulator
    models the same path): nccl (the pinned default with an [inference] section) or filesystem."""
    path = str((cfg.framework.get("weight_sync") or {}).get("disaggregated", "nccl"))
    if path not in ("nccl", "filesystem"):
        raise ValueError(
            f"framework.weight_sync.disaggregated={path}: prime-rl broadcasts weights by nccl or filesystem"
        )
    return path
