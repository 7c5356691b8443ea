"""Test oracle: an exact per-rollout processor-sharing model of the same queue (the emulator's first
engine, ~5x slower). Each rollout is its own event pair: it joins its engine's continuous batch after
its environment time and prefill, and every sequence on the engine advances at the per-sequence rate
of the current batch (a virtual clock per engine). test_reference.py checks that the group-level
engine in bench/emulator (generator.Pool) agrees with it.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.emulator.costmodel import EngineModel, TrainerModel, rate_table
from bench.emulator.draws import Draws
from bench.emulator.policies import Schedule

# segment status codes (trace names in STATUS_NAMES)
RUNNING, PENDING, USED, DISCARDED, ABORTED, FILTERED, RESUMED = range(7)
STATUS_NAMES = ("aborted", "aborted", "used", "discarded", "aborted", "filtered", "resumed")
JOIN, ENGINE, COMPUTE_DONE, SYNC_DONE = range(4)
CHUNK_GROUPS = 256


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
    """Everything the trace writer needs; arrays are per segment or per root rollout."""

    steps: list[StepRow]
    wall_s: float
    seg: dict[
        str, np.ndarray
    ]  # per segment: root, status, step, v_start, v_end, t_dispatch, t_finish, tokens
    root: dict[str, np.ndarray]  # per root rollout: group, prompt_tokens, tool_tokens, turns, env_s, reward
    generator_busy_s: float
    events: int
    engines: int
    concurrency: int
    extra: dict[str, Any] = field(default_factory=dict)


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
        self.n_eng, self.cap_conf, self.R, self.steps = engines, max_concurrency, prompts_per_step, steps
        self.G = draws.group_size
        self.heap: list = []
        self.seq = 0
        self.t = 0.0
        self.version = 0
        # engines
        self.e_V = [0.0] * engines
        self.e_t = [0.0] * engines
        self.e_B = [0] * engines
        self.e_act = [0] * engines
        self.e_heap: list[list] = [[] for _ in range(engines)]
        self.e_epoch = [0] * engines
        self.waiting: deque[int] = deque()
        self.inflight_rollouts = 0
        self.busy_since = -1.0
        self.gen_busy = 0.0
        self._set_load(0)
        # root rollouts (static draws) and groups
        self.chunks: list = []
        self.r_work: list[float] = []  # decode tokens left
        self.r_delay: list[float] = []  # env + prefill of the first segment (s)
        self.r_ctx: list[int] = []  # prompt + tool tokens (for re-prefill on resume)
        self.r_seg: list[int] = []  # current segment
        self.g_left: list[int] = []
        self.g_vstart: list[int] = []
        self.g_zero: list[bool] = []
        self.g_all: list[bool] = []
        self.g_none: list[bool] = []
        self.n_groups_drawn = 0
        self.next_group = 0
        self.inflight: set[int] = set()
        self.resume: deque[int] = deque()
        # segments
        self.sg_root: list[int] = []
        self.sg_status: list[int] = []
        self.sg_step: list[int] = []
        self.sg_vstart: list[int] = []
        self.sg_vend: list[int] = []
        self.sg_tdisp: list[float] = []
        self.sg_tfin: list[float] = []
        self.sg_tok: list[float] = []
        self.sg_work: list[float] = []
        self.sg_eng: list[int] = []
        self.sg_vjoin: list[float] = []
        self.sg_join_t: list[float] = []  # when the segment starts decoding (nan: not started)
        self.sg_delay: list[float] = []  # environment time + prefill the segment was launched with
        # batches and trainer
        self.filling = 1
        self.batch_groups: dict[int, list[int]] = {1: []}
        self.batch_filtered: dict[int, list[int]] = {1: []}
        self.batch_fill_t: dict[int, float] = {}
        self.round_dispatched = 0  # last batch whose round was dispatched (round mode)
        self.round_t: dict[int, float] = {}
        self.trainer_busy = False
        self.next_step = 1
        self.last_end = 0.0
        self.step_rows: list[StepRow] = []
        self.pending_step: tuple | None = None
        self.done = False
        self.events = 0

    # --- load shape that drifts with training -------------------------------------------------
    def _set_load(self, step: int) -> None:
        seq = self.draws.mean_seq_len(step)
        prompt = float(self.draws.w.prompt_len_mean)
        self.cap = self.em.concurrency(self.cap_conf, seq)
        # indexed by decode batch size; sized to the configured cap so a drifting cap never overflows
        self.rate = rate_table(self.em, max(self.cap_conf, self.cap), prompt + 0.5 * (seq - prompt))

    # --- engines ------------------------------------------------------------------------------
    def _advance(self, e: int, t: float) -> None:
        dt = t - self.e_t[e]
        if dt > 0:
            self.e_V[e] += self.rate[self.e_B[e]] * dt if self.e_B[e] else 0.0
            self.e_t[e] = t

    def _reschedule(self, e: int) -> None:
        h, st = self.e_heap[e], self.sg_status
        while h and st[h[0][1]] != RUNNING:
            heapq.heappop(h)
        self.e_epoch[e] += 1
        if h:
            dv = h[0][0] - self.e_V[e]
            tn = self.e_t[e] + (dv / self.rate[self.e_B[e]] if dv > 0 else 0.0)
            self.seq += 1
            heapq.heappush(self.heap, (tn, self.seq, ENGINE, e, self.e_epoch[e]))

    def _pause(self, until: float) -> None:
        """Engines decode nothing until `until` (weight load, or trainer using colocated GPUs)."""
        for e in range(self.n_eng):
            self._advance(e, self.t)
            if self.e_t[e] < until:
                self.e_t[e] = until
            self._reschedule(e)

    def _slot_taken(self, t: float) -> None:
        if self.inflight_rollouts == 0:
            self.busy_since = t
        self.inflight_rollouts += 1

    def _slot_freed(self, t: float) -> None:
        self.inflight_rollouts -= 1
        if self.inflight_rollouts == 0:
            self.gen_busy += t - self.busy_since

    def _start(self, sg: int, delay: float, t: float) -> bool:
        act = self.e_act
        e = min(range(self.n_eng), key=act.__getitem__)  # least-loaded engine, like a router
        if act[e] >= self.cap:
            return False
        act[e] += 1
        self.sg_eng[sg] = e
        self.sg_join_t[sg] = t + delay  # its environment time and prefill end then
        self._slot_taken(t)
        self.seq += 1
        heapq.heappush(self.heap, (t + delay, self.seq, JOIN, sg, 0))
        return True

    def _launch(self, sg: int, delay: float, t: float) -> None:
        self.sg_delay[sg] = delay
        if self.waiting or not self._start(sg, delay, t):
            self.waiting.append((sg, delay))

    def _drain_waiting(self, t: float) -> None:
        w = self.waiting
        while w:
            sg, delay = w[0]
            if self.sg_status[sg] != RUNNING:
                w.popleft()
                continue
            if not self._start(sg, delay, t):
                return
            w.popleft()

    # --- groups ---------------------------------------------------------------------------------
    def _draw_more(self) -> None:
        c = self.draws.chunk(CHUNK_GROUPS, self.next_step - 1)
        self.chunks.append(c)
        ctx = c.prompt_tokens + c.tool_tokens
        delay = c.env_s + self.em.prefill_s(ctx)
        self.r_work += c.response_tokens.astype(np.float64).tolist()
        self.r_delay += delay.tolist()
        self.r_ctx += ctx.tolist()
        self.r_seg += [-1] * len(ctx)
        self.g_left += [0] * CHUNK_GROUPS
        self.g_vstart += [0] * CHUNK_GROUPS
        self.g_zero += c.zero_adv.tolist()
        self.g_all += c.solve_all.tolist()
        self.g_none += c.solve_none.tolist()
        self.n_groups_drawn += CHUNK_GROUPS

    def _new_segment(self, root: int, t: float, work: float) -> int:
        sg = len(self.sg_root)
        self.sg_root.append(root)
        self.sg_status.append(RUNNING)
        self.sg_step.append(-1)
        self.sg_vstart.append(self.version)
        self.sg_vend.append(-1)
        self.sg_tdisp.append(t)
        self.sg_tfin.append(np.nan)
        self.sg_tok.append(0.0)
        self.sg_work.append(work)
        self.sg_eng.append(-1)
        self.sg_vjoin.append(-1.0)
        self.sg_join_t.append(np.nan)
        self.sg_delay.append(0.0)
        self.r_seg[root] = sg
        return sg

    def _dispatch_group(self, t: float) -> None:
        if self.next_group >= self.n_groups_drawn:
            self._draw_more()
        g = self.next_group
        self.next_group += 1
        self.g_left[g] = self.G
        self.g_vstart[g] = self.version
        self.inflight.add(g)
        for root in range(g * self.G, (g + 1) * self.G):
            sg = self._new_segment(root, t, self.r_work[root])
            self._launch(sg, self.r_delay[root], t)

    def _resume_group(self, g: int, t: float) -> None:
        """Restart a group's aborted rollouts with their remaining tokens (re-prefill the context)."""
        self.inflight.add(g)
        for root in range(g * self.G, (g + 1) * self.G):
            old = self.r_seg[root]
            if self.sg_status[old] != RESUMED:
                continue
            done = self.r_work[root] - self.r_work_left[root]
            sg = self._new_segment(root, t, self.r_work_left[root])
            self.sg_vstart[sg] = self.sg_vstart[old]
            # the engine dropped the KV cache: re-prefill prompt + tokens so far; an episode aborted
            # before its decode began still has the rest of its environment time (its sandbox lives on)
            delay = float(self.em.prefill_s(self.r_ctx[root] + done)) + self.r_env_left.get(root, 0.0)
            self._launch(sg, delay, t)

    def _group_segments(self, g: int) -> list[int]:
        return [self.r_seg[r] for r in range(g * self.G, (g + 1) * self.G)]

    def _set_group_status(self, g: int, status: int, t: float) -> None:
        st = self.sg_status
        for sg in self._group_segments(g):
            if st[sg] in (RUNNING, PENDING):
                st[sg] = status

    # --- dispatch rules -------------------------------------------------------------------------
    def _may_generate(self, batch: int) -> bool:
        if self.s.colocated and self.trainer_busy:
            return False
        return self.version >= batch - 1 - self.s.lag

    def _top_up(self, t: float) -> None:
        """Refill mode: keep `inflight_groups` groups in flight while the lag allows."""
        if not self._may_generate(self.filling):
            return
        while len(self.inflight) < self.s.inflight_groups:
            self._next_group(t)

    def _next_group(self, t: float) -> None:
        """Dispatch one group: a buffered partial group first (unless too stale), else a fresh one."""
        b = self.filling
        while self.resume:
            g = self.resume.popleft()
            if (b - 1) - self.g_vstart[g] > self.s.staleness_bound:
                self._set_group_status(g, DISCARDED, t)
                self._close_resumed(g, DISCARDED)
                continue
            self._resume_group(g, t)
            return
        self._dispatch_group(t)

    def _dispatch_round(self, t: float) -> None:
        """Round mode: dispatch the round of the batch being filled, resumed groups first."""
        b = self.filling
        if self.round_dispatched >= b or b > self.steps or not self._may_generate(b):
            return
        self.round_dispatched = b
        self.round_t[b] = t
        for _ in range(self.s.inflight_groups):
            self._next_group(t)

    def _close_resumed(self, g: int, status: int) -> None:
        # an aborted group that will never resume: its buffered rollouts end with `status`
        for sg in self._group_segments(g):
            if self.sg_status[sg] == RESUMED:
                self.sg_status[sg] = status

    def _generate(self, t: float) -> None:
        if self.s.refill:
            self._top_up(t)
        else:
            self._dispatch_round(t)

    # --- completions ----------------------------------------------------------------------------
    def _finish_segment(self, sg: int, t: float) -> None:
        self.sg_status[sg] = PENDING
        self.sg_tfin[sg] = t
        self.sg_vend[sg] = self.version
        self.sg_tok[sg] = self.sg_work[sg]
        g = self.sg_root[sg] // self.G
        self.g_left[g] -= 1
        if self.g_left[g] == 0:
            self._group_done(g, t)

    def _group_done(self, g: int, t: float) -> None:
        self.inflight.discard(g)
        b, s = self.filling, self.s
        replace = s.refill
        if (b - 1) - self.g_vstart[g] > s.staleness_bound:
            self._set_group_status(g, DISCARDED, t)
        elif s.filter_zero_advantage and self.g_zero[g]:
            self._set_group_status(g, FILTERED, t)
            self.batch_filtered[b].append(g)
            replace = s.backfill
        else:
            self.batch_groups[b].append(g)
        if len(self.batch_groups[b]) + (0 if s.backfill else len(self.batch_filtered[b])) >= self.R:
            self._fill(b, t)
        elif replace and b <= self.steps and self._may_generate(b) and not s.refill:
            self._dispatch_group(t)
        elif not s.refill and not self.inflight and b <= self.steps and self.round_dispatched >= b:
            # round exhausted (staleness drops) before the batch filled: top the round up
            for _ in range(self.R - len(self.batch_groups[b])):
                self._dispatch_group(t)
        if s.refill:
            self._top_up(t)

    def _fill(self, b: int, t: float) -> None:
        self.batch_fill_t[b] = t
        self.filling = b + 1
        self.batch_groups[b + 1] = []
        self.batch_filtered[b + 1] = []
        if self.s.surplus != "carry":
            self._stop_inflight(t, DISCARDED if self.s.surplus == "cancel" else RESUMED)
        self._try_train(t)
        self._generate(t)

    def _stop_inflight(self, t: float, status: int) -> None:
        """Cancel (discard) or abort (buffer for resume) every rollout of every in-flight group."""
        touched = set()
        for g in sorted(self.inflight):
            for sg in self._group_segments(g):
                st = self.sg_status[sg]
                if st == PENDING and status == RESUMED:
                    continue  # finished members of an aborted group keep their result
                if st not in (RUNNING, PENDING):
                    continue
                if st == RUNNING:
                    e = self.sg_eng[sg]
                    done = 0.0
                    if e >= 0:
                        if self.sg_vjoin[sg] >= 0:
                            self._advance(e, t)
                            done = min(self.e_V[e] - self.sg_vjoin[sg], self.sg_work[sg])
                            self.e_B[e] -= 1
                        self.e_act[e] -= 1
                        self._slot_freed(t)
                        touched.add(e)
                    self.sg_tok[sg] = max(done, 0.0)
                    self.sg_tfin[sg] = t
                    self.sg_vend[sg] = self.version
                    if status == RESUMED:
                        root = self.sg_root[sg]
                        self.r_work_left[root] = self.sg_work[sg] - self.sg_tok[sg]
                        # not decoding yet: what is left of its delay (all of it if never started)
                        join = self.sg_join_t[sg]
                        left = self.sg_delay[sg] if np.isnan(join) else max(join - t, 0.0)
                        self.r_env_left[root] = left if self.sg_vjoin[sg] < 0 else 0.0
                self.sg_status[sg] = status
            if status == RESUMED:
                self.g_left[g] = sum(
                    1 for r in range(g * self.G, (g + 1) * self.G) if self.sg_status[self.r_seg[r]] == RESUMED
                )
                self.resume.append(g)
        self.inflight.clear()
        for e in touched:
            self._reschedule(e)
        self._drain_waiting(t)

    # --- trainer --------------------------------------------------------------------------------
    def _try_train(self, t: float) -> None:
        b = self.next_step
        if self.trainer_busy or b > self.steps or b not in self.batch_fill_t:
            return
        self.trainer_busy = True
        groups = self.batch_groups[b]
        roots = [r for g in groups for r in range(g * self.G, (g + 1) * self.G)]
        for sg in [self.r_seg[r] for r in roots]:
            self.sg_status[sg] = USED
            self.sg_step[sg] = b
        static = self._static(groups)
        seq = static["prompt"] + static["response"] + static["tool"]
        logprob_s, compute_s = self.tm.step_times(seq)
        stale = (b - 1) - np.repeat(np.array([self.g_vstart[g] for g in groups]), self.G)
        counted = groups + self.batch_filtered[b]
        self.pending_step = (b, t, logprob_s, compute_s, roots, static, stale, counted)
        end = t + logprob_s + compute_s
        if self.s.colocated:
            self._pause(end + self.tm.sync_s)
        self._push(end, COMPUTE_DONE, b)

    def _static(self, groups: list[int]) -> dict[str, np.ndarray]:
        """Static draws of the rollouts of `groups` (group-contiguous slices of the chunks)."""
        G, out = self.G, {}
        for name, attr in (
            ("prompt", "prompt_tokens"),
            ("response", "response_tokens"),
            ("tool", "tool_tokens"),
            ("reward", "reward"),
        ):
            parts = []
            for g in groups:
                c, o = divmod(g, CHUNK_GROUPS)
                parts.append(getattr(self.chunks[c], attr)[o * G : (o + 1) * G])
            out[name] = np.concatenate(parts) if parts else np.zeros(0)
        return out

    def _push(self, t: float, kind: int, x: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, x, 0))

    def _compute_done(self, b: int, t: float) -> None:
        if not self.s.colocated:
            self._pause(t + self.tm.sync_s)
        self._push(t + self.tm.sync_s, SYNC_DONE, b)

    def _sync_done(self, b: int, t: float) -> None:
        _, t0, logprob_s, compute_s, roots, st, stale, counted = self.pending_step
        n = len(roots)
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
                prompt_tokens=int(st["prompt"].sum()),
                response_tokens=int(st["response"].sum()),
                staleness_mean=float(stale.mean()) if n else np.nan,
                staleness_max=float(stale.max()) if n else np.nan,
                reward_mean=float(st["reward"].mean()) if n else np.nan,
                solve_all_frac=float(np.mean([self.g_all[g] for g in counted])) if counted else np.nan,
                solve_none_frac=float(np.mean([self.g_none[g] for g in counted])) if counted else np.nan,
            )
        )
        self.version = b
        self.trainer_busy = False
        self.last_end = t
        self.next_step = b + 1
        if b >= self.steps:
            self.done = True
            return
        if self.draws.drift(b) != self.draws.drift(b - 1):
            for e in range(self.n_eng):
                self._advance(e, t)
            self._set_load(b)
            for e in range(self.n_eng):
                self._reschedule(e)
        self._try_train(t)
        self._generate(t)
        self._drain_waiting(t)

    # --- main loop ------------------------------------------------------------------------------
    def run(self) -> Result:
        """Run until the last step's weight sync; return the trace arrays."""
        self.r_work_left: dict[int, float] = {}
        self.r_env_left: dict[int, float] = {}
        self._generate(0.0)
        heap, pop = self.heap, heapq.heappop
        st, e_heap, e_epoch = self.sg_status, self.e_heap, self.e_epoch
        events = 0
        while heap and not self.done:
            t, _, kind, x, y = pop(heap)
            self.t = t
            events += 1
            if kind == JOIN:
                if st[x] != RUNNING:
                    continue
                e = self.sg_eng[x]
                self._advance(e, t)
                v = self.e_V[e]
                self.sg_vjoin[x] = v
                heapq.heappush(e_heap[e], (v + self.sg_work[x], x))
                self.e_B[e] += 1
                self._reschedule(e)
            elif kind == ENGINE:
                if y != e_epoch[x]:
                    continue
                self._advance(x, t)
                h = e_heap[x]
                while h and (st[h[0][1]] != RUNNING or h[0][0] <= self.e_V[x] + 1e-6):
                    _, sg = heapq.heappop(h)
                    if st[sg] != RUNNING:
                        continue
                    self.e_B[x] -= 1
                    self.e_act[x] -= 1
                    self._slot_freed(t)
                    self._finish_segment(sg, t)
                self._drain_waiting(t)
                self._reschedule(x)
            elif kind == COMPUTE_DONE:
                self._compute_done(x, t)
            else:
                self._sync_done(x, t)
        if not self.done:
            raise RuntimeError(
                f"emulation stalled at t={self.t:.1f}s after {len(self.step_rows)} of {self.steps} steps "
                f"(policy {self.s.name}): no event left; check experiment.oversampling and the staleness bound"
            )
        return self._result(events)

    def _result(self, events: int) -> Result:
        wall = self.last_end
        if self.inflight_rollouts > 0:
            self.gen_busy += wall - self.busy_since
        for g in self.resume:  # buffered partial rollouts never resumed: the run ended
            self._close_resumed(g, ABORTED)
        status = np.array(self.sg_status, dtype=np.int8)
        n_roots = self.next_group * self.G
        cat = {
            k: np.concatenate([getattr(c, k) for c in self.chunks])[:n_roots]
            for k in ("prompt_tokens", "tool_tokens", "turns", "env_s", "reward")
        }
        cat["group"] = np.arange(n_roots) // self.G
        return Result(
            steps=self.step_rows,
            wall_s=wall,
            seg={
                "root": np.array(self.sg_root, dtype=np.int64),
                "status": status,
                "step": np.array(self.sg_step, dtype=np.int64),
                "v_start": np.array(self.sg_vstart, dtype=np.int64),
                "v_end": np.array(self.sg_vend, dtype=np.int64),
                "t_dispatch": np.array(self.sg_tdisp),
                "t_finish": np.array(self.sg_tfin),
                "tokens": np.array(self.sg_tok),
            },
            root=cat,
            generator_busy_s=self.gen_busy,
            events=events,
            engines=self.n_eng,
            concurrency=self.cap,
        )
