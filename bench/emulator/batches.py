"""Batch filling and filtering: the trainer's batch for each step, filled group by group as groups
finish generating.

A finished group is discarded when its policy version lags the batch's step by more than the
staleness bound, filtered when every reward in it is equal (zero advantage, when the schedule
filters), else kept. A batch is full when `prompts_per_step` groups count toward it: the kept ones,
plus the filtered ones when a filtered group is not replaced (no backfill: the trainer takes a
smaller batch). What happens then to the groups still in flight is surplus.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.emulator.policies import Schedule
from bench.emulator.rollouts import DISCARDED, FILTERED, PENDING


@dataclass
class Batch:
    """The batch trainer step `step` trains on (times in emulated seconds)."""

    step: int
    kept: list[int] = field(default_factory=list)  # groups it trains on
    filtered: list[int] = field(default_factory=list)  # groups dropped for zero advantage
    round_at: float | None = None  # its round of groups was dispatched (round dispatch only)
    filled_at: float | None = None  # its last group came in

    def counted(self, backfill: bool) -> int:
        """Groups that count toward the batch size."""
        return len(self.kept) + (0 if backfill else len(self.filtered))

    def generation_s(self, previous: Batch | None) -> float:
        """Generation time of the batch: from its round's dispatch (or the previous batch's fill, or
        the start of the run) to its fill."""
        if self.round_at is not None:
            start = self.round_at
        else:
            start = previous.filled_at if previous is not None and previous.filled_at is not None else 0.0
        return self.filled_at - start


def staleness(batch_step: int, version_start: Any) -> Any:
    """Policy versions a sample generated from weights `version_start` lags when trained at
    `batch_step` (step b trains with weights b - 1); elementwise over an array of versions."""
    return (batch_step - 1) - version_start


def verdict(sched: Schedule, batch_step: int, version_start: int, zero_advantage: bool) -> int:
    """The status of a group finishing while `batch_step` fills: DISCARDED (too stale), FILTERED
    (zero advantage, filtered by the schedule) or PENDING (kept: waits for the trainer)."""
    if staleness(batch_step, version_start) > sched.staleness_bound:
        return DISCARDED
    if sched.filter_zero_advantage and zero_advantage:
        return FILTERED
    return PENDING
