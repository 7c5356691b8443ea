"""What an ingested run was: the facts its logs hold (runners/<framework>_config.py), the model
matched against conf/model, the hardware, and what the user gave -> manifest `inferred` + config.

Rules (issue 13): a value the logs hold wins; a user value that contradicts it is refused naming
both; a value the logs lack is taken from the user and marked "given"; anything else is unknown
(null with the reason), never a default. The model is matched on the logged architecture (layers,
hidden, heads, KV heads, head dim, FFN, vocab; or the total parameter count with the model class),
else named by its path; with a full architecture and no match, FLOPs come from the logged
architecture itself. The hardware: bench/infer_hardware.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import yaml
from omegaconf import OmegaConf

from bench import flops
from bench.config import CONF_DIR, Algorithm, ModelConf
from bench.infer_hardware import hardware_unknown
from bench.resolve import placement_of
from runners.run_config import Fact, Facts

NOT_FLOPS = ("name", "max_context", "rope_theta")  # fields two variants of one architecture differ in
PARAMS_TOLERANCE = 0.005  # logged vs conf/model parameter count (norms and biases are ~0.01%)
# fact -> the config key a user sets for it (experiment.trainer_gpus=8, workload.group_size=16)
CONFIG_KEYS = {
    "group_size": "workload.group_size",
    "prompts_per_step": "workload.prompts_per_step",
    "max_prompt_len": "workload.max_prompt_len",
    "max_response_len": "workload.max_response_len",
    "total_steps": "workload.steps",
    "staleness_bound": "workload.staleness_budget",
    "gpus.trainer": "experiment.trainer_gpus",
    "gpus.rollout": "experiment.generator_gpus",
    "gpus.hybrid": "experiment.trainer_gpus",
    "algorithm": "workload.algorithm",
    "kl_coef": "workload.kl_coef",  # on-policy distillation: the teacher's reverse-KL weight
}
ALGORITHMS = tuple(a.value for a in Algorithm)  # what a config may hold
ARCH_FIELDS = {"layers": "layers", "hidden": "hidden", "q_heads": "q_heads", "kv_heads": "kv_heads",
               "head_dim": "head_dim", "vocab": "vocab"}  # fmt: skip


class Conflict(ValueError):
    """User values that contradict the logs; str() is one line per contradiction."""


def _model_yaml(stem: str) -> dict[str, Any]:
    """conf/model/<stem>.yaml with the sibling files its `defaults:` list names merged under it."""
    raw = yaml.safe_load((CONF_DIR / "model" / f"{stem}.yaml").read_text()) or {}
    merged: dict[str, Any] = {}
    for d in raw.pop("defaults", []) or []:
        if isinstance(d, str) and d != "_self_" and not d.startswith("/"):
            merged.update(_model_yaml(d))
    return {**merged, **raw}


def conf_models() -> dict[str, dict[str, Any]]:
    """conf/model/<file>.yaml -> the typed model node (schema defaults filled) as a dict."""
    out = {}
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        node = OmegaConf.merge(OmegaConf.structured(ModelConf), _model_yaml(path.stem))
        out[path.stem] = OmegaConf.to_container(node, enum_to_str=True)
    return out


def _total_params(model: dict[str, Any]) -> float:
    from types import SimpleNamespace

    return flops.param_counts(SimpleNamespace(**model))["total"]


# Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (128) x TP, so a
# Megatron run logs 152064 for a 151936-token model at TP 2; TP up to 64 is considered.
VOCAB_DIVISOR = 128
VOCAB_TP = (1, 2, 4, 8, 16, 32, 64)


def padded_vocab_tp(logged: int, vocab: int) -> int | None:
    """The smallest TP whose Megatron padding turns `vocab` into `logged` (1 when equal), else None."""
    for tp in VOCAB_TP:
        step = VOCAB_DIVISOR * tp
        if logged == -(-vocab // step) * step:
            return tp if logged != vocab else 1
    return 1 if logged == vocab else None


def _arch_agrees(arch: dict[str, Any], model: dict[str, Any]) -> list[str]:
    """The logged fields that differ from a conf/model entry (`hidden 1024 vs 4096`); a vocabulary
    padded for tensor parallelism (padded_vocab_tp) agrees."""
    diffs = [
        f"{k} {arch[k]} vs {model[f]}"
        for k, f in ARCH_FIELDS.items()
        if k in arch
        and arch[k] != model[f]
        and not (k == "vocab" and padded_vocab_tp(int(arch[k]), int(model[f])))
    ]
    if arch.get("experts"):  # MoE: the expert FFN and count decide (a dense FFN size may be unused)
        if arch["experts"] != model["routed_experts"]:
            diffs.append(f"experts {arch['experts']} vs {model['routed_experts']}")
        if arch.get("ffn_expert") and arch["ffn_expert"] != model["ffn_expert"]:
            diffs.append(f"ffn_expert {arch['ffn_expert']} vs {model['ffn_expert']}")
    elif "ffn" in arch and arch["ffn"] != model["ffn_dense"]:
        diffs.append(f"ffn {arch['ffn']} vs {model['ffn_dense']}")
    if "params" in arch:
        total = _total_params(model)
        if abs(arch["params"] - total) > PARAMS_TOLERANCE * total:
            diffs.append(f"params {arch['params'] / 1e6:.2f}M vs {total / 1e6:.2f}M")
    return diffs


def _class_family(arch: dict[str, Any], model: dict[str, Any]) -> bool:
    """Qwen3ForCausalLM names model_type qwen3: a logged class must name the conf model's type."""
    cls = str(arch.get("class", ""))
    if not cls:
        return True
    stem = cls.split("For")[0].lower()
    return stem == str(model["model_type"]).replace("_", "").lower()


def match_model(facts: Facts) -> tuple[str | None, dict[str, Any] | None, str, str | None]:
    """(conf/model name or None, model dict for FLOPs or None, evidence, source)."""
    arch_fact, path_fact = facts.get("architecture"), facts.get("model_path")
    models = conf_models()
    if arch_fact:
        arch = arch_fact.value
        enough = ("layers" in arch and "hidden" in arch) or ("params" in arch and "class" in arch)
        hits = [
            n for n, m in models.items() if enough and _class_family(arch, m) and not _arch_agrees(arch, m)
        ]
        named = [n for n in hits if path_fact and _path_names(str(path_fact.value), models[n])]
        if len(hits) > 1 and named:  # the path picks one of several entries: the longest name it holds
            hits = sorted(named, key=lambda n: -len(models[n]["name"]))[:1]
        same = {
            json.dumps({k: v for k, v in models[n].items() if k not in NOT_FLOPS}, sort_keys=True)
            for n in hits
        }
        if hits and len(same) == 1:  # one entry, or entries whose FLOPs are the same (variants)
            shown = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in arch.items())
            also = f" (same architecture as {', '.join(hits[1:])})" if len(hits) > 1 else ""
            vocab = int(models[hits[0]]["vocab"])
            padded = (
                f"; vocab {arch['vocab']} is {vocab} padded to a multiple of {VOCAB_DIVISOR} x TP "
                f"{padded_vocab_tp(int(arch['vocab']), vocab)} (Megatron)"
                if arch.get("vocab") and arch["vocab"] != vocab
                else ""
            )
            return (
                hits[0],
                models[hits[0]],
                f"logged architecture {shown} matches conf/model/{hits[0]}.yaml{also}{padded}",
                arch_fact.source,
            )
        full = _from_architecture(arch)
        if full is not None:
            return (
                None,
                full,
                "no conf/model entry matches the logged architecture: FLOPs from the logged architecture itself",
                arch_fact.source,
            )
    if path_fact:
        for name, m in models.items():
            if _path_names(str(path_fact.value), m):
                return name, m, f"model path {path_fact.value!r} names {m['name']}", path_fact.source
    why = (
        "the logs print no architecture"
        if not arch_fact
        else "the logged architecture matches no conf/model entry"
    )
    return None, None, f"model unknown: {why}; pass model=<conf/model name>", None


def _path_names(path: str, model: dict[str, Any]) -> bool:
    """A checkpoint path or hub id naming a conf/model entry (`Qwen/Qwen3-8B`, `.../Qwen3-8B-Base`)."""
    short = model["name"].split("/")[-1]
    return re.search(rf"(^|/){re.escape(short)}($|[-_/])", path, re.I) is not None


def _from_architecture(arch: dict[str, Any]) -> dict[str, Any] | None:
    """A ModelConf-shaped dict from a complete logged dense/MoE GQA architecture, else None."""
    need = ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab")
    if not all(arch.get(k) for k in need):
        return None
    moe = bool(arch.get("experts"))
    return {
        **{f.name: f.default for f in dataclasses.fields(ModelConf) if not isinstance(f.default, str) or f.default != "???"},
        "name": f"logged architecture ({arch.get('class', 'unnamed')})",
        "model_type": "logged",
        "layers": arch["layers"], "hidden": arch["hidden"], "q_heads": arch["q_heads"],
        "kv_heads": arch["kv_heads"], "head_dim": arch["head_dim"], "vocab": arch["vocab"],
        "ffn_dense": 0 if moe else arch["ffn"], "ffn_expert": arch.get("ffn_expert", 0) if moe else 0,
        "routed_experts": arch.get("experts", 0), "top_k": arch.get("top_k", 0),
        "dense_layers": 0 if moe else arch["layers"], "tied_embeddings": bool(arch.get("tied_embeddings")),
        "attention": "gqa", "max_context": 0,
    }  # fmt: skip


def _given(overrides: list[str]) -> tuple[set[str], set[str]]:
    """(config groups chosen, dotted keys set) by the user's overrides."""
    keys = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
    return {k for k in keys if "." not in k}, {k for k in keys if "." in k}


def _is_given(key: str, groups: set[str], keys: set[str]) -> bool:
    return key in keys or key.split(".")[0] in groups or "experiment" in groups


def _conf_name(node: Any, group: str) -> str | None:
    """conf/<group> file whose `name` is node.name."""
    for p in sorted((CONF_DIR / group).glob("*.yaml")):
        if (yaml.safe_load(p.read_text()) or {}).get("name") == node.get("name"):
            return p.stem
    return None


def resolve(
    facts: Facts,
    overrides: list[str],
    cfg: Any,
    hardware: tuple[str | None, str | None, str],
    teacher_unknown: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inferred block, config for metrics) from the logs' facts and the user's overrides; raises
    Conflict when a given value contradicts a logged one. teacher_unknown: why an on-policy
    distillation teacher's placement is not known (bench.infer_teacher.complete)."""
    groups, keys = _given(overrides)
    conflicts: list[str] = []
    facts = dict(facts)
    for name, key in CONFIG_KEYS.items():
        if not _is_given(key, groups, keys):
            continue
        given = OmegaConf.select(cfg, key)
        given = getattr(given, "value", given)  # an Enum field (workload.algorithm) as its text
        logged = facts.get(name)
        if logged is not None and given is not None and given != logged.value:
            conflicts.append(f"{key}={given} (given) contradicts the logs: {logged.value} ({logged.source})")
        elif logged is None and given is not None and name != "gpus.hybrid":
            if name in ("gpus.trainer", "gpus.rollout") and "gpus.hybrid" in facts:
                continue
            facts[name] = Fact(given, "given")
    if _is_given("experiment.placement", groups, keys) and any(k.startswith("gpus.") for k in facts):
        placement = placement_of(cfg)
        logged_colocated = "gpus.hybrid" in facts
        if (placement == "colocated") != logged_colocated:
            src = next(f.source for k, f in facts.items() if k.startswith("gpus."))
            shown = "colocated (hybrid)" if logged_colocated else "separate trainer and rollout GPUs"
            conflicts.append(
                f"experiment.placement={placement} (given) contradicts the logs: {shown} ({src})"
            )
    model_name, model, evidence, model_src = match_model(facts)
    if "model" in groups or "experiment" in groups:
        given = _conf_name(cfg.model, "model")
        if model_name and given != model_name:
            conflicts.append(
                f"model={given} (given) contradicts the logs: {model_name} ({evidence}, {model_src})"
            )
        elif model_name is None:
            arch = facts.get("architecture")
            diffs = _arch_agrees(arch.value, conf_models()[given]) if arch and given else []
            if diffs:
                conflicts.append(
                    f"model={given} (given) contradicts the logged architecture: {'; '.join(diffs)} ({arch.source})"
                )
            model_name, model, evidence, model_src = (
                given,
                conf_models().get(given),
                "given by the user",
                "given",
            )
    hw_name, hw_src, hw_note = hardware
    if "hardware" in groups or "experiment" in groups:
        given = _conf_name(cfg.hardware, "hardware")
        if hw_name and given != hw_name:
            conflicts.append(f"hardware={given} (given) contradicts the logs: {hw_name} ({hw_src})")
        hw_name, hw_src = given, hw_src or "given"
    if conflicts:
        raise Conflict("\n".join(conflicts))
    inferred = _inferred(facts, model_name, model, evidence, model_src, hw_name, hw_src, hw_note)
    inferred["algorithm"] = _entry(facts.get("algorithm"), "algorithm")
    if "kl_coef" in facts or getattr(facts.get("algorithm"), "value", None) == "opd":
        inferred["kl_coef"] = _entry(facts.get("kl_coef"), "distillation weight")
    inferred["teacher"] = _teacher(facts, teacher_unknown)
    return inferred, _config(facts, cfg, model, hw_name, groups)


def _teacher(facts: Facts, unknown: str | None) -> dict[str, Any]:
    """The on-policy-distillation teacher: its model (matched on the path, when the path names a
    conf/model entry), path, placement, dedicated GPUs (0 on the generator's) and engine size."""
    algo = facts.get("algorithm")
    if algo is None or algo.value != "opd":
        why = (
            "algorithm unknown" if algo is None else f"algorithm {algo.value} ({algo.source}) has no teacher"
        )
        return {"value": None, "source": None, "reason": why}
    path = facts.get("teacher.model_path")
    match = next((n for n, m in conf_models().items() if path and _path_names(str(path.value), m)), None)
    placement = facts.get("teacher.placement")
    gpus = facts.get("gpus.teacher")
    if gpus is None and placement is not None and placement.value != "dedicated":
        gpus = Fact(0, f"placement {placement.value}: no GPUs of its own ({placement.source})")
    return {
        "model": {"value": match, "source": path.source if match else None}
        if match or path is None
        else {
            "value": None,
            "source": None,
            "reason": f"teacher path {path.value!r} names no conf/model entry",
        },
        "model_path": _entry(path, "teacher model path"),
        "placement": placement.as_json()
        if placement
        else {"value": None, "source": None, "reason": unknown or "teacher placement not found in the logs"},
        "gpus": _entry(gpus, "teacher GPUs"),
        "gpu_ids": _entry(facts.get("gpu_ids.teacher"), "teacher GPU ids"),
        "tp": _entry(facts.get("teacher.tp"), "teacher engine size"),
    }


# Folders that hold models rather than name them (`/root/models/<name>`): a local path's parent
# is the model's organisation (`/workspace/verl/Qwen/Qwen2-7B-Instruct`) unless it is one of these.
MODEL_DIRS = frozenset(
    "models model hf_models hf huggingface hub pretrained weights checkpoints checkpoint ckpt ckpts "
    "cache data mnt root home workspace opt tmp snapshots".split()
)
HF_CACHE = re.compile(r"models--([^/]+)--([^/]+)")


def model_name_from_path(path: str) -> str:
    """The model's name as the run logged it: a hub id (`Qwen/Qwen2-7B-Instruct`) as is; a hub
    cache folder (`models--Qwen--Qwen3-8B/snapshots/<hash>`) as its id; a local path as its last
    two folders (`.../Qwen/Qwen2-7B-Instruct` -> `Qwen/Qwen2-7B-Instruct`), or its last folder
    when the one above only holds models (`/root/models/deepseek-llm-7b-chat` ->
    `deepseek-llm-7b-chat`); a relative path that is not a hub id (`ckpt/global_step_58`) as is."""
    path = path.rstrip("/")
    cache = HF_CACHE.search(path)
    if cache:
        return f"{cache.group(1)}/{cache.group(2)}"
    parts = [p for p in path.split("/") if p and p not in (".", "~")]
    local = path.startswith(("/", "~", "."))
    if not local or len(parts) < 2:
        return path if not local else (parts[-1] if parts else path)
    parent, name = parts[-2], parts[-1]
    return name if parent.lower() in MODEL_DIRS or parent.startswith(".") else f"{parent}/{name}"


def _model_identity(
    facts: Facts, conf_name: str | None, model: dict[str, Any] | None, conf_src: str | None
) -> dict[str, Any]:
    """inferred.model: the model's name from the run itself (its model path), with the line; the
    conf/model entry's name only when the user gave that entry (model=...)."""
    path, hub = facts.get("model_path"), facts.get("model_hub_id")
    if path is not None and hub is not None:  # a local path the log downloaded a hub model into
        return {"value": hub.value, "path": path.value, "source": f"{hub.source}, loaded from {path.source}"}
    if path is not None and isinstance(path.value, str) and path.value:
        return {"value": model_name_from_path(path.value), "path": path.value, "source": path.source}
    if conf_src == "given" and model:
        return {"value": model["name"], "source": "given", "conf": conf_name}
    return {
        "value": None,
        "source": None,
        "reason": "the logs print no model path; pass model=<conf/model name>",
    }


def _entry(fact: Fact | None, what: str) -> dict[str, Any]:
    if fact is None:
        return {"value": None, "source": None, "reason": f"{what} not found in the logs; pass it to set it"}
    return fact.as_json()


def _inferred(facts, model_name, model, evidence, model_src, hw_name, hw_src, hw_note) -> dict[str, Any]:
    gpus = {k.split(".", 1)[1]: f.as_json() for k, f in facts.items() if k.startswith("gpus.")}
    gpu_ids = {k.split(".", 1)[1]: f.as_json() for k, f in facts.items() if k.startswith("gpu_ids.")}
    out: dict[str, Any] = {
        "model": _model_identity(facts, model_name, model, model_src),
        "model_arch": {
            "value": model_name,
            "name": model["name"] if model else None,
            "rule": evidence,
            "source": model_src,
            **({} if model else {"reason": evidence}),
        },
        "model_evidence": evidence,
        "model_path": _entry(facts.get("model_path"), "model path"),
        "architecture": _entry(facts.get("architecture"), "architecture"),
        "hardware": {"value": hw_name, "source": hw_src}
        if hw_name
        else {
            "value": None,
            "source": None,
            "reason": hardware_unknown() + (f"; {hw_note}" if hw_note else ""),
        },
        "gpus": gpus or {"value": None, "source": None, "reason": "GPU roles not found in the logs"},
        # which device indices each role ran on (per-role telemetry), when the logs name them
        "gpu_ids": gpu_ids
        or {"value": None, "source": None, "reason": "the logs do not name each role's devices"},
    }
    for name, what in (
        ("nodes", "node count"),
        ("group_size", "group size"),
        ("prompts_per_step", "prompts per step"),
        ("max_prompt_len", "max prompt length"),
        ("max_response_len", "max response length"),
        ("total_steps", "configured step count"),
        ("mode", "mode"),
        ("staleness_bound", "staleness bound"),
    ):
        out[name] = _entry(facts.get(name), what)
    for name, what in (
        ("rollout.tp", "rollout tensor parallelism"),
        ("trainer.tp", "trainer tensor parallelism"),
        ("trainer.pp", "trainer pipeline parallelism"),
        ("trainer.ep", "trainer expert parallelism"),
        ("trainer.dp", "trainer data parallelism"),
    ):
        out[name.replace(".", "_")] = _entry(facts.get(name), what)
    return out


def _config(
    facts: Facts, cfg: Any, model: dict | None, hw_name: str | None, groups: set[str]
) -> dict[str, Any]:
    """The config metrics read: the user's composed nodes where given, inferred values over them,
    null where unknown (never the compose defaults of an unnamed experiment)."""
    full = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    given_exp = "experiment" in groups
    exp = dict(full["experiment"]) if given_exp else {"name": "ingested"}
    work = dict(full["workload"]) if given_exp or "workload" in groups else {}
    value = {k: f.value for k, f in facts.items()}
    if "gpus.hybrid" in value:
        exp.update(
            placement="colocated", trainer_gpus=value["gpus.hybrid"], generator_gpus=value["gpus.hybrid"]
        )
    elif "gpus.trainer" in value or "gpus.rollout" in value:
        exp.update(
            placement="disaggregated",
            trainer_gpus=value.get("gpus.trainer"),
            generator_gpus=value.get("gpus.rollout"),
        )
    exp.setdefault("placement", None)
    exp.setdefault("trainer_gpus", None)
    exp.setdefault("generator_gpus", None)
    # the parallelism that ran: calibrate composes it instead of the schema's TP 1
    for name, key in (("rollout.tp", "generator"), ("trainer.tp", "trainer"), ("trainer.pp", "trainer"),
                      ("trainer.ep", "trainer")):  # fmt: skip
        if name in value:
            exp[key] = {**(exp.get(key) or {}), name.split(".")[1]: value[name]}
    teachers = _teacher_confs(facts)
    if teachers:
        exp["teachers"] = teachers
    for name, key in CONFIG_KEYS.items():
        if key.startswith("workload.") and name in value:
            if name == "algorithm" and value[name] not in ALGORITHMS:
                continue  # an estimator the workload schema has no word for (gae, rloo, ...)
            work[key.split(".", 1)[1]] = value[name]
    named = _model_identity(facts, None, None, None).get("value")
    if model is not None and named:  # FLOPs from the matched entry, the name the run's own
        model = {**model, "name": named}
    return {
        "framework": full["framework"],
        "model": model,
        "hardware": full["hardware"] if hw_name else None,
        "experiment": exp,
        "workload": work,
    }


def _teacher_confs(facts: Facts) -> list[dict[str, Any]]:
    """experiment.teachers of an on-policy-distillation run, from its logged teacher: the
    conf/model entry its path names, placement, dedicated GPUs and engine size; [] when the run
    has no teacher or the logs do not say which model it was."""
    algo, path = facts.get("algorithm"), facts.get("teacher.model_path")
    if algo is None or algo.value != "opd" or path is None:
        return []
    stem = next((n for n, m in conf_models().items() if _path_names(str(path.value), m)), None)
    placement = facts.get("teacher.placement")
    if stem is None or placement is None:
        return []
    gpus = facts.get("gpus.teacher")
    tp = facts.get("teacher.tp")
    return [
        {
            "model": stem,
            "placement": placement.value,
            "gpus": int(gpus.value) if gpus and placement.value == "dedicated" else 0,
            "tp": int(tp.value) if tp else 1,
            "domains": [],
            "checkpoint": str(path.value),
        }
    ]


def inferred_from_config(cfg: Any, r: Any = None) -> dict[str, Any]:
    """The `inferred` block of a run the suite launched (or emulated): the same shape as an ingested
    run's, every value from the composed config it ran (source "config: <key>"); `r` is cfg's
    bench.resolve.Resolved (worked out here when not given)."""
    from bench.resolve import Resolved

    r = r or Resolved.from_config(cfg)

    def entry(key: str) -> dict[str, Any]:
        v = OmegaConf.select(cfg, key)
        return {"value": v, "source": f"config: {key}"} if v is not None else {"value": None, "source": None}

    model, hardware = _conf_name(cfg.model, "model"), _conf_name(cfg.hardware, "hardware")
    algorithm = str(getattr(cfg.workload.algorithm, "value", cfg.workload.algorithm))
    if r.colocated:
        gpus = {"hybrid": entry("experiment.trainer_gpus")}
    else:
        gpus = {"trainer": entry("experiment.trainer_gpus"), "rollout": entry("experiment.generator_gpus")}
    if r.teacher.gpus:  # dedicated teacher GPUs: the job holds them too (metrics' GPU hours)
        gpus["teacher"] = {
            "value": r.teacher.gpus,
            "source": "config: experiment.teachers[].gpus (dedicated)",
        }
    return {
        "model": {"value": str(cfg.model.name), "source": "config: model.name"},
        "model_arch": {
            "value": model,
            "name": str(cfg.model.name),
            "rule": f"the suite composed conf/model/{model}.yaml",
            "source": "config: model",
        },
        "model_evidence": f"the suite composed conf/model/{model}.yaml",
        "hardware": {"value": hardware, "source": "config: hardware"},
        "gpus": gpus,
        "nodes": {"value": r.nodes, "source": "config: the job's nodes (bench.resolve)"},
        "group_size": entry("workload.group_size"),
        "prompts_per_step": entry("workload.prompts_per_step"),
        "max_prompt_len": entry("workload.max_prompt_len"),
        "max_response_len": entry("workload.max_response_len"),
        "total_steps": entry("workload.steps"),
        "mode": {"value": r.mode or None, "source": "config: framework.mode as the runner resolves it"},
        "staleness_bound": entry("workload.staleness_budget"),
        "algorithm": {"value": algorithm, "source": "config: workload.algorithm"},
        "teacher": _configured_teacher(cfg, r, algorithm),
    }


def _configured_teacher(cfg: Any, r: Any, algorithm: str) -> dict[str, Any]:
    """The inferred `teacher` of a composed config: the teacher that scores workload.task."""
    t = next((t for t in r.teachers if t.scores(str(cfg.workload.task))), None)
    if t is None:
        return {"value": None, "source": None, "reason": f"algorithm {algorithm} (config) has no teacher"}
    src = "config: experiment.teachers"
    return {
        "model": {"value": t.model, "source": src},
        "model_path": {"value": t.weights or None, "source": src},
        "placement": {"value": t.placement, "source": src},
        "gpus": {"value": t.gpus, "source": src},
        "gpu_ids": {"value": None, "source": None, "reason": "placed by the framework at run time"},
        "tp": {"value": t.engine_gpus, "source": src},
    }
