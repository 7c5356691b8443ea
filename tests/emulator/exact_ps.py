"""Test oracle: an exact per-rollout processor-sharing generation engine (the emulator's first
engine, ~5x slower), run by the emulator's own Loop in place of the group-level generator.Pool.

Each rollout is its own event pair: it takes a slot on the least-loaded engine (or waits, first in
first out, for one), joins that engine's continuous batch after its environment time and prefill,
and every decoding sequence on the engine advances at the per-sequence rate of the current batch
(a virtual clock per engine). A group is finished when its last rollout is. test_reference.py
checks that the group-level Pool agrees with it on the same draws and the same queue.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

JOIN, ENGINE, EMPTY = range(
    3
)  # a rollout starts decoding; an engine's next finish; a group with nothing to run


@dataclass(slots=True)
class Sequence:
    """One rollout on the generator (decode tokens; seconds)."""

    group: GroupRun
    member: int  # its index in the group
    work: float  # tokens to decode
    delay: float  # environment time + prefill before decoding (s)
    engine: int = -1  # -1: waiting for a slot
    v_join: float = -1.0  # the engine's virtual clock when it began decoding (-1: not yet)


@dataclass(slots=True)
class GroupRun:
    """A group placed on the generator; `finish` holds each rollout's finish time (s)."""

    group: int
    finish: np.ndarray
    left: int = 0  # rollouts still running


class ExactEngine:
    """All engines, rollout by rollout (bench.emulator.generator.GenerationEngine)."""

    def __init__(self, engines: int, group_size: int):
        self.engines, self.G = engines, group_size
        self.rate: list[float] = [1.0]
        self.limit = group_size
        self.V = [0.0] * engines  # virtual clock: tokens a sequence decoded since t = 0
        self.t_e = [0.0] * engines
        self.B = [0] * engines  # sequences decoding
        self.held = [0] * engines  # rollouts holding a slot (delay or decode)
        self.e_heap: list[list[tuple[float, int]]] = [[] for _ in range(engines)]
        self.epoch = [0] * engines
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.live: dict[int, Sequence] = {}  # by sequence id
        self.next_id = 0
        self.waiting: deque[int] = deque()
        self.empty: dict[int, GroupRun] = {}  # groups placed with nothing to run, by event id
        self.busy_s = 0.0
        self._running = 0
        self._busy_since = 0.0

    # --- engines ---------------------------------------------------------------------------------
    def _advance(self, e: int, t: float) -> None:
        dt = t - self.t_e[e]
        if dt > 0:
            self.V[e] += self.rate[self.B[e]] * dt if self.B[e] else 0.0
            self.t_e[e] = t

    def _reschedule(self, e: int) -> None:
        h = self.e_heap[e]
        while h and h[0][1] not in self.live:
            heapq.heappop(h)
        self.epoch[e] += 1
        if h:
            dv = h[0][0] - self.V[e]
            tn = self.t_e[e] + (dv / self.rate[self.B[e]] if dv > 0 else 0.0)
            self._push(tn, ENGINE, e, self.epoch[e])

    def _push(self, t: float, kind: int, x: int, epoch: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, x, epoch))

    def set_load(self, concurrency: int, rate: list[float], t: float) -> None:
        for e in range(self.engines):
            self._advance(e, t)
        self.limit, self.rate = concurrency, rate
        for e in range(self.engines):
            self._reschedule(e)

    def prepare(self, work: np.ndarray, delay: np.ndarray, memo: dict | None = None) -> None:
        """Nothing to precompute: every rollout is its own event pair."""

    def pause(self, t: float, until: float) -> None:
        for e in range(self.engines):
            self._advance(e, t)
            if self.t_e[e] < until:
                self.t_e[e] = until
            self._reschedule(e)

    # --- rollouts --------------------------------------------------------------------------------
    def place(self, g: int, work: np.ndarray, delay: np.ndarray, t: float, fresh: bool) -> bool:
        """Every rollout with something to do takes a slot or waits for one: always accepted."""
        run = GroupRun(g, np.full(self.G, t))
        for i in range(self.G):
            if work[i] <= 0 and delay[i] <= 0:  # a resumed group's member that had finished
                continue
            self.next_id += 1
            self.live[self.next_id] = Sequence(run, i, float(work[i]), float(delay[i]))
            run.left += 1
            if self.waiting or not self._start(self.next_id, t):
                self.waiting.append(self.next_id)
        if run.left == 0:
            self.next_id += 1
            self.empty[self.next_id] = run
            self._push(t, EMPTY, self.next_id)
        return True

    def _start(self, sid: int, t: float) -> bool:
        held = self.held
        e = min(range(self.engines), key=held.__getitem__)  # least-loaded engine, like a router
        if held[e] >= self.limit:
            return False
        held[e] += 1
        s = self.live[sid]
        s.engine = e
        if self._running == 0:
            self._busy_since = t
        self._running += 1
        self._push(t + s.delay, JOIN, sid)
        return True

    def _free(self, s: Sequence, t: float) -> None:
        self.held[s.engine] -= 1
        self._running -= 1
        if self._running == 0:
            self.busy_s += t - self._busy_since

    def _start_waiting(self, t: float) -> None:
        w = self.waiting
        while w:
            if w[0] in self.live and not self._start(w[0], t):
                return
            w.popleft()

    def next_time(self) -> float:
        h = self.heap
        while h:
            _, _, kind, x, epoch = h[0]
            if (
                (kind == JOIN and x not in self.live)
                or (kind == ENGINE and epoch != self.epoch[x])
                or (kind == EMPTY and x not in self.empty)
            ):
                heapq.heappop(h)
                continue
            return h[0][0]
        return np.inf

    def step(self) -> list[tuple[int, GroupRun]]:
        t, _, kind, x, _ = heapq.heappop(self.heap)
        if kind == EMPTY:
            run = self.empty.pop(x)
            return [(run.group, run)]
        if kind == JOIN:
            s = self.live[x]
            e = s.engine
            self._advance(e, t)
            s.v_join = self.V[e]
            heapq.heappush(self.e_heap[e], (s.v_join + s.work, x))
            self.B[e] += 1
            self._reschedule(e)
            return []
        e, out = x, []
        self._advance(e, t)
        h = self.e_heap[e]
        while h and (h[0][1] not in self.live or h[0][0] <= self.V[e] + 1e-6):
            _, sid = heapq.heappop(h)
            s = self.live.pop(sid, None)
            if s is None:
                continue
            self.B[e] -= 1
            self._free(s, t)
            run = s.group
            run.finish[s.member] = t
            run.left -= 1
            if run.left == 0:
                out.append((run.group, run))
        self._start_waiting(t)
        self._reschedule(e)
        return out

    def advance(self, limit: float) -> tuple[float, list[tuple[int, GroupRun]], int]:
        """Events earlier than `limit` (s) until one finishes groups (GenerationEngine.advance)."""
        t, n = self.next_time(), 0
        while t < limit:
            out = self.step()
            n += 1
            if out:
                return t, out, n
            t = self.next_time()
        return t, [], n

    def finish_times(self, records: list[GroupRun], delay: np.ndarray, work: np.ndarray) -> np.ndarray:
        """Each rollout's own finish time, as it happened."""
        return np.stack([run.finish for run in records])

    def stop_all(self, t: float) -> tuple[list[int], np.ndarray]:
        """Stop every rollout at t; its group's row holds the tokens each had decoded (0 before its
        decode began): generator.Decoded."""
        decoded: dict[int, np.ndarray] = {}
        for s in self.live.values():
            done = 0.0
            if s.engine >= 0:
                if s.v_join >= 0:
                    self._advance(s.engine, t)
                    done = min(self.V[s.engine] - s.v_join, s.work)
                    self.B[s.engine] -= 1
                self._free(s, t)
            decoded.setdefault(s.group.group, np.zeros(self.G))[s.member] = max(done, 0.0)
        self.live.clear()
        self.waiting.clear()
        self.empty.clear()
        for e in range(self.engines):
            self.e_heap[e].clear()
            self.epoch[e] += 1
        return list(decoded), np.array(list(decoded.values())).reshape(len(decoded), self.G)

    def close(self, t: float) -> None:
        if self._running > 0:
            self.busy_s += t - self._busy_since
            self._busy_since = t
