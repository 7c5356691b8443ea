"""Sweep expansion, in one place: Hydra's own override parser and basic sweeper turn `key=a,b`,
`range(64,321,32)` and `choice(...)` into the cartesian product of points, as `--multirun` does.
`bench run` (one job per point and framework) and `bench emulate` (one run directory per point)
both expand through here.

A sweep's size is counted from each swept key's values before the product is built (a range is
counted, not listed), and a sweep of more than `MAX_POINTS` points is refused unless the command is
given `--max-points N` (docs/bad-input.md): every point is composed and validated before the first
job starts, so `range(1,100000)` would otherwise run silently for hours before anything happened.
"""

from __future__ import annotations

import math
import sys

from bench.cli import counted
from bench.errors import UsageError

MAX_POINTS = 256  # sweep points `run` and `emulate` expand without `--max-points N`


class SweepError(UsageError):
    """The overrides sweep a key without --multirun, or sweep more points than the cap."""


def expand(
    overrides: list[str], multirun: bool, max_points: int = MAX_POINTS
) -> list[tuple[dict[str, str], list[str]]]:
    """Sweep points as (swept key -> value, the point's full override list), in Hydra's order.

    Without a sweep override this is one point with the overrides as given. A sweep states its
    size on stderr (`sweep: N points over KEYS`) before the caller composes the first point."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    sweeps = [o for o in parsed if o.is_sweep_override()]
    swept = [o.key_or_group for o in sweeps]
    if swept and not multirun:
        raise SweepError(f"sweep over {swept} needs --multirun (as in Hydra)")
    size = math.prod(_count(o) for o in sweeps)
    if not math.isfinite(size):
        ranges = " ".join(o.input_line for o in sweeps if not math.isfinite(_count(o)))
        raise SweepError(f"{ranges}: a range without an end; expected finite start, stop and step")
    if swept and size == 0:
        empty = " ".join(o.input_line for o in sweeps if _count(o) == 0)
        raise SweepError(
            f"{empty}: no values to sweep; expected a range with start before stop (or a negative step)"
        )
    if swept and size > max_points:
        raise SweepError(
            f"sweep over {swept} is {size} points, more than --max-points {max_points}; narrow it, "
            f"or confirm with --max-points {size}"
        )
    points = []
    for batch in BasicSweeper.split_arguments(parsed, None):
        for combo in batch:
            values = dict(o.split("=", 1) for o in combo)
            points.append(({k: values[k] for k in swept}, combo))
    if swept:
        print(f"sweep: {counted(len(points), 'point')} over {', '.join(swept)}", file=sys.stderr)
    return points


def _count(o) -> float:
    """Values of one sweep override: a range's length from start, stop and step (inf for a range
    without an end, e.g. `range(0,inf)`); any other sweep's values listed by Hydra."""
    from hydra.core.override_parser.types import RangeSweep

    v = o.value()
    if isinstance(v, RangeSweep) and v.step:  # step 0: Hydra's own "Invalid range values" below
        n = (v.stop - v.start) / v.step
        return max(0, math.ceil(n)) if math.isfinite(n) else math.inf
    return len(list(o.sweep_string_iterator()))
