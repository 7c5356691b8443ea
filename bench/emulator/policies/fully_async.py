"""Fully asynchronous RL with a staleness bound: prime-rl (orchestrator scheduler), verl
`fully_async` / V1 `separate_async`.

Streaming generation: prompts x oversampling groups stay in flight; every finished group is
replaced at once and rollouts stay in flight across weight updates (the update lands mid-rollout,
so `policy_version_end` > `policy_version_start`). The trainer takes the first batch of finished
groups. Generation runs at most `emulator.async_lag` batches ahead of the trainer (prime-rl: 1,
its fixed async level); samples older than `workload.staleness_budget` versions are discarded
(prime-rl `max_off_policy_steps`, verl `max_off_policy_threshold`) where the framework drops stale
samples (`framework.drops_stale`; slime's fully-async rollout does not).
"""

from __future__ import annotations

from typing import Any

from bench.emulator.policies import Schedule, common, staleness_bound, surplus


def schedule(cfg: Any) -> Schedule:
    return Schedule(
        name="fully_async",
        colocated=False,
        lag=max(1, int(cfg.emulator.async_lag)),
        refill=True,
        # with partial rollout (verl fully_async, AReaL, slime + --partial-rollout) in-flight rollouts
        # are interrupted when a batch fills and resume under the new weights; otherwise they carry on
        surplus=surplus(cfg, "abort" if cfg.experiment.partial_rollout else "carry"),
        staleness_bound=staleness_bound(cfg),
        **common(cfg),
    )
