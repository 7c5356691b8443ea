"""The scoring stage: teachers (a reward model, judge or distillation teacher) scoring finished groups.

A group that finishes generating is routed by its domain (the workload's task) to the first teacher of
experiment.teachers whose `domains` cover it, and queued there, first in, first out. A teacher has
engines (tp GPUs each); a free engine takes every group waiting in its teacher's queue as one batch
and scores it with one prefill-only forward pass over the batch's prompt + response tokens:

    batch_s = emulator.score_fixed_s + 2 x teacher active params x tokens / (engine GPUs x peak x prefill_mfu)

(compute-bound, as the generator's prefill; `score_fixed_s` is the per-batch request round trip and
scheduling). A group joins the trainer's batch only when its scoring batch ends.

Placement: a `dedicated` teacher has its own GPUs and runs beside generation. A `with_generator`
teacher is served on the generator's GPUs (Prime-RL's opd run: one vLLM server each, sharing GPU 0):
while a teacher engine of k GPUs computes a batch for c seconds (batch_s without the fixed part,
which is a round trip, not GPU work) it holds k of the generator's N GPUs, so the generator loses
k x c GPU-seconds, which the model spreads evenly over the pool: every generation engine pauses for
c x k / N from the batch's start (exact when the generator is one engine on the teacher's GPUs, as
in Prime-RL's run, up to where in the batch the pause falls; mean-field otherwise, like the
generator's own batch shares). Pauses of concurrent batches add up rather than overlap, so the
GPU-seconds are conserved.

Units: seconds, tokens, FLOP/s. Nothing here is fitted: the efficiency is `emulator.prefill_mfu`; a
teacher's cost (TeacherModel, teacher_models) is the cost model's (bench/model/costmodel.py), this
module is only the queues.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.model.costmodel import TeacherModel


@dataclass
class TeacherState:
    """A teacher's FIFO queue of (group, tokens) and which of its engines are busy."""

    model: TeacherModel
    queue: deque = field(default_factory=deque)
    free: list[int] = field(default_factory=list)  # idle engines, lowest first
    busy_s: float = 0.0  # engine-seconds spent scoring
    batches: int = 0
    groups: int = 0
    tokens: float = 0.0


class Scorer:
    """Every teacher's queue and engines; events are scoring batches ending.

    `pause(t, until)`: stop the generator's decoding (the Loop's generator.pause), called for batches
    of with_generator teachers."""

    def __init__(self, teachers: list[TeacherModel], pause: Callable[[float, float], None] | None = None):
        if not teachers:
            raise ValueError("a Scorer needs at least one teacher (experiment.teachers)")
        self.teachers = [TeacherState(m, free=list(range(m.engines))) for m in teachers]
        for s in self.teachers:
            if not s.free:
                raise ValueError(f"teacher {s.model.model}: 0 engines; expected GPUs for at least one engine")
        self.pause = pause
        self.events: list[
            tuple[float, int, int, int, list[int]]
        ] = []  # (t_end, seq, teacher, engine, groups)
        self._seq = 0
        self._routes: dict[str, int] = {}
        self.scored_at: dict[int, tuple[float, float]] = {}  # group -> its scoring batch's (start, end) (s)
        self.stolen_until = 0.0  # generator paused for with_generator scoring until (s)

    def route(self, domain: str) -> int:
        """Index of the teacher that scores `domain`: the first whose domains cover it."""
        k = self._routes.get(domain)
        if k is None:
            k = next((i for i, s in enumerate(self.teachers) if s.model.scores(domain)), -1)
            if k < 0:
                raise ValueError(f"no teacher scores domain {domain!r} (experiment.teachers domains)")
            self._routes[domain] = k
        return k

    def submit(self, g: int, tokens: float, domain: str, t: float) -> None:
        """Group g (`tokens` prompt + response tokens over its rollouts) finished generating at t."""
        k = self.route(domain)
        self.teachers[k].queue.append((g, float(tokens)))
        self._start(k, t)

    def drop(self, groups: set[int]) -> None:
        """Forget `groups` still waiting in a queue (cancelled): they are never scored. A batch
        already on an engine runs to its end."""
        for s in self.teachers:
            if s.queue:
                s.queue = deque(q for q in s.queue if q[0] not in groups)

    def _start(self, k: int, t: float) -> None:
        """Teacher k's free engines take what waits in its queue: the first takes all of it."""
        s = self.teachers[k]
        if not s.queue or not s.free:
            return
        e = s.free.pop(0)
        groups = [g for g, _ in s.queue]
        tokens = sum(n for _, n in s.queue)
        s.queue.clear()
        d = s.model.batch_s(tokens)
        end = t + d
        s.busy_s += d
        s.batches += 1
        s.groups += len(groups)
        s.tokens += tokens
        for g in groups:
            self.scored_at[g] = (t, end)
        if s.model.generator_share > 0 and self.pause is not None:
            # the GPU-seconds the batch computes on the generator's GPUs, spread over its engines,
            # after any earlier with_generator batch's share (concurrent batches add up)
            start = max(t, self.stolen_until)
            self.stolen_until = start + s.model.compute_s(tokens) * s.model.generator_share
            self.pause(t, self.stolen_until)
        self._seq += 1
        heapq.heappush(self.events, (end, self._seq, k, e, groups))

    def next_time(self) -> float:
        """When the next scoring batch ends (inf when none is running)."""
        return self.events[0][0] if self.events else np.inf

    def step(self) -> tuple[float, list[int]]:
        """End the next scoring batch: (its end time, the groups it scored); the engine takes the
        next batch from its queue."""
        t, _, k, e, groups = heapq.heappop(self.events)
        s = self.teachers[k]
        s.free.append(e)
        s.free.sort()
        self._start(k, t)
        return t, groups

    def span_s(self, groups: list[int]) -> float:
        """Wall seconds during which a scoring batch of any of `groups` ran (the union of their
        batches' intervals): the scoring time of a trainer step whose batch holds `groups`."""
        iv = sorted(self.scored_at[g] for g in groups if g in self.scored_at)
        total, end = 0.0, -np.inf
        for a, b in iv:
            if b <= end:
                continue
            total += b - max(a, end)
            end = b
        return total

    def forget(self, groups: list[int]) -> None:
        """Drop the scoring intervals of groups no step will ask about again."""
        for g in groups:
            self.scored_at.pop(g, None)

    def summary(self) -> list[dict[str, Any]]:
        """Per teacher: engines, batches, groups, tokens scored and engine-seconds busy."""
        return [
            {
                "model": s.model.model,
                "engines": s.model.engines,
                "engine_gpus": s.model.engine_gpus,
                "with_generator": s.model.generator_share > 0,
                "batches": s.batches,
                "groups": s.groups,
                "tokens": int(round(s.tokens)),
                "busy_s": s.busy_s,
            }
            for s in self.teachers
        ]
