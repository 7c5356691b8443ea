"""Trainer and weight-sync events: a trainer step starts when its batch is full and the trainer is
free, computes log-probs and the update (costmodel.TrainerModel), then syncs the new weights to the
generator, whose engines pause while they load them (and, colocated, for the whole step: trainer and
generator share the GPUs). When the sync lands, the generator's policy version is the step's.

Trainer step = wait + logprob + compute + sync (the SemiAnalysis definition); one StepRow each.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from bench.emulator.batches import Batch, staleness
from bench.emulator.rollouts import USED, Rollouts
from bench.model.costmodel import TrainerModel

COMPUTE_DONE, SYNC_DONE = range(2)


@dataclass
class StepRow:
    """One trainer step of the trace (seconds; tokens; staleness in policy versions)."""

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
class TrainingStep:
    """The step the trainer is on: its batch's samples and timings."""

    batch: Batch
    t_start: float  # the batch was taken (s)
    logprob_s: float
    compute_s: float
    prompt_tokens: np.ndarray  # per sample
    response_tokens: np.ndarray
    reward: np.ndarray
    staleness: np.ndarray  # policy versions each sample lags


class Trainer:
    """The trainer's clock: which step it is on, and its pending compute / sync events."""

    def __init__(self, model: TrainerModel, steps: int):
        self.model, self.steps = model, steps
        self.events: list[tuple[float, int, int, int]] = []  # (t, seq, COMPUTE_DONE | SYNC_DONE, step)
        self._seq = 0
        self.current: TrainingStep | None = None  # None: idle
        self.next_step = 1
        self.last_end = 0.0  # the previous step's weight sync landed (s)
        self.rows: list[StepRow] = []

    @property
    def busy(self) -> bool:
        return self.current is not None

    def push(self, t: float, kind: int, step: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, step))

    def ready(self, batches: dict[int, Batch]) -> Batch | None:
        """The batch to train now: the next step's, when the trainer is idle and that batch is full."""
        b = self.next_step
        batch = batches.get(b)
        if self.current is not None or b > self.steps or batch is None or batch.filled_at is None:
            return None
        return batch

    def start(self, batch: Batch, rollouts: Rollouts, t: float) -> float:
        """Train `batch` from t: its rollouts become `used`; returns when compute ends (s)."""
        b, G = batch.step, rollouts.group_size
        kept = np.array(batch.kept, dtype=np.int64)  # whole rows of the grouped columns, group by group
        rollouts.grouped("status")[kept], rollouts.grouped("step")[kept] = USED, b
        prompt, response = (rollouts.grouped(k)[kept].ravel() for k in ("prompt_tokens", "response_tokens"))
        tool = rollouts.grouped("tool_tokens")[kept].ravel()
        logprob_s, compute_s = self.model.step_times(prompt + response + tool)
        start = np.array([rollouts.version_start[g] for g in batch.kept], dtype=np.int64)
        lag = np.repeat(staleness(b, start), G)  # per sample
        reward = rollouts.grouped("reward")[kept].ravel()
        self.current = TrainingStep(batch, t, logprob_s, compute_s, prompt, response, reward, lag)
        end = t + logprob_s + compute_s
        self.push(end, COMPUTE_DONE, b)
        return end

    def finish(self, t: float, rollouts: Rollouts, previous: Batch | None) -> StepRow:
        """The current step's weight sync landed at t: its StepRow; the trainer is idle again."""
        s = self.current
        batch, n = s.batch, len(s.response_tokens)
        counted = batch.kept + batch.filtered
        # shares of the counted groups, as Python sums (np.mean of a list converts it first; the
        # quotient of the same two integers is the same float)
        solve_all = sum([rollouts.solve_all[g] for g in counted]) / len(counted) if counted else np.nan
        solve_none = sum([rollouts.solve_none[g] for g in counted]) / len(counted) if counted else np.nan
        row = StepRow(
            step=batch.step,
            t_start_s=self.last_end,
            t_end_s=t,
            wait_s=s.t_start - self.last_end,
            gen_s=batch.generation_s(previous),
            logprob_s=s.logprob_s,
            compute_s=s.compute_s,
            sync_s=self.model.sync_phase_s,
            samples=n,
            prompts=n // rollouts.group_size,
            prompt_tokens=int(s.prompt_tokens.sum()),
            response_tokens=int(s.response_tokens.sum()),
            staleness_mean=float(s.staleness.mean()) if n else np.nan,
            staleness_max=float(s.staleness.max()) if n else np.nan,
            reward_mean=float(s.reward.mean()) if n else np.nan,
            solve_all_frac=solve_all,
            solve_none_frac=solve_none,
        )
        self.rows.append(row)
        self.current, self.last_end, self.next_step = None, t, batch.step + 1
        return row
