"""The surplus at a batch fill: what happens to the rollouts still in flight when the trainer's batch
is full (Schedule.surplus). `carry` keeps them generating for later batches (nothing to do here);
`cancel` stops them and discards them (the oversampling waste); `abort` stops them and buffers them
to resume later from where they stopped (partial rollout), re-prefilling their context.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from bench.emulator.generator import Decoded
from bench.emulator.rollouts import DONE_TOKENS, PENDING, RESUMED, RUNNING, Rollouts


def stop_in_flight(
    rollouts: Rollouts,
    groups: list[int],
    decoded: Decoded,
    t: float,
    version: int,
    abort: bool,
    never_placed: Collection[int],
    placed_at: dict[int, float] | None = None,
) -> None:
    """Cancel (discard) or abort (buffer as `resumed` segments) every rollout of `groups` still in
    flight at t (`groups` ascending). `decoded`: the groups on an engine and the tokens each of their
    rollouts had decoded (the engine's stop, generator.Decoded); `never_placed`: groups still queued for an engine slot, which spent no time yet;
    `placed_at`: when groups that had queued for a slot got one (their environment time began)."""
    if not abort:  # written with every other fill's cancelled groups at the end of the run
        rollouts.discard(groups, decoded, t, version)
        return
    rollouts.flush()  # t_dispatch and version_start are read and copied to history below
    r, G = rollouts.table.cols, rollouts.group_size
    rows = rollouts.members(groups)
    running = r["status"][rows] == RUNNING
    idx = rows[running]
    zeros = np.zeros(G)
    placed = dict(zip(decoded[0], decoded[1], strict=True))
    tokens = np.concatenate([placed.get(g, zeros) for g in groups])[running]
    r["tokens"][idx], r["t_finish"][idx], r["version_end"][idx] = tokens, t, version
    left = r["seg_work"][idx] - tokens
    r["left"][idx] = left
    began = r["t_dispatch"][idx]
    if placed_at:
        began = np.maximum(began, [placed_at.get(g, -np.inf) for g in (idx // G).tolist()])
    spent = np.where(np.isin(idx // G, list(never_placed)), 0.0, t - began)
    # an episode aborted before its decode began keeps the rest of its environment time
    r["env_left"][idx] = np.where(tokens > 0, 0.0, np.maximum(r["seg_delay"][idx] - spent, 0.0))
    r["status"][idx[left <= DONE_TOKENS]] = PENDING  # finished just before the abort: keeps its result
    cut = idx[left > DONE_TOKENS]
    h = rollouts.history
    sl = h.add(len(cut))
    for k in ("step", "version_start", "version_end", "t_dispatch", "t_finish", "tokens"):
        h.cols[k][sl] = r[k][cut]
    h.cols["rollout"][sl], h.cols["status"][sl] = cut, RESUMED
    r["status"][cut] = RESUMED


def resume_segments(
    rollouts: Rollouts, g: int, t: float, prefill_s: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Restart group g's aborted rollouts at t with the tokens they had left; return the group's
    (work, delay) per rollout for the engine (0, 0 for members that had already finished)."""
    rollouts.flush()  # the group's first dispatch is written before its resumed rows' own
    rows, r = rollouts.rows(g), rollouts.table.cols
    again = r["status"][rows] == RESUMED
    left, work = r["left"][rows], r["work"][rows]
    done = work - left
    # the engine dropped the KV cache: re-prefill prompt + tokens so far; an episode aborted
    # before its decode began still has the rest of its environment time (its sandbox lives on)
    delay = np.where(again, prefill_s(r["context"][rows] + done) + r["env_left"][rows], 0.0)
    seg_work = np.where(again, left, 0.0)
    idx = np.arange(rows.start, rows.stop)[again]
    r["seg_delay"][idx] = delay[again]
    r["status"][idx], r["t_dispatch"][idx], r["t_finish"][idx] = RUNNING, t, np.nan
    r["seg_work"][idx], r["tokens"][idx], r["version_end"][idx] = left[again], 0.0, -1
    return seg_work, delay
