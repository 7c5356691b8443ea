"""The queue: groups of rollouts flow generator -> environment -> queue -> trainer -> weight sync.

Events are only what the queue needs: a group starting to decode and finishing (generator.Pool),
the trainer finishing compute, and the weight sync landing. Everything independent is drawn up front
in numpy (draws.py). A Schedule (policies/) decides when groups are dispatched, what happens to
in-flight rollouts when a batch fills, and the staleness bound.

Rollout state lives in per-rollout numpy columns (a rollout's id is its index; group g holds rollouts
g*G .. g*G+G-1). A partial rollout aborted when a batch fills leaves a `resumed` row in a history
table, and its own row restarts when it resumes; so its last row is always its final state.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.emulator.costmodel import EngineModel, TrainerModel, rate_table
from bench.emulator.draws import Draws
from bench.emulator.generator import Pool, batch_shares, finish_times
from bench.emulator.policies import Schedule

# rollout status codes; STATUS_NAMES maps them to the trace's names (still in flight at the end: aborted)
RUNNING, PENDING, USED, DISCARDED, ABORTED, FILTERED, RESUMED = range(7)
STATUS_NAMES = ("aborted", "aborted", "used", "discarded", "aborted", "filtered", "resumed")
COMPUTE_DONE, SYNC_DONE = range(2)
CHUNK_GROUPS = 256
DONE = 1e-6  # tokens: a rollout with fewer left has finished
STATIC = ("prompt_tokens", "response_tokens", "tool_tokens", "turns", "env_s", "reward")
TRACE = ("status", "step", "v_start", "v_end", "t_dispatch", "t_finish", "tokens")


@dataclass
class StepRow:
    step: int
    t_start_s: float
    t_end_s: float
    wait_s: float
    gen_s: float
    logprob_s: float
    compute_s: float
    sync_s: float
    samples: int
    prompts: int
    prompt_tokens: int
    response_tokens: int
    staleness_mean: float
    staleness_max: float
    reward_mean: float
    solve_all_frac: float
    solve_none_frac: float


@dataclass
class Result:
    """What the trace writer needs. `seg`: one row per rollout segment (history rows first, then
    every dispatched rollout's final row), with its `root` rollout id; `root`: static draws."""

    steps: list[StepRow]
    wall_s: float
    seg: dict[str, np.ndarray]
    root: dict[str, np.ndarray]
    generator_busy_s: float
    events: int
    engines: int
    concurrency: int


class Grow:
    """Equal-length numpy columns that double when full."""

    def __init__(self, **dtypes: Any):
        self.n, self.cap = 0, 4096
        self.cols = {k: np.zeros(self.cap, dtype=d) for k, d in dtypes.items()}

    def add(self, k: int) -> slice:
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


def _trace_cols() -> dict[str, Any]:
    return {"status": np.int8, "step": np.int64, "v_start": np.int64, "v_end": np.int64,
            "t_dispatch": np.float64, "t_finish": np.float64, "tokens": np.float64}  # fmt: skip


class Loop:
    """One emulated run of `steps` trainer steps under Schedule `sched`."""

    def __init__(
        self,
        sched: Schedule,
        engine: EngineModel,
        trainer: TrainerModel,
        draws: Draws,
        engines: int,
        max_concurrency: int,
        prompts_per_step: int,
        steps: int,
    ):
        if engines < 1:
            raise ValueError(f"experiment.generator_gpus gives {engines} engines; expected at least 1")
        self.s, self.em, self.tm, self.draws = sched, engine, trainer, draws
        self.R, self.steps, self.G = prompts_per_step, steps, draws.group_size
        self.cap_conf = max(int(max_concurrency), self.G)
        self.pool = Pool(engines, self.G, [1.0], self.cap_conf)
        self._set_load(0)
        self.version, self.t, self.heap, self.seq = 0, 0.0, [], 0
        dyn = {
            "work": np.float64,
            "left": np.float64,
            "delay": np.float64,
            "ctx": np.float64,
            "seg_work": np.float64,
            "seg_delay": np.float64,  # environment time + prefill the current segment started with
            "env_left": np.float64,  # of an aborted rollout that had not started decoding (s)
        }
        stat = {"prompt_tokens": np.int64, "response_tokens": np.int64, "tool_tokens": np.int64,
                "turns": np.int64, "env_s": np.float64, "reward": np.float64}  # fmt: skip
        self.roots = Grow(**dyn, **stat, **_trace_cols())
        self.hist = Grow(root=np.int64, **_trace_cols())
        self.g_vstart: list[int] = []
        self.g_zero: list[bool] = []
        self.g_all: list[bool] = []
        self.g_none: list[bool] = []
        self.g_crit: list[int] = []  # rollout that finishes last at the nominal rate
        self.g_b: list[tuple[float, ...]] = []  # its mean-field share of the decode batch, per span
        self.g_occ: list[float] = []  # its time-averaged slot occupancy (rollouts)
        self.next_group = 0
        self.inflight: set[int] = set()
        self.waiting: deque[tuple[int, Any, Any]] = deque()
        self.resume: deque[int] = deque()
        self.resumed: set[int] = set()
        self.fin_groups: list[int] = []  # fresh groups completed, and (t0, d, w, t) of each
        self.fin_params: list[tuple[float, float, float, float]] = []
        self.filling = 1
        self.batch_groups: dict[int, list[int]] = {1: []}
        self.batch_filtered: dict[int, list[int]] = {1: []}
        self.batch_fill_t: dict[int, float] = {}
        self.round_dispatched = 0
        self.round_t: dict[int, float] = {}
        self.trainer_busy = False
        self.next_step = 1
        self.last_end = 0.0
        self.step_rows: list[StepRow] = []
        self.pending: tuple = ()
        self.done = False

    # --- load shape that drifts with training ---------------------------------------------------
    def _set_load(self, step: int) -> None:
        seq = self.draws.mean_seq_len(step)
        prompt = float(self.draws.w.prompt_len_mean)
        self.cap = self.em.concurrency(self.cap_conf, seq)
        self.pool.limit = self.cap
        self.pool.rate = rate_table(self.em, self.cap_conf, prompt + 0.5 * (seq - prompt))

    # --- groups ---------------------------------------------------------------------------------
    def _draw_more(self) -> None:
        c = self.draws.chunk(CHUNK_GROUPS, self.next_step - 1)
        sl = self.roots.add(CHUNK_GROUPS * self.G)
        r = self.roots.cols
        for k in STATIC:
            r[k][sl] = getattr(c, k)
        ctx = (c.prompt_tokens + c.tool_tokens).astype(np.float64)
        delay = c.env_s + self.em.prefill_s(ctx)
        work = c.response_tokens.astype(np.float64)
        r["work"][sl] = r["left"][sl] = r["seg_work"][sl] = work
        r["delay"][sl], r["seg_delay"][sl], r["ctx"][sl] = delay, delay, ctx
        r["step"][sl] = r["v_end"][sl] = -1
        r["t_finish"][sl] = np.nan
        nominal = self.pool.rate[min(self.cap, len(self.pool.rate) - 1)]
        life = (delay + work / nominal).reshape(CHUNK_GROUPS, self.G)  # vectorised group_shape()
        crit = life.argmax(axis=1)
        rows = np.arange(CHUNK_GROUPS)
        w = work.reshape(CHUNK_GROUPS, self.G)
        self.g_crit += crit.tolist()
        self.g_b += [tuple(x) for x in batch_shares(w, w[rows, crit]).tolist()]
        self.g_occ += (life.sum(axis=1) / life[rows, crit]).tolist()
        self.g_vstart += [0] * CHUNK_GROUPS
        self.g_zero += c.zero_adv.tolist()
        self.g_all += c.solve_all.tolist()
        self.g_none += c.solve_none.tolist()

    def _rows(self, g: int) -> slice:
        return slice(g * self.G, (g + 1) * self.G)

    def _dispatch_group(self, t: float) -> None:
        g = self.next_group
        if (g + 1) * self.G > self.roots.n:
            self._draw_more()
        self.next_group += 1
        self.g_vstart[g] = self.version
        rows, r = self._rows(g), self.roots.cols
        r["t_dispatch"][rows] = t
        r["v_start"][rows] = self.version
        self._place(g, r["work"][rows], r["delay"][rows], t, (self.g_crit[g], self.g_b[g], self.g_occ[g]))

    def _resume_group(self, g: int, t: float) -> None:
        """Restart a group's aborted rollouts with their remaining tokens (re-prefill the context)."""
        rows, r = self._rows(g), self.roots.cols
        again = r["status"][rows] == RESUMED
        left, work = r["left"][rows], r["work"][rows]
        done = work - left
        # the engine dropped the KV cache: re-prefill prompt + tokens so far; an episode aborted
        # before its decode began still has the rest of its environment time (its sandbox lives on)
        delay = np.where(again, self.em.prefill_s(r["ctx"][rows] + done) + r["env_left"][rows], 0.0)
        seg_work = np.where(again, left, 0.0)
        idx = np.arange(rows.start, rows.stop)[again]
        r["seg_delay"][idx] = delay[again]
        r["status"][idx], r["t_dispatch"][idx], r["t_finish"][idx] = RUNNING, t, np.nan
        r["seg_work"][idx], r["tokens"][idx], r["v_end"][idx] = left[again], 0.0, -1
        self.resumed.add(g)
        self._place(g, seg_work, delay, t, None)

    def _place(self, g: int, work: np.ndarray, delay: np.ndarray, t: float, crit: Any) -> None:
        self.inflight.add(g)
        if self.waiting or not self.pool.place(g, work, delay, t, crit):
            self.waiting.append((g, (work, delay), crit))

    def _drain_waiting(self, t: float) -> None:
        while self.waiting:
            g, (work, delay), crit = self.waiting[0]
            if g in self.inflight and not self.pool.place(g, work, delay, t, crit):
                return
            self.waiting.popleft()

    def _set_status(self, g: int, status: int, only: tuple[int, ...] = (RUNNING, PENDING)) -> None:
        view = self.roots.cols["status"][self._rows(g)]
        mask = view == only[0]
        for o in only[1:]:
            mask |= view == o
        view[mask] = status

    # --- dispatch rules -------------------------------------------------------------------------
    def _may_generate(self, batch: int) -> bool:
        if self.s.colocated and self.trainer_busy:
            return False
        return batch <= self.steps and self.version >= batch - 1 - self.s.lag

    def _next_group(self, t: float) -> None:
        """Dispatch one group: a buffered partial group first (unless too stale), else a fresh one."""
        while self.resume:
            g = self.resume.popleft()
            if (self.filling - 1) - self.g_vstart[g] > self.s.staleness_bound:
                self._set_status(g, DISCARDED, (PENDING, RESUMED))
                continue
            self._resume_group(g, t)
            return
        self._dispatch_group(t)

    def _generate(self, t: float) -> None:
        b = self.filling
        if not self._may_generate(b):
            return
        if self.s.refill:  # keep `inflight_groups` in flight
            while len(self.inflight) < self.s.inflight_groups:
                self._next_group(t)
        elif self.round_dispatched < b:  # one round per batch
            self.round_dispatched = b
            self.round_t[b] = t
            for _ in range(self.s.inflight_groups):
                self._next_group(t)

    # --- completions ----------------------------------------------------------------------------
    def _complete(self, g: int, grp: list, t: float) -> None:
        """Group g finished on its engine at t (`grp`: its placement record in the Pool)."""
        rows, r = self._rows(g), self.roots.cols
        if g in self.resumed:  # members that finished before the abort keep their results
            fin = Pool.finish_times(grp, t)
            run = r["status"][rows] == RUNNING
            idx = np.arange(rows.start, rows.stop)[run]
            r["t_finish"][idx], r["v_end"][idx], r["status"][idx] = fin[run], self.version, PENDING
            r["tokens"][idx] = r["seg_work"][idx]
        else:  # finish times are computed for all such groups at once at the end
            self.fin_groups.append(g)
            self.fin_params.append((grp[1], grp[4], grp[5], t))
            r["v_end"][rows], r["status"][rows] = self.version, PENDING
            r["tokens"][rows] = r["seg_work"][rows]
        self._group_done(g, t)

    def _group_done(self, g: int, t: float) -> None:
        if g not in self.inflight:
            return
        self.inflight.discard(g)
        b, s = self.filling, self.s
        if (b - 1) - self.g_vstart[g] > s.staleness_bound:
            self._set_status(g, DISCARDED)
        elif s.filter_zero_advantage and self.g_zero[g]:
            self._set_status(g, FILTERED)
            self.batch_filtered[b].append(g)
            if s.backfill and not s.refill and self._may_generate(b):
                self._next_group(t)  # dynamic sampling: replace the dropped group
        else:
            self.batch_groups[b].append(g)
        kept = len(self.batch_groups[b]) + (0 if s.backfill else len(self.batch_filtered[b]))
        if kept >= self.R:
            self._fill(b, t)
        elif not s.refill and not self.inflight and self.round_dispatched >= b and b <= self.steps:
            for _ in range(self.R - kept):  # round exhausted by staleness drops: top it up
                self._next_group(t)
        if s.refill:
            self._generate(t)

    def _fill(self, b: int, t: float) -> None:
        self.batch_fill_t[b] = t
        self.filling = b + 1
        self.batch_groups[b + 1] = []
        self.batch_filtered[b + 1] = []
        if self.s.surplus != "carry":
            self._stop_inflight(t, self.s.surplus == "abort")
        self._try_train(t)
        self._generate(t)

    def _stop_inflight(self, t: float, abort: bool) -> None:
        """Cancel (discard) or abort (buffer for resume) every in-flight group at t."""
        done = self.pool.stop_all(t)
        groups = sorted(self.inflight)
        queued = {w[0] for w in self.waiting}  # never reached an engine: no time spent
        self.waiting.clear()
        self.inflight.clear()
        if not groups:
            return
        r, zeros = self.roots.cols, np.zeros(self.G)
        rows = (np.array(groups)[:, None] * self.G + np.arange(self.G)).ravel()
        run = r["status"][rows] == RUNNING
        idx = rows[run]
        tok = np.concatenate([done.get(g, zeros) for g in groups])[run]
        r["tokens"][idx], r["t_finish"][idx], r["v_end"][idx] = tok, t, self.version
        if not abort:
            status = r["status"][rows]
            r["status"][rows] = np.where((status == RUNNING) | (status == PENDING), DISCARDED, status)
            return
        left = r["seg_work"][idx] - tok
        r["left"][idx] = left
        spent = np.where(np.isin(idx // self.G, list(queued)), 0.0, t - r["t_dispatch"][idx])
        r["env_left"][idx] = np.where(tok > 0, 0.0, np.maximum(r["seg_delay"][idx] - spent, 0.0))
        r["status"][idx[left <= DONE]] = PENDING  # finished just before the abort: keeps its result
        cut = idx[left > DONE]
        h = self.hist.add(len(cut))
        for k in ("step", "v_start", "v_end", "t_dispatch", "t_finish", "tokens"):
            self.hist.cols[k][h] = r[k][cut]
        self.hist.cols["root"][h], self.hist.cols["status"][h] = cut, RESUMED
        r["status"][cut] = RESUMED
        self.resume.extend(groups)

    # --- trainer --------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, x: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, x))

    def _try_train(self, t: float) -> None:
        b = self.next_step
        if self.trainer_busy or b > self.steps or b not in self.batch_fill_t:
            return
        self.trainer_busy = True
        groups = self.batch_groups[b]
        idx = (np.array(groups, dtype=np.int64)[:, None] * self.G + np.arange(self.G)).ravel()
        r = self.roots.cols
        r["status"][idx], r["step"][idx] = USED, b
        prompt, resp = r["prompt_tokens"][idx], r["response_tokens"][idx]
        logprob_s, compute_s = self.tm.step_times(prompt + resp + r["tool_tokens"][idx])
        stale = (b - 1) - np.repeat(np.array([self.g_vstart[g] for g in groups], dtype=np.int64), self.G)
        self.pending = (t, logprob_s, compute_s, prompt, resp, r["reward"][idx], stale)
        end = t + logprob_s + compute_s
        if self.s.colocated:
            self.pool.pause(t, end + self.tm.sync_s)
        self._push(end, COMPUTE_DONE, b)

    def _sync_done(self, b: int, t: float) -> None:
        t0, logprob_s, compute_s, prompt, resp, reward, stale = self.pending
        n, counted = len(resp), self.batch_groups[b] + self.batch_filtered[b]
        self.step_rows.append(
            StepRow(
                step=b,
                t_start_s=self.last_end,
                t_end_s=t,
                wait_s=t0 - self.last_end,
                gen_s=self.batch_fill_t[b] - self.round_t.get(b, self.batch_fill_t.get(b - 1, 0.0)),
                logprob_s=logprob_s,
                compute_s=compute_s,
                sync_s=self.tm.sync_s,
                samples=n,
                prompts=n // self.G,
                prompt_tokens=int(prompt.sum()),
                response_tokens=int(resp.sum()),
                staleness_mean=float(stale.mean()) if n else np.nan,
                staleness_max=float(stale.max()) if n else np.nan,
                reward_mean=float(reward.mean()) if n else np.nan,
                solve_all_frac=float(np.mean([self.g_all[g] for g in counted])) if counted else np.nan,
                solve_none_frac=float(np.mean([self.g_none[g] for g in counted])) if counted else np.nan,
            )
        )
        self.version, self.trainer_busy, self.last_end, self.next_step = b, False, t, b + 1
        if b >= self.steps:
            self.done = True
            return
        if self.draws.drift(b) != self.draws.drift(b - 1):
            self._set_load(b)
        self._try_train(t)
        self._generate(t)
        self._drain_waiting(t)

    # --- main loop ------------------------------------------------------------------------------
    def run(self) -> Result:
        """Run until the last step's weight sync lands; return the trace arrays."""
        self._generate(0.0)
        pool, heap = self.pool, self.heap
        events = 0
        while not self.done:
            t_gen = pool.next_time()
            events += 1
            if heap and heap[0][0] <= t_gen:
                t, _, kind, b = heapq.heappop(heap)
                self.t = t
                if kind == COMPUTE_DONE:
                    if not self.s.colocated:
                        pool.pause(t, t + self.tm.sync_s)  # engines stop to load the new weights
                    self._push(t + self.tm.sync_s, SYNC_DONE, b)
                else:
                    self._sync_done(b, t)
            elif t_gen < np.inf:
                self.t = t_gen
                done = pool.step()
                for g, grp in done:
                    self._complete(g, grp, t_gen)
                if done:
                    self._drain_waiting(t_gen)
            else:
                raise RuntimeError(
                    f"emulation stalled at t={self.t:.1f}s after {len(self.step_rows)} of {self.steps} steps "
                    f"(policy {self.s.name}): nothing in flight and no trainer event"
                )
        pool.close(self.last_end)
        return self._result(events)

    def _result(self, events: int) -> Result:
        for g in self.resume:  # buffered partial rollouts never resumed: the run ended
            self._set_status(g, ABORTED, (RESUMED,))
        n = self.next_group * self.G
        r, h = self.roots.view(), self.hist.view()
        if self.fin_groups:
            idx = (np.array(self.fin_groups)[:, None] * self.G + np.arange(self.G)).ravel()
            p = np.repeat(np.array(self.fin_params), self.G, axis=0)
            r["t_finish"][idx] = finish_times(
                p[:, 0], p[:, 1], p[:, 2], p[:, 3], r["delay"][idx], r["work"][idx]
            )
        seg = {k: np.concatenate([h[k], r[k][:n]]) for k in TRACE}
        seg["root"] = np.concatenate([h["root"], np.arange(n)])
        return Result(
            steps=self.step_rows,
            wall_s=self.last_end,
            seg=seg,
            root={k: r[k][:n] for k in STATIC},
            generator_busy_s=min(self.pool.busy_s, self.last_end),
            events=events,
            engines=self.pool.E,
            concurrency=self.cap,
        )
