"""bench.resolve: the layout numbers of one model of each family, worked out once, and every stage
(validate, dispatch, the emulator's cost model, metrics) reading the same ones."""

from __future__ import annotations

import pytest

from bench.config import compose
from bench.emulator.run import build
from bench.resolve import Pool, Resolved, job_nodes
from bench.validate import validate


def test_dense_gqa_qwen3_8b_smoke():
    r = Resolved.from_config(compose(["experiment=smoke", "framework=verl"]))
    assert (r.trainer, r.generator) == (Pool(8, 1, 8), Pool(8, 1, 8))
    assert (r.total_gpus, r.nodes, r.trainer_dp) == (16, 2, 8)
    assert (r.engine_gpus, r.engines) == (1, 8)
    # 36 layers x (K, V) x head_dim 128 x 8 KV heads x BF16
    assert r.kv_bytes_per_token == 36 * 2 * 128 * 8 * 2 == 147_456
    # 80 GB x 0.85 minus 8.19B params x BF16, over the bytes per token
    assert r.kv_tokens_per_engine == pytest.approx((80e9 * 0.85 - 8_190_427_136 * 2) / 147_456)
    assert r.mean_seq_tokens == pytest.approx(256 + 0.35 * 8192)
    assert r.concurrency_per_engine == 112  # KV-bound: 350,065 tokens / 3,123.2 tokens


def test_moe_gqa_qwen3_235b_case1_replicates_kv_heads_over_tp():
    r = Resolved.from_config(compose(["experiment=semianalysis_case1", "framework=prime_rl"]))
    # 94 layers x (K, V) x 128 x max(4 KV heads, TP8) x BF16: TP8 over 4 heads holds 2 copies
    assert r.kv_bytes_per_token == 94 * 2 * 128 * 8 * 2 == 385_024
    assert (r.engine_gpus, r.engines, r.total_gpus, r.nodes) == (8, 24, 256, 32)  # TP8/EP8 engines
    assert r.engine_weight_bytes == pytest.approx(235.09e9, rel=1e-4)  # FP8 generation weights


def test_mla_glm5_case2_caches_the_latent_on_every_tp_rank():
    r = Resolved.from_config(compose(["experiment=semianalysis_case2", "framework=prime_rl"]))
    # 78 layers x (kv_lora_rank 512 + rope 64) x BF16, x tp 1 (DP32 attention: one rank per token)
    assert r.kv_bytes_per_token == 78 * 576 * 2
    assert (r.engine_gpus, r.engines) == (32, 4)  # DP32 x TP1, EP32 inside the engine
    assert r.trainer_dp == 128 // 2  # cp 2
    tp4 = Resolved.from_config(
        compose(["experiment=semianalysis_case2", "experiment.generator.tp=4", "experiment.generator.dp=8"])
    )
    assert tp4.kv_bytes_per_token == 78 * 576 * 2 * 4
    assert tp4.engine_gpus == 32


def test_colocated_pools_are_the_same_gpus_counted_once():
    r = Resolved.from_config(
        compose(["experiment=smoke", "experiment.placement=colocated", "experiment.generator_gpus=8"])
    )
    assert (r.colocated, r.total_gpus, r.nodes, r.generator) == (True, 8, 1, r.trainer)
    assert (r.mode, r.policy) == ("sync", "bench.emulator.policies.colocated_sync")


def test_pools_that_fit_one_node_share_it():
    r = Resolved.from_config(
        compose(["experiment=smoke", "experiment.trainer_gpus=2", "experiment.generator_gpus=6"])
    )
    assert (r.trainer, r.generator, r.nodes) == (Pool(2, 1, 2), Pool(6, 1, 6), 1)


def test_an_impossible_layout_resolves_to_what_validate_reports():
    cfg = compose(["experiment=smoke", "experiment.generator.tp=3"])
    r = Resolved.from_config(cfg)
    assert (r.engine_gpus, r.engines) == (3, 2)  # floored: validate names the key
    assert any(p.startswith("experiment.generator: tp x dp = 3 GPUs per engine") for p in validate(cfg))


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=smoke", "framework=verl"],
        ["experiment=semianalysis_case1", "framework=prime_rl"],
        ["experiment=semianalysis_case2", "framework=prime_rl"],
        ["experiment=verl_one_step_off_h20", "framework=verl"],
    ],
    ids=lambda o: o[0],
)
def test_validate_dispatch_and_emulator_take_the_same_numbers(overrides):
    cfg = compose([*overrides, "emulator.steps=1"])
    r = Resolved.from_config(cfg)
    loop, _, prov = build(cfg)
    assert (loop.em.gpus, loop.em.kv_bytes_per_token, loop.em.kv_capacity_tokens) == (
        r.engine_gpus,
        r.kv_bytes_per_token,
        r.kv_tokens_per_engine,
    )
    assert loop.generator.engines == r.engines and prov["policy"] == r.policy
    assert job_nodes(cfg, None) == r.nodes


@pytest.mark.parametrize("sharding", ["fsdp", "megatron"])
def test_offloaded_and_resident_trainer_state_add_up_to_the_whole(sharding):
    """Case 1 offloads the optimizer: what stays on a GPU and what the hand-off would move are one
    sharding rule's two parts (bench.model.costmodel.handoff_s reads the offloaded one)."""
    base = ["experiment=semianalysis_case1", f"experiment.trainer.sharding={sharding}"]
    off = Resolved.from_config(compose(base))
    on = Resolved.from_config(compose([*base, "experiment.trainer.offload_optimizer=false"]))
    assert on.trainer_offloaded_bytes_per_gpu == 0.0
    assert off.trainer_offloaded_bytes_per_gpu > 0.0
    assert off.trainer_bytes_per_gpu + off.trainer_offloaded_bytes_per_gpu == pytest.approx(
        on.trainer_bytes_per_gpu
    )
