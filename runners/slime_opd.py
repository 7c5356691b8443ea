"""slime's on-policy distillation flags (v0.3.1 slime/utils/arguments.py, docs/en/advanced/
on-policy-distillation.md) for workload.algorithm=opd; runners/slime.py adds them to its flag list.

slime has two teacher modes and no teacher placement of its own:
- `--opd-type sglang`: the teacher is an SGLang server started outside slime (its example starts it
  by hand on a spare GPU); each rollout is sent to it by slime's reward function
  (`slime.rollout.on_policy_distillation.reward_func`, `--rm-url`), which also replaces the task
  reward (it is 0), so the advantage is the reverse KL alone. The suite's job gives Ray every GPU of
  every node, so a dedicated teacher is a site server named by framework.native.opd_teacher_url
  (the opd-benchmark's Miles run: an external SGLang teacher on GPU 1).
- `--opd-type megatron`: the teacher checkpoint (`--opd-teacher-load`, Megatron torch_dist, same
  architecture as the student) is loaded into the training actor and forwarded there: on the
  trainer's GPUs, which are the generator's only when colocated (placement with_generator). The
  task reward (--rm-type) stays in the advantage: slime adds OPD on top of the estimator.
"""

from __future__ import annotations

from typing import Any

from runners import opd
from runners.base import enum_value

REWARD_FUNC = "slime.rollout.on_policy_distillation.reward_func"
POST_PROCESS = "slime.rollout.on_policy_distillation.post_process_rewards"


def teacher_mode(cfg: Any) -> str | None:
    """'sglang' (a dedicated teacher server), 'megatron' (in the trainer) or None (no OPD)."""
    t = opd.teacher(cfg) if opd.is_opd(cfg) else None
    if t is None:
        return None
    return "sglang" if enum_value(t.placement) == "dedicated" else "megatron"


def flags(cfg: Any) -> list[tuple[str, Any]]:
    """--use-opd and its teacher for this workload ([] without OPD)."""
    mode = teacher_mode(cfg)
    if mode is None:
        return []
    f: list[tuple[str, Any]] = [
        ("--use-opd", None),
        ("--opd-type", mode),
        ("--opd-kl-coef", cfg.workload.kl_coef),
    ]
    if mode == "sglang":
        url = str((cfg.framework.native or {}).get("opd_teacher_url") or "")
        return f + [("--custom-rm-path", REWARD_FUNC), ("--custom-reward-post-process-path", POST_PROCESS),
                    ("--rm-url", url)]  # fmt: skip
    return f + [("--opd-teacher-load", teacher_load(cfg))]


def teacher_load(cfg: Any) -> str:
    """--opd-teacher-load: the teacher as a Megatron torch_dist checkpoint beside its prepared HF
    snapshot, as --ref-load beside the student's (slime's tools/convert_hf_to_torch_dist.py makes it;
    `bench prepare` fetches the snapshot only and says so, `bench inspect` checks the folder)."""
    return f"{opd.weights_dir(cfg, opd.teacher(cfg))}_torch_dist"


def problems(cfg: Any, colocated: bool) -> list[str]:
    """What slime 0.3.1 cannot do with this OPD workload (one line each)."""
    if not opd.is_opd(cfg):
        return []
    out = opd.routing_problems(cfg, "slime")
    t = opd.teacher(cfg)
    if t is None:
        return out
    key = f"experiment.teachers[{list(cfg.experiment.teachers).index(t)}]"
    if teacher_mode(cfg) == "sglang" and not (cfg.framework.native or {}).get("opd_teacher_url"):
        out.append(
            f"{key}.placement=dedicated: slime 0.3.1 places no teacher (its SGLang teacher is a server started "
            "outside slime) and the suite's Ray job holds every GPU; start the teacher on other GPUs and pass "
            "+framework.native.opd_teacher_url=http://HOST:PORT/generate, or use placement=with_generator"
        )
    if teacher_mode(cfg) == "megatron":
        if not colocated:
            out.append(
                f"{key}.placement=with_generator on disaggregated GPUs: slime 0.3.1 forwards an in-process teacher "
                "on the trainer's GPUs (--opd-type megatron), not the generator's; use placement=colocated or dedicated"
            )
        if opd.same_architecture(cfg, t) is False:
            out.append(
                f"{key}.model={t.model}: slime 0.3.1's in-process teacher (--opd-type megatron) must have the "
                f"student's architecture ({cfg.model.name}); use placement=dedicated (an SGLang teacher server)"
            )
    return out


def notes(cfg: Any) -> list[str]:
    mode = teacher_mode(cfg)
    if mode == "sglang":
        return [
            "opd: teacher log-probs from the SGLang server at framework.native.opd_teacher_url (outside the job); "
            "slime's reward function replaces the task reward with 0, so the advantage is the reverse KL alone"
        ]
    if mode == "megatron":
        return [
            "opd: the teacher (Megatron torch_dist at --opd-teacher-load, converted like --ref-load) is forwarded "
            "in the training actor; the task reward (--rm-type) stays in the GRPO advantage beside the reverse KL"
        ]
    return []
