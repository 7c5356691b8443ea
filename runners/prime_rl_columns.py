"""Step-indexed columns for log parsers: append-only accumulation and a row-dict view.

A dict per step costs ~150-300 bytes; array('d') columns cost 8 bytes per logged value, which
keeps a 2.5M-step console log (prime-rl's rl launcher prints one Step line per step) small.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

NAN = float("nan")


class StepTable:
    """Append-only step-indexed columns of one source: one entry per log line, NaN = not logged.

    array('d') columns cost 8 bytes per value (a dict of tuples costs ~150 bytes per step), so a
    2.5M-step console log stays small; duplicates (resumed runs) are resolved once, at the end."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.step = array("q")
        self.cols = [array("d") for _ in names]

    def append(self, step: int, values: tuple) -> None:
        """One log line's values for `step`, in `names` order (None = not logged)."""
        self.step.append(step)
        for col, v in zip(self.cols, values, strict=True):
            col.append(NAN if v is None else v)

    def append_dict(self, step: int, values: dict[str, Any]) -> None:
        self.append(step, tuple(values.get(n) for n in self.names))

    def _views(self) -> tuple[np.ndarray, list[np.ndarray], bool]:
        """Zero-copy numpy views of the columns, and whether steps strictly increase (the usual
        case: one line per step, in order, so no step needs resolving and nothing is copied)."""
        steps = np.frombuffer(self.step, dtype=np.int64)
        cols = [np.frombuffer(c, dtype=np.float64) for c in self.cols]
        return steps, cols, bool(np.all(steps[1:] > steps[:-1]))

    def last_rows(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(sorted unique steps, columns): each step's last line wins whole (a console line)."""
        steps, cols, ordered = self._views()
        if ordered:
            return steps, dict(zip(self.names, cols, strict=True))
        uniq, first_of_reversed = np.unique(steps[::-1], return_index=True)
        at = len(steps) - 1 - first_of_reversed
        return uniq, {n: c[at] for n, c in zip(self.names, cols, strict=True)}

    def last_values(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(sorted unique steps, columns): per column, each step's last logged value wins
        (metrics.jsonl rows of one step carry different keys and merge)."""
        steps, cols, ordered = self._views()
        if ordered:
            return steps, dict(zip(self.names, cols, strict=True))
        uniq = np.unique(steps)
        out = {}
        for name, v in zip(self.names, cols, strict=True):
            ok = ~np.isnan(v)
            s_rev, v_rev = steps[ok][::-1], v[ok][::-1]
            has, first = np.unique(s_rev, return_index=True)
            full = np.full(len(uniq), np.nan)
            full[np.searchsorted(uniq, has)] = v_rev[first]
            out[name] = full
        return uniq, out


def union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted unique steps of two sorted unique arrays (no copy when one is empty)."""
    return a if not len(b) else b if not len(a) else np.union1d(a, b)


def overlay(out: dict[str, np.ndarray], steps: np.ndarray, src: np.ndarray, cols: dict) -> None:
    """Write a source's logged values (non-NaN) over `out` at the rows of `steps` it shares."""
    if src is steps or np.array_equal(src, steps):  # one source holds every step: adopt its columns
        for name, v in cols.items():
            if name not in out:
                out[name] = v
            else:
                ok = ~np.isnan(v)
                out[name][ok] = v[ok]
        return
    pos = np.searchsorted(steps, src)
    hit = pos < len(steps)
    hit[hit] = steps[pos[hit]] == src[hit]
    for name, v in cols.items():
        v = v[hit]
        ok = ~np.isnan(v)
        if ok.any():
            col = out.setdefault(name, np.full(len(steps), np.nan))
            col[pos[hit][ok]] = v[ok]


class StepRows(Sequence):
    """Trace rows held as columns: a read-only sequence of row dicts, built one at a time.

    Reads like the list of dicts ParseResult.steps documents (len, rows[i], rows[-1], slices,
    iteration, `== [...]`); a row has only the keys its step logged. 2.5M steps take ~8 bytes
    per logged value instead of a dict per step. `to_frame()` gives the columns as a DataFrame.
    """

    def __init__(self, steps: np.ndarray, cols: dict[str, np.ndarray], int_columns: frozenset = frozenset()):
        self.steps = np.asarray(steps, dtype=np.int64)
        self.int_columns = int_columns  # returned as int (counts), the rest as float
        self.cols = {k: v for k, v in cols.items() if (~np.isnan(v)).any()}

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row: dict[str, Any] = {"step": int(self.steps[i])}
        for name, col in self.cols.items():
            v = col[i]
            if v == v:  # not NaN
                row[name] = int(v) if name in self.int_columns else float(v)
        return row

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # mutable-looking container semantics, like list

    def __repr__(self) -> str:
        return f"StepRows({len(self)} steps, columns={['step', *self.cols]})"

    def to_frame(self) -> Any:
        """The rows as a pandas DataFrame: Int64 for count columns, float64 (NaN = not logged)."""
        import pandas as pd  # not at import time: the parser itself needs no pandas

        data: dict[str, Any] = {"step": self.steps}
        for name, col in self.cols.items():
            data[name] = pd.array(col, dtype="Int64") if name in self.int_columns else col
        return pd.DataFrame(data)
