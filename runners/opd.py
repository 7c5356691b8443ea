"""On-policy distillation (workload.algorithm=opd) as every runner needs it: the teacher that scores
this workload's rollouts, where its weights are, and what no pinned framework can express.

The workload has one domain, workload.task: of experiment.teachers (validated by bench/validate.py:
at least one scores that domain) exactly one is rendered. A second teacher for the same domain, or
one for a domain this workload never produces, cannot be routed by any runner here (verl routes by
a `data_source` key the suite's prepared data does not split by task; slime 0.3.1 has one --rm-url;
prime-rl 0.8.0 one teacher per train source), so each refuses it with this module's line. Each
runner's own translation (keys, placement limits) stays in runners/<framework>.py.

Runners import nothing from bench/: the teacher's Hugging Face name is read from its conf/model YAML.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

from runners import data_paths
from runners.base import enum_value

CONF_MODEL = data_paths.REPO / "conf" / "model"


def is_opd(cfg: Any) -> bool:
    return enum_value(cfg.workload.algorithm) == "opd"


def scores(teacher: Any, task: str) -> bool:
    """A teacher scores `task` when its domains list it, or it lists none (every domain)."""
    return not list(teacher.domains or []) or task in list(teacher.domains)


def teacher(cfg: Any) -> Any:
    """The one teacher of experiment.teachers that scores workload.task (None when none does)."""
    task = str(cfg.workload.task)
    return next((t for t in cfg.experiment.get("teachers") or [] if scores(t, task)), None)


def routing_problems(cfg: Any, framework: str) -> list[str]:
    """Teachers this framework cannot route: a second one for workload.task, or one for a domain
    this single-task workload never produces."""
    task, out = str(cfg.workload.task), []
    chosen = teacher(cfg)
    for i, t in enumerate(cfg.experiment.get("teachers") or []):
        if t is chosen:
            continue
        why = (
            f"a second teacher for workload.task={task}"
            if scores(t, task)
            else f"domains {list(t.domains)} are never produced by this workload (one task: {task})"
        )
        out.append(
            f"experiment.teachers[{i}]: {why}; {framework} is rendered with one teacher per run "
            "(routing rollouts by domain needs a multi-task workload); remove it"
        )
    return out


@cache
def _hub_name(option: str) -> str | None:
    path = CONF_MODEL / f"{option}.yaml"
    if "/" in option or not path.is_file():
        return None
    name = (yaml.safe_load(path.read_text()) or {}).get("name")
    return str(name) if name else None


def weights(t: Any) -> str:
    """The teacher's weights: its checkpoint (HF repo id or path) when given, else its conf/model
    option's HF repo id ('' when the option is unknown: bench/validate.py says so)."""
    return str(t.checkpoint or "") or (_hub_name(str(t.model)) or "")


def weights_dir(cfg: Any, t: Any) -> str:
    """Where the teacher's weights are on the cluster: an absolute checkpoint path as given, else
    <model_root>/<repo id>, the snapshot `bench prepare` writes (the student's rule, runners/data_paths.py)."""
    return str(data_paths.weights_dir(cfg, weights(t)))


def same_architecture(cfg: Any, t: Any) -> bool | None:
    """Whether the teacher's conf/model entry has the student's architecture (None: unknown)."""
    path = CONF_MODEL / f"{t.model}.yaml"
    if not path.is_file():
        return None
    doc = yaml.safe_load(path.read_text()) or {}
    keys = ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn_dense", "ffn_expert", "vocab")
    if any(k not in doc for k in ("layers", "hidden", "vocab")):
        return None  # a variant whose facts sit in a base YAML: not compared here
    return all(doc.get(k, 0) == cfg.model.get(k, 0) for k in keys)
