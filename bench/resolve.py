"""Every number derived from a composed config, worked out once: `Resolved.from_config(cfg)`.

GPU pools per role (trainer, generator, dedicated teachers) and the job's nodes, each teacher of
experiment.teachers with its model (conf/model/<name>.yaml) and engines, the trainer's parallel layout, generation engines (TP x DP
attention, with EP inside the engine), KV-cache bytes per token (GQA and MLA), engine memory and
the concurrency ceiling, and the framework mode -> emulator policy choice. Validation, dispatch,
the emulator's cost model and metrics read these numbers from here and derive none of them again;
the run directory keeps them in config.resolved.yaml beside the config they follow from.

`from_config` never raises on an impossible layout (validate reports those, one line per key): a
pool that does not divide is floored, and a count it cannot form is 0.

Units: bytes, tokens, GPUs, nodes; `_gb` is 1e9 bytes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from omegaconf import OmegaConf

from bench.flops import param_counts

GB = 1e9
# Mixed-precision Adam, bytes per parameter: bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m, v 8.
BYTES_WEIGHTS_GRADS = 4
BYTES_OPTIMIZER = 12


@dataclass(frozen=True)
class Pool:
    """The GPUs of one role: `nodes` nodes of `gpus_per_node` GPUs (a pool smaller than a node
    takes part of one node)."""

    gpus: int
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class TeacherPool:
    """One teacher of experiment.teachers, resolved: what scores which domains on which engines."""

    model: str  # conf/model option name
    weights: str  # checkpoint when given, else the model's HF repo id ("" when the model is unknown)
    placement: str  # dedicated (its own GPUs) | with_generator (served on the generator's GPUs)
    gpus: int  # dedicated GPUs (0 with_generator)
    engine_gpus: int  # GPUs of one teacher engine (its tp)
    engines: int  # dedicated: gpus / tp; with_generator: generator GPUs / tp (floored)
    domains: tuple[str, ...]  # workload.task values it scores; () = every domain
    active_params: float  # parameters a token's forward pass uses (0 when the model is unknown)
    weight_bytes: float  # all weights at 2 bytes (BF16) on one engine

    def scores(self, domain: str) -> bool:
        return not self.domains or domain in self.domains


@dataclass(frozen=True)
class Resolved:
    """The derived layout of one composed config (one framework at one sweep point)."""

    placement: str  # colocated | disaggregated
    trainer: Pool
    generator: Pool  # on colocated runs: the trainer's GPUs, time-shared
    teacher: Pool  # dedicated teacher GPUs of every teacher (0 GPUs without dedicated teachers)
    total_gpus: int  # GPUs the run holds: trainer + generator (once when colocated) + dedicated teachers
    nodes: int  # nodes of the job
    gpus_per_node: int  # of the cluster
    trainer_dp: int  # data-parallel size: trainer GPUs / (tp x pp x cp); 0 when it does not divide
    trainer_bytes_per_gpu: float  # weights + grads + optimizer per trainer GPU, before activations
    trainer_offloaded_bytes_per_gpu: float  # of those, what experiment.trainer.offload_* keep on the host
    engine_gpus: int  # GPUs of one generation engine: tp x dp (EP runs inside the engine)
    engines: int  # generator GPUs / engine GPUs (floored)
    engine_weight_bytes: float  # all weights resident on one engine at the generation dtype
    kv_bytes_per_token: float  # KV cache one token occupies across an engine
    kv_tokens_per_engine: float  # KV cache an engine holds after its weights (tokens, >= 0)
    mean_seq_tokens: float  # mean prompt + response length of the workload (tokens)
    concurrency_ceiling: float  # sequences of mean length that fit one engine's KV cache
    concurrency_per_engine: int  # in flight per engine: min(max_concurrency, ceiling), >= 1
    mode: str  # the framework's native mode ("" when it cannot be resolved: see mode_notes)
    policy: str  # dotted path of the emulator policy that models that mode
    mode_notes: tuple[str, ...] = ()
    teachers: tuple[TeacherPool, ...] = ()  # experiment.teachers in order

    @property
    def colocated(self) -> bool:
        return self.placement == "colocated"

    @classmethod
    def from_config(cls, cfg: Any) -> Resolved:
        e, w, hw, g = cfg.experiment, cfg.workload, cfg.hardware, cfg.experiment.generator
        gpn = int(cfg.cluster.gpus_per_node)
        placement = placement_of(cfg)
        trainer = _pool(int(e.trainer_gpus), gpn)
        teachers = tuple(_teacher(t, int(e.generator_gpus)) for t in e.get("teachers") or ())
        teacher = _pool(sum(t.gpus for t in teachers), gpn)
        if placement == "colocated":
            generator, total = trainer, trainer.gpus + teacher.gpus
            pools_nodes = trainer.nodes + teacher.nodes
        else:
            generator = _pool(int(e.generator_gpus), gpn)
            total = trainer.gpus + generator.gpus + teacher.gpus
            pools_nodes = trainer.nodes + generator.nodes + teacher.nodes
        # every pool on one node when they fit (verl's 2 + 6 one-step-off example; the opd-benchmark's
        # 1 + 1 teacher), else node-disjoint
        nodes = 1 if total <= gpn else pools_nodes
        mp = int(e.trainer.tp) * int(e.trainer.pp) * int(e.trainer.cp)
        engine_gpus = int(g.tp) * int(g.dp)
        weights = param_counts(cfg.model)["total"] * float(g.dtype_bytes)
        kv_bpt = kv_bytes_per_token(cfg.model, g)
        hbm = engine_gpus * float(hw.hbm_gb) * GB * float(g.gpu_memory_utilization)
        kv_tokens = max(0.0, hbm - weights) / kv_bpt if kv_bpt else 0.0
        mean_seq = float(w.prompt_len_mean + w.response_len_mean_frac * w.max_response_len)
        ceiling = kv_tokens / mean_seq if mean_seq > 0 else 0.0
        mode, policy, notes = _mode_choice(cfg)
        return cls(
            placement=placement,
            trainer=trainer,
            generator=generator,
            teacher=teacher,
            total_gpus=total,
            nodes=nodes,
            gpus_per_node=gpn,
            trainer_dp=trainer.gpus // mp if mp > 0 and trainer.gpus % mp == 0 else 0,
            trainer_bytes_per_gpu=trainer_bytes_per_gpu(cfg),
            trainer_offloaded_bytes_per_gpu=trainer_offloaded_bytes_per_gpu(cfg),
            engine_gpus=engine_gpus,
            engines=int(e.generator_gpus) // engine_gpus if engine_gpus > 0 else 0,
            engine_weight_bytes=weights,
            kv_bytes_per_token=kv_bpt,
            kv_tokens_per_engine=kv_tokens,
            mean_seq_tokens=mean_seq,
            concurrency_ceiling=ceiling,
            concurrency_per_engine=max(1, min(int(g.max_concurrency), int(ceiling))),
            mode=mode,
            policy=policy,
            mode_notes=tuple(notes),
            teachers=teachers,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain values for config.resolved.yaml and the manifest (`resolved:`)."""
        d = asdict(self)
        d["mode_notes"] = list(self.mode_notes)
        d["teachers"] = [{**t, "domains": list(t["domains"])} for t in d["teachers"]]
        return d


def job_nodes(cfg: Any, launch: Any = None, resolved: Resolved | None = None) -> int:
    """Nodes of one job: the runner's Launch.nodes when it rendered one (its own placement rules),
    else the resolved layout's (`resolved`, worked out here when not given)."""
    if launch is not None and getattr(launch, "nodes", 0):
        return int(launch.nodes)
    return max(1, (resolved or Resolved.from_config(cfg)).nodes)


def placement_of(cfg: Any) -> str:
    """'colocated' or 'disaggregated' from experiment.placement (an enum or its string)."""
    p = cfg.experiment.placement
    return str(getattr(p, "value", p)).rsplit(".", 1)[-1]


def _teacher(t: Any, generator_gpus: int) -> TeacherPool:
    """experiment.teachers[i] resolved (an unknown model resolves to 0 parameters: validate names it)."""
    model = load_model(str(t.model))
    placement = str(getattr(t.placement, "value", t.placement)).rsplit(".", 1)[-1]
    tp = int(t.tp)
    gpus = int(t.gpus) if placement == "dedicated" else 0
    served = gpus if placement == "dedicated" else generator_gpus
    p = param_counts(model) if model is not None else {"total": 0.0, "active": 0.0}
    return TeacherPool(
        model=str(t.model),
        weights=str(t.checkpoint) or (str(model.name) if model is not None else ""),
        placement=placement,
        gpus=gpus,
        engine_gpus=tp,
        engines=served // tp if tp > 0 else 0,
        domains=tuple(str(d) for d in t.domains),
        active_params=p["active"],
        weight_bytes=p["total"] * 2.0,
    )


@lru_cache(maxsize=64)
def load_model(name: str) -> Any:
    """conf/model/<name>.yaml under the ModelConf schema (its `defaults:` bases merged first), read
    only; None when there is no such option (bench.config.group_options("model") lists them)."""
    from bench.config import CONF_DIR, ModelConf

    path = CONF_DIR / "model" / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        return None
    node = OmegaConf.load(path)
    bases = [b for b in node.pop("defaults", []) if b != "_self_"]
    merged = OmegaConf.structured(ModelConf)
    for base in bases:
        parent = load_model(str(base))
        if parent is None:
            return None
        merged = OmegaConf.merge(merged, parent)
    merged = OmegaConf.merge(merged, node)
    OmegaConf.set_readonly(merged, True)
    return merged


def _pool(gpus: int, gpus_per_node: int) -> Pool:
    if gpus_per_node < 1:  # a cluster without GPU nodes: validate names cluster.gpus_per_node
        return Pool(gpus, 0, 0)
    if gpus <= gpus_per_node:
        return Pool(gpus, 1 if gpus > 0 else 0, max(gpus, 0))
    return Pool(gpus, math.ceil(gpus / gpus_per_node), gpus_per_node)


def kv_bytes_per_token(model: Any, gen: Any) -> float:
    """KV-cache bytes one token occupies across an engine (all layers).

    GQA: 2 (K, V) x head_dim x KV heads, each KV head replicated when TP exceeds them (a TP rank
    holds at least one). MLA: the compressed latent + rope key, which every TP rank of the token's
    attention group holds whole (it is not split by head), so x tp."""
    if str(getattr(model.attention, "value", model.attention)).endswith("mla"):
        return float(
            model.layers * (model.kv_lora_rank + model.qk_rope_head_dim) * gen.kv_dtype_bytes * gen.tp
        )
    return float(model.layers * 2 * model.head_dim * max(model.kv_heads, gen.tp) * gen.kv_dtype_bytes)


def trainer_bytes_per_gpu(cfg: Any) -> float:
    """Weights + gradients + optimizer state per trainer GPU (bytes), activations excluded: what
    stays on the GPU (experiment.trainer.offload_* keep the rest in host memory)."""
    t = cfg.experiment.trainer
    wg = 0.0 if t.offload_params else BYTES_WEIGHTS_GRADS
    return trainer_state_bytes(cfg, wg, 0.0 if t.offload_optimizer else BYTES_OPTIMIZER)


def trainer_offloaded_bytes_per_gpu(cfg: Any) -> float:
    """Of a trainer GPU's state, what experiment.trainer.offload_* keep in host memory (bytes):
    loaded for the update and put back."""
    t = cfg.experiment.trainer
    wg = BYTES_WEIGHTS_GRADS if t.offload_params else 0.0
    return trainer_state_bytes(cfg, wg, BYTES_OPTIMIZER if t.offload_optimizer else 0.0)


def trainer_state_bytes(cfg: Any, wg: float, opt: float) -> float:
    """Per trainer GPU, `wg` bytes a parameter of weights + grads and `opt` of optimizer state, sharded
    as the trainer shards them (bytes)."""
    m, t, n = cfg.model, cfg.experiment.trainer, max(1, int(cfg.experiment.trainer_gpus))
    p = param_counts(m)["total"]
    if t.sharding == "fsdp":
        return p * (wg + opt) / n
    # Megatron: dense weights split over TP x PP, experts over EP x PP; the distributed optimizer
    # shards optimizer state over the data-parallel ranks of each.
    experts = expert_params(m)
    mp_dense, mp_expert = max(1, t.tp * t.pp), max(1, t.ep * t.pp)
    dp_dense, dp_expert = max(1, n // (mp_dense * max(1, t.cp))), max(1, n // mp_expert)
    return (p - experts) * (wg / mp_dense + opt / (mp_dense * dp_dense)) + experts * (
        wg / mp_expert + opt / (mp_expert * dp_expert)
    )


def expert_params(m: Any) -> float:
    """Parameters of the routed and shared experts of an MoE model (0 for a dense model)."""
    moe_layers = m.layers - m.dense_layers if m.routed_experts else 0
    return float(moe_layers * (m.routed_experts + m.shared_experts) * 3 * m.hidden * m.ffn_expert)


# placement x staleness kind -> the emulator policy that models it, for mode "auto" when the
# framework's runner cannot resolve the mode itself
_SEMANTIC = {
    ("colocated", "sync"): "colocated_sync",
    ("colocated", "partial"): "partial_rollout",
    ("disaggregated", "sync"): "disaggregated_sync",
    ("disaggregated", "one_step"): "one_step_off",
    ("disaggregated", "async"): "fully_async",
    ("disaggregated", "partial"): "partial_rollout",
}


def _mode_choice(cfg: Any) -> tuple[str, str, list[str]]:
    """(native mode, emulator policy path, notes); ("", "", [why]) when it cannot be resolved."""
    if cfg.emulator.policy:
        return "", str(cfg.emulator.policy), []
    try:
        return resolve_mode(cfg)
    except Exception as e:  # noqa: BLE001 - a config without modes (an ingested run's) has no policy
        return "", "", [f"{type(e).__name__}: {e}"]


def resolve_mode(cfg: Any) -> tuple[str, str, list[str]]:
    """(native mode, policy dotted path, notes) for cfg's framework and experiment.

    `framework.mode` wins when set; "auto" asks the runner (runners.base.Runner.resolve_mode), and
    when the runner cannot answer, picks by placement, staleness budget and partial rollout, falling
    back to the framework's first mode with a note when it has no mode of that kind."""
    fw, notes = cfg.framework, []
    modes = dict(fw.modes)
    if not modes:
        raise ValueError(f"conf/framework/{fw.name}.yaml: `modes:` is empty; expected mode -> policy path")
    mode = str(fw.mode)
    if mode == "auto":
        try:
            from runners.base import load_runner

            mode = load_runner(fw).resolve_mode(cfg)
        except Exception as e:  # runner absent or not implemented: decide here
            mode = _auto_mode(cfg, modes, notes)
            notes.append(f"mode auto -> {mode} by the emulator's rule ({type(e).__name__} from the runner)")
    if mode not in modes:
        raise ValueError(f"framework.mode={mode!r}: conf/framework/{fw.name}.yaml modes has {sorted(modes)}")
    return mode, modes[mode], notes


def _auto_mode(cfg: Any, modes: dict[str, str], notes: list[str]) -> str:
    ex, w = cfg.experiment, cfg.workload
    kind = "partial" if ex.partial_rollout else ("sync" if w.staleness_budget == 0 else "one_step")
    if kind == "one_step" and w.staleness_budget > 1:
        kind = "async"
    want = _SEMANTIC.get((placement_of(cfg), kind), "fully_async")
    for mode, path in modes.items():
        if path.rsplit(".", 1)[-1] == want:
            return mode
    mode = next(iter(modes))
    notes.append(f"{cfg.framework.name} has no mode modelled by {want}; using {mode!r} ({modes[mode]})")
    return mode
