"""verl's on-policy distillation (workload.algorithm=opd) at 0.9.1: the `distillation.*` overrides
(verl/trainer/config/distillation/distillation.yaml and workers/config/distillation.py in the wheel)
and what verl cannot express; runners/verl.py adds them to its translation and validation.

verl places a teacher itself: `distillation.nnodes x n_gpus_per_node` is its own Ray resource pool
(`teacher_pool`, trainer/ppo/v1/trainer_base.py, experimental/fully_async_policy), sized by
runners/verl.layout; the teacher's vLLM servers score each finished rollout inside the agent loop.
"""

from __future__ import annotations

from typing import Any

from runners import opd
from runners.base import enum_value


def distillation_overrides(cfg: Any, lay: dict[str, int]) -> list[str]:
    """On-policy distillation (verl 0.9.1 distillation/distillation.yaml): one teacher in verl's
    own teacher_pool, served by vLLM, scoring prompt + response (max_model_len one token more, as
    DistillationTeacherModelConfig requires); the loss is the sampled-token reverse KL (k1) as a
    policy-gradient signal with no task reward (the coefficient is then fixed at 1.0 by verl)."""
    t = opd.teacher(cfg) if opd.is_opd(cfg) else None
    if t is None:
        return []
    wl, gen = cfg.workload, cfg.experiment.generator
    teacher = "distillation.teacher_models.teacher_model"
    return [
        "distillation.enabled=True",
        f"distillation.nnodes={lay['teacher_nnodes']}",
        f"distillation.n_gpus_per_node={lay['teacher_gpus_per_node']}",
        f"{teacher}.model_path={opd.weights_dir(cfg, t)}",
        f"{teacher}.inference.name=vllm",
        f"{teacher}.inference.tensor_model_parallel_size={int(t.tp)}",
        f"{teacher}.inference.gpu_memory_utilization={float(gen.gpu_memory_utilization)}",
        f"{teacher}.inference.max_model_len={int(wl.max_prompt_len) + int(wl.max_response_len) + 1}",
        "distillation.distillation_loss.loss_mode=k1",
        "distillation.distillation_loss.use_task_rewards=False",
        "distillation.distillation_loss.use_policy_gradient=True",
        # verl's DistillationLossConfig defaults (its YAML leaves them null): k1 is clamped at 10 and
        # log-probs at -10, as the opd-benchmark's verl run set them
        "distillation.distillation_loss.loss_max_clamp=10.0",
        "distillation.distillation_loss.log_prob_min_clamp=-10.0",
    ]


def opd_problems(cfg: Any, mode: str) -> list[str]:
    """What verl 0.9.1 cannot do with an on-policy distillation workload (one line each)."""
    if not opd.is_opd(cfg):
        return []
    out = opd.routing_problems(cfg, "verl")
    t = opd.teacher(cfg)
    if t is not None and enum_value(t.placement) != "dedicated":
        i = list(cfg.experiment.teachers).index(t)
        out.append(
            f"experiment.teachers[{i}].placement={enum_value(t.placement)}: verl 0.9.1 serves teachers only in "
            "their own resource pool (distillation.nnodes x n_gpus_per_node > 0); use placement=dedicated with gpus >= 1"
        )
    if mode == "one_step_off":
        out.append(
            "framework.mode='one_step_off' with workload.algorithm=opd: verl 0.9.1's one-step-off entry creates "
            "no teacher_pool (experimental/separation/utils.py); use separate_async or fully_async"
        )
    if float(cfg.workload.kl_coef) != 1.0:
        out.append(
            f"workload.kl_coef={cfg.workload.kl_coef} with workload.algorithm=opd: verl 0.9.1 fixes the "
            "distillation coefficient at 1.0 without task rewards (trainer/distillation/losses.py); expected 1.0"
        )
    return out
