"""Hardware cost model of the emulator: generator engines (KV capacity, decode roofline, prefill)
and the trainer (step compute, log-prob passes, weight sync). Pure functions of the composed config.

Units: seconds, tokens, bytes, FLOPs, FLOP/s. Every efficiency is an input from `cfg.emulator`
(docs/emulator.md gives each default and its source); nothing here is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from bench import flops
from bench.resolve import Resolved


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

    def decode_step_s(self, batch: np.ndarray | float, live_len: float) -> np.ndarray:
        """Seconds per decode step for `batch` sequences of mean live context `live_len` tokens.

        Roofline: bytes read (dense weights + expected distinct experts touched + KV) over bandwidth,
        or 2 x active params x batch over compute when batches are large.
        """
        b = np.asarray(batch, dtype=np.float64)
        experts = 0.0
        if self.routed_experts:
            # expected distinct experts touched per MoE layer by b tokens x top_k picks
            hit = 1.0 - (1.0 - self.top_k / self.routed_experts) ** b
            experts = self.moe_layers * self.routed_experts * hit * self.expert_bytes
        mem = (self.dense_bytes + experts + b * live_len * self.kv_bytes_per_token) / self.bw
        comp = 2.0 * self.active_params * b / self.compute
        return np.maximum(mem, comp)

    def prefill_s(self, tokens: np.ndarray | float) -> np.ndarray:
        """Compute-bound prefill time (s) of `tokens` prompt tokens on this engine."""
        return 2.0 * self.active_params * np.asarray(tokens, dtype=np.float64) / self.compute

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
    )


@dataclass(frozen=True)
class TrainerModel:
    """Trainer step costs: FLOPs of the step's tokens over achieved FLOP/s, plus fixed costs."""

    flop_rate: float  # achieved FLOP/s of the whole trainer pool
    optimizer_s: float
    logprob_passes: int
    sync_s: float  # weight sync trainer -> generator per update (s)
    seq_grid: np.ndarray  # sequence lengths (tokens) where FLOPs/token is tabulated
    fpt_grid: np.ndarray  # training FLOPs per token at seq_grid

    def flops(self, seq_lens: np.ndarray) -> float:
        """Training (fwd+bwd) FLOPs of sequences of `seq_lens` tokens (suite convention)."""
        s = np.asarray(seq_lens, dtype=np.float64)
        return float(np.sum(s * np.interp(s, self.seq_grid, self.fpt_grid)))

    def step_times(self, seq_lens: np.ndarray) -> tuple[float, float]:
        """(logprob_s, compute_s) of one step on sequences of `seq_lens` tokens.

        compute_s = fwd+bwd FLOPs / achieved FLOP/s + optimizer_s; each log-prob pass is a forward
        (one third of fwd+bwd) at the same efficiency.
        """
        f = self.flops(seq_lens)
        return self.logprob_passes * f / 3.0 / self.flop_rate, f / self.flop_rate + self.optimizer_s


def weight_sync_s(cfg: Any, r: Resolved) -> float:
    """Seconds to push updated weights to every generator GPU (s).

    Each generator GPU must receive its shard, model bytes (generation dtype) / engine GPUs, over the
    placement's link: scale-out network per GPU when disaggregated, NVLink (CUDA IPC) when colocated;
    at `weight_sync_eff` of the link, plus the fixed pause/reload cost `weight_sync_fixed_s`.
    """
    m, hw, ex, em = plain_model(cfg.model), cfg.hardware, cfg.experiment, cfg.emulator
    shard = flops.param_counts(m)["total"] * ex.generator.dtype_bytes / r.engine_gpus
    link = (hw.nvlink_gbps if r.colocated else hw.network_gbps) * 1e9 * em.weight_sync_eff
    return shard / link + em.weight_sync_fixed_s


def trainer_model(cfg: Any, r: Resolved) -> TrainerModel:
    """Build the TrainerModel of cfg (all trainer GPUs; colocated runs train on the whole pool)."""
    m, hw, em = plain_model(cfg.model), cfg.hardware, cfg.emulator
    top = int(cfg.workload.max_prompt_len + cfg.workload.max_response_len)
    grid = np.unique(np.geomspace(1, max(top, 2), 96).astype(np.int64))
    fpt = np.array([flops.flops_per_token(m, int(s), "suite") for s in grid])
    return TrainerModel(
        flop_rate=hw.peak_bf16_flops * r.trainer.gpus * em.trainer_mfu,
        optimizer_s=float(em.optimizer_s),
        logprob_passes=int(em.logprob_passes_by_framework.get(cfg.framework.name, em.logprob_passes)),
        sync_s=weight_sync_s(cfg, r),
        seq_grid=grid.astype(np.float64),
        fpt_grid=fpt,
    )


def rate_table(engine: EngineModel, max_batch: int, live_len: float) -> list[float]:
    """Per-sequence decode rate (tokens/s) for decode batches 0..max_batch (index = batch size)."""
    b = np.arange(max_batch + 1, dtype=np.float64)
    b[0] = 1.0
    return list(1.0 / engine.decode_step_s(b, live_len))
