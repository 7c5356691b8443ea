"""Partial rollout with abort-and-resume: slime `--partial-rollout` (APRIL), verl V1 `colocate_async`.

Each batch dispatches prompts x oversampling groups; when the batch fills, the unfinished rollouts
are aborted and buffered with the tokens they have, then resumed first in the next round (a large
re-prefill: the engine dropped their KV cache) under newer weights. A resumed sample whose first
tokens are older than `workload.staleness_budget` versions is discarded where the framework
drops stale samples (`framework.drops_stale`; slime's buffer keeps them without limit). Colocated placement
(verl colocate_async) pauses generation while training; disaggregated (slime train_async.py) runs
one step ahead.
"""

from __future__ import annotations

from typing import Any

from bench.emulator.policies import Schedule, common, staleness_bound, surplus


def schedule(cfg: Any) -> Schedule:
    colocated = str(cfg.experiment.placement) in ("colocated", "Placement.colocated")
    return Schedule(
        name="partial_rollout",
        colocated=colocated,
        lag=0 if colocated else 1,
        refill=False,
        surplus=surplus(cfg, "abort"),
        staleness_bound=staleness_bound(cfg),
        **common(cfg),
    )
