"""Colocated synchronous RL: verl `trainer_mode=sync` (hybrid engine), slime `train.py --colocate`.

Generation and training take turns on the same GPUs. Each step dispatches one round of
prompts x oversampling groups with the current weights; once the batch fills, unfinished rollouts
are cancelled (oversampling waste), the engines sleep, the trainer runs, and the new weights are
loaded in place before the next round. Staleness is 0.
"""

from __future__ import annotations

from typing import Any

from bench.emulator.policies import Schedule, common, surplus


def schedule(cfg: Any) -> Schedule:
    return Schedule(
        name="colocated_sync",
        colocated=True,
        lag=0,
        refill=False,
        surplus=surplus(cfg, "cancel"),
        staleness_bound=0,
        **common(cfg),
    )
