"""The queue: groups of rollouts flow generator -> environment -> queue -> trainer -> weight sync.

The Loop dispatches groups to its generation engine (generator.Pool, or any GenerationEngine: the
exact per-rollout oracle in tests/emulator swaps only that), puts finished groups into the batch
being filled (batches.py), deals with the surplus still in flight when a batch fills (surplus.py),
and runs the trainer and weight-sync events (trainer.py). With teachers (workload.algorithm=opd),
a finished group is first scored (scoring.py) and joins the batch when its scoring batch ends.
Rollout state lives in rollouts.py's columns; everything independent of the queue is drawn up
front in numpy (draws.py). A Schedule (policies/) sets the rules: dispatch a round of groups per
batch or keep groups in flight (refill), how many policy versions generation may run ahead (lag),
the surplus rule and the staleness bound.

Events are only what the queue needs: a group starting to decode and finishing (the engine), a
scoring batch ending (teachers only), the trainer finishing compute, and the weight sync landing.
The Loop writes no files: run() returns the trace's columns (trace_out.py writes them).
"""

from __future__ import annotations

import gc
import heapq
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from bench.emulator import surplus
from bench.emulator.batches import Batch, staleness, verdict
from bench.emulator.draws import Draws
from bench.emulator.generator import GenerationEngine
from bench.emulator.policies import Schedule
from bench.emulator.rollouts import ABORTED, DISCARDED, FILTERED, PENDING, RESUMED, RUNNING, Rollouts
from bench.emulator.scoring import Scorer
from bench.emulator.trainer import COMPUTE_DONE, SYNC_DONE, StepRow, Trainer
from bench.model.costmodel import EngineModel, TrainerModel, rate_table

CHUNK_GROUPS = 256  # groups drawn at a time


@dataclass
class Result:
    """An emulated run as trace columns. `segments`: one row per rollout segment (resumed segments
    first, then every dispatched rollout's final row), with its `rollout` id; `draws`: each
    rollout's drawn prompt/response/tool tokens, turns, environment time and reward."""

    steps: list[StepRow]
    wall_s: float
    segments: dict[str, np.ndarray]
    draws: dict[str, np.ndarray]
    generator_busy_s: float
    events: int
    engines: int
    concurrency: int  # rollouts an engine holds at the end of the run
    group_size: int = 0  # rollouts a group (0: not known)
    score_s: list[float] | None = None  # per step: wall seconds its groups' scoring ran (teachers only)
    teachers: list[dict] | None = None  # per teacher: batches, groups, tokens scored, busy engine-seconds


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block, back as it was after. A run allocates
    ~10^5 short-lived tuples and records and makes no reference cycles, yet the collector's passes
    walk its growing object graph: 7% of a case-1 plan point (bench.plan.emulate_all pauses it for
    every point, their metrics too). A cycle made inside the block is collected by the first pass
    after it; a process forked inside the block runs without the collector."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class Queued(NamedTuple):
    """A group waiting for room on an engine, in dispatch order."""

    group: int
    work: np.ndarray
    delay: np.ndarray
    fresh: bool


class Loop:
    """One emulated run of `steps` trainer steps under Schedule `sched` on `generator`'s engines."""

    def __init__(
        self,
        sched: Schedule,
        engine: EngineModel,
        trainer: TrainerModel,
        draws: Draws,
        generator: GenerationEngine,
        max_concurrency: int,
        prompts_per_step: int,
        steps: int,
        scorer: Scorer | None = None,
        domain: str = "",
    ):
        if generator.engines < 1:
            raise ValueError(
                f"experiment.generator_gpus gives {generator.engines} engines; expected at least 1"
            )
        self.sched, self.em, self.tm, self.draws = sched, engine, trainer, draws
        # the engine a drawn chunk's derived arrays (prefill delays, group shapes) hold for: every
        # field of its model (a plan's splits share one engine; another engine derives its own)
        self.engine_key = repr(engine)
        self.generator = generator
        self.prompts_per_step, self.steps, self.G = prompts_per_step, steps, draws.group_size
        self.max_concurrency = max(int(max_concurrency), self.G)
        # groups dispatched when every batch fill cancels what is in flight: a batch's groups plus
        # those in flight, a step (the most common case; a run that needs more grows its columns)
        self.rollouts = Rollouts(self.G, steps * (prompts_per_step + sched.inflight_groups))
        self.trainer = Trainer(trainer, steps)
        self.version = 0  # policy version of the generator's weights
        self.t = 0.0
        self._set_load(0, 0.0)
        self.next_group = 0
        # per group drawn: its rollouts' tokens and delays (s), row views of its chunk's arrays
        self.drawn: list[tuple[np.ndarray, np.ndarray]] = []
        self.in_flight: set[int] = set()  # groups dispatched and not finished
        self.queued: deque[Queued] = deque()  # in flight, waiting for an engine slot
        self.placed_at: dict[int, float] = {}  # in flight, placed after waiting: when (s)
        self.partial: deque[int] = deque()  # groups aborted at a batch fill, buffered to resume
        self.resumed: set[int] = set()
        self.unresolved: list = []  # fresh groups finished: (group, engine record, policy version)
        self.filling = 1  # the step whose batch is being filled
        self.batches: dict[int, Batch] = {1: Batch(1)}
        self.round_dispatched = 0  # last step whose round of groups went out (round dispatch)
        self.resume_at = 0.0  # colocated: the engines decode again from then (s)
        # A chunk's groups all take the drift of the step they were drawn at: when lengths drift,
        # a chunk covers at most one round, so a run of few groups a step still drifts step by step.
        drifts = draws.len_drift != 1.0
        self.chunk_groups = min(CHUNK_GROUPS, sched.inflight_groups) if drifts else CHUNK_GROUPS
        # scoring stage (teachers): groups finished generating, queued or being scored; they stay in flight
        self.scorer, self.domain = scorer, domain
        self.scoring: set[int] = set()
        self.score_s: list[float] = []
        self.done = False

    # --- load shape that drifts with training ---------------------------------------------------
    def _set_load(self, step: int, t: float) -> None:
        seq = self.draws.mean_seq_len(step)
        prompt = float(self.draws.w.prompt_len_mean)
        self.concurrency = self.em.concurrency(self.max_concurrency, seq)
        rate = rate_table(self.em, self.max_concurrency, prompt + 0.5 * (seq - prompt))
        self.generator.set_load(self.concurrency, rate, t)

    # --- dispatch -------------------------------------------------------------------------------
    def _may_generate(self, step: int) -> bool:
        """Work for `step`'s batch may start: the trainer is not holding the (colocated) GPUs and
        the generator's weights are at most `lag` versions behind."""
        if self.sched.colocated and self.trainer.busy:
            return False
        return step <= self.steps and self.version >= step - 1 - self.sched.lag

    def _generate(self, t: float) -> None:
        """Dispatch what the schedule allows now: top the groups in flight up (refill), or send the
        filling batch's round of groups once."""
        b, s = self.filling, self.sched
        if not self._may_generate(b):
            return
        if s.refill:
            while len(self.in_flight) < s.inflight_groups:
                self._next_group(t)
        elif self.round_dispatched < b:
            self.round_dispatched = b
            self.batches[b].round_at = max(t, self.resume_at)  # generation starts once the GPUs are back
            for _ in range(s.inflight_groups):
                self._next_group(t)

    def _next_group(self, t: float) -> None:
        """Dispatch one group: a buffered partial group first (unless too stale), else a fresh one."""
        while self.partial:
            g = self.partial.popleft()
            if staleness(self.filling, self.rollouts.version_start[g]) > self.sched.staleness_bound:
                self.rollouts.mark(g, DISCARDED, (PENDING, RESUMED))
                continue
            work, delay = surplus.resume_segments(self.rollouts, g, t, self.em.prefill_s)
            self.resumed.add(g)
            self._place(g, work, delay, t, False)
            return
        g = self.next_group
        if g >= len(self.drawn):
            chunk = self.draws.chunk(self.chunk_groups, self.trainer.next_step - 1)
            memo = chunk.memo.setdefault(self.engine_key, {})  # what other runs derived from it
            work, delay = self.rollouts.add_chunk(chunk, self.em.prefill_s, memo)
            if "rows" not in memo:  # each group's (tokens, delays): views of the chunk's read-only arrays
                memo["rows"] = list(zip(work, delay, strict=True))
            self.drawn += memo["rows"]
            self.generator.prepare(work, delay, memo)
        self.next_group += 1
        self.rollouts.dispatch(g, t, self.version)
        self._place(g, *self.drawn[g], t, True)

    def _place(self, g: int, work: np.ndarray, delay: np.ndarray, t: float, fresh: bool) -> None:
        """Group g is in flight from t: on an engine, or queued (first come, first placed)."""
        self.in_flight.add(g)
        if self.queued or not self.generator.place(g, work, delay, t, fresh):
            self.queued.append(Queued(g, work, delay, fresh))

    def _place_queued(self, t: float) -> None:
        while self.queued:
            q = self.queued[0]
            if q.group in self.in_flight:
                if not self.generator.place(q.group, q.work, q.delay, t, q.fresh):
                    return
                self.placed_at[q.group] = t  # its environment time starts now, not at dispatch
            self.queued.popleft()

    # --- a group finished generating ------------------------------------------------------------
    def _finished(self, g: int, record: object, t: float) -> None:
        """Group g's last rollout finished at t (`record`: the engine's)."""
        if g not in self.in_flight:  # cancelled by the batch an earlier group of this event filled:
            self.rollouts.settle()  # its rows as the cancel wrote them, then what follows here
        rows, r = self.rollouts.rows(g), self.rollouts.table.cols
        if g in self.resumed:  # members that finished before the abort keep their results
            running = r["status"][rows] == RUNNING
            idx = np.arange(rows.start, rows.stop)[running]
            placed = (r["seg_delay"][rows][None], r["seg_work"][rows][None])  # as resume_segments set them
            r["t_finish"][idx] = self.generator.finish_times([record], *placed)[0][running]
            r["version_end"][idx], r["status"][idx] = self.version, PENDING
            r["tokens"][idx] = r["seg_work"][idx]
        else:  # a fresh group's finish times, end version and tokens are filled in at the end, all
            # at once (nothing reads them before: only running rollouts are stopped or resumed)
            self.unresolved.append((g, record, self.version))
            r["status"][rows] = PENDING
        if self.scorer is None:
            self._to_batch(g, t)
        elif g in self.in_flight:  # scored first: joins the batch when its scoring batch ends
            self.scoring.add(g)
            tokens = (
                r["prompt_tokens"][rows].sum()
                + r["response_tokens"][rows].sum()
                + r["tool_tokens"][rows].sum()
            )
            self.scorer.submit(g, float(tokens), self.domain, t)

    def _scored(self, groups: list[int], t: float) -> None:
        """`groups`' scoring batch ended at t: each joins the filling batch."""
        for g in groups:
            if g in self.scoring:
                self.scoring.discard(g)
                self._to_batch(g, t)

    def _to_batch(self, g: int, t: float) -> None:
        """Judge finished group g into the filling batch; fill it when enough groups count."""
        if g not in self.in_flight:
            return
        self.in_flight.discard(g)
        self.placed_at.pop(g, None)
        b, s, batch = self.filling, self.sched, self.batches[self.filling]
        status = verdict(s, b, self.rollouts.version_start[g], self.rollouts.zero_advantage[g])
        if status == PENDING:
            batch.kept.append(g)
        else:
            self.rollouts.mark(g, status)
        if status == FILTERED:
            batch.filtered.append(g)
            if s.backfill and not s.refill and self._may_generate(b):
                self._next_group(t)  # dynamic sampling: replace the dropped group
        counted = batch.counted(s.backfill)
        if counted >= self.prompts_per_step:
            self._fill(batch, t)
        elif not s.refill and not self.in_flight and self.round_dispatched >= b and b <= self.steps:
            for _ in range(self.prompts_per_step - counted):  # round exhausted by staleness drops: top it up
                self._next_group(t)
        if s.refill:
            self._generate(t)

    def _fill(self, batch: Batch, t: float) -> None:
        """`batch` is full at t: stop or keep the surplus in flight, train, dispatch the next work."""
        batch.filled_at = t
        self.filling = batch.step + 1
        self.batches[self.filling] = Batch(self.filling)
        if self.sched.surplus != "carry":
            self._stop_in_flight(t, abort=self.sched.surplus == "abort")
        self._train(t)
        self._generate(t)

    def _stop_in_flight(self, t: float, abort: bool) -> None:
        decoded = self.generator.stop_all(t)
        # a group being scored has finished generating: abort lets it finish scoring (it counts toward
        # the next batch); cancel discards it with the rest of the surplus
        scoring = self.scoring if abort else set()
        groups = sorted(self.in_flight - scoring) if scoring else sorted(self.in_flight)
        never_placed = {q.group for q in self.queued}  # spent no time on an engine
        placed_at, self.placed_at = self.placed_at, {}
        self.queued.clear()
        self.in_flight.clear()
        if self.scoring and not abort:
            self.scorer.drop(self.scoring)
            self.scoring = set()
        self.in_flight |= scoring
        if groups:
            surplus.stop_in_flight(
                self.rollouts, groups, decoded, t, self.version, abort, never_placed, placed_at
            )
            if abort:
                self.partial.extend(groups)

    # --- trainer and weight sync ----------------------------------------------------------------
    def _train(self, t: float) -> None:
        batch = self.trainer.ready(self.batches)
        if batch is None:
            return
        end = self.trainer.start(batch, self.rollouts, t)
        if self.sched.colocated:  # trainer and generator share the GPUs: no decoding until synced
            self.resume_at = end + self.tm.sync_s + self.tm.handoff_s  # synced and handed back
            self.generator.pause(t, self.resume_at)

    def _compute_done(self, step: int, t: float) -> None:
        if not self.sched.colocated:
            self.generator.pause(t, t + self.tm.sync_s)  # engines stop to load the new weights
        self.trainer.push(t + self.tm.sync_phase_s, SYNC_DONE, step)

    def _synced(self, step: int, t: float) -> None:
        """Step `step`'s weights landed at t: the generator is at policy version `step`."""
        self.trainer.finish(t, self.rollouts, self.batches.get(step - 1))
        if self.scorer is not None:
            b = self.batches[step]
            self.score_s.append(self.scorer.span_s(b.kept + b.filtered))
            self.scorer.forget(b.kept + b.filtered)
        self.version = step
        if step >= self.steps:
            self.done = True
            return
        if self.draws.drift(step) != self.draws.drift(step - 1):
            self._set_load(step, t)
        self._train(t)
        self._generate(t)
        self._place_queued(t)

    # --- main loop ------------------------------------------------------------------------------
    def run(self) -> Result:
        """Run until the last step's weight sync lands; return the trace columns."""
        with gc_paused():
            return self._run()

    def _run(self) -> Result:
        self._generate(0.0)
        gen, events, trainer_events, scorer = self.generator, 0, self.trainer.events, self.scorer
        inf = np.inf
        while not self.done:
            # the generator runs up to the next trainer or scoring event (either wins a tie), and
            # comes back early when groups finish: the Loop then reacts (batch, refill) at that time
            t_score = scorer.next_time() if scorer is not None else inf
            t_train = trainer_events[0][0] if trainer_events else inf
            t, finished, n = gen.advance(t_train if t_train <= t_score else t_score)
            events += n
            if finished:
                self.t = t
                for g, record in finished:
                    self._finished(g, record, t)
                self._place_queued(t)
                continue
            events += 1
            if trainer_events and t_train <= t_score:
                self.t, _, kind, step = heapq.heappop(trainer_events)
                if kind == COMPUTE_DONE:
                    self._compute_done(step, self.t)
                else:
                    self._synced(step, self.t)
            elif t_score < inf:
                self.t, groups = scorer.step()
                self._scored(groups, self.t)
            else:
                raise RuntimeError(
                    f"emulation stalled at t={self.t:.1f}s after {len(self.trainer.rows)} of {self.steps} "
                    f"steps (policy {self.sched.name}): nothing in flight and no trainer event"
                )
        gen.close(self.trainer.last_end)
        return self._result(events)

    def _result(self, events: int) -> Result:
        for g in self.partial:  # buffered partial rollouts never resumed: the run ended
            self.rollouts.mark(g, ABORTED, (RESUMED,))
        if self.unresolved:  # whole groups' rows (Rollouts.grouped), group by group
            groups, records, versions = zip(*self.unresolved, strict=True)
            rows, col = np.array(groups, dtype=np.int64), self.rollouts.grouped
            placed = col("delay")[rows], col("work")[rows]
            col("t_finish")[rows] = self.generator.finish_times(list(records), *placed)
            col("version_end")[rows] = np.array(versions, dtype=np.int64)[:, None]
            col("tokens")[rows] = col("seg_work")[rows]
        wall = self.trainer.last_end
        segments, draws = self.rollouts.segments(self.next_group * self.G)
        return Result(
            steps=self.trainer.rows,
            wall_s=wall,
            segments=segments,
            draws=draws,
            generator_busy_s=min(self.generator.busy_s, wall),
            events=events,
            engines=self.generator.engines,
            concurrency=self.concurrency,
            group_size=self.G,
            score_s=self.score_s if self.scorer is not None else None,
            teachers=self.scorer.summary() if self.scorer is not None else None,
        )
