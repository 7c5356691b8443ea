"""Rollout columns: the state of every dispatched rollout, one numpy column per field, and the facts
of each group (its prompt's rollouts, scored together).

A rollout's id is its row: group g holds rollouts g*G .. g*G+G-1, drawn a chunk of groups at a time
(draws.py). A rollout aborted when a batch fills (partial rollout) leaves a `resumed` segment in
`history` and its own row restarts when it resumes, so a rollout's own row is always its final state.
Status codes are small ints in one int8 column (vectorised masks over whole groups); STATUS_NAMES
gives the trace's names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.emulator.draws import GroupChunk
from bench.emulator.generator import Decoded

# Rollout status. In flight: RUNNING (generating) or PENDING (finished, not trained yet); final: USED
# (trained), DISCARDED (cancelled surplus or too stale), FILTERED (zero advantage), ABORTED (buffered
# partial rollout the run ended on); RESUMED: a segment cut by an abort, continued in a later segment.
RUNNING, PENDING, USED, DISCARDED, ABORTED, FILTERED, RESUMED = range(7)
# trace names; a rollout still running or pending when the run ends was aborted by the end of the run
STATUS_NAMES = ("aborted", "aborted", "used", "discarded", "aborted", "filtered", "resumed")
IN_FLIGHT = (RUNNING, PENDING)
DONE_TOKENS = 1e-6  # decode tokens: a rollout with fewer left has finished

# per-rollout draws, fixed at dispatch
DRAWN = {"prompt_tokens": np.int64, "response_tokens": np.int64, "tool_tokens": np.int64,
         "turns": np.int64, "env_s": np.float64, "reward": np.float64}  # fmt: skip
# one trace segment: what the trace's rollouts.parquet reports per row
SEGMENT = {"status": np.int8, "step": np.int64, "version_start": np.int64, "version_end": np.int64,
           "t_dispatch": np.float64, "t_finish": np.float64, "tokens": np.float64}  # fmt: skip
# generation state (decode tokens and seconds)
GENERATION = {
    "work": np.float64,  # response tokens to decode in all
    "left": np.float64,  # tokens still to decode (after an abort)
    "delay": np.float64,  # environment time + prefill before the first decode (s)
    "context": np.float64,  # prompt + tool-output tokens (re-prefilled on resume)
    "seg_work": np.float64,  # tokens the current segment set out to decode
    "seg_delay": np.float64,  # environment time + prefill the current segment started with (s)
    "env_left": np.float64,  # environment time left of an episode aborted before its decode began (s)
}


# blocks of released tables (Columns.release) by (dtype, shape), for the next run of this process
_SPARE: dict[tuple[np.dtype, tuple[int, int]], list[np.ndarray]] = {}


class Columns:
    """Equal-length numpy columns that double their capacity when full.

    `recycled`: the first block of each dtype may be one a finished run released (release()), its
    rows holding that run's values: the owner writes every column of the rows it adds. A fresh
    block's pages are faulted in and zeroed by the kernel at their first write: ~12 ms of a 0.4-s
    case-1 plan point for its 60 MB, which a recycled block (already mapped) does not pay."""

    def __init__(self, dtypes: dict[str, Any], cap: int = 4096, recycled: bool = False):
        self.n, self.cap = 0, max(int(cap), 1)
        # the columns of a dtype are rows of one block: numpy asks the kernel for huge pages for
        # arrays of 4 MiB and more, and case 1's 380k-row columns (3 MB each) as separate arrays
        # were ~20k page faults, ~30 ms of sys time in a 0.4-s plan point
        by_dtype: dict[np.dtype, list[str]] = {}
        for k, d in dtypes.items():
            by_dtype.setdefault(np.dtype(d), []).append(k)
        cols, self.blocks = {}, []
        for d, names in by_dtype.items():
            spare = _SPARE.get((d, (len(names), self.cap))) if recycled else None
            block = spare.pop() if spare else np.zeros((len(names), self.cap), dtype=d)
            self.blocks.append(block)
            cols.update(zip(names, block, strict=True))
        self.cols = {k: cols[k] for k in dtypes}

    def release(self) -> None:
        """Hand the blocks to the next recycled Columns of this process; nothing may read these
        columns (or a view of them, such as a Result's) after."""
        for b in self.blocks:
            _SPARE.setdefault((b.dtype, b.shape), []).append(b)
        self.blocks, self.cols = [], {}

    def add(self, k: int) -> slice:
        """Room for k more rows; returns their slice."""
        if self.n + k > self.cap:
            while self.n + k > self.cap:
                self.cap *= 2
            for name, a in self.cols.items():
                b = np.zeros(self.cap, dtype=a.dtype)
                b[: self.n] = a[: self.n]
                self.cols[name] = b
        sl = slice(self.n, self.n + k)
        self.n += k
        return sl

    def view(self) -> dict[str, np.ndarray]:
        return {k: a[: self.n] for k, a in self.cols.items()}


class Rollouts:
    """Every drawn rollout (columns) and group (lists, read one group at a time), plus the history of
    resumed segments."""

    def __init__(self, group_size: int, groups: int = 256):
        """`groups`: how many groups the run is expected to draw. Rows for them are allocated up
        front (zeroed pages cost nothing until written), so the columns are not grown and copied
        ~7 times over a 300-step case-1 run (5% of its time); more groups still fit."""
        self.group_size = group_size
        self.table = Columns({**GENERATION, **DRAWN, **SEGMENT}, groups * group_size, recycled=True)
        self.history = Columns({"rollout": np.int64, **SEGMENT})
        # per group
        self.version_start: list[int] = []  # policy version its generation started with
        # groups dispatched whose rows' t_dispatch and version_start are not written yet (flush)
        self.unflushed: list[tuple[int, float, int]] = []
        # groups cancelled at batch fills whose rows are not written yet (discard, settle)
        self.cancelled: list[tuple[list[int], Decoded, float, int]] = []
        self.zero_advantage: list[bool] = []  # every reward equal: no learning signal
        self.solve_all: list[bool] = []
        self.solve_none: list[bool] = []

    def release(self) -> None:
        """The run is over and its Result read: the table's memory goes to the next run of this
        process (Columns.release); these rollouts, and the Result's columns, are not read after."""
        self.table.release()

    def add_chunk(
        self, c: GroupChunk, prefill_s: Any, memo: dict | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Append a chunk of drawn groups; return their (work, delay), shaped (groups, G). `memo`:
        a dict kept with the chunk for this engine (prefill_s's), where the context, delay and work
        arrays an earlier run derived from the same chunk are found (read-only) or left."""
        sl = self.table.add(len(c.zero_adv) * self.group_size)
        r = self.table.cols
        for k in DRAWN:
            r[k][sl] = getattr(c, k)
        if memo is not None and "delay" in memo:
            context, delay, work = memo["context"], memo["delay"], memo["work"]
        else:
            context = (c.prompt_tokens + c.tool_tokens).astype(np.float64)
            delay = c.env_s + prefill_s(context)
            work = c.response_tokens.astype(np.float64)
            if memo is not None:
                for a in (context, delay, work):
                    a.setflags(write=False)
                memo.update(context=context, delay=delay, work=work)
        r["work"][sl] = r["left"][sl] = r["seg_work"][sl] = work
        r["delay"][sl], r["seg_delay"][sl], r["context"][sl] = delay, delay, context
        r["step"][sl] = r["version_end"][sl] = -1
        r["t_finish"][sl] = np.nan
        # the rest of a row is written at dispatch (flush) or read only once written, but these start
        # at 0 (RUNNING; no token decoded; no environment time owed): the table may be recycled
        r["status"][sl], r["tokens"][sl], r["env_left"][sl] = RUNNING, 0.0, 0.0
        self.version_start += [0] * len(c.zero_adv)
        self.zero_advantage += c.zero_adv.tolist()
        self.solve_all += c.solve_all.tolist()
        self.solve_none += c.solve_none.tolist()
        return work.reshape(-1, self.group_size), delay.reshape(-1, self.group_size)

    def rows(self, g: int) -> slice:
        """Group g's rollouts."""
        return slice(g * self.group_size, (g + 1) * self.group_size)

    def grouped(self, name: str) -> np.ndarray:
        """Column `name` as (groups, G) rows, a view: one group's rollouts are a row, so a list of
        groups gathers or scatters whole rows (cheaper than the members() of the same groups)."""
        return self.table.cols[name].reshape(-1, self.group_size)

    def members(self, groups: list[int]) -> np.ndarray:
        """Rollout ids of `groups`, group by group."""
        G = self.group_size
        return (np.array(groups, dtype=np.int64)[:, None] * G + np.arange(G)).ravel()

    def mark(self, g: int, status: int, only: tuple[int, ...] = IN_FLIGHT) -> None:
        """Set group g's rollouts whose status is one of `only` to `status`."""
        view = self.table.cols["status"][self.rows(g)]
        mask = view == only[0]
        for o in only[1:]:
            mask |= view == o
        view[mask] = status

    def dispatch(self, g: int, t: float, version: int) -> None:
        """Group g's generation starts at t with weights of `version`. Its rows' t_dispatch and
        version_start columns are written by the next flush(), for every group dispatched since at
        once (two writes per group were 5% of a case-1 run)."""
        self.version_start[g] = version
        self.unflushed.append((g, t, version))

    def flush(self) -> None:
        """Write t_dispatch and version_start of the groups dispatched since the last flush; called
        by every reader of those columns (surplus.stop_in_flight, surplus.resume_segments, segments)."""
        if self.unflushed:
            groups, times, versions = zip(*self.unflushed, strict=True)
            rows = np.array(groups, dtype=np.int64)
            self.grouped("t_dispatch")[rows] = np.array(times, dtype=np.float64)[:, None]
            self.grouped("version_start")[rows] = np.array(versions, dtype=np.int64)[:, None]
            self.unflushed.clear()

    def discard(self, groups: list[int], decoded: Decoded, t: float, version: int) -> None:
        """`groups` (ascending) were cancelled at t (the surplus of a batch fill): their running
        rollouts end at t under `version` with the tokens `decoded` holds (the engine's stop; none
        for a group never placed), and every rollout still in flight is discarded. The rows are
        written by settle(), every fill's at once (written at each fill they were 8% of a case-1
        run): a cancelled group is never dispatched, trained, marked or read again before the run's
        segments(), and the one later write (a group that finished in the event whose earlier group
        filled the batch: Loop._finished) settles first."""
        self.cancelled.append((groups, decoded, t, version))

    def settle(self) -> None:
        """Write the rows of the groups discard() was given since the last settle."""
        if not self.cancelled:
            return
        r, G, cancelled = self.table.cols, self.group_size, self.cancelled
        groups = [g for c in cancelled for g in c[0]]
        # each fill's decoded rows go to their groups' places in `groups` (a group never placed: 0)
        at, first = [], 0
        for fill, (placed, _), _, _ in cancelled:
            where = {g: i for i, g in enumerate(fill, first)}
            at += [where[g] for g in placed]
            first += len(fill)
        decoded = np.zeros((len(groups), G))
        decoded[at] = np.concatenate([x for _, (_, x), _, _ in cancelled])
        rows = self.members(groups)
        status = r["status"][rows]
        running = status == RUNNING
        idx = rows[running]
        n = [len(c[0]) * G for c in cancelled]  # rows of each fill
        t = np.repeat(np.array([c[2] for c in cancelled], dtype=np.float64), n)
        version = np.repeat(np.array([c[3] for c in cancelled], dtype=np.int64), n)
        r["tokens"][idx], r["t_finish"][idx] = decoded.ravel()[running], t[running]
        r["version_end"][idx] = version[running]
        r["status"][rows] = np.where(running | (status == PENDING), DISCARDED, status)
        cancelled.clear()

    def segments(self, rollouts: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(segments, draws) of the first `rollouts` rollouts: the history of resumed segments, then
        every rollout's own (final) row, each with its `rollout` id; and their per-rollout draws."""
        self.flush()
        self.settle()
        r, h = self.table.view(), self.history.view()
        if self.history.n:
            seg = {k: np.concatenate([h[k], r[k][:rollouts]]) for k in SEGMENT}
            seg["rollout"] = np.concatenate([h["rollout"], np.arange(rollouts)])
        else:  # no resumed segment (no abort): the rows themselves, not a copy of 7 columns
            seg = {k: r[k][:rollouts] for k in SEGMENT}
            seg["rollout"] = np.arange(rollouts)
        return seg, {k: r[k][:rollouts] for k in DRAWN}
