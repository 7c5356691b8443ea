"""The GPU layouts `bench plan` and `bench predict` may propose, and what a run itself shows.

- the trainer:generator splits of a GPU count that `bench validate` accepts (`valid_splits`): the
  only splits a plan emulates, a prediction falls back to, or the report advises;
- the placement a framework cannot run (`placement_problem`: its runner's own line) and the GPUs a
  run holds (`held_gpus`), so a prediction keeps the run's GPUs and never overlaps two roles;
- a point's $ per M useful trained tokens (`useful_cost`), the plan's objective;
- the measured run as a plan's baseline row (`measured_point`), and its zero-advantage shape
  (`zero_advantage_setup`: workload.solve_rate_alpha/beta fitted to the groups it logged).

This module does not import bench.plan (which imports it).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

SPLIT_KEYS = ("experiment.trainer_gpus", "experiment.generator_gpus", "experiment.placement")


def set_point(
    c: Any,
    trainer: int,
    generator: int,
    bound: int | None = None,
    inflight: float | None = None,
    seed: int | None = None,
) -> Any:
    """Set one point of the plan in c, in place (c is a private copy: deep-copying the config costs
    ~60 ms, more than validating it)."""
    c.experiment.trainer_gpus, c.experiment.generator_gpus = trainer, generator
    if bound is not None:
        c.workload.staleness_budget = bound
    if inflight is not None:
        c.experiment.oversampling = inflight
    if seed is not None:
        c.experiment.seed = seed
    return c


def disaggregated(cfg: Any) -> Any:
    """A copy of cfg with experiment.placement=disaggregated (trainer and generator on their own GPUs)."""
    c = copy.deepcopy(cfg)
    c.experiment.placement = "disaggregated"
    return c


def valid_splits(
    cfg: Any, total: int, check: Callable[[list[tuple[int, int]]], list[bool]] | None = None
) -> list[tuple[int, int]]:
    """(trainer, generator) GPU splits of `total` that bench.validate accepts, generator ascending.
    `check(splits)`: whether validate accepts each split of cfg (bench.plan: on its pool's workers,
    ~20 ms a split); default: validated here, one after the other.

    Only generator counts that are whole engines are put to validate (an engine is the unit the
    generator pool is made of: validate would refuse the rest anyway, one by one)."""
    from bench.resolve import Resolved
    from bench.validate import validate

    engine = max(1, Resolved.from_config(cfg).engine_gpus)
    splits = [(total - g, g) for g in range(engine, total, engine)]
    if check is None:
        c = copy.deepcopy(cfg)
        return [(t, g) for t, g in splits if not validate(set_point(c, t, g))]
    return [split for split, ok in zip(splits, check(splits), strict=True) if ok]


def candidate_splits(
    s: Any, check: Callable[[list[tuple[int, int]]], list[bool]] | None = None
) -> list[tuple[int, int]]:
    """The splits a plan emulates (at most s.splits of those validate accepts, the current one among
    them; s: a bench.plan.Setup); `check` as valid_splits'. UsageError when no split of s.total passes
    validate (a colocated setup is then planned colocated only, said in its notes)."""
    valid = valid_splits(s.cfg, s.total, check)
    if not valid and s.colocated is not None:
        s.notes.append(
            f"no trainer:generator split of {s.total} GPUs passes bench validate: planned colocated only"
        )
        return []
    if not valid:
        from bench.errors import UsageError

        why, fix = no_split_why(s.cfg, s.total)
        raise UsageError(
            f"gpus={s.total}: no trainer:generator split passes bench validate ({why}); {fix or 'choose another gpus='}"
        )
    return choose(valid, s.current, s.splits)


def no_split_why(cfg: Any, total: int) -> tuple[str, str | None]:
    """(why no trainer:generator split of `total` GPUs passes bench validate, the fix when another
    GPU count cannot help, else None). A problem validate finds at every split (the trainer's
    parallelism, the algorithm, a loss weight the framework fixes) is named as such: no GPU count
    changes it; otherwise the problem at the even split (as close as engines allow)."""
    from bench.resolve import Resolved
    from bench.validate import validate

    engine = max(1, Resolved.from_config(cfg).engine_gpus)
    if total <= engine:
        return f"engines of {engine} GPUs; one engine leaves no trainer GPU", None
    c = copy.deepcopy(cfg)
    found = {g: validate(set_point(c, total - g, g)) for g in range(engine, total, engine)}
    everywhere = [p for p in found[engine] if all(p in f for f in found.values())]
    if everywhere:
        return (
            f"engines of {engine} GPUs; at every split: {everywhere[0]}",
            "no GPU count changes that: set the key it names",
        )
    g = max(engine, total // 2 // engine * engine)
    return f"engines of {engine} GPUs; at {total - g}:{g}: {found[g][0]}", None


def choose(valid: list[tuple[int, int]], current: tuple[int, int] | None, n: int) -> list[tuple[int, int]]:
    """At most n splits, evenly spaced over the valid ones, the current split always included."""
    if len(valid) <= n:
        return valid
    idx = {round(i * (len(valid) - 1) / (n - 1)) for i in range(n)} if n > 1 else {0}
    picked = [valid[i] for i in sorted(idx)]
    if current in valid and current not in picked:
        # replace the nearest picked split by the current one, keeping n points
        nearest = min(picked, key=lambda s: abs(s[1] - current[1]))
        picked = sorted([s for s in picked if s != nearest] + [current], key=lambda s: s[1])
    return picked


def splits_text(splits: list[tuple[int, int]]) -> str:
    """'6:2, 4:4' (trainer:generator GPUs)."""
    return ", ".join(f"{t}:{g}" for t, g in splits)


def whole_nodes(cfg: Any, splits: list[tuple[int, int]]) -> str:
    """' (roles take whole nodes of N GPUs)' when the splits span several nodes and every one puts
    each role on whole nodes; '' otherwise."""
    gpn = int(cfg.cluster.gpus_per_node)
    if not splits or sum(splits[0]) <= gpn or any(t % gpn or g % gpn for t, g in splits):
        return ""
    return f" (roles take whole nodes of {gpn} GPUs)"


def placement_problem(cfg: Any) -> str | None:
    """The line in which cfg's framework refuses cfg's experiment.placement (its runner's check, as
    bench validate prints it), or None when the framework runs that placement."""
    from bench.validate import validate

    return next((p for p in validate(cfg) if p.startswith("experiment.placement=")), None)


def held_gpus(cfg: Any) -> int:
    """GPUs trainer and generator hold between them (once when colocated; dedicated teachers apart)."""
    from bench.resolve import Resolved

    r = Resolved.from_config(cfg)
    return r.total_gpus - r.teacher.gpus


def own_framework(experiment: str, overrides: list[str]) -> str | None:
    """The first of conf/experiment/<experiment>.yaml's experiment.frameworks, read without composing
    (a compose costs ~0.15 s); None when the file names none or an override may change them."""
    from omegaconf import OmegaConf

    from bench.config import CONF_DIR

    if any(o.lstrip("+~").startswith("experiment.frameworks") for o in overrides):
        return None
    names = OmegaConf.select(
        OmegaConf.load(CONF_DIR / "experiment" / f"{experiment}.yaml"), "experiment.frameworks"
    )
    return str(names[0]) if names else None


def split_dict(row: pd.Series | None, teacher_gpus: int) -> dict[str, int] | None:
    """A point's split; dedicated teacher GPUs are held as the experiment has them (not swept)."""
    if row is None:
        return None
    return {
        "placement": str(row.placement),
        "trainer_gpus": int(row.trainer_gpus),
        "generator_gpus": int(row.generator_gpus),
        "teacher_gpus": teacher_gpus,
        "staleness_budget": int(row.staleness_budget),
        "oversampling": float(row.oversampling),
    }


def fmt_g(v: float) -> str:
    """3 significant digits; '-' when unknown."""
    return "-" if v is None or v != v else f"{v:.3g}"


def fmt_pct(v: float) -> str:
    """A fraction as a whole percentage; '-' when unknown."""
    return "-" if v is None or v != v else f"{100 * v:.0f}%"


def useful_cost(cost: float | None, zero_adv: float | None, steps: pd.DataFrame) -> float | None:
    """$ per M useful trained tokens: trained tokens of groups with a non-zero advantage. A policy
    that filters zero-advantage groups (filtered_samples > 0) never trains them, so its trained
    tokens are all useful; otherwise they are trained and the zero-advantage share is paid for."""
    if cost is None:
        return None
    if steps["filtered_samples"].fillna(0).sum() > 0:
        return cost
    return cost / (1 - zero_adv) if zero_adv is not None and zero_adv < 1 else None


# ---- what the run itself shows -----------------------------------------------------------------

# Beta(alpha, beta) per-prompt solve rates searched by zero_advantage_setup: mean x concentration
_MEANS = np.linspace(0.005, 0.995, 199)
_CONCENTRATIONS = np.geomspace(0.05, 500, 240)


def solve_fractions(alpha: np.ndarray, beta: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """P(every rollout of a group of `group` passes), P(none passes) with solve rate ~ Beta(alpha, beta)."""
    alpha, beta = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    i = np.arange(group).reshape((-1,) + (1,) * alpha.ndim)  # the product runs over the group's rollouts
    s = alpha + beta
    return np.prod((alpha + i) / (s + i), axis=0), np.prod((beta + i) / (s + i), axis=0)


def zero_advantage_setup(steps: pd.DataFrame, group: int) -> tuple[list[str], str]:
    """(overrides, note): workload.solve_rate_alpha/beta fitted to the run's logged solve_all_frac and
    solve_none_frac (window means of every step after the first), so the emulated zero-advantage share
    is the run's; ([], note naming the default) when the run does not log them."""
    steady = steps.sort_values("step").iloc[1:]
    cols = ("solve_all_frac", "solve_none_frac")
    if len(steady) == 0 or not all(c in steady and steady[c].notna().any() for c in cols) or group < 2:
        return [], (
            "zero-advantage share: default workload.solve_rate_alpha=1, workload.solve_rate_beta=1 "
            "(the run logs no solve_all/solve_none fractions)"
        )
    p_all, p_none = (float(steady[c].mean()) for c in cols)
    m, k = np.meshgrid(_MEANS, _CONCENTRATIONS)
    a, b = m * k, (1 - m) * k
    fa, fn = solve_fractions(a, b, group)
    i = np.unravel_index(np.argmin((fa - p_all) ** 2 + (fn - p_none) ** 2), a.shape)
    alpha, beta = float(a[i]), float(b[i])
    note = (
        f"zero-advantage share from the run: solve_all {p_all:.1%}, solve_none {p_none:.1%} "
        f"-> workload.solve_rate_alpha={alpha:.3g}, workload.solve_rate_beta={beta:.3g}"
    )
    return [f"workload.solve_rate_alpha={alpha:.4g}", f"workload.solve_rate_beta={beta:.4g}"], note


def run_shapes(cfg: Any, steps: pd.DataFrame, calibration: str | None, given: list[str]) -> list[str]:
    """Set cfg's zero-advantage shape to the run's (zero_advantage_setup; the user's
    workload.solve_rate_* win) in place; the notes naming what is the run's and what a default
    (the length inputs the fitted `calibration` YAML kept at their default)."""
    import yaml
    from omegaconf import OmegaConf

    shape, note = zero_advantage_setup(steps, int(cfg.workload.group_size))
    if any(g.startswith("workload.solve_rate_") for g in given):
        shape, note = [], "zero-advantage share: workload.solve_rate_alpha/beta as given"
    for o in shape:
        key, _, value = o.partition("=")
        OmegaConf.update(cfg, key, float(value))
    kept = (yaml.safe_load(calibration) or {}).get("defaults") or {} if calibration else {}
    lengths = [
        f"{k}={v.get('value')}" for k, v in kept.items() if k.startswith("workload.") and isinstance(v, dict)
    ]
    return [note] + (
        [f"length shape: default {', '.join(lengths)} (not in the run's logs)"] if lengths else []
    )


def measured_point(cfg: Any, steps: pd.DataFrame, kept: tuple[str, ...]) -> dict[str, Any]:
    """The measured run's `kept` figures (bench.metrics on its own trace, over the wall clock of its
    steps as the emulated points have it; cfg: the run as it ran, for its GPU count and $/GPU-hour),
    None where its trace does not log what a figure needs."""
    from omegaconf import OmegaConf

    from bench import metrics
    from bench.resolve import placement_of

    # the wall clock of the steps, as the emulated points have it: start-up before the first step
    # (model loading, engine launch) is left out, else a short run's rate and $/M read as the start-up's
    # (untimed steps: bench.metrics.wall_s's own fallback, the sum of step_s)
    timed = all(c in steps and steps[c].notna().any() for c in ("t_start_s", "t_end_s"))
    span = float(steps["t_end_s"].max() - steps["t_start_s"].min()) if timed else None
    manifest = {
        "mode": "native",
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "wall_s": span if span is not None and span > 0 else None,
    }
    c = metrics.Context(manifest, steps, None, None)
    for name, fn in metrics.METRICS.items():
        try:
            v = fn(c)
            c.values[name] = float(v) if v is not None and math.isfinite(v) else None
        except (metrics.Missing, KeyError) as e:
            c.values[name], c.missing[name] = None, str(e)
    placement = placement_of(cfg)
    out: dict[str, Any] = {
        "placement": placement,
        "trainer_gpus": int(cfg.experiment.trainer_gpus),
        "generator_gpus": int(
            cfg.experiment.trainer_gpus if placement == "colocated" else cfg.experiment.generator_gpus
        ),
        "gpus": held_gpus(cfg),
        "measured": True,
        "wall_s": c.values.get("wall_s"),  # first step start to last step end (start-up left out)
    }
    out.update({k: c.values.get(k) for k in kept})
    out["missing"] = {k: c.missing[k] for k in kept if c.values.get(k) is None and k in c.missing}
    return out
