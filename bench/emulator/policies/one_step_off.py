"""One-step off-policy: verl `one_step_off_policy`, slime `train_async.py`.

Disaggregated pools; the round for batch k+1 is generated (with weights k-1) while the trainer
trains batch k, so generation overlaps training by exactly one step. Weights are synced after every
step, pausing the engines. Surplus rollouts of a round are cancelled when the batch fills.
Staleness is at most 1.
"""

from __future__ import annotations

from typing import Any

from bench.emulator.policies import Schedule, common, surplus


def schedule(cfg: Any) -> Schedule:
    return Schedule(
        name="one_step_off",
        colocated=False,
        lag=1,
        refill=False,
        surplus=surplus(cfg, "cancel"),
        staleness_bound=1,
        **common(cfg),
    )
