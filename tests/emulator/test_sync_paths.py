"""Weight-sync paths, the colocated hand-off and the small-batch decode floor, on the repository's
real model and hardware facts (Qwen3-0.6B: 595,984,384 parameters; H100: NVLink 450 GB/s, network
50 GB/s, PCIe Gen5 host link 64 GB/s each way)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.__main__ import main as bench_main
from bench.config import compose
from bench.model import costmodel as cm
from bench.resolve import Resolved

PARAMS = 595_984_384  # Qwen3-0.6B, bench.flops.param_counts total
SMALL = ["experiment=smoke", "model=qwen3_0_6b", "hardware=h100_sxm"]
COLOCATED = [
    *SMALL,
    "experiment.placement=colocated",
    "experiment.trainer_gpus=1",
    "experiment.generator_gpus=1",
]


def _sync(overrides: list[str]) -> float:
    cfg = compose(overrides)
    return cm.weight_sync_s(cfg, Resolved.from_config(cfg))


def test_each_path_moves_the_bytes_over_its_own_link():
    fixed = ["emulator.weight_sync_fixed_s=0.25", "emulator.weight_sync_eff=0.5"]
    shard = PARAMS * 2.0  # BF16 generation weights on a 1-GPU engine
    assert _sync([*SMALL, "framework=verl", *fixed]) == pytest.approx(shard / (50e9 * 0.5) + 0.25)  # nccl
    assert _sync([*COLOCATED, "framework=verl", *fixed]) == pytest.approx(shard / (450e9 * 0.5) + 0.25)  # ipc
    fs = [*SMALL, "framework=prime_rl", "framework.weight_sync.disaggregated=filesystem", *fixed]
    # written once and read back, both at the filesystem's bandwidth
    assert _sync([*fs, "emulator.filesystem_gbps=4"]) == pytest.approx(2 * shard / 4e9 + 0.25)


def test_unknown_path_and_missing_filesystem_bandwidth_are_named():
    with pytest.raises(
        ValueError, match=r"framework.weight_sync.disaggregated='rdma' \(verl\): expected one of"
    ):
        _sync([*SMALL, "framework=verl", "framework.weight_sync.disaggregated=rdma"])
    fs = [*SMALL, "framework=prime_rl", "framework.weight_sync.disaggregated=filesystem"]
    with pytest.raises(ValueError, match=r"emulator.filesystem_gbps: must be > 0"):
        _sync([*fs, "emulator.filesystem_gbps=0"])


def _handoff(overrides: list[str]) -> float:
    cfg = compose(overrides)
    return cm.handoff_s(cfg, Resolved.from_config(cfg))


def test_colocated_handoff_moves_the_trainer_state_and_adds_the_frameworks_sleep_and_wake():
    # slime --colocate offloads the whole trainer: 16 bytes a parameter (bf16 weights + grads, fp32
    # master + Adam moments) out and back over PCIe, plus its published 4.04 s sleep + 1.94 s wake
    assert _handoff([*COLOCATED, "framework=slime"]) == pytest.approx(2 * PARAMS * 16 / 64e9 + 5.98)
    # verl keeps the trainer on the GPU: nothing moves, no fixed cost; what the experiment offloads is
    # on the host already, and its transfer is the update's (costmodel.offload_s), not the hand-off's
    assert _handoff([*COLOCATED, "framework=verl"]) == 0.0
    opt = [*COLOCATED, "framework=verl", "experiment.trainer.offload_optimizer=true"]
    assert _handoff(opt) == 0.0
    cfg = compose(opt)
    assert cm.offload_s(cfg, Resolved.from_config(cfg)) == pytest.approx(2 * PARAMS * 12 / 64e9)
    assert _handoff([*SMALL, "framework=slime"]) == 0.0  # disaggregated: no hand-off


def test_a_measured_handoff_applies_to_its_own_framework_only():
    measured = ["emulator.handoff_measured_s=9.0", "emulator.handoff_measured_on=slime"]
    assert _handoff([*COLOCATED, "framework=slime", *measured]) == pytest.approx(2 * PARAMS * 16 / 64e9 + 9.0)
    assert _handoff([*COLOCATED, "framework=verl", *measured]) == 0.0


def test_unknown_host_link_is_refused_when_bytes_must_move():
    with pytest.raises(ValueError, match=r"hardware.host_gbps: unknown for H100-SXM"):
        _handoff([*COLOCATED, "framework=slime", "hardware.host_gbps=0"])


def _steps(tmp_path, name: str, overrides: list[str]) -> pd.DataFrame:
    out = tmp_path / name
    assert bench_main(["emulate", *overrides, "emulator.steps=6", "--out", str(out)]) == 0
    return pd.read_parquet(out / "trace" / "steps.parquet").iloc[1:]


def test_the_trace_counts_the_handoff_where_the_framework_logs_it(tmp_path):
    """slime's perf/train_wait_time holds its sleep and wake: the emulated wait does too, and sync_s
    is the transfer alone; verl's timing_s/update_weights holds the wake-up: its sync_s does."""
    slime = _steps(tmp_path, "slime", [*COLOCATED, "framework=slime"])
    handoff = 2 * PARAMS * 16 / 64e9 + 5.98
    transfer = PARAMS * 2.0 / (450e9 * 0.5) + 1.0  # ipc at the defaults
    assert np.allclose(slime.sync_s, transfer)
    assert np.allclose(slime.wait_s - slime.gen_s, handoff, atol=1e-6)
    verl = _steps(
        tmp_path, "verl", [*COLOCATED, "framework=verl", "experiment.trainer.offload_optimizer=true"]
    )
    assert np.allclose(verl.sync_s, transfer)  # the offloaded optimizer's transfer is in update_actor
    assert np.allclose(verl.wait_s, verl.gen_s, atol=1e-6)


def test_decode_never_faster_than_the_floor():
    cfg = compose([*SMALL, "framework=verl", "emulator.decode_step_floor_s=0.016"])
    e = cm.engine_model(cfg, Resolved.from_config(cfg))
    step = e.decode_step_s(np.array([1.0, 16.0, 128.0]), 300.0)
    assert np.all(step == 0.016)  # a 0.6B model's roofline is under 1 ms at these batches
    big = e.decode_step_s(np.array([1e5]), 300.0)
    assert big[0] > 0.016  # a large batch is compute-bound above the floor


def test_a_latency_bound_step_takes_the_longest_sequence_times_the_floor(tmp_path):
    """One engine holding the step's 256 rollouts at once (16 prompts x 16, concurrency 256), every
    response at the 64-token cap (no spread): each step generates for 64 decode iterations of 10 ms,
    plus prefill; four times the rollouts (64 prompts) take four waves."""
    fixed = [
        *COLOCATED, "framework=verl", "workload.max_response_len=64", "workload.response_len_mean_frac=1.0",
        "workload.response_len_sigma=0.01", "emulator.decode_step_floor_s=0.01",
    ]  # fmt: skip
    one_wave = _steps(tmp_path, "floor", [*fixed, "workload.prompts_per_step=16"])
    assert np.allclose(one_wave.gen_s, 0.64, rtol=0.02)
    four_waves = _steps(tmp_path, "floor4", [*fixed, "workload.prompts_per_step=64"])
    assert np.allclose(four_waves.gen_s, 4 * 0.64, rtol=0.02)
