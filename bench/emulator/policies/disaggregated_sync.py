"""Disaggregated synchronous RL: slime `train.py` without `--colocate` (separate rollout GPUs).

Like colocated sync, but trainer and generator own separate GPU pools: each waits for the other
(generator idle while the trainer computes and syncs; trainer idle while the round generates).
Weights travel over the scale-out network. Staleness is 0.
"""

from __future__ import annotations

from typing import Any

from bench.emulator.policies import Schedule, common, surplus


def schedule(cfg: Any) -> Schedule:
    return Schedule(
        name="disaggregated_sync",
        colocated=False,
        lag=0,
        refill=False,
        surplus=surplus(cfg, "cancel"),
        staleness_bound=0,
        **common(cfg),
    )
