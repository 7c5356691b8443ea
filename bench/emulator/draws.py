"""Load shape: vectorised draws of groups of rollouts from the workload's distributions.

Everything independent of the queue is drawn here in numpy, a chunk of groups at a time: response
lengths (lognormal, capped at the max, mean drifting over training), turns, environment latency
(sandbox start-up + per-turn execution, lognormal tails), per-prompt solve rates (Beta) and rewards.

Draws depend only on the workload, the seed and the sequence of (groups, drift) asked for, never on
the GPU split: a plan emulates every split at the same seeds, so inside `shared()` runs with the same
workload and seed replay the chunks an earlier run drew (bit-identical, the random generator's state
is restored where a run asks for more or for another drift) instead of drawing them again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any

import numpy as np
from omegaconf import OmegaConf


@dataclass
class GroupChunk:
    """Draws for `groups` x `group_size` rollouts, flattened rollout-major (group g = rows g*G..)."""

    prompt_tokens: np.ndarray  # int64, tokens
    response_tokens: np.ndarray  # int64, tokens generated over all turns
    tool_tokens: np.ndarray  # int64, environment output tokens appended to the context (prefilled)
    turns: np.ndarray  # int64
    env_s: np.ndarray  # float64, start-up + per-turn execution (s)
    reward: np.ndarray  # float64, 0/1
    zero_adv: np.ndarray  # bool per group: every rollout passed or every one failed
    solve_all: np.ndarray  # bool per group
    solve_none: np.ndarray  # bool per group
    # what runs replaying this chunk derive from it (rollouts.add_chunk, generator.Pool.prepare),
    # by engine: every split of a plan derives the same arrays from the same draws
    memo: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass
class _Drawn:
    """One chunk a run drew, kept for the runs after it: what it was asked for, the chunk (read-only)
    and the random generator's state after it."""

    groups: int
    drift: float
    chunk: GroupChunk
    state_after: dict


# (seed, workload) -> the chunks drawn so far, in order; None outside shared()
_SHARED: dict[tuple, list[_Drawn]] | None = None


@contextmanager
def shared() -> Iterator[None]:
    """Inside the block, a run whose workload and seed an earlier run of the block had replays that
    run's chunks while it asks for the same (groups, drift) (bench.plan: every split at the same
    seeds). The chunks are held until the block ends (18 MB per seed for 300 case-1 steps)."""
    global _SHARED
    outer, _SHARED = _SHARED, {} if _SHARED is None else _SHARED
    try:
        yield
    finally:
        _SHARED = outer


def _lognormal(rng: np.random.Generator, mean: np.ndarray | float, sigma: float, size: int) -> np.ndarray:
    """Lognormal draws with the given arithmetic mean and log-space sigma."""
    mu = np.log(np.maximum(mean, 1e-9)) - 0.5 * sigma * sigma
    return rng.lognormal(mu, sigma, size)


class Draws:
    """Draw source for one run: deterministic for a seed, chunk after chunk."""

    def __init__(self, cfg: Any, seed: int):
        # the workload as plain values: chunk() reads a dozen of them per chunk, and OmegaConf
        # attribute access is ~100x slower than a namespace's
        plain = OmegaConf.to_container(cfg.workload, resolve=True, enum_to_str=True)
        w = self.w = SimpleNamespace(**plain)
        self.rng = np.random.default_rng(seed)
        self.group_size = int(w.group_size)
        self.drift_steps = max(int(w.response_len_drift_steps) or int(w.steps) - 1, 1)
        self.len_drift = float(w.response_len_drift)
        # chunks an earlier run with this workload and seed drew (shared()); k: the next to replay
        key = (int(seed), repr(sorted(plain.items())))
        self._log = _SHARED.setdefault(key, []) if _SHARED is not None else None
        self._k = 0
        self._behind = False  # chunks were replayed: self.rng has not drawn them

    def drift(self, step: int) -> float:
        """Multiplier of mean response length and turns at trainer step `step` (linear, then flat)."""
        f = min(max(step, 0) / self.drift_steps, 1.0)
        return 1.0 + (self.len_drift - 1.0) * f

    def mean_seq_len(self, step: int) -> float:
        """Expected final sequence length (prompt + response + tool output, tokens) at `step`."""
        w, d = self.w, self.drift(step)
        resp = min(w.response_len_mean_frac * d, 1.0) * w.max_response_len
        turns = max(1.0, w.turns_mean * d)
        cap = w.max_prompt_len + w.max_response_len
        return float(min(w.prompt_len_mean + resp + turns * w.tool_output_tokens_mean, cap))

    def chunk(self, groups: int, step: int) -> GroupChunk:
        """Draw `groups` groups for rollouts dispatched while the trainer is at `step`."""
        d, log, k = self.drift(step), self._log, self._k
        if log is None:
            return self._draw(groups, d)
        if k < len(log) and log[k].groups == groups and log[k].drift == d:
            self._k, self._behind = k + 1, True  # the same draw an earlier run made here
            return log[k].chunk
        if self._behind:  # continue from where the replayed chunks left the generator
            self.rng.bit_generator.state, self._behind = log[k - 1].state_after, False
        c = self._draw(groups, d)
        if k == len(log):  # the first run to get this far: keep it for the next ones
            for f in fields(c):
                if f.name != "memo":
                    getattr(c, f.name).setflags(write=False)
            log.append(_Drawn(groups, d, c, self.rng.bit_generator.state))
            self._k += 1
        else:  # asked for something else than the earlier run: this run draws its own from here
            self._log = None
        return c

    def _draw(self, groups: int, d: float) -> GroupChunk:
        """`groups` groups at drift multiplier d, from this run's generator."""
        w, rng, g = self.w, self.rng, self.group_size
        n = groups * g
        prompt = np.minimum(np.repeat(_lognormal(rng, w.prompt_len_mean, 0.3, groups), g), w.max_prompt_len)
        resp = _lognormal(rng, w.response_len_mean_frac * d * w.max_response_len, w.response_len_sigma, n)
        resp = np.clip(resp, 1, w.max_response_len).astype(np.int64)
        extra = max(w.turns_mean * d - 1.0, 0.0)
        turns = 1 + rng.poisson(extra, n) if extra > 0 else np.ones(n, dtype=np.int64)
        tool = (turns - 1) * w.tool_output_tokens_mean
        room = np.maximum(w.max_prompt_len + w.max_response_len - prompt - resp, 0)
        tool = np.minimum(tool, room).astype(np.int64)
        env = np.zeros(n)
        if w.env_startup_s > 0:
            env += _lognormal(rng, w.env_startup_s, w.env_latency_sigma, n)
        if w.env_latency_mean_s > 0:
            # sum of `turns` lognormal per-turn latencies: draw them all, then sum per rollout
            per_turn = _lognormal(rng, w.env_latency_mean_s, w.env_latency_sigma, int(turns.sum()))
            env += np.add.reduceat(per_turn, np.concatenate(([0], np.cumsum(turns)[:-1])))
        p = rng.beta(w.solve_rate_alpha, w.solve_rate_beta, groups)
        reward = (rng.random(n) < np.repeat(p, g)).astype(np.float64)
        passed = reward.reshape(groups, g).sum(axis=1)
        solve_all, solve_none = passed == g, passed == 0
        return GroupChunk(
            prompt_tokens=prompt.astype(np.int64),
            response_tokens=resp,
            tool_tokens=tool,
            turns=turns.astype(np.int64),
            env_s=env,
            reward=reward,
            zero_adv=solve_all | solve_none,
            solve_all=solve_all,
            solve_none=solve_none,
        )
