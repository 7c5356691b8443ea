"""Hardware cost model of the emulator: generator engines (KV capacity, decode roofline, prefill)
and the trainer (step compute, log-prob passes, weight sync). Pure functions of the composed config.

Units: seconds, tokens, bytes, FLOPs, FLOP/s. Two sources of physics (docs/emulator.md, "Hardware
profile"): the datasheet (conf/hardware) times the efficiencies of `cfg.emulator`, or, when the config
names a measured hardware profile (`hardware_profile=FILE`, `hardware.profile`), bench.model.hwprofile's
fitted forms, which this module calls and never restates. Nothing here is fitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from bench import flops
from bench.model import hwprofile, hwprofile_conf
from bench.resolve import Resolved, trainer_state_bytes


def plain_model(model: Any) -> SimpleNamespace:
    """A ModelConf node as a plain namespace: bench.flops reads dozens of attributes per call, and
    OmegaConf attribute access is ~100x slower than a namespace's."""
    if isinstance(model, SimpleNamespace):
        return model
    return SimpleNamespace(**OmegaConf.to_container(model, resolve=True, enum_to_str=True))


@dataclass(frozen=True)
class EngineModel:
    """One generation engine: memory and speed figures derived from model x hardware x emulator."""

    gpus: int
    kv_capacity_tokens: float  # tokens of KV cache the engine holds
    kv_bytes_per_token: float
    weight_bytes: float  # all weights resident on the engine (bytes)
    dense_bytes: float  # weights read every decode step whatever the batch (attention, dense MLP, LM head)
    expert_bytes: float  # bytes of one routed expert in one MoE layer
    moe_layers: int
    routed_experts: int
    top_k: int
    active_params: float
    bw: float  # achieved HBM bandwidth of the engine (bytes/s)
    compute: float  # achieved compute of the engine in prefill/decode (FLOP/s)
    # shortest decode iteration (s): the engine's launches, scheduling and sampling (a framework cost;
    # with a profile, whose launch term is measured, a floor on it, never added)
    floor_s: float = 0.0
    # the measured hardware profile (bench.model.hwprofile); None: the datasheet
    profile: dict[str, Any] | None = None
    arch: hwprofile.Arch | None = None  # the model's shape as the profile's forms read it
    tied_head_bytes: float = 0.0  # a tied LM head: read every step (only the profile path counts it)

    def decode_step_s(self, batch: np.ndarray | float, live_len: float) -> np.ndarray:
        """Seconds per decode step for `batch` sequences of mean live context `live_len` tokens.

        Bytes read: dense weights + expected distinct experts touched + KV. Datasheet: a roofline,
        bytes over bandwidth or 2 x active params x batch over compute when batches are large. With a
        profile: hwprofile.decode_s on each of the engine's GPUs (bytes, KV heads and FLOPs split over
        them, the launch term per iteration). Either way never below the engine's floor, the
        framework's per-iteration latency that bounds a small batch (then generation takes the longest
        sequence x the floor, whatever the bandwidth).
        """
        b = np.asarray(batch, dtype=np.float64)
        experts = 0.0
        if self.routed_experts:
            # expected distinct experts touched per MoE layer by b tokens x top_k picks
            hit = 1.0 - (1.0 - self.top_k / self.routed_experts) ** b
            experts = self.moe_layers * self.routed_experts * hit * self.expert_bytes
        kv = b * live_len * self.kv_bytes_per_token
        if self.profile is not None:
            weights = self.dense_bytes + self.tied_head_bytes + experts
            step = hwprofile.decode_s(
                self.profile, self.arch, b, live_len, weights, kv, 2.0 * self.active_params * b, self.gpus
            )
            return np.maximum(step, self.floor_s)
        mem = (self.dense_bytes + experts + kv) / self.bw
        comp = 2.0 * self.active_params * b / self.compute
        return np.maximum(np.maximum(mem, comp), self.floor_s)

    def prefill_s(self, tokens: np.ndarray | float) -> np.ndarray:
        """Prefill time (s) of `tokens` prompt tokens on this engine: compute-bound at the datasheet's
        achieved rate, or hwprofile.prefill_s (one sequence, FLOPs split over the engine's GPUs)."""
        t = np.asarray(tokens, dtype=np.float64)
        if self.profile is not None:
            return hwprofile.prefill_s(self.profile, self.arch, 1, t, self.active_params, self.gpus)
        return 2.0 * self.active_params * t / self.compute

    def concurrency(self, cap: int, seq_len: float) -> int:
        """Rollouts in flight on the engine: min(configured cap, KV tokens / mean sequence length)."""
        return max(1, min(int(cap), int(self.kv_capacity_tokens // max(seq_len, 1.0))))


def engine_model(cfg: Any, r: Resolved) -> EngineModel:
    """Build the EngineModel of cfg's generator (one engine; all engines are identical); its size,
    weights and KV cache come from the resolved layout `r`."""
    m, hw, g, em = plain_model(cfg.model), cfg.hardware, cfg.experiment.generator, cfg.emulator
    gpus = r.engine_gpus
    p = flops.param_counts(m)
    dt = float(g.dtype_bytes)
    weight_bytes = r.engine_weight_bytes
    moe_layers = (m.layers - m.dense_layers) if m.routed_experts else 0
    expert_bytes = 3.0 * m.hidden * m.ffn_expert * dt
    routed_total = moe_layers * m.routed_experts * expert_bytes
    dense_bytes = weight_bytes - routed_total - m.vocab * m.hidden * dt  # embedding lookup reads one row
    measured = hwprofile_conf.for_config(cfg)
    if r.kv_tokens_per_engine <= 0:
        raise ValueError(
            f"experiment.generator: {gpus} x {hw.name} ({hw.hbm_gb} GB, gpu_memory_utilization "
            f"{g.gpu_memory_utilization}) cannot hold {m.name} weights ({weight_bytes / 1e9:.0f} GB at "
            f"dtype_bytes={dt}); expected a larger engine (tp/ep) or a smaller model"
        )
    return EngineModel(
        gpus=gpus,
        kv_capacity_tokens=r.kv_tokens_per_engine,
        kv_bytes_per_token=r.kv_bytes_per_token,
        weight_bytes=weight_bytes,
        dense_bytes=dense_bytes,
        expert_bytes=expert_bytes,
        moe_layers=moe_layers,
        routed_experts=int(m.routed_experts),
        top_k=int(m.top_k),
        active_params=p["active"],
        bw=gpus * hw.hbm_tbps * 1e12 * em.decode_bw_eff,
        compute=gpus * hw.peak_bf16_flops * em.prefill_mfu,
        floor_s=float(em.decode_step_floor_s),
        profile=measured[0] if measured else None,
        arch=arch_of(m),
        tied_head_bytes=m.vocab * m.hidden * dt if m.tied_embeddings else 0.0,
    )


def arch_of(m: SimpleNamespace) -> hwprofile.Arch:
    """The model's shape as bench.model.hwprofile's forms read it (layers, widths, heads; an MoE model's
    expert width as `ffn`: the forms take its bytes and FLOPs from the emulator, not from the shape)."""
    return hwprofile.Arch(
        layers=int(m.layers),
        hidden=int(m.hidden),
        heads=int(m.q_heads),
        kv=int(m.kv_heads),
        hd=int(m.head_dim),
        ffn=int(m.ffn_dense or m.ffn_expert),
        vocab=int(m.vocab),
        tied=bool(m.tied_embeddings),
    )


@dataclass(frozen=True)
class TrainerModel:
    """Trainer step costs: FLOPs of the step's tokens over achieved FLOP/s (datasheet) or through
    hwprofile's eager forms (a measured profile), plus fixed costs: the optimizer step and, when the
    experiment keeps trainer state in host memory, its transfer for the update (`offload_s`)."""

    flop_rate: float  # achieved FLOP/s of the whole trainer pool (datasheet path)
    optimizer_s: float  # per step: emulator.optimizer_s, or hwprofile.optimizer_s of one GPU's shard
    logprob_passes: int
    sync_s: float  # weight sync trainer -> generator per update (s)
    seq_grid: np.ndarray  # sequence lengths (tokens) where FLOPs/token is tabulated
    fpt_grid: np.ndarray  # training FLOPs per token at seq_grid
    dp: int = 1  # trainer data-parallel ranks
    bin_tokens: int = 0  # micro-batch length (tokens) of a framework that pads to DP; 0: none
    handoff_s: float = 0.0  # colocated rollout <-> train hand-off per step (s); engines stay paused
    handoff_in_sync: bool = True  # the framework's own timers count the hand-off in sync_s (else in wait_s)
    # the measured hardware profile (bench.model.hwprofile); None: the datasheet
    profile: dict[str, Any] | None = None
    arch: hwprofile.Arch | None = None  # the model's shape as the profile's forms read it
    gpus: int = 1  # trainer GPUs: the step's FLOPs split over them
    micro_batch_tokens: int = 0  # tokens per GPU per micro-batch: each micro-batch launches every layer
    # per step: the state experiment.trainer.offload_* keep in host memory, loaded for the update and
    # put back over the host link (s; offload_s below): part of the update, not of its FLOP rate
    offload_s: float = 0.0

    @property
    def sync_phase_s(self) -> float:
        """Compute end -> the step's weights land (s): the sync, plus the hand-off where it is part of it."""
        return self.sync_s + (self.handoff_s if self.handoff_in_sync else 0.0)

    def seq_flops(self, seq_lens: np.ndarray) -> np.ndarray:
        """Training (fwd+bwd) FLOPs of each sequence of `seq_lens` tokens (suite convention)."""
        s = np.asarray(seq_lens, dtype=np.float64)
        return s * np.interp(s, self.seq_grid, self.fpt_grid)

    def flops(self, seq_lens: np.ndarray) -> float:
        """Training (fwd+bwd) FLOPs of sequences of `seq_lens` tokens, summed."""
        return float(self.seq_flops(seq_lens).sum())

    def step_times(self, seq_lens: np.ndarray) -> tuple[float, float]:
        """(logprob_s, compute_s) of one step on sequences of `seq_lens` tokens.

        compute_s = fwd+bwd FLOPs / achieved FLOP/s + optimizer_s + offload_s (the offloaded state's
        transfer: bytes over the host link, whatever the FLOP rate); each log-prob pass is a forward
        (one third of fwd+bwd) at the same efficiency. With a profile, the same FLOPs per GPU through
        hwprofile.eager_s ("train" for fwd+bwd, "prefill" for a forward), each rank launching every
        layer once per micro-batch of its share of the step's tokens.
        """
        work = self.seq_flops(seq_lens)
        # a framework that pads its micro-batch count to the DP size pays for the busiest rank
        f = dp_padded_work(work, seq_lens, self.bin_tokens, self.dp) if self.bin_tokens else float(work.sum())
        if self.profile is not None:
            tokens = float(np.sum(seq_lens)) / self.dp
            passes = max(1, math.ceil(tokens / self.micro_batch_tokens)) if self.micro_batch_tokens else 1
            forward = hwprofile.eager_s(self.profile, self.arch, "prefill", f / 3.0, passes, self.gpus)
            train = hwprofile.eager_s(self.profile, self.arch, "train", f, passes, self.gpus)
            return self.logprob_passes * forward, train + self.optimizer_s + self.offload_s
        return (
            self.logprob_passes * f / 3.0 / self.flop_rate,
            f / self.flop_rate + self.optimizer_s + self.offload_s,
        )


SYNC_PATHS = ("ipc", "nccl", "filesystem")


def sync_path(cfg: Any, r: Resolved) -> str:
    """The framework's weight-sync path at this placement (framework.weight_sync.<placement>)."""
    key = "colocated" if r.colocated else "disaggregated"
    path = (cfg.framework.get("weight_sync") or {}).get(key)
    if path not in SYNC_PATHS:
        raise ValueError(
            f"framework.weight_sync.{key}={path!r} ({cfg.framework.name}): expected one of {', '.join(SYNC_PATHS)}"
        )
    return str(path)


def weight_sync_s(cfg: Any, r: Resolved) -> float:
    """Seconds from the trainer's new weights to every engine serving them (s), by the framework's path:

    - ipc: each generator GPU receives its shard (model bytes at the generation dtype / engine GPUs)
      over NVLink (CUDA IPC handles, in-place resharding on the same GPUs or node);
    - nccl: the same shard over the scale-out network per GPU (broadcast from the trainer);
    - filesystem: the trainer writes the whole model (generation dtype) to a shared filesystem, then
      every engine reads it back, both at `emulator.filesystem_gbps` (a site input), serially because
      an engine reloads only once the checkpoint is complete (prime-rl's STABLE marker).

    Links run at `weight_sync_eff`; the filesystem at its stated bandwidth. Plus the fixed pause /
    reload cost `weight_sync_fixed_s` of every path.
    """
    m, hw, ex, em = plain_model(cfg.model), cfg.hardware, cfg.experiment, cfg.emulator
    model_bytes = flops.param_counts(m)["total"] * ex.generator.dtype_bytes
    path = sync_path(cfg, r)
    if path == "filesystem":
        if float(em.filesystem_gbps) <= 0:
            raise ValueError(
                "emulator.filesystem_gbps: must be > 0 for a filesystem weight sync; "
                "set it to the site's shared-filesystem bandwidth (GB/s)"
            )
        transfer = 2.0 * model_bytes / (float(em.filesystem_gbps) * 1e9)
    else:
        link = (hw.nvlink_gbps if path == "ipc" else hw.network_gbps) * 1e9 * em.weight_sync_eff
        transfer = model_bytes / r.engine_gpus / link
    return transfer + em.weight_sync_fixed_s


def handoff_s(cfg: Any, r: Resolved) -> float:
    """Colocated rollout <-> train hand-off per step (s): what each GPU moves to host memory and back
    over `hardware.host_gbps` to make room for the engines (the trainer's resident params + grads +
    optimizer when the framework offloads the trainer: slime's --colocate), plus the framework's fixed
    sleep + wake cost: as measured on one of its runs (`emulator.handoff_measured_s` when
    `handoff_measured_on` names it), else as the framework states it (`framework.handoff_fixed_s`),
    else `emulator.handoff_fixed_s`. What the experiment offloads (experiment.trainer.offload_*) is
    already in host memory while the engines generate: its transfer is the update's (`offload_s`),
    not the hand-off's. 0 when disaggregated."""
    if not r.colocated:
        return 0.0
    fw, em = cfg.framework, cfg.emulator
    measured = em.get("handoff_measured_s") if em.get("handoff_measured_on") == fw.name else None
    stated = fw.get("handoff_fixed_s")
    fixed = float(next(v for v in (measured, stated, em.handoff_fixed_s) if v is not None))
    # the framework moves the whole resident trainer state (sharded as the trainer shards it: bench.resolve)
    moved = r.trainer_bytes_per_gpu if fw.get("offloads_trainer", False) else 0.0
    if moved == 0.0:
        return fixed
    return 2.0 * moved / _host_Bps(cfg, moved, "a colocated hand-off") + fixed


def _host_Bps(cfg: Any, moved: float, what: str) -> float:
    """hardware.host_gbps in bytes/s (GPU <-> host, per GPU, each way); refused when unknown."""
    host = float(cfg.hardware.get("host_gbps") or 0.0)
    if host <= 0:
        raise ValueError(
            f"hardware.host_gbps: unknown for {cfg.hardware.name}; {what} moves "
            f"{moved / 1e9:.1f} GB per GPU to host memory and back: set hardware.host_gbps (GB/s)"
        )
    return host * 1e9


def offload_s(cfg: Any, r: Resolved) -> float:
    """Per step (s): the trainer state experiment.trainer.offload_params / offload_optimizer keep in
    host memory (r.trainer_offloaded_bytes_per_gpu: weights + grads and / or AdamW state, sharded as
    the trainer shards them), loaded onto each GPU for the update and put back after it, in any
    placement. verl's FSDP and Megatron workers do this inside update_actor (load before
    update_policy, offload after), so its timer counts it. Bytes over the host link one way each:
    the measured pinned host-to-device and device-to-host rates of the config's hardware profile
    (offloaded state is held in pinned host buffers: a non-blocking device-to-host copy lands in
    pinned memory), else `hardware.host_gbps` each way. 0 when nothing is offloaded."""
    moved = r.trainer_offloaded_bytes_per_gpu
    if moved == 0.0:
        return 0.0
    measured = hwprofile_conf.for_config(cfg)
    seconds = hwprofile.host_roundtrip_s(measured[0], moved) if measured else None
    return (
        seconds if seconds is not None else 2.0 * moved / _host_Bps(cfg, moved, "an offloaded trainer update")
    )


def trainer_model(cfg: Any, r: Resolved) -> TrainerModel:
    """Build the TrainerModel of cfg (all trainer GPUs; colocated runs train on the whole pool)."""
    m, hw, em = plain_model(cfg.model), cfg.hardware, cfg.emulator
    top = int(cfg.workload.max_prompt_len + cfg.workload.max_response_len)
    grid = np.unique(np.geomspace(1, max(top, 2), 96).astype(np.int64))
    fpt = np.array([flops.flops_per_token(m, int(s), "suite") for s in grid])
    measured = hwprofile_conf.for_config(cfg)
    profile = measured[0] if measured else None
    # AdamW over the optimizer state one GPU holds, sharded as the trainer shards it (bench.resolve)
    optimizer = hwprofile.optimizer_s(profile, trainer_state_bytes(cfg, 0.0, 1.0)) if profile else None
    return TrainerModel(
        flop_rate=hw.peak_bf16_flops * r.trainer.gpus * em.trainer_mfu,
        optimizer_s=float(em.optimizer_s) if optimizer is None else optimizer,
        logprob_passes=int(em.logprob_passes_by_framework.get(cfg.framework.name, em.logprob_passes)),
        sync_s=weight_sync_s(cfg, r),
        handoff_s=handoff_s(cfg, r),
        handoff_in_sync=str(cfg.framework.get("handoff_logged_as", "sync")) == "sync",
        seq_grid=grid.astype(np.float64),
        fpt_grid=fpt,
        dp=max(1, r.trainer_dp),
        bin_tokens=padding_bin_tokens(cfg),
        profile=profile,
        arch=arch_of(m),
        gpus=max(1, r.trainer.gpus),
        micro_batch_tokens=int(cfg.experiment.trainer.micro_batch_tokens),
        offload_s=offload_s(cfg, r),
    )


# What a measured profile sets, and the emulator inputs it therefore leaves unused (the manifest says so)
PROFILE_PHYSICS = ["decode", "prefill", "trainer forward and backward", "optimizer"]
PROFILE_NOT_APPLIED = [
    "emulator.decode_bw_eff",
    "emulator.prefill_mfu (generator; teacher scoring keeps it)",
    "emulator.trainer_mfu",
    "emulator.optimizer_s",
]
PROFILE_DATASHEET = ["weight sync links", "colocated hand-off (hardware.host_gbps)", "teacher scoring"]


def hardware_source(cfg: Any) -> str | dict[str, Any]:
    """The manifest's `emulator.hardware_source`: "datasheet", or the profile (file, the key that set
    it, device, fitted models) with what it sets, the inputs it leaves unused and what stays datasheet."""
    measured = hwprofile_conf.for_config(cfg)
    if measured is None:
        return hwprofile_conf.DATASHEET
    return {
        **measured[1],
        "physics": PROFILE_PHYSICS,
        "not_applied": PROFILE_NOT_APPLIED,
        "datasheet": PROFILE_DATASHEET,
    }


def rate_table(engine: EngineModel, max_batch: int, live_len: float) -> list[float]:
    """Per-sequence decode rate (tokens/s) for decode batches 0..max_batch (index = batch size)."""
    b = np.arange(max_batch + 1, dtype=np.float64)
    b[0] = 1.0
    return list(1.0 / engine.decode_step_s(b, live_len))


# ---- micro-batch padding to the data-parallel size (prime-rl) ----------------------------------


def padding_bin_tokens(cfg: Any) -> int:
    """Micro-batch length (tokens) of cfg's framework when it packs samples into micro-batches and
    pads their count to a multiple of the trainer's DP size; 0 when it does not. The fact is the
    runner's (`dp_padding_bin_tokens`, runners/prime_rl.py); a runner without it does not pad."""
    from hydra.utils import get_class

    try:
        runner = get_class(str(cfg.framework._target_))
    except (ImportError, ValueError, AttributeError):  # no runner class: nothing says it pads
        return 0
    rule = getattr(runner, "dp_padding_bin_tokens", None)
    return int(rule(cfg) or 0) if rule else 0


def dp_padded_work(work: np.ndarray, tokens: np.ndarray, bin_tokens: float, dp: int) -> float:
    """Work the trainer pool spends on one step (unit of `work`, e.g. FLOPs): dp x the busiest rank's.

    prime-rl (src/prime_rl/trainer/batch.py prepare_batch, v0.8.0) packs the step's samples
    (`tokens`, their work `work`) into micro-batches of at most `bin_tokens` tokens, raises their
    count to target = max(1, ceil(M / dp)) x dp by splitting multi-sample micro-batches, pads with
    zero-advantage copies of the first micro-batch when even single-sample ones are too few, and
    deals them to the dp ranks balanced by cost (Karmarkar-Karp). Modelled as:
      M       = max(samples longer than bin/2, ceil(tokens / bin)), the least micro-batches any
                packing needs (prime-rl's first-fit-decreasing lands at or just above it);
      dummies = max(0, target - samples), each costing the longest sample (the first micro-batch
                once every micro-batch holds one sample; a padded micro-batch computes like a real
                one, its loss is only masked);
      busiest = max((sum(work) + dummies x max(work)) / dp, max(work)), the balanced partition's
                lower bound (a rank holds at least the heaviest micro-batch).
    Returns dp x busiest (>= sum(work)); dp <= 1 or no sample: sum(work).
    """
    w = np.asarray(work, dtype=np.float64)
    n, real = len(w), float(np.sum(w))
    if dp <= 1 or n == 0:
        return real
    s = np.asarray(tokens, dtype=np.float64)
    packed = max(int(np.count_nonzero(s > bin_tokens / 2)), int(np.ceil(s.sum() / bin_tokens)), 1)
    target = -(-packed // dp) * dp
    heaviest = float(w.max())
    busiest = max((real + max(0, target - n) * heaviest) / dp, heaviest)
    return dp * busiest


@dataclass(frozen=True)
class TeacherModel:
    """One teacher's engines and the time they take to score a batch."""

    model: str  # conf/model option name
    engines: int
    engine_gpus: int
    flop_rate: float  # achieved FLOP/s of one engine in a prefill-only pass
    active_params: float
    fixed_s: float  # per batch (s)
    generator_share: float  # with_generator: engine GPUs / generator GPUs; 0 when dedicated
    domains: tuple[str, ...]  # () = every domain

    def compute_s(self, tokens: float) -> float:
        """GPU seconds of the prefill-only forward over `tokens` prompt + response tokens."""
        return 2.0 * self.active_params * tokens / self.flop_rate

    def batch_s(self, tokens: float) -> float:
        """Seconds one engine takes to score a batch of `tokens` prompt + response tokens."""
        return self.fixed_s + self.compute_s(tokens)

    def scores(self, domain: str) -> bool:
        return not self.domains or domain in self.domains


def teacher_models(cfg: Any, r: Resolved) -> list[TeacherModel]:
    """The TeacherModel of every resolved teacher of cfg (r.teachers, in order)."""
    hw, em = cfg.hardware, cfg.emulator
    generator_gpus = r.engines * r.engine_gpus
    out = []
    for t in r.teachers:
        shared = t.placement == "with_generator"
        out.append(
            TeacherModel(
                model=t.model,
                engines=t.engines,
                engine_gpus=t.engine_gpus,
                flop_rate=t.engine_gpus * float(hw.peak_bf16_flops) * float(em.prefill_mfu),
                active_params=t.active_params,
                fixed_s=float(em.score_fixed_s),
                generator_share=t.engine_gpus / generator_gpus if shared and generator_gpus else 0.0,
                domains=t.domains,
            )
        )
    return out
