"""Emulator policies: one small module per framework mode, loaded by dotted path.

A policy is a function `schedule(cfg) -> Schedule`: the few facts about a framework mode that the
queue needs (placement, how far generation may run ahead, what happens to in-flight rollouts when a
batch fills, the staleness bound). conf/framework/*.yaml `modes:` maps each native mode to one
module path; `emulator.policy` overrides it with any importable path (a user's own policy too).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, Protocol

Surplus = Literal["carry", "cancel", "abort"]
SURPLUS = ("carry", "cancel", "abort")


@dataclass(frozen=True)
class Schedule:
    """What the queue needs to know about a framework mode.

    - colocated: trainer and generator time-share the same GPUs (generation pauses while training).
    - lag: batches the generator may run ahead: work for batch b is dispatched only once the generator
      holds weights of version >= b - 1 - lag (0 = synchronous, 1 = one step off-policy).
    - refill: replace every finished group at once (continuous/streaming generation) instead of
      dispatching one round of groups per batch.
    - surplus: in-flight rollouts when a batch fills: carry (keep them for later batches), cancel
      (discard: oversampling waste), abort (stop and resume them later: partial rollout).
    - staleness_bound: max policy versions a trained sample may lag; older ones are discarded.
    - inflight_groups: groups in flight (refill) or dispatched per round (prompts x oversampling).
    - filter_zero_advantage / backfill: drop groups whose rewards are all equal; replace them or not.
    """

    name: str
    colocated: bool
    lag: int
    refill: bool
    surplus: Surplus
    staleness_bound: int
    inflight_groups: int
    filter_zero_advantage: bool = False
    backfill: bool = True

    def __post_init__(self) -> None:
        if self.surplus not in SURPLUS:
            raise ValueError(f"Schedule.surplus={self.surplus!r}: expected one of {SURPLUS}")
        if self.lag < 0 or self.inflight_groups < 1:
            raise ValueError(f"Schedule {self.name}: lag={self.lag}, inflight_groups={self.inflight_groups}")


class Policy(Protocol):
    """The policy hook: the composed BenchConf in, the Schedule of the queue out."""

    def __call__(self, cfg: Any) -> Schedule: ...


def load_object(path: str) -> Any:
    """Import `package.module` or `package.module.attr` (the ~10-line loader of every hook)."""
    module, _, attr = path.rpartition(".")
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as e:
        if e.name != path or not module:  # a missing dependency inside the module, or no parent
            raise
    try:
        return getattr(importlib.import_module(module), attr)
    except AttributeError:
        raise ImportError(f"{path!r}: module {module!r} has no attribute {attr!r}") from None


def load_policy(path: str) -> Policy:
    """A policy from a dotted path: a module (its `schedule` function) or a callable."""
    obj = load_object(path)
    if isinstance(obj, ModuleType):
        obj = getattr(obj, "schedule", None)
    if not callable(obj):
        raise ImportError(f"{path!r}: expected a module with `schedule(cfg)` or a callable policy")
    return obj


def inflight_groups(cfg: Any) -> int:
    """Groups dispatched per batch: prompts per step x experiment.oversampling (at least the batch)."""
    import math

    need = int(cfg.workload.prompts_per_step)
    return max(need, int(math.ceil(need * float(cfg.experiment.oversampling) - 1e-9)))


def common(cfg: Any) -> dict[str, Any]:
    """Schedule fields every policy takes from the experiment and emulator groups."""
    return {
        "inflight_groups": inflight_groups(cfg),
        "filter_zero_advantage": bool(cfg.experiment.filter_zero_advantage),
        "backfill": bool(cfg.emulator.filter_backfill),
    }


UNBOUNDED = 10**9  # staleness_bound of a framework that never drops stale samples


def staleness_bound(cfg: Any) -> int:
    """Versions a trained sample may lag before it is discarded: workload.staleness_budget (at
    least 1) where the framework enforces it (framework.drops_stale), else UNBOUNDED."""
    if not cfg.framework.drops_stale:
        return UNBOUNDED
    return max(1, int(cfg.workload.staleness_budget))


def surplus(cfg: Any, default: Surplus) -> Surplus:
    """The policy's surplus rule unless `emulator.surplus` overrides it (a documented input)."""
    rule = cfg.emulator.surplus or default
    if rule not in SURPLUS:
        raise ValueError(
            f"emulator.surplus={rule!r}: expected one of {SURPLUS} (or empty for the policy's own)"
        )
    return rule
