"""verl: the configuration that ran, read from the run's own files -> Facts (runners/run_config.py).

Where verl writes it (found by content, never by name):
- a dumped config YAML (`.hydra/config.yaml`, or a copy: top-level `actor_rollout_ref:` and
  `trainer:`), OmegaConf interpolations resolved against the same file;
- the console log: main_ppo's TaskRunner pprints the resolved config
  (`(TaskRunner pid=N) {'actor_rollout_ref': {...`), one Ray-prefixed line per key;
- Hydra's override list (`.hydra/overrides.yaml`: `- data.train_batch_size=8`);
- the architecture: `Qwen3ForCausalLM contains 596.05M parameters` (fsdp_workers), the only
  architecture line verl prints.

Keys (verl 0.4-0.9): group size `actor_rollout_ref.rollout.n`; prompts per step
`data.train_batch_size`; `data.max_prompt_length` / `max_response_length`; trainer GPUs
`trainer.nnodes x trainer.n_gpus_per_node`, colocated with rollout (hybrid) unless a separate rollout
pool is configured (`rollout.nnodes x rollout.n_gpus_per_node` of the one-step-off / fully-async
recipes); on-policy distillation `distillation.enabled`, its teacher pool `distillation.nnodes x
n_gpus_per_node` and `distillation.teacher_models.<name>.model_path`; the advantage estimator
`algorithm.adv_estimator` otherwise;
reward model `reward_model.nnodes x n_gpus_per_node` when it has its own pool;
`trainer.total_training_steps`; staleness `async_training.staleness_threshold`.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from runners.config_tree import Tree, from_command, from_overrides, from_pprint_dump, from_yaml
from runners.run_config import (
    Facts,
    find_line,
    head_text,
    hf_config_architecture,
    hub_id_of,
    positive_int,
    put,
    source,
    text_files,
)

PARAMS_LINE = re.compile(r"\b(\w+For\w+) contains ([\d.]+)([KMBT]) parameters")
ON_POLICY_LAG = {"sync": 0, "one_step_off": 1}  # policy versions a sample lags in these modes
SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
DUMP_START = re.compile(
    r"^(?:\S*\([\w.:-]+ pid=\d+[^)]*\)\S* ?)?\{'(?:actor_rollout_ref|data|algorithm)':", re.M
)


def trees(log_dir: Path) -> list[Tree]:
    """Every config verl left under log_dir, most direct first: YAML dumps, console dumps, the
    launch command a log quotes, overrides. Read once per state of the files (the log parser asks
    for the group size, the config reader for everything)."""
    files = text_files(log_dir)
    return _trees(Path(log_dir), tuple((p, p.stat().st_mtime_ns, p.stat().st_size) for p in files))


@functools.lru_cache(maxsize=8)
def _trees(log_dir: Path, files: tuple[tuple[Path, int, int], ...]) -> list[Tree]:
    dumps, consoles, commands, overrides = [], [], [], []
    for path, _, _ in files:
        text = head_text(path)
        if re.search(r"^actor_rollout_ref:", text, re.M) and re.search(r"^trainer:", text, re.M):
            t = from_yaml(text, path, log_dir)
            if t:
                dumps.append(t)
        elif re.search(r"^\s*-\s*\+*[\w.]+=", text, re.M) and path.suffix in (".yaml", ".yml"):
            t = from_overrides(text, path, log_dir)
            if t:
                overrides.append(t)
        else:
            m = DUMP_START.search(text)
            if m:
                start = m.start() + m.group(0).index("{")
                t = from_pprint_dump(text, start, path, log_dir)
                if t:
                    consoles.append(t)
            t = from_command(text, path, log_dir)
            if t:
                commands.append(t)
    return dumps + consoles + commands + overrides


def read_group_size(log_dir: Path) -> int | None:
    """Samples per prompt (rollout.n, else vLLM's sampling n) for the step parser."""
    facts: Facts = {}
    v, src = _first(trees(log_dir), "actor_rollout_ref.rollout.n")
    put(facts, "group_size", positive_int(v), src or "")
    if "group_size" not in facts:
        _printed_counts(facts, Path(log_dir), [])
    return facts["group_size"].value if "group_size" in facts else None


def _first(ts: list[Tree], key: str) -> tuple[Any, str | None]:
    for t in ts:
        v, src = t.get(key)
        if v is not None:
            return v, src
    return None, None


def _count(ts: list[Tree], prefix: str) -> tuple[int | None, str | None]:
    """nnodes x n_gpus_per_node of one pool, from the first file that has both."""
    for t in ts:
        nodes, _ = t.get(f"{prefix}.nnodes")
        per, src = t.get(f"{prefix}.n_gpus_per_node")
        if positive_int(nodes) and positive_int(per):
            return positive_int(nodes) * positive_int(per), src
    return None, None


def _truthy(ts: list[Tree], key: str) -> bool:
    v, _ = _first(ts, key)
    return v is True or str(v).lower() == "true"


def read(log_dir: Path | str, run_info: dict[str, Any] | None = None) -> Facts:
    """Facts of a verl run folder (or one log file); run_info is the parser's (for the mode)."""
    log_dir = Path(log_dir)
    facts: Facts = {}
    ts = trees(log_dir)
    for name, key in (
        ("group_size", "actor_rollout_ref.rollout.n"),
        ("prompts_per_step", "data.train_batch_size"),
        ("max_prompt_len", "data.max_prompt_length"),
        ("max_response_len", "data.max_response_length"),
        ("total_steps", "trainer.total_training_steps"),
        ("nodes", "trainer.nnodes"),
    ):
        v, src = _first(ts, key)
        put(facts, name, positive_int(v), src or "")
    _printed_counts(facts, log_dir, ts)
    v, src = _first(ts, "actor_rollout_ref.model.path")
    put(facts, "model_path", v if isinstance(v, str) else None, src or "")
    if isinstance(v, str):
        hub_id_of(facts, log_dir, v)
    trainer, t_src = _count(ts, "trainer")
    rollout, r_src = _count(ts, "rollout")  # a separate rollout pool (one-step-off, fully async)
    if trainer and rollout:
        put(facts, "gpus.trainer", trainer, t_src)
        put(facts, "gpus.rollout", rollout, r_src)
    elif trainer:
        put(facts, "gpus.hybrid", trainer, t_src)  # actor and rollout share the trainer's GPUs
    _algorithm(facts, ts)
    if "algorithm" not in facts:
        _critic_algorithm(facts, log_dir)
    _parallelism(facts, ts)
    if _truthy(ts, "reward_model.enable"):
        n, src = _count(ts, "reward_model")
        put(facts, "gpus.reward", n, src)
    v, src = _first(ts, "async_training.staleness_threshold")
    if v is not None:
        put(facts, "staleness_bound", v, src)
    if run_info and run_info.get("mode") and run_info.get("mode_source") != "assumed":
        # verl_logs decides the mode from the actor prefix, the metric keys or trainer.v1
        how = run_info.get("mode_source")
        _, src = _first(ts, "trainer.v1.trainer_mode") if how == "config" else (None, None)
        put(facts, "mode", run_info["mode"], src or f"verl step records ({how})")
        if run_info["mode"] in ON_POLICY_LAG:  # the lag these modes have by construction
            put(
                facts,
                "staleness_bound",
                ON_POLICY_LAG[run_info["mode"]],
                f"mode {run_info['mode']} ({src or how})",
            )
    arch = _architecture(log_dir)
    if arch:
        put(facts, "architecture", arch[0], arch[1])
    return facts


# What verl prints about the step count and the group size, beside its config:
# ray_trainer `Total training steps: 105`, the old fsdp_workers' LR schedule `Total steps: 435,
# num_warmup_steps: 0`, the trainer's tqdm bar `Training Progress:   0%|    | 0/105 [...`, and
# the dataloader size (`Size of train dataloader: 7`, x trainer.total_epochs); vLLM's sampling
# kwargs (`kwargs: {'n': 5, ...`) carry the group size of versions whose rollout config has no `n`.
TOTAL_STEPS_LINES = (
    (re.compile(r"\bTotal training steps: (\d+)"), "Total training steps"),
    (re.compile(r"\bTotal steps: (\d+)"), "Total steps (LR schedule)"),
    (re.compile(r"Training Progress:[^|\n]*\|[^|\n]*\|\s*\d+/(\d+)"), "tqdm Training Progress"),
)
DATALOADER_LINE = re.compile(r"\bSize of train dataloader: (\d+)")
SAMPLING_N_LINE = re.compile(r"\bkwargs: \{'n': (\d+),")


def _printed_counts(facts: Facts, log_dir: Path, ts: list[Tree]) -> None:
    """total_steps and group_size from the lines verl prints when its config does not state them."""
    epochs, e_src = _first(ts, "trainer.total_epochs")
    for path in text_files(log_dir):
        text = head_text(path, 8 << 20)
        for pattern, what in TOTAL_STEPS_LINES:
            m, line = find_line(text, pattern.pattern)
            if m:
                put(facts, "total_steps", positive_int(m.group(1)), f"{source(log_dir, path, line)} ({what})")
        m, line = find_line(text, DATALOADER_LINE.pattern)
        if m and positive_int(epochs) and positive_int(m.group(1)):
            put(
                facts,
                "total_steps",
                positive_int(m.group(1)) * positive_int(epochs),
                f"{source(log_dir, path, line)} (train dataloader size) x trainer.total_epochs ({e_src})",
            )
        if "group_size" not in facts:
            m, line = find_line(text, SAMPLING_N_LINE.pattern)
            if m:
                put(
                    facts,
                    "group_size",
                    positive_int(m.group(1)),
                    f"{source(log_dir, path, line)} (vLLM sampling n)",
                )


def _parallelism(facts: Facts, ts: list[Tree]) -> None:
    """Rollout TP, and the trainer's TP / PP / EP (Megatron's settings; FSDP shards data only, so
    its TP and PP are 1 by construction, cited to the strategy) and DP = GPUs / (TP x PP)."""
    v, src = _first(ts, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    put(facts, "rollout.tp", positive_int(v), src or "")
    strategy, s_src = _first(ts, "actor_rollout_ref.actor.strategy")
    base = "actor_rollout_ref.actor.megatron."
    for name, key in (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
                      ("ep", "expert_model_parallel_size")):  # fmt: skip
        v, src = _first(ts, base + key)
        put(facts, f"trainer.{name}", positive_int(v), src or "")
    if isinstance(strategy, str) and strategy.startswith("fsdp"):
        for name in ("tp", "pp"):
            put(
                facts,
                f"trainer.{name}",
                1,
                f"{s_src} (strategy {strategy}: no tensor or pipeline parallelism)",
            )
    gpus = facts.get("gpus.hybrid") or facts.get("gpus.trainer")
    tp, pp = facts.get("trainer.tp"), facts.get("trainer.pp")
    if gpus and tp and pp and gpus.value % (tp.value * pp.value) == 0:
        dp = gpus.value // (tp.value * pp.value)
        put(facts, "trainer.dp", dp, f"{gpus.source}: {gpus.value} GPUs / (TP {tp.value} x PP {pp.value})")


def _algorithm(facts: Facts, ts: list[Tree]) -> None:
    """On-policy distillation when `distillation.enabled` (verl >= 0.8): the teacher runs in its
    own Ray resource pool (`teacher_pool`, distillation.nnodes x n_gpus_per_node), so it is
    dedicated; else the advantage estimator (`algorithm.adv_estimator`, GSPO by its loss mode)."""
    if _truthy(ts, "distillation.enabled"):
        _, on_src = _first(ts, "distillation.enabled")
        put(facts, "algorithm", "opd", on_src or "")
        coef, coef_src = _first(ts, "distillation.distillation_loss.distillation_loss_coef")
        put(facts, "kl_coef", coef if isinstance(coef, int | float) else None, coef_src or "")
        n, src = _count(ts, "distillation")
        put(facts, "gpus.teacher", n, src)
        put(facts, "teacher.placement", "dedicated" if n else None, f"{src} (verl's teacher_pool)")
        for t in ts:
            teachers = t.raw("distillation.teacher_models")
            for name in teachers if isinstance(teachers, dict) else ():
                path, p_src = t.get(f"distillation.teacher_models.{name}.model_path")
                put(facts, "teacher.model_path", path if isinstance(path, str) else None, p_src or "")
                tp, tp_src = t.get(f"distillation.teacher_models.{name}.inference.tensor_model_parallel_size")
                put(facts, "teacher.tp", positive_int(tp), tp_src or "")
        return
    est, src = _first(ts, "algorithm.adv_estimator")
    loss, loss_src = _first(ts, "actor_rollout_ref.actor.policy_loss.loss_mode")
    if est == "grpo" and loss == "gspo":
        put(facts, "algorithm", "gspo", loss_src or "")
    elif isinstance(est, str):
        put(facts, "algorithm", est, src or "")


CRITIC_KEY = re.compile(r"\bstep:\d+ - .*?\bcritic/vf_loss:")


def _critic_algorithm(facts: Facts, log_dir: Path) -> None:
    """PPO with a critic when the config is not printed: verl trains a critic (`critic/vf_loss` in
    its step records) for adv_estimator gae only, its default."""
    for path in text_files(log_dir):
        text = head_text(path, 8 << 20)
        m, line = find_line(text, CRITIC_KEY.pattern)
        if m:
            src = f"{source(log_dir, path, line)} (critic/vf_loss: a critic is trained, which verl does for gae only)"
            put(facts, "algorithm", "gae", src)
            return


def _architecture(log_dir: Path) -> tuple[dict[str, Any], str] | None:
    """The model config verl prints ('Model config after override: Qwen2Config {...}'), else its
    parameter-count line (the only architecture line some versions print)."""
    for path in text_files(log_dir):
        hf = hf_config_architecture(head_text(path, 8 << 20))
        if hf:
            return hf[0], source(log_dir, path, hf[1])
    for path in text_files(log_dir):
        text = head_text(path, 8 << 20)
        m = PARAMS_LINE.search(text)
        if m:
            params = float(m.group(2)) * SCALE[m.group(3)]
            line = text.count("\n", 0, m.start()) + 1
            return {"class": m.group(1), "params": params}, source(log_dir, path, line)
    return None
