"""Sweep expansion, in one place: Hydra's own override parser and basic sweeper turn `key=a,b`,
`range(64,321,32)` and `choice(...)` into the cartesian product of points, as `--multirun` does.
`bench run` (one job per point and framework) and `bench emulate` (one run directory per point)
both expand through here."""

from __future__ import annotations


class SweepError(ValueError):
    """The overrides sweep a key without --multirun."""


def expand(overrides: list[str], multirun: bool) -> list[tuple[dict[str, str], list[str]]]:
    """Sweep points as (swept key -> value, the point's full override list), in Hydra's order.

    Without a sweep override this is one point with the overrides as given."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    swept = [o.key_or_group for o in parsed if o.is_sweep_override()]
    if swept and not multirun:
        raise SweepError(f"sweep over {swept} needs --multirun (as in Hydra)")
    points = []
    for batch in BasicSweeper.split_arguments(parsed, None):
        for combo in batch:
            values = dict(o.split("=", 1) for o in combo)
            points.append(({k: values[k] for k in swept}, combo))
    return points
