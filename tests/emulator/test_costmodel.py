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
    assert compute_s == pytest.approx(f / rate + case1.emulator.optimizer_s, rel=1e-3)
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
