"""Write an emulated run's trace: steps.parquet (one row per trainer step, with dispatched / discarded /
filtered counts and generated tokens per step window) and rollouts.parquet (one row per rollout
segment: a partial rollout aborted and resumed has a `resumed` row, then its final row)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.emulator.loop import Result
from bench.emulator.rollouts import DISCARDED, FILTERED, STATUS_NAMES, USED
from bench.trace import RolloutWriter, RunPaths, write_steps

ROW_GROUP = 200_000
STATUS_ARRAY = pa.array(STATUS_NAMES, type=pa.string())


def _per_window(edges: np.ndarray, times: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Sum `weights` (or count) of events at `times` into step windows ending at `edges` (s)."""
    ok = np.isfinite(times)
    idx = np.searchsorted(edges, times[ok], side="left")
    idx = np.minimum(idx, len(edges) - 1)  # events exactly at the end of the run
    w = None if weights is None else weights[ok]
    return np.bincount(idx, weights=w, minlength=len(edges))[: len(edges)]


def step_rows(r: Result) -> list[dict]:
    """One trace row per trainer step of `r`, with the step window's dispatched / discarded /
    filtered rollout counts and generated tokens."""
    seg = r.segments
    edges = np.array([s.t_end_s for s in r.steps])
    first = np.zeros(len(seg["rollout"]), dtype=bool)
    first[np.unique(seg["rollout"], return_index=True)[1]] = True  # a rollout is dispatched once
    status = seg["status"]
    dispatched = _per_window(edges, seg["t_dispatch"][first])
    discarded = _per_window(edges, seg["t_finish"][status == DISCARDED])
    filtered = _per_window(edges, seg["t_finish"][status == FILTERED])
    generated = _per_window(edges, seg["t_finish"], seg["tokens"])
    rows = []
    for i, s in enumerate(r.steps):
        row = asdict(s)
        row["step_s"] = s.t_end_s - s.t_start_s
        row["dispatched_samples"] = int(dispatched[i])
        row["discarded_samples"] = int(discarded[i])
        row["filtered_samples"] = int(filtered[i])
        row["generated_tokens"] = int(round(generated[i]))
        rows.append(row)
    return rows


def write_trace(paths: RunPaths, r: Result, group_size: int, steps_written: bool = False) -> dict[str, int]:
    """Write steps.parquet (unless a paced run already streamed it) and rollouts.parquet for `r`;
    return rollout counts by final status."""
    if not steps_written:
        write_steps(paths.steps, step_rows(r))
    seg, draws = r.segments, r.draws
    status = seg["status"]
    names = np.array(STATUS_NAMES)
    rid = seg["rollout"]
    n = len(rid)
    with RolloutWriter(paths.rollouts) as w:
        for a in range(0, max(n, 1), ROW_GROUP):
            sl = slice(a, min(a + ROW_GROUP, n))
            ids, st = rid[sl], status[sl]
            step = seg["step"][sl]
            vend = seg["version_end"][sl]
            done = np.isin(st, (USED, FILTERED))  # finished and scored
            w.write(
                {
                    "rollout_id": ids,
                    "group_id": ids // group_size,
                    "step_consumed": pa.array(step, mask=step < 0),
                    "policy_version_start": seg["version_start"][sl],
                    "policy_version_end": pa.array(vend, mask=vend < 0),
                    "t_dispatch_s": seg["t_dispatch"][sl],
                    "t_finish_s": seg["t_finish"][sl],
                    "prompt_tokens": draws["prompt_tokens"][ids],
                    "response_tokens": np.round(seg["tokens"][sl]).astype(np.int64),
                    "turns": draws["turns"][ids],
                    "env_s": draws["env_s"][ids],
                    "reward": pa.array(draws["reward"][ids], mask=~done),
                    "status": pc.take(STATUS_ARRAY, pa.array(st.astype(np.int64))),
                }
            )
    last = np.zeros(n, dtype=bool)
    last[n - 1 - np.unique(rid[::-1], return_index=True)[1]] = True
    final = names[status[last]]
    return {k: int(v) for k, v in zip(*np.unique(final, return_counts=True), strict=True)}
