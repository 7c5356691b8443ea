"""The generator and trainer cost model on the repository's real model and hardware facts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench import flops
from bench.config import compose
from bench.model import costmodel as cm
from bench.resolve import Resolved


@pytest.fixture(scope="module")
def case1():
    return compose(["experiment=semianalysis_case1", "framework=prime_rl"])


def test_engine_size_and_kv_capacity(case1):
    e = cm.engine_model(case1, Resolved.from_config(case1))
    assert e.gpus == 8  # TP8 / EP8 instance
    weights = flops.param_counts(case1.model)["total"] * 1.0  # FP8 generation
    hbm = 8 * 141e9 * 0.85
    assert e.kv_capacity_tokens == pytest.approx((hbm - weights) / 385_024)
    # concurrency: the configured cap, unless KV / sequence length is lower
    assert e.concurrency(256, 1000) == 256
    assert e.concurrency(256, 32768) == int(e.kv_capacity_tokens // 32768)


def test_decode_roofline_small_batches_read_weights_large_batches_pay_kv_and_compute(case1):
    e = cm.engine_model(case1, Resolved.from_config(case1))
    step = e.decode_step_s(np.array([1.0, 8, 64, 256]), 8000)
    assert np.all(np.diff(step) > 0)
    per_seq_rate = 1 / step
    assert per_seq_rate[0] > 5 * per_seq_rate[-1]
    # MoE: one token touches top_k experts per layer, not all 128
    one = e.dense_bytes + e.moe_layers * e.routed_experts * (1 - (1 - 8 / 128)) * e.expert_bytes
    assert step[0] == pytest.approx((one + 8000 * e.kv_bytes_per_token) / e.bw)


def test_engine_that_cannot_hold_the_weights_is_an_error():
    cfg = compose(["experiment=semianalysis_case1", "experiment.generator.tp=1", "experiment.generator.ep=1"])
    with pytest.raises(ValueError, match="cannot hold"):
        cm.engine_model(cfg, Resolved.from_config(cfg))


def test_trainer_step_time_is_flops_over_achieved_rate(case1):
    # two sequences on 64 data-parallel ranks: prime-rl would pad them to 64 micro-batches
    # (tests/emulator/test_dp_padding.py); the rate itself is checked without that padding
    tm = replace(cm.trainer_model(case1, Resolved.from_config(case1)), bin_tokens=0)
    seqs = np.array([4096.0, 16384.0])
    f = sum(s * flops.flops_per_token(case1.model, int(s)) for s in seqs)
    assert tm.flops(seqs) == pytest.approx(f, rel=1e-3)
    logprob_s, compute_s = tm.step_times(seqs)
    rate = 989e12 * 64 * case1.emulator.trainer_mfu
    # case 1 keeps the optimizer state on the host: its transfer is part of the update, not of the rate
    offload = cm.offload_s(case1, Resolved.from_config(case1))
    assert offload > 0 and tm.offload_s == offload
    assert compute_s == pytest.approx(f / rate + case1.emulator.optimizer_s + offload, rel=1e-3)
    assert logprob_s == 0.0  # prime-rl: old log-probs come from inference
    verl_cfg = compose(["experiment=semianalysis_case1", "framework=verl"])
    verl = cm.trainer_model(verl_cfg, Resolved.from_config(verl_cfg))
    assert verl.step_times(seqs)[0] == pytest.approx(f / 3 / rate, rel=1e-3)  # one forward pass


def test_weight_sync_is_shard_bytes_over_the_link(case1):
    shard = flops.param_counts(case1.model)["total"] * 1.0 / 8
    assert cm.weight_sync_s(case1, Resolved.from_config(case1)) == pytest.approx(shard / (50e9 * 0.5) + 1.0)
    colocated = compose(["experiment=smoke", "experiment.placement=colocated"])
    shard = flops.param_counts(colocated.model)["total"] * 2.0
    assert cm.weight_sync_s(colocated, Resolved.from_config(colocated)) == pytest.approx(
        shard / (450e9 * 0.5) + 1.0
    )


# Qwen3-0.6B on one H100 (PCIe Gen5 host link, 64 GB/s each way)
SMALL = ["experiment=smoke", "model=qwen3_0_6b", "hardware=h100_sxm", "framework=verl"]
PARAMS = 595_984_384  # Qwen3-0.6B, bench.flops.param_counts total


def _trainer(overrides: list[str]) -> cm.TrainerModel:
    cfg = compose(overrides)
    return cm.trainer_model(cfg, Resolved.from_config(cfg))


def test_offloaded_state_is_loaded_for_the_update_and_put_back_in_any_placement():
    """experiment.trainer.offload_*: the offloaded bytes per GPU (4 a parameter of weights + grads, 12
    of AdamW state; one trainer GPU holds them all) cross the host link in and out once per step,
    charged in the update whatever the placement; nothing offloaded, nothing charged."""
    one = ["experiment.trainer_gpus=1", "experiment.generator_gpus=1"]
    both = ["experiment.trainer.offload_params=true", "experiment.trainer.offload_optimizer=true"]
    for placement in ("colocated", "disaggregated"):
        base = [*SMALL, *one, f"experiment.placement={placement}"]
        assert _trainer(base).offload_s == 0.0
        opt = _trainer([*base, "experiment.trainer.offload_optimizer=true"])
        assert opt.offload_s == pytest.approx(2 * PARAMS * 12 / 64e9)
        assert _trainer([*base, *both]).offload_s == pytest.approx(2 * PARAMS * 16 / 64e9)
        # charged as time, not through the FLOP rate
        seqs = np.array([1024.0, 2048.0])
        plain = _trainer(base)
        assert opt.step_times(seqs)[1] == pytest.approx(plain.step_times(seqs)[1] + opt.offload_s)
        assert opt.step_times(seqs)[0] == plain.step_times(seqs)[0]  # log-prob passes do not load it
        # verl's colocated hand-off moves nothing of its own: the offloaded state is not counted twice
        assert opt.handoff_s == 0.0
    # sharded as the trainer shards it: FSDP over 8 GPUs moves an eighth per GPU
    eight = _trainer([*SMALL, "experiment.trainer_gpus=8", "experiment.trainer.offload_optimizer=true"])
    assert eight.offload_s == pytest.approx(2 * PARAMS * 12 / 8 / 64e9)


def test_offload_uses_the_profiles_measured_pinned_host_copies():
    """With a hardware profile, each way at its measured pinned rate (conf/hardware/profiles/h200.yaml)."""
    cfg = compose([*SMALL, "hardware=h200", "hardware.profile=profiles/h200.yaml",
                   "experiment.trainer.offload_optimizer=true"])  # fmt: skip
    r = Resolved.from_config(cfg)
    moved = r.trainer_offloaded_bytes_per_gpu
    assert moved == pytest.approx(PARAMS * 12 / cfg.experiment.trainer_gpus)
    assert cm.offload_s(cfg, r) == pytest.approx(moved / 55407245497.4755 + moved / 55315719785.38017)


def test_offload_without_a_host_link_is_refused():
    with pytest.raises(
        ValueError, match=r"hardware.host_gbps: unknown for H100-SXM; an offloaded trainer update"
    ):
        _trainer([*SMALL, "experiment.trainer.offload_optimizer=true", "hardware.host_gbps=0"])
