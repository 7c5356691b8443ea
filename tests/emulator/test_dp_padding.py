"""prime-rl's micro-batch padding to the trainer's data-parallel size, as the emulator costs it
(bench.model.costmodel.dp_padded_work): hand-computed factors, and only for prime-rl."""

from __future__ import annotations

import numpy as np
import pytest

from bench.config import compose
from bench.model.costmodel import dp_padded_work, padding_bin_tokens, trainer_model
from bench.resolve import Resolved


def test_a_batch_that_packs_into_a_multiple_of_dp_costs_its_own_work():
    # 10 samples of 1000 tokens in bins of 4096: 3 micro-batches at least, raised to 4 for dp 4 by
    # splitting (10 samples are enough): no dummy; every rank holds 2.5 samples' work on average
    tokens = np.full(10, 1000.0)
    assert dp_padded_work(tokens, tokens, 4096, 4) == pytest.approx(10_000)


def test_too_few_samples_are_padded_with_copies_that_cost_like_real_ones():
    # 3 samples of 3000 tokens > half a bin of 4096: 3 micro-batches, dp 4 needs 4: one dummy copy
    # of the longest sample; the busiest rank holds one sample: 4 x 3000 = 12000 for 9000 of work
    tokens = np.full(3, 3000.0)
    assert dp_padded_work(tokens, tokens, 4096, 4) == pytest.approx(12_000)  # factor 4/3


def test_one_long_sample_sets_the_busiest_rank():
    # 1000, 1000 and 3000 tokens on dp 2: 2 micro-batches (5000 / 4096 rounded up); the rank that
    # holds the 3000-token sample works 3000 while the mean is 2500: 2 x 3000 = 6000 (factor 1.2)
    tokens = np.array([1000.0, 1000.0, 3000.0])
    assert dp_padded_work(tokens, tokens, 4096, 2) == pytest.approx(6000)


def test_one_rank_never_pads():
    tokens = np.array([100.0, 4000.0])
    assert dp_padded_work(tokens, tokens, 4096, 1) == pytest.approx(4100)


def test_only_prime_rl_pads_and_its_micro_batch_is_its_seq_len():
    base = ["experiment=semianalysis_case1", "experiment.trainer_gpus=48", "experiment.generator_gpus=208"]
    prime = compose([*base, "framework=prime_rl"])
    assert padding_bin_tokens(prime) == 4096 + 28672  # rl.toml seq_len = max prompt + max response
    assert padding_bin_tokens(compose([*base, "framework=verl"])) == 0
    assert padding_bin_tokens(compose([*base, "framework=slime"])) == 0
    m = trainer_model(prime, Resolved.from_config(prime))
    assert (m.dp, m.bin_tokens) == (48, 32768)
    # 48 samples of 20K tokens (> half a bin): 48 micro-batches, one per rank: no padding
    logprob_s, compute_s = m.step_times(np.full(48, 20_000.0))
    # case 1 keeps Adam state on the host: its transfer (m.offload_s) is in the update, not the FLOP rate
    assert compute_s - m.optimizer_s - m.offload_s == pytest.approx(
        m.flops(np.full(48, 20_000.0)) / m.flop_rate
    )
    # 47 such samples: the 48th rank computes a dummy copy, paid for like a real sample
    _, padded_s = m.step_times(np.full(47, 20_000.0))
    assert padded_s - m.optimizer_s - m.offload_s == pytest.approx(
        m.flops(np.full(48, 20_000.0)) / m.flop_rate
    )
