"""docs/frameworks.md: what each workload key sets in each framework, read off the renders.

Nothing here is written by hand: for every framework, the smoke experiment is rendered once as
is, once per entry of PERTURBATIONS (one key changed) and once per OPD_ROWS entry (on-policy
distillation: OPD_BASE plus a teacher), and the page lists the native settings that changed (the
runner's `native_settings` of each Launch), or the runner's refusal. The page
cannot drift from the code: it *is* the code's output (tests/runners/test_docs.py checks it is
current). Composition lives in the suite (`python -m bench render --frameworks-doc >
docs/frameworks.md`); this module only lays the page out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# (override applied to experiment=smoke, why this change is shown). Values differ from the smoke
# experiment's so that every translated key shows up; each must be valid in the suite's schema.
PERTURBATIONS: list[tuple[str, str]] = [
    ("workload.prompts_per_step=128", "prompts per trainer step"),
    ("workload.group_size=8", "samples per prompt"),
    ("workload.mini_batches_per_step=2", "optimizer updates per trainer step"),
    ("workload.steps=40", "trainer steps"),
    ("workload.max_prompt_len=2048", "prompt cap, tokens"),
    ("workload.max_response_len=4096", "response cap over all turns, tokens"),
    ("workload.lr=2e-6", "learning rate"),
    ("workload.kl_coef=0.001", "KL loss coefficient"),
    ("workload.temperature=0.7", "sampling temperature"),
    ("workload.std_normalize=false", "GRPO std normalisation"),
    ("workload.algorithm=gspo", "policy loss"),
    ("workload.staleness_budget=2", "policy versions a sample may lag"),
    ("experiment.placement=colocated", "trainer and generator on the same GPUs"),
    ("experiment.trainer_gpus=16", "trainer GPUs"),
    ("experiment.generator_gpus=16", "generator GPUs"),
    ("experiment.trainer.sharding=megatron", "trainer sharding"),
    ("experiment.trainer.offload_optimizer=true", "optimizer state on CPU"),
    ("experiment.trainer.micro_batch_tokens=32768", "tokens per GPU per micro-batch"),
    ("experiment.generator.tp=2", "engine tensor parallelism"),
    ("experiment.generator.max_concurrency=128", "sequences in flight per engine"),
    ("experiment.generator.gpu_memory_utilization=0.7", "engine memory fraction"),
    ("experiment.generator.dtype_bytes=1", "FP8 generation weights"),
    ("experiment.oversampling=1.5", "prompts started per prompt kept"),
    ("experiment.filter_zero_advantage=true", "drop groups with zero advantage"),
    ("experiment.partial_rollout=true", "resume aborted rollouts"),
    ("experiment.seed=7", "seed"),
]

# On-policy distillation needs two keys at once (workload.algorithm=opd and experiment.teachers;
# bench/validate.py refuses either alone), so its rows are composed from the smoke experiment with
# OPD_BASE and the row's overrides (Hydra syntax, as a user types them), not one key perturbed.
# kl_coef 1.0: the reverse-KL coefficient verl and prime-rl fix at 1 (the smoke workload's is 0).
OPD_BASE: tuple[str, ...] = ("workload.algorithm=opd", "workload.kl_coef=1.0")
OPD_ROWS: list[tuple[tuple[str, ...], str]] = [
    (
        ("experiment.teachers=[{model:qwen3_30b_a3b,gpus:8,tp:2}]",),
        "a teacher on 8 GPUs of its own, 2 per engine",
    ),
    (
        (
            "experiment.teachers=[{model:qwen3_30b_a3b,gpus:8,tp:2}]",
            "+framework.native.opd_teacher_url=http://teacher-host:30000/generate",
        ),
        "the same, with slime's teacher server at a site URL",
    ),
    (
        (
            "experiment.generator.gpu_memory_utilization=0.45",
            "experiment.teachers=[{model:qwen3_8b,placement:with_generator}]",
        ),
        "a teacher served on the generator's GPUs",
    ),
    (
        ("experiment.placement=colocated", "experiment.teachers=[{model:qwen3_8b,placement:with_generator}]"),
        "a teacher on the shared GPUs of a colocated run",
    ),
]

# Where `bench ingest` reads each value of manifest.json `inferred`, per framework: transcribed
# from the readers' docstrings and code (runners/<framework>_config.py; model and hardware are
# matched in bench/infer.py). Every `backticked` name in a cell is in its reader's source
# (tests/runners/test_docs_inferred.py), so a reader that stops reading a key breaks the test.
# Each value's `source` in a manifest is the file:line it was read from, or "given".
INFERRED_SOURCES: list[tuple[str, dict[str, str]]] = [
    (
        "model (matched against conf/model by bench/infer.py)",
        {
            "verl": "the name: the model path `actor_rollout_ref.model.path` (config dump, launch command "
            "with its MODEL_PATH= variable), or the hub id a huggingface-cli download put there; the "
            "architecture (model_arch): the printed HF config, else `Qwen3ForCausalLM contains 596.05M parameters`",
            "slime": "Megatron's argument dump (`num_layers`, `hidden_size`, `num_attention_heads`, "
            "`num_query_groups`, `kv_channels`, `ffn_hidden_size`, `padded_vocab_size`, `num_experts`) "
            "and its rank-(0, 0) `number of parameters`; path `hf_checkpoint`",
            "prime_rl": "no architecture is printed: the name only (`model.name` in the config, "
            "`Initializing model (name=...)` on the console), else given",
        },
    ),
    (
        "hardware",
        {
            fw: "telemetry's nvidia-smi `name`, a device name a log prints (NVIDIA H100 80GB HBM3), a "
            "suite manifest beside the logs, or given (checked against the logged memory and MFU); never "
            "a default"
            for fw in ("verl", "slime", "prime_rl")
        },  # fmt: skip
    ),
    (
        "gpus: trainer / rollout / hybrid",
        {
            "verl": "`trainer.nnodes` x `trainer.n_gpus_per_node` (hybrid), or trainer and rollout "
            "when a separate `rollout.nnodes` x `rollout.n_gpus_per_node` pool exists",
            "slime": "`actor_num_nodes` x `actor_num_gpus_per_node`; hybrid when `colocate`, "
            "else rollout `rollout_num_gpus`",
            "prime_rl": "`deployment.num_train_gpus` / `deployment.num_infer_gpus` (or `trainer_gpu_ids` / "
            "`inference_gpu_ids`); the launcher's `Starting trainer on GPU(s)` / `Starting inference on "
            "GPU(s)`; `Starting RL trainer in World(world_size=...)`",
        },
    ),
    (
        "gpus: teacher / reward",
        {
            "verl": "`distillation.nnodes` x `n_gpus_per_node` when `distillation.enabled`; "
            "`reward_model` pool when `reward_model.enable`",
            "slime": "an external SGLang server's `server_args=ServerArgs(...)` (`tp_size` x `pp_size` x "
            "`dp_size`): teacher with `use_opd`, else reward",
            "prime_rl": "`deployment.num_teacher_gpus`",
        },
    ),
    (
        "gpu_ids (devices per role, for per-role telemetry)",
        {
            "verl": "not read: roles are placed through Ray and the logs do not name their devices",
            "slime": "not read: roles are placed through Ray and the logs do not name their devices",
            "prime_rl": "the launcher's `Starting inference on GPU(s)` / `Starting trainer on GPU(s)` "
            "through its `local->physical GPU mapping`",
        },
    ),
    (
        "nodes",
        {
            "verl": "`trainer.nnodes`",
            "slime": "`actor_num_nodes`",
            "prime_rl": "`Starting RL trainer in World(... num_nodes=...)`",
        },
    ),
    (
        "group_size",
        {
            "verl": "`actor_rollout_ref.rollout.n`, else vLLM's sampling `kwargs: {'n': N`",
            "slime": "`n_samples_per_prompt`",
            "prime_rl": "`orchestrator.group_size` (`orchestrator.rollouts_per_example` before v0.8), "
            "else `progress/rollouts` / `progress/tasks` of metrics.jsonl",
        },
    ),
    (
        "prompts_per_step",
        {
            "verl": "`data.train_batch_size`",
            "slime": "`rollout_batch_size`",
            "prime_rl": "`orchestrator.batch_size` / group size (rollouts, not prompts), else "
            "`progress/tasks` of metrics.jsonl",
        },
    ),
    (
        "max_prompt_len",
        {
            "verl": "`data.max_prompt_length`",
            "slime": "`rollout_max_prompt_len`",
            "prime_rl": "not read (unknown unless given)",
        },
    ),
    (
        "max_response_len",
        {
            "verl": "`data.max_response_length`",
            "slime": "`rollout_max_response_len`",
            "prime_rl": "`*.sampling.max_completion_tokens` (`orchestrator.sampling.max_tokens` before 2026-04)",
        },
    ),
    (
        "total_steps",
        {
            "verl": "`trainer.total_training_steps`, `Total training steps: N`, the LR schedule's `Total "
            "steps: N`, the `Training Progress` bar's `0/N`, else `Size of train dataloader: N` x "
            "`trainer.total_epochs`",
            "slime": "`num_rollout`",
            "prime_rl": "`max_steps` (config), `Starting orchestrator loop (max_steps=N)`",
        },
    ),
    (
        "rollout_tp, trainer_tp / pp / ep / dp",
        {
            "verl": "`actor_rollout_ref.rollout.tensor_model_parallel_size`; the actor's "
            "Megatron `tensor_model_parallel_size` / `pipeline_model_parallel_size` / "
            "`expert_model_parallel_size` (TP and PP 1 under an FSDP `strategy`); DP = GPUs / (TP x PP)",
            "slime": "`rollout_num_gpus_per_engine`; Megatron `tensor_model_parallel_size` / "
            "`pipeline_model_parallel_size` / `expert_model_parallel_size`; DP = GPUs / (TP x PP)",
            "prime_rl": "not read",
        },
    ),
    (
        "mode",
        {
            "verl": "`trainer.v1.trainer_mode`, else the step records (the parser's actor prefix and metric keys)",
            "slime": "the driver and the `colocate` flag (the slime parser)",
            "prime_rl": "`async`: prime-rl's only mode (orchestrator and trainer overlap)",
        },
    ),
    (
        "staleness_bound",
        {
            "verl": "`async_training.staleness_threshold`; 0 for sync, 1 for one-step-off by construction",
            "slime": "the driver (the slime parser)",
            "prime_rl": "`orchestrator.max_off_policy_steps` (`orchestrator.max_async_level` before)",
        },
    ),
    (
        "kl_coef (on-policy distillation's reverse-KL weight)",
        {
            "verl": "`distillation.distillation_loss.distillation_loss_coef` when `distillation.enabled`",
            "slime": "`opd_kl_coef` when `use_opd`",
            "prime_rl": "1: prime-rl's fixed ref_kl weight, when the algorithm is opd",
        },
    ),
]

HEADER = """# The same workload in each framework

Generated by `python -m bench render --frameworks-doc` (runners/docs.py); do not edit. The smoke
experiment (`experiment=smoke`) is rendered for every framework, then once more per row with one
key changed; each cell lists the native settings that changed (`old -> new`), or why the runner
refuses the change. Units differ between frameworks: the values show how the runner translates
(e.g. a count of prompts becoming a count of samples).
"""

OPD_INTRO = """On-policy distillation takes two keys at once, so each row is the smoke experiment with
`{base}` and the row's overrides (a teacher of `experiment.teachers`); the cell lists what the
render changes for the teacher and the algorithm (settings `old -> new`, the job's nodes and
processes per role, the runner's notes), or why the runner refuses it. Teacher weights are read where `bench prepare` puts them
(docs/native-runs.md, "On-policy distillation")."""


@dataclass
class FrameworkDoc:
    """One framework's column of the page: the renders' outcomes and its parsers' log formats."""

    name: str
    version: str
    notes: list[str]  # the smoke render's translation notes (Launch.notes)
    changes: dict[str, list[str] | str] = field(default_factory=dict)  # override -> changes or refusal
    parser_formats: Any = None  # the runner module's PARSER_FORMATS
    opd: dict[str, list[str] | str] = field(default_factory=dict)  # OPD_ROWS key -> changes or refusal


def opd_key(row: tuple[str, ...]) -> str:
    """An OPD row's overrides after OPD_BASE, as one string (the key of FrameworkDoc.opd)."""
    return " ".join(row)


def with_notes(settings: list[str], base: Any, launch: Any) -> list[str]:
    """A render's changed settings, then what its launch (runners.base.Launch) changes beyond them
    against the smoke render `base`: the job's nodes, its processes per role, and the translation
    notes it adds ("note: ..."), e.g. prime-rl's teacher servers as job steps of their own."""
    out = list(settings)
    if base.nodes != launch.nodes:
        out.append(f"job nodes: {base.nodes} -> {launch.nodes}")
    before, after = Counter(p.role for p in base.processes), Counter(p.role for p in launch.processes)
    out += [f"{role} processes: {before[role]} -> {after[role]}"
            for role in sorted(set(before) | set(after)) if before[role] != after[role]]  # fmt: skip
    return out + [f"note: {n}" for n in launch.notes if n not in base.notes]


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Native settings that differ between two renders, as `key: old -> new` (- for absent)."""
    out = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old != new:
            out.append(f"{key}: {_short(old)} -> {_short(new)}")
    return out


def _short(value: str | None) -> str:
    if value is None:
        return "-"
    return value if len(value) <= 100 else value[:97] + "..."


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _format_rows(formats: Any) -> list[str]:
    if isinstance(formats, dict):
        return [f"- **{v}**: " + "; ".join(_cell(x) for x in items) for v, items in formats.items()]
    return ["- " + "; ".join(f"{k}: {_cell(v)}" for k, v in item.items()) for item in formats]


def _outcome(got: list[str] | str) -> str:
    """One table cell: the refusal, or each changed setting in code and each added note as text."""
    if isinstance(got, str):
        return f"refused: {_cell(got)}"
    items = [_cell(c) if c.startswith("note: ") else f"`{_cell(c)}`" for c in got]
    return "<br>".join(items) or "no change"


def page(docs: list[FrameworkDoc]) -> str:
    """The whole docs/frameworks.md text."""
    lines = [HEADER, "## What each key sets", ""]
    head = [
        "| change | " + " | ".join(f"{d.name} {d.version}" for d in docs) + " |",
        "|---|" + "---|" * len(docs),
    ]
    lines += head
    for override, why in PERTURBATIONS:
        cells = [_outcome(d.changes.get(override, "not rendered")) for d in docs]
        lines.append(f"| `{override}` ({why}) | " + " | ".join(cells) + " |")
    lines += ["", "## On-policy distillation", "", OPD_INTRO.format(base=" ".join(OPD_BASE)), "", *head]
    for row, why in OPD_ROWS:
        cells = [_outcome(d.opd.get(opd_key(row), "not rendered")) for d in docs]
        lines.append(f"| `{opd_key(row)}` ({why}) | " + " | ".join(cells) + " |")
    lines += ["", "## Translation notes on the smoke experiment", ""]
    for d in docs:
        lines += [f"### {d.name}", "", *(f"- {_cell(n)}" for n in d.notes), ""]
    lines += inferred_sources([d.name for d in docs])
    lines += ["## Log formats the parsers accept", ""]
    for d in docs:
        lines += [f"### {d.name} (pinned {d.version})", "", *_format_rows(d.parser_formats), ""]
    # cluster=local keeps prepared data in the checkout: the page must not depend on where it is
    return "\n".join(lines).replace(str(Path(__file__).resolve().parent.parent), "<repo>")


def inferred_sources(frameworks: list[str]) -> list[str]:
    """The "Where ingest reads what ran" section: INFERRED_SOURCES as one table, a column per framework."""
    lines = [
        "## Where ingest reads what ran",
        "",
        "`python -m bench ingest` writes each value to manifest.json `inferred` with its `source` "
        "(the file:line it was read from, or `given`); a value the logs lack is null with the reason. "
        "Readers: runners/<framework>_config.py; model matching: bench/infer.py; hardware: "
        "bench/infer_hardware.py.",
        "",
        "| value | " + " | ".join(frameworks) + " |",
        "|---|" + "---|" * len(frameworks),
    ]
    for value, by_fw in INFERRED_SOURCES:
        lines.append(
            f"| {value} | " + " | ".join(_cell(by_fw.get(fw, "not read")) for fw in frameworks) + " |"
        )
    return [*lines, ""]
