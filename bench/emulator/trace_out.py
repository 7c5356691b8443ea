"""The writer-adapter of an emulated run (the emulator itself writes nothing): its Result as trace
rows and columns (step_rows, rollout_rows, final_counts: pure), and write_trace, which writes them.
steps.parquet has one row per trainer step, with dispatched / discarded / filtered counts and
generated tokens per step window; rollouts.parquet one row per rollout segment (a partial rollout
aborted and resumed has a `resumed` row, then its final row)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.emulator.loop import Result
from bench.emulator.rollouts import DISCARDED, FILTERED, STATUS_NAMES, USED
from bench.trace import RolloutWriter, RunPaths, write_steps

ROW_GROUP = 200_000
STATUS_ARRAY = pa.array(STATUS_NAMES, type=pa.string())


def _windows(edges: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(which `times` are finite, the step window each finite one falls in): windows end at `edges`
    (s); an event exactly at the end of the run is in the last."""
    ok = np.isfinite(times)
    return ok, np.minimum(np.searchsorted(edges, times[ok], side="left"), len(edges) - 1)


def _per_window(idx: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Sum `weights` (or count) of events in windows `idx` (_windows) over n windows."""
    return np.bincount(idx, weights=weights, minlength=n)[:n]


def first_segments(r: Result) -> np.ndarray:
    """Mask of each rollout's first segment (a rollout is dispatched once): its first resumed segment
    where it has any, else its own row. Segments are the resumed ones in the order they were cut,
    then every rollout's own row (rollout id = row), so only the few resumed ids need sorting."""
    ids = r.segments["rollout"]
    n_resumed = len(ids) - len(r.draws["prompt_tokens"])
    first = np.ones(len(ids), dtype=bool)
    if n_resumed:
        resumed = ids[:n_resumed]
        first[:n_resumed] = False
        first[np.unique(resumed, return_index=True)[1]] = True
        first[n_resumed + resumed] = False  # their own rows are later segments
    return first


def step_rows(r: Result) -> list[dict]:
    """One trace row per trainer step of `r`, with the step window's dispatched / discarded /
    filtered rollout counts and generated tokens."""
    seg, G = r.segments, r.group_size
    edges = np.array([s.t_end_s for s in r.steps])
    n = len(edges)
    if G and len(seg["rollout"]) == len(r.draws["prompt_tokens"]):
        # no resumed segment: a group's rollouts share their dispatch, placed once (380k -> 24k
        # binary searches for case 1)
        dispatched = _per_window(_windows(edges, seg["t_dispatch"][::G])[1], n) * G
    else:
        dispatched = _per_window(_windows(edges, seg["t_dispatch"][first_segments(r)])[1], n)
    # every segment's end placed in its window once (380k binary searches for case 1) for all three
    ended, idx = _windows(edges, seg["t_finish"])
    status = seg["status"][ended]
    discarded = _per_window(idx[status == DISCARDED], n)
    filtered = _per_window(idx[status == FILTERED], n)
    generated = _per_window(idx, n, seg["tokens"][ended])
    rows = []
    for i, s in enumerate(r.steps):
        row = dict(vars(s))  # StepRow's fields are scalars: asdict's deep copy cost 0.1 ms a step
        row["step_s"] = s.t_end_s - s.t_start_s
        row["dispatched_samples"] = int(dispatched[i])
        row["discarded_samples"] = int(discarded[i])
        row["filtered_samples"] = int(filtered[i])
        row["generated_tokens"] = int(round(generated[i]))
        if r.score_s is not None:  # teachers only: a run without a scoring stage leaves it null
            # scored while the trainer waits (the batch fills once its groups are scored): part of
            # wait_s, so a generation-side column, not the step's serial score_s phase
            row["gen_score_s"] = r.score_s[i]
        rows.append(row)
    return rows


def rollout_rows(r: Result, group_size: int, rows: slice) -> dict[str, object]:
    """Trace columns of rollouts.parquet for segments `rows` of `r` (unknowns masked: a rollout not
    trained has no step, one not finished no end version, one not scored no reward)."""
    seg, draws = r.segments, r.draws
    ids, status = seg["rollout"][rows], seg["status"][rows]
    step, vend = seg["step"][rows], seg["version_end"][rows]
    scored = np.isin(status, (USED, FILTERED))  # finished and scored
    return {
        "rollout_id": ids,
        "group_id": ids // group_size,
        "step_consumed": pa.array(step, mask=step < 0),
        "policy_version_start": seg["version_start"][rows],
        "policy_version_end": pa.array(vend, mask=vend < 0),
        "t_dispatch_s": seg["t_dispatch"][rows],
        "t_finish_s": seg["t_finish"][rows],
        "prompt_tokens": draws["prompt_tokens"][ids],
        "response_tokens": np.round(seg["tokens"][rows]).astype(np.int64),
        "turns": draws["turns"][ids],
        "env_s": draws["env_s"][ids],
        "reward": pa.array(draws["reward"][ids], mask=~scored),
        "status": pc.take(STATUS_ARRAY, pa.array(status.astype(np.int64))),
    }


def final_counts(r: Result) -> dict[str, int]:
    """Dispatched rollouts by final status (a rollout's last segment)."""
    rid, status = r.segments["rollout"], r.segments["status"]
    n = len(rid)
    last = np.zeros(n, dtype=bool)
    last[n - 1 - np.unique(rid[::-1], return_index=True)[1]] = True
    final = np.array(STATUS_NAMES)[status[last]]
    return {k: int(v) for k, v in zip(*np.unique(final, return_counts=True), strict=True)}


def write_trace(paths: RunPaths, r: Result, group_size: int, steps_written: bool = False) -> dict[str, int]:
    """Write steps.parquet (unless a paced run already streamed it) and rollouts.parquet for `r`,
    the latter ROW_GROUP rows at a time (a run of a million rollouts is never converted whole);
    return rollout counts by final status."""
    if not steps_written:
        write_steps(paths.steps, step_rows(r))
    n = len(r.segments["rollout"])
    with RolloutWriter(paths.rollouts) as w:
        for a in range(0, max(n, 1), ROW_GROUP):
            w.write(rollout_rows(r, group_size, slice(a, min(a + ROW_GROUP, n))))
    return final_counts(r)
