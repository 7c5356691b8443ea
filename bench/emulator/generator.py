"""The generator pool: engines running continuous batches, modelled at the granularity of groups.

A group (the orchestrator's unit: prime-rl routes a whole group to one client) runs on one engine.
Its G rollouts each spend their environment time and prefill (a pure delay, in real time), then
decode. Within an engine every decoding sequence advances at the same per-sequence rate, set by the
engine's decode batch B through the roofline (costmodel.rate_table): egalitarian processor sharing.

Per engine a virtual clock V (dV/dt = rate(B)) turns that into O(log n) work per event: a group
whose critical rollout (the one that would finish last at today's rate) starts decoding at V0 with
w tokens finishes when V = V0 + w, however B changes meanwhile. While decoding, a group adds to B
its number of live sequences, averaged over each of SEGMENTS equal spans of the critical rollout's
progress (mean field inside a span), so the engine's token throughput is conserved, a group's load
falls as its short rollouts end, and a batch's last groups speed up as their engine empties. One
span (the plain average) is enough when an engine holds groups at every phase; when every group
starts at once (a refill after cancel-at-fill), the per-sequence rate's convexity in B makes a
single average 6% pessimistic against the exact per-rollout engine; three spans bring it to 0.2%
(two: 1.3%, four: 0.0%, at 1.24x the events of three).
Events: one when a group starts decoding, one per later span, one when it finishes; nothing per
token or per turn.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

JOIN, ENGINE = 0, 1
SEGMENTS = 3  # spans of a group's decode with their own batch share (see the module docstring)


class GenerationEngine(Protocol):
    """What the Loop needs of the generator: groups in, finished groups out, in emulated seconds.

    `Pool` (below) is the group-level engine the emulator runs; tests/emulator/exact_ps.py is the
    exact per-rollout engine the same Loop runs as a test oracle. A finished group is returned as
    (group, record); `finish_times(records, delay, work)` gives its rollouts' finish times, so the
    Loop may defer them to the end of the run and compute them all at once."""

    engines: int
    busy_s: float  # seconds with at least one group on an engine

    def set_load(self, concurrency: int, rate: list[float], t: float) -> None:
        """Rollouts an engine holds, and per-sequence decode rate (tokens/s) by decode batch size."""

    def prepare(self, work: np.ndarray, delay: np.ndarray, memo: dict | None = None) -> None:
        """Groups just drawn (ids follow the previous ones): decode tokens and delay (s), (groups, G).
        `memo`: a dict kept with the drawn chunk for this engine, where what an engine derives from
        the chunk may be kept for the next run replaying it (bench.plan: every split, the same draws)."""

    def place(self, g: int, work: np.ndarray, delay: np.ndarray, t: float, fresh: bool) -> bool:
        """Start group g at t (its rollouts' tokens and delays; `fresh`: as drawn, not resumed);
        False when no engine has room (the Loop queues it and offers it again)."""

    def next_time(self) -> float:
        """Time of the next event (inf when idle)."""

    def step(self) -> list[tuple[int, object]]:
        """Process the next event; the groups it finished, as (group, record)."""

    def advance(self, limit: float) -> tuple[float, list[tuple[int, object]], int]:
        """Process events earlier than `limit` (s) until one finishes groups: (the time of that
        event (s), the groups it finished as (group, record), events processed)."""

    def finish_times(self, records: list, delay: np.ndarray, work: np.ndarray) -> np.ndarray:
        """Finish time (s) of every rollout of finished groups' `records`, (groups, G), given the
        delays (s) and tokens they were placed with, (groups, G)."""

    def pause(self, t: float, until: float) -> None:
        """No decoding between t and `until`."""

    def stop_all(self, t: float) -> Decoded:
        """Stop every group at t; the groups that were on an engine and the tokens each of their
        rollouts had decoded, (groups, G)."""

    def close(self, t: float) -> None:
        """End of run at t (busy time of groups still in flight)."""


@dataclass(slots=True)
class Placement:
    """A group on an engine (a resumed group is a new placement); times in s, work in tokens."""

    engine: int
    t_start: float  # placed: its rollouts' environment time and prefill begin
    delay: np.ndarray  # per rollout: environment time + prefill before decoding (s)
    work: np.ndarray  # per rollout: tokens to decode
    crit_delay: float  # the critical rollout's (the one that finishes last)
    crit_work: float
    share: float  # its current share of the engine's decode batch (sequences)
    v_join: float  # the engine's virtual clock when the critical rollout began decoding (-1: not yet)
    group: int
    occupancy: float  # rollouts held, time-averaged over the group's life
    shares: Sequence[float]  # batch share per span of the critical rollout's decode


# What a stop found: the groups on an engine (in any order) and the tokens each of their rollouts
# had decoded, one row per group (groups, G). Rows, not a dict of them: a run keeps every batch
# fill's until its end (rollouts.Rollouts.discard), and one array a fill is cheaper to make and read.
Decoded = tuple[list[int], np.ndarray]

# A finished group, as the Loop keeps it until the end of the run: (t_start, crit_delay, crit_work,
# t_end) in s and tokens. A plain tuple of floats, not a record, for a measured reason: the Loop holds
# one per finished group for the whole run, and holding the Placement instead ran case 1 ~3% slower.
Finished = tuple[float, float, float, float]


class Pool:
    """All engines of the generator; times in seconds, work in decode tokens."""

    def __init__(self, engines: int, group_size: int):
        self.E, self.G = engines, group_size
        self.rate: list[float] = [1.0]  # per-sequence tokens/s, indexed by decode batch size (set_load)
        self.top = 0  # the largest batch the rate table holds: len(rate) - 1
        self.limit = group_size  # rollouts an engine holds (KV capacity / sequence length, capped)
        self.V = [0.0] * engines
        self.t_e = [0.0] * engines
        self.B = [0.0] * engines
        self.occ = [0.0] * engines  # rollouts held, time-averaged over each group's life (see place)
        self.e_heap: list[list[tuple[float, int, int]]] = [[] for _ in range(engines)]
        self.epoch = [0] * engines
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.groups: dict[int, Placement] = {}  # by placement id
        self.pid = 0  # placement ids: a resumed group is a new placement
        self.busy_s = 0.0
        self._busy_since = 0.0
        # per drawn group, at the nominal rate (prepare): its critical rollout's delay (s) and tokens,
        # its batch share per span and its occupancy; plain lists, read one group at a time by place()
        self.crit_delay: list[float] = []
        self.crit_work: list[float] = []
        self.shares: list[list[float]] = []
        self.occupancy: list[float] = []

    @property
    def engines(self) -> int:
        return self.E

    def set_load(self, concurrency: int, rate: list[float], t: float) -> None:
        """New concurrency and rate table (the load drifts with training). Engines are not advanced
        to t first: the Loop changes the load when a weight sync lands, and the sync's pause has
        already brought every engine to t; an event scheduled at the old rate that comes early (the
        rate falls as contexts grow) reschedules itself."""
        self.limit, self.rate, self.top = concurrency, rate, len(rate) - 1

    def prepare(self, work: np.ndarray, delay: np.ndarray, memo: dict | None = None) -> None:
        """Each drawn group's shape at today's nominal rate (vectorised group_shape()); found in
        `memo` when a run replaying the same chunk at the same rate shaped it (10% of a plan point)."""
        nominal = self.rate[min(self.limit, len(self.rate) - 1)]
        shape = memo.get(("shape", nominal)) if memo is not None else None
        if shape is None:
            life = delay + work / nominal
            crit = life.argmax(axis=1)
            rows = np.arange(len(work))
            crit_work = work[rows, crit]
            shape = (
                delay[rows, crit].tolist(),
                crit_work.tolist(),
                batch_shares(work, crit_work).tolist(),  # lists of floats, only read
                (life.sum(axis=1) / life[rows, crit]).tolist(),
            )
            if memo is not None:
                memo["shape", nominal] = shape
        self.crit_delay += shape[0]
        self.crit_work += shape[1]
        self.shares += shape[2]
        self.occupancy += shape[3]

    # --- engines ---------------------------------------------------------------------------------
    def _advance(self, e: int, t: float) -> None:
        dt = t - self.t_e[e]
        if dt > 0:
            b = self.B[e]
            if b > 1e-9:
                i = int(b + 0.5)
                self.V[e] += self.rate[i if i < self.top else self.top] * dt
            self.t_e[e] = t

    def _rate(self, e: int) -> float:
        i = int(self.B[e] + 0.5)
        i = 1 if i < 1 else i
        return self.rate[i if i < self.top else self.top]  # min(max(i, 1), top), without the calls

    def _reschedule(self, e: int) -> None:
        """Engine e's next event at its current rate (one call per engine event: _rate inlined)."""
        h, groups = self.e_heap[e], self.groups
        while h and h[0][1] not in groups:
            heapq.heappop(h)
        self.epoch[e] = epoch = self.epoch[e] + 1
        if h:
            dv = h[0][0] - self.V[e]
            self.seq += 1
            if dv > 0:
                i = int(self.B[e] + 0.5)
                i = 1 if i < 1 else i
                tn = self.t_e[e] + dv / self.rate[i if i < self.top else self.top]
            else:
                tn = self.t_e[e] + 0.0
            heapq.heappush(self.heap, (tn, self.seq, ENGINE, e, epoch))

    def pause(self, t: float, until: float) -> None:
        """No decoding between t and `until` (weights loading, or training on colocated GPUs)."""
        for e in range(self.E):
            self._advance(e, t)
            if self.t_e[e] < until:
                self.t_e[e] = until
            self._reschedule(e)

    # --- groups ----------------------------------------------------------------------------------
    def place(self, g: int, work: np.ndarray, delay: np.ndarray, t: float, fresh: bool) -> bool:
        """Start group g (decode tokens and delays (s) per rollout) on the least-loaded engine at t;
        False when every engine is full. A fresh group has its shape from prepare(); a resumed one
        is shaped at today's rate.

        Capacity is counted in rollouts held, time-averaged over the group's life (a rollout holds its
        slot through its environment time and decode; the group ends with its critical rollout), so a
        group's finished rollouts free room for others, as they do in the engine."""
        occ = self.occ
        e = occ.index(min(occ))  # least-loaded engine (the first on ties)
        if fresh:
            d, w, shares, o = self.crit_delay[g], self.crit_work[g], self.shares[g], self.occupancy[g]
        else:
            c, shares, o = group_shape(work, delay, self._rate(e))
            d, w = float(delay[c]), float(work[c])
        if occ[e] > 0 and occ[e] + o > self.limit:
            return False
        if not self.groups:
            self._busy_since = t
        occ[e] += o
        self.pid += 1
        self.groups[self.pid] = Placement(e, t, delay, work, d, w, shares[0], -1.0, g, o, shares)
        self.seq += 1
        heapq.heappush(self.heap, (t + d, self.seq, JOIN, self.pid, 0))
        return True

    def next_time(self) -> float:
        """Time of the pool's next event (inf when idle)."""
        h = self.heap
        while h:
            _, _, kind, x, ep = h[0]
            if (kind == JOIN and x not in self.groups) or (kind == ENGINE and ep != self.epoch[x]):
                heapq.heappop(h)
                continue
            return h[0][0]
        return np.inf

    def step(self) -> list[tuple[int, Finished]]:
        """Process the next event; return the groups it completed as (group, Finished)."""
        return self.advance(np.inf, 1)[1]

    def advance(self, limit: float, most: int = 0) -> tuple[float, list[tuple[int, Finished]], int]:
        """Process events earlier than `limit` (s) in time order until one completes groups (or
        `most` events, when > 0): (the time of the event that completed them (s), the groups as
        (group, Finished), events processed). An event at `limit` or later is left on the heap.

        Four in five events complete nothing (a group starting to decode, a span ending): they are
        processed here without a return to the Loop, with next_time, step, _advance and _reschedule
        inlined (this is the emulator's hottest path, one pass per engine event; the arithmetic is
        theirs, in their order). A group's spans are chained: only its next span's entry is on its
        engine's heap (its successor is pushed when it is reached, and is never earlier), so the heap
        pops them in the same order as if all were pushed at once, with a third of the entries. The
        event being processed stays at the top of the pool's heap until its engine's next event
        replaces it (one sift, not a pop and a push; the keys are unique, so the order is the same)."""
        heap, groups, B, V, t_e, epoch = self.heap, self.groups, self.B, self.V, self.t_e, self.epoch
        rate, top, e_heap, occ, seq = self.rate, self.top, self.e_heap, self.occ, self.seq
        pop, push, replace = heapq.heappop, heapq.heappush, heapq.heapreplace
        n, t, out = 0, 0.0, []
        while heap:
            t, _, kind, x, ep = heap[0]  # left on the heap until processed: replaced by its engine's next
            if kind == JOIN:
                p = groups.get(x)
                if p is None:  # a placement stopped before its decode began
                    pop(heap)
                    continue
                e = p.engine
            elif ep != epoch[x]:  # an engine event its engine rescheduled since
                pop(heap)
                continue
            else:
                e = x
            if t >= limit:  # the Loop's first
                break
            n += 1
            # the engine's clock, virtual clock and decode batch, as locals, written back below
            te, v, b = t_e[e], V[e], B[e]
            if t - te > 0:  # the virtual clock to t
                if b > 1e-9:
                    i = int(b + 0.5)
                    v += rate[i if i < top else top] * (t - te)
                te = t
            h = e_heap[e]
            if kind == JOIN:  # the critical rollout starts decoding
                p.v_join = v
                # span j starts at V = v_join + w * j / k; span k is the finish
                push(h, (v + p.crit_work * 1 / len(p.shares), x, 1))
                b += p.share
            else:
                v_now = v + 1e-6
                while h and (h[0][1] not in groups or h[0][0] <= v_now):
                    _, pid, j = pop(h)
                    p = groups.get(pid)
                    if p is None:
                        continue
                    shares = p.shares
                    k = len(shares)
                    if j < k:  # the next span: the group's share of B steps down
                        b = b + shares[j] - p.share
                        b = b if b >= 0.0 else 0.0  # max(b, 0.0), without the call
                        p.share = shares[j]
                        push(h, (p.v_join + p.crit_work * (j + 1) / k, pid, j + 1))
                        continue
                    del groups[pid]
                    b -= p.share
                    b = b if b >= 0.0 else 0.0
                    occ[e] = max(occ[e] - p.occupancy, 0.0)
                    out.append((p.group, (p.t_start, p.crit_delay, p.crit_work, t)))
                if not groups:
                    self.busy_s += t - self._busy_since
            t_e[e], V[e], B[e] = te, v, b
            # _reschedule(e): the engine's next event at its current rate
            while h and h[0][1] not in groups:
                pop(h)
            epoch[e] = ep = epoch[e] + 1
            if h:
                dv = h[0][0] - v
                seq += 1
                if dv > 0:
                    i = int(b + 0.5)
                    i = 1 if i < 1 else i
                    tn = te + dv / rate[i if i < top else top]
                else:
                    tn = te + 0.0
                replace(heap, (tn, seq, ENGINE, e, ep))  # the event processed out, the next in: one sift
            else:
                pop(heap)
            if out or n == most:
                break
        self.seq = seq
        return t, out, n

    def finish_times(self, records: list[Finished], delay: np.ndarray, work: np.ndarray) -> np.ndarray:
        """Each rollout's finish (s) in finished groups, (groups, G), given the delays and tokens they
        were placed with: its own delay, then its tokens at its group's mean rate (the critical
        rollout's tokens took t_end - (t_start + crit_delay) s)."""
        col = np.array(records).reshape(-1, 4, 1)
        return finish_times(col[:, 0], col[:, 1], col[:, 2], col[:, 3], delay, work)

    def stop_all(self, t: float) -> Decoded:
        """Stop every group at t (cancel or abort); return the groups and the tokens each of their
        rollouts had decoded (Decoded)."""
        recs = list(self.groups.values())
        done: Decoded = ([], np.zeros((0, self.G)))
        if recs:
            for e in {p.engine for p in recs}:
                self._advance(e, t)
            # per-sequence rate of each group's engine, as Python floats (numpy scalars would make
            # the arithmetic below ~5x slower; the values are the same doubles)
            rate_of = [self._rate(e) for e in range(self.E)]
            rates, V = [rate_of[p.engine] for p in recs], self.V
            # the critical rollout's progress, shifted by each rollout's own delay
            head = np.array(
                [V[p.engine] - p.v_join + p.crit_delay * r if p.v_join >= 0 else (t - p.t_start) * r
                 for p, r in zip(recs, rates, strict=True)]
            )  # fmt: skip
            rate = np.array(rates)
            # (groups, G); concatenate + reshape is np.stack's result at a quarter of its cost
            delay = np.concatenate([p.delay for p in recs]).reshape(len(recs), -1)
            work = np.concatenate([p.work for p in recs]).reshape(len(recs), -1)
            x = np.clip(head[:, None] - delay * rate[:, None], 0.0, work)
            done = [p.group for p in recs], x
            self.busy_s += t - self._busy_since
        self.groups.clear()
        self.heap.clear()  # every entry was a stopped group's or an engine's (stale from here on)
        for e in range(self.E):
            self.B[e], self.occ[e] = 0.0, 0.0
            self.e_heap[e].clear()
            self.epoch[e] += 1
        return done

    def close(self, t: float) -> None:
        """End of run: count the busy time of groups still in flight."""
        if self.groups:
            self.busy_s += t - self._busy_since
            self._busy_since = t


def finish_times(t0, d, w, t, delay, work):
    """Vectorised over groups too: rollouts start decoding at t0 + delay and finish at t at the latest."""
    span = np.maximum(np.asarray(t) - (np.asarray(t0) + d), 0.0)
    rate_inv = np.where(np.asarray(w) > 0, span / np.maximum(w, 1e-12), 0.0)
    return np.clip(np.asarray(t0) + delay + work * rate_inv, np.asarray(t0) + delay, t)


def group_shape(work: np.ndarray, delay: np.ndarray, rate: float) -> tuple[int, tuple[float, ...], float]:
    """(critical rollout, decode-batch share per span, slot occupancy) of one group at per-sequence
    `rate` (tokens/s).

    The critical rollout finishes last; the batch shares are batch_shares() of the group's work; the
    occupancy is sum(delay + work / rate) / its (delay + work / rate).
    """
    life = delay + work / rate
    c = int(np.argmax(life))
    shares = batch_shares(work[None, :], np.array([work[c]]))[0]
    return c, tuple(shares.tolist()), float(life.sum() / life[c]) if life[c] > 0 else 1.0


def batch_shares(work: np.ndarray, crit_work: np.ndarray, spans: int = SEGMENTS) -> np.ndarray:
    """Live decoders of each group (rows of `work`, tokens) averaged over `spans` equal spans of its
    critical rollout's `crit_work` tokens: (groups, spans). Tokens are conserved: the shares times
    crit_work / spans sum to the group's work clipped at crit_work."""
    edges = crit_work[:, None] * (np.arange(spans + 1) / spans)[None, :]  # (groups, spans + 1)
    done = np.minimum(work[:, :, None], edges[:, None, :]).sum(axis=1)  # tokens by each edge
    width = np.maximum(np.diff(edges, axis=1), 1e-12)
    return np.where(crit_work[:, None] > 0, np.diff(done, axis=1) / width, 0.0)
