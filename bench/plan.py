"""`bench plan (experiment=X | RUN_DIR) [gpus=N] [max_staleness=K] [--json] [--out DIR]`:
how to split a fixed number of GPUs between generation and training, answered by emulation.

Every generator:trainer split of the total (the experiment's or run's own trainer + generator GPUs,
once when colocated, or `gpus=N`) that `bench validate`
accepts (engine size, whole nodes, batch divisibility) is a candidate; at most `splits=` of them
(default 16, evenly spaced, the current split always among them) are emulated, each at `seeds=`
seeds (default 3), at each async bound `bounds=K1,K2,..` (workload.staleness_budget, the
framework's max_async_level / staleness budget) and each in-flight cap `inflight=X1,X2,..`
(experiment.oversampling: groups kept in flight or dispatched per batch = prompts x X); both
default to the experiment's own value. The recommendation maximises useful trained
tokens per dollar: trained tokens of groups with a non-zero advantage (discarded rollouts are
never trained) per $, i.e. minimises

    useful $/M = cost_per_mtok_usd / (1 - zero_advantage_frac)     ($ per M useful trained tokens)

(= cost_per_mtok_usd when the policy filters zero-advantage groups before training)

among splits whose largest staleness over every seed stays within `max_staleness` (default: the
experiment's workload.staleness_budget). Production meets consumption where
bench.report.sweep.crossing says so (the report's rule). Every number is emulated.

A colocated setup is also planned as it runs (one colocated point on all the GPUs). `RUN_DIR`
plans on a measured run's setup with its calibration (fitted as `bench predict` does, written to
DIR/calibration.yaml), its zero-advantage shape where it logs one, and the measured run as the
baseline row (bench.plan_splits); `experiment=X` uses the experiment's own emulator inputs.
`--cluster NAME` sends the emulations to NAME's Slurm as one job array instead.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import multiprocessing as mp
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.cli import counted
from bench.errors import UsageError
from bench.outdir import check_out
from bench.plan_page import KNOBS, USEFUL, knob, preload, print_table, sentence, write_page
from bench.plan_splits import (
    candidate_splits,
    disaggregated,
    held_gpus,
    own_framework,
    set_point,
    split_dict,
    useful_cost,
)
from bench.resolve import placement_of

SEEDS = 3
SPLITS = 16
JOBS = 2  # both cores of the reference machine: the emulations are independent
# The figures each emulated point keeps (bench.metrics names), and the plan's own objective.
KEPT = (
    "trajectories_per_s",
    "production_samples_per_s",
    "consumption_samples_per_s",
    "trainer_idle_frac",
    "staleness_mean",
    "staleness_max",
    "zero_advantage_frac",
    "oversampling_waste",
    "cost_per_mtok_usd",
)
OBJECTIVE = (
    "min useful $/M = cost_per_mtok_usd / (1 - zero_advantage_frac) (zero-advantage groups trained; "
    "= cost_per_mtok_usd where they are filtered), subject to staleness_max <= max_staleness"
)
OWN = {"gpus", "max_staleness", "seeds", "splits", "bounds", "inflight"}  # the plan's own keys


@dataclass
class Setup:
    """What a plan sweeps around: the base config, the GPUs to split, the bounds, the source."""

    cfg: Any  # disaggregated: the splits are emulated on it
    total: int
    current: tuple[int, int] | None  # (trainer, generator) GPUs of the experiment or run
    max_staleness: int
    bounds: list[int]
    inflight: list[float]
    seeds: list[int]
    source: str
    calibration: str | None = None  # fitted YAML text (--from), written beside the page
    splits: int = SPLITS  # at most this many splits are emulated
    notes: list[str] = field(default_factory=list)
    colocated: Any = None  # a colocated experiment or run as it ran: also planned on all `total` GPUs
    measured: dict[str, Any] | None = None  # the measured run's figures (RUN_DIR): the baseline row


# ---- one emulated point (runs in a pool worker) ------------------------------------------------

_BASE: Any = None  # the base config, set before the pool forks; workers read it, nothing is pickled
_WORK: Any = None  # this process's own copy of _BASE, set to each point in turn
# this process's layouts (Resolved, ~10 ms each: it builds the runner through Hydra) by (trainer GPUs,
# generator GPUs, async bound, in-flight cap): a split's validation and its seeds' emulations share one
_LAYOUTS: dict[tuple[int, int, int, float], Any] = {}


def _point(t: int, g: int, bound: int, inflight: float, seed: int | None = None) -> tuple[Any, Any]:
    """_WORK set to one point of _BASE, and its layout (Resolved)."""
    from bench.resolve import Resolved

    global _WORK
    if _WORK is None:
        _WORK = copy.deepcopy(_BASE)
    cfg = set_point(_WORK, t, g, bound, inflight, seed)
    if (t, g, bound, inflight) not in _LAYOUTS:
        _LAYOUTS[t, g, bound, inflight] = Resolved.from_config(cfg)
    return cfg, _LAYOUTS[t, g, bound, inflight]


def split_ok(split: tuple[int, int]) -> bool:
    """Whether bench validate accepts (trainer GPUs, generator GPUs) of _BASE at its own async bound,
    in-flight cap and seed (bench.plan_splits.valid_splits' check, run by a pool worker)."""
    from bench.validate import validate

    base = _BASE.experiment
    cfg, r = _point(*split, int(_BASE.workload.staleness_budget), float(base.oversampling), int(base.seed))
    return not validate(cfg, r)


def emulate_point(item: tuple[int, int, int, float, int]) -> dict[str, Any]:
    """Emulate (trainer GPUs, generator GPUs, async bound, in-flight cap, seed) of _BASE; its KEPT
    figures."""
    from omegaconf import OmegaConf

    from bench import metrics
    from bench.emulator.run import build
    from bench.emulator.trace_out import step_rows

    t, g, bound, inflight, seed = item
    cfg, resolved = _point(t, g, bound, inflight, seed)
    loop, _, _ = build(cfg, resolved)
    result = loop.run()
    # the run's metrics through bench.metrics' own functions, on the trace held in memory
    manifest = {
        "mode": "emulated",
        "wall_s": result.wall_s,
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
    }
    c = metrics.Context(manifest, pd.DataFrame(step_rows(result)), None, None, cfg, resolved)
    for name, fn in metrics.METRICS.items():
        try:
            v = fn(c)
            c.values[name] = float(v) if v is not None and math.isfinite(v) else None
        except metrics.Missing as e:
            c.values[name], c.missing[name] = None, str(e)
    row = dict(trainer_gpus=t, generator_gpus=g, staleness_budget=bound, oversampling=inflight, seed=seed)
    row.update({k: c.values.get(k) for k in KEPT})
    row[USEFUL] = useful_cost(row["cost_per_mtok_usd"], row["zero_advantage_frac"], c.steps)
    loop.rollouts.release()  # the next point's rollouts reuse the memory (nothing here reads it again)
    return row


@contextmanager
def workers(cfg: Any, jobs: int = JOBS, meanwhile: Callable | None = None) -> Iterator[Callable]:
    """map(fn, items) -> list over `jobs` forked workers (1, or no fork: here) sharing cfg as _BASE,
    for split_ok and emulate_point. Every split is emulated at the same seeds, so each process draws
    a seed's rollouts once (draws.shared). `meanwhile()`: this process's own work, done while the
    workers run the first map (after the forks: they never inherit it, it holds no lock of theirs)."""
    from bench.emulator.draws import shared
    from bench.emulator.loop import gc_paused

    global _BASE, _WORK
    _BASE, _WORK = cfg, None
    _LAYOUTS.clear()
    try:  # the collector off for every point, in the workers too (forked with it off): 7% of a point
        with shared(), gc_paused():
            if jobs <= 1 or "fork" not in mp.get_all_start_methods():
                yield lambda fn, items: [fn(i) for i in items]
                return
            with ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork")) as pool:
                pending = [meanwhile] if meanwhile is not None else []

                def run(fn: Callable, items: list) -> list:
                    done = pool.map(fn, items)  # a fork pool starts every worker at the first submit
                    if pending:
                        pending.pop()()
                    return list(done)

                yield run
    finally:
        _BASE = _WORK = None
        _LAYOUTS.clear()


def emulate_all(
    cfg: Any, items: list[tuple], jobs: int = JOBS, meanwhile: Callable | None = None
) -> pd.DataFrame:
    """emulate_point over items of cfg on `jobs` workers (a single item: here); `meanwhile` as workers'."""
    jobs = jobs if len(items) > 1 else 1
    with workers(cfg, jobs, meanwhile) as run:
        return emulate(run, items, jobs)


def by_seed(items: list[tuple], jobs: int) -> list[list[int]]:
    """Indices of `items` (..., seed) as the workers' tasks: whole seeds first, as many as share
    evenly among `jobs` workers (a process draws a seed's rollouts and derives their shapes once:
    ~0.15 s a seed, each worker once per seed it meets), then one task per item of the other seeds,
    on which the workers balance."""
    seeds = list(dict.fromkeys(i[4] for i in items))
    whole = seeds[: len(seeds) - len(seeds) % jobs] if jobs > 1 else []
    tasks = [[k for k, i in enumerate(items) if i[4] == seed] for seed in whole]
    return tasks + [[k] for k, i in enumerate(items) if i[4] not in whole]


def emulate_points(items: list[tuple]) -> list[dict[str, Any]]:
    """emulate_point over `items`, one task of a worker (by_seed)."""
    return [emulate_point(i) for i in items]


def emulate(run: Callable, items: list[tuple], jobs: int) -> pd.DataFrame:
    """emulate_point's rows of `items`, in their order, through workers' map `run` (by_seed tasks)."""
    tasks, rows = by_seed(items, jobs), [None] * len(items)
    for task, done in zip(tasks, run(emulate_points, [[items[k] for k in t] for t in tasks]), strict=True):
        for k, row in zip(task, done, strict=True):
            rows[k] = row
    return pd.DataFrame(rows)


# ---- the answer --------------------------------------------------------------------------------


def summarise(rows: pd.DataFrame, max_staleness: int) -> pd.DataFrame:
    """One row per (placement, async bound, in-flight cap, split): mean and seed band (min, max) of every
    figure, through bench.report.sweep.points, with `staleness_ok` (every seed within max_staleness)
    and `met` (production reaches bench.report.sweep.MEET x consumption)."""
    from bench.report.sweep import MEET, points

    out = []
    for (placement, bound, inflight), g in rows.groupby(["placement", *KNOBS]):
        pts = points(g.drop(columns=list(KNOBS)).assign(sweep_value=g["generator_gpus"]))
        pts["placement"], pts["staleness_budget"], pts["oversampling"] = placement, bound, inflight
        out.append(pts)
    pts = pd.concat(out, ignore_index=True)
    pts["trainer_gpus"] = pts["trainer_gpus"].astype(int)
    pts["generator_gpus"] = pts["generator_gpus"].astype(int)
    pts["staleness_ok"] = pts["staleness_max_max"].fillna(math.inf) <= max_staleness
    ratio = pts["production_samples_per_s"] / pts["consumption_samples_per_s"]
    pts["met"] = ratio >= MEET
    return pts


def crossings(pts: pd.DataFrame) -> dict[str, float | None]:
    """Generator GPUs where production reaches consumption, per (async bound, in-flight cap) curve
    (the report's rule)."""
    from bench.report.sweep import crossing

    split = pts[pts.placement == "disaggregated"]  # a colocated point is no split on the curve
    return {knob(*k): crossing(g.sort_values("sweep_value")) for k, g in split.groupby(list(KNOBS))}


def recommend(pts: pd.DataFrame) -> pd.Series | None:
    """The cheapest point within the staleness bound: lowest mean useful $/M. Points whose seed band
    of useful $/M reaches the cheapest one's are as cheap as the seeds can tell; among those, the
    least trainer idle wins (the same money, the trainer's GPUs better used), then the lower mean."""
    ok = pts[pts["staleness_ok"] & pts[USEFUL].notna()]
    if ok.empty:
        return None
    best = ok.loc[ok[USEFUL].idxmin()]
    lo, hi = f"{USEFUL}_min", f"{USEFUL}_max"
    if lo not in ok or hi not in ok:
        return best
    tied = ok[ok[lo] <= best[hi]]
    return tied.sort_values(["trainer_idle_frac", USEFUL]).iloc[0]


def current_point(pts: pd.DataFrame, s: Setup) -> pd.Series | None:
    if s.current is None:
        return None
    t, g = s.current
    bound, inflight = int(s.cfg.workload.staleness_budget), float(s.cfg.experiment.oversampling)
    m = pts[(pts.trainer_gpus == t) & (pts.generator_gpus == g) & (pts.staleness_budget == bound)]
    m = m[
        (m.oversampling == inflight)
        & (m.placement == ("disaggregated" if s.colocated is None else "colocated"))
    ]
    return None if m.empty else m.iloc[0]


# ---- setup: experiment=X or --from RUN_DIR -----------------------------------------------------


def _ints(key: str, text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        raise UsageError(f"{key}={text}: expected integers (e.g. {key}=3)") from None
    if any(v < 0 for v in vals):
        raise UsageError(f"{key}={text}: expected non-negative integers")
    return vals


def _floats(key: str, text: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        raise UsageError(f"{key}={text}: expected numbers (e.g. {key}=1.5,2)") from None
    if any(not v >= 1 for v in vals):
        raise UsageError(f"{key}={text}: expected values >= 1 (groups in flight per group a step needs)")
    return vals


def setup(from_dir: Path | None, given: list[str], out: Path) -> Setup:
    """The plan's Setup from the command line's key=value (plan keys taken out, the rest are
    overrides); UsageError (one line) on anything wrong, before anything is written."""
    opts = {k: v for k, _, v in (g.partition("=") for g in given) if k in OWN}
    rest = [g for g in given if g.partition("=")[0] not in OWN]
    bad = [g for g in rest if "=" not in g]
    if bad:
        raise UsageError(f"unexpected argument {bad[0]!r}; expected key=value (experiment=X, gpus=N, ...)")
    text, measured, notes = None, None, []
    if from_dir is not None:
        cfg, source, text, measured, notes = _from_run(from_dir, rest, out)
    else:
        cfg, source = _from_experiment(rest)
    colocated = None
    if placement_of(cfg) == "colocated":  # planned as it is (one point) and split
        colocated, cfg = cfg, disaggregated(cfg)
    held = held_gpus(colocated if colocated is not None else cfg)  # the run's or experiment's own GPUs
    total = _ints("gpus", opts["gpus"])[0] if "gpus" in opts else held
    here = (
        (total, total)
        if colocated is not None
        else (int(cfg.experiment.trainer_gpus), int(cfg.experiment.generator_gpus))
    )
    seeds = _ints("seeds", opts.get("seeds", str(SEEDS)))[0]
    splits = _ints("splits", opts.get("splits", str(SPLITS)))[0]
    if seeds < 1 or splits < 1:
        raise UsageError(f"seeds={seeds} splits={splits}: expected at least 1 of each")
    budget = int(cfg.workload.staleness_budget)
    return Setup(
        cfg=cfg,
        total=total,
        current=here if held == total else None,
        max_staleness=_ints("max_staleness", opts["max_staleness"])[0] if "max_staleness" in opts else budget,
        bounds=_ints("bounds", opts["bounds"]) if "bounds" in opts else [budget],
        inflight=_floats("inflight", opts["inflight"])
        if "inflight" in opts
        else [float(cfg.experiment.oversampling)],
        seeds=[int(cfg.experiment.seed) + i for i in range(seeds)],
        source=source,
        calibration=text,
        notes=notes
        if held == total
        else [*notes, f"gpus={total} differs from the {counted(held, 'GPU')} planned from: no current split"],
        splits=splits,
        colocated=colocated,
        measured=measured,
    )


def _from_experiment(rest: list[str]) -> tuple[Any, str]:
    from hydra.errors import HydraException

    from bench.config import compose, group_options

    exp = [g.split("=", 1)[1] for g in rest if g.startswith("experiment=")]
    if not exp:
        raise UsageError("name what to plan: experiment=X (conf/experiment) or a RUN_DIR")
    if exp[0] not in group_options("experiment"):
        raise UsageError(
            f"experiment {exp[0]!r} not found; choose one of {', '.join(group_options('experiment'))}"
        )
    given = any(g.startswith("framework=") for g in rest)
    own = None if given else own_framework(exp[0], rest)  # the experiment's own: compose's default may differ
    try:
        cfg = compose([*rest, f"framework={own}"] if own else rest)
        if not given and cfg.framework.name != (own := cfg.experiment.frameworks[0]):
            cfg = compose([*rest, f"framework={own}"])  # the file named none, or an override changed them
    except HydraException as e:
        raise UsageError(f"cannot compose the overrides: {str(e).splitlines()[0]}") from None
    return cfg, f"experiment={exp[0]} ({cfg.framework.name}, the experiment's own emulator inputs)"


def _from_run(
    run_dir: Path, rest: list[str], out: Path
) -> tuple[Any, str, str | None, dict[str, Any], list[str]]:
    """The run's setup and calibration, composed as `bench predict` composes a replay (the run's
    own framework), its zero-advantage shape from the groups it logged: (config, source, the fitted
    calibration's YAML text for the plan directory, the measured baseline, notes naming defaults)."""
    from bench import predict, run_setup
    from bench.plan_splits import measured_point, run_shapes

    manifest, steps, _ = run_setup.read_run(run_dir)
    fw = [g for g in rest if g.startswith("framework=")] or [f"framework={manifest.get('framework')}"]
    others = [g for g in rest if not g.startswith("framework=")]
    cfg, frm, text = predict.plan(run_dir, [*fw, *others], out / "calibration")
    source = (
        f"{run_dir} ({frm['run_framework']} run, calibration {'fitted now' if text else frm['calibration']})"
    )
    measured = measured_point(cfg, steps, KEPT)
    measured[USEFUL] = useful_cost(measured["cost_per_mtok_usd"], measured["zero_advantage_frac"], steps)
    return cfg, source, text, measured, run_shapes(cfg, steps, text, rest)


# ---- the plan ----------------------------------------------------------------------------------


@dataclass
class Plan:
    """A finished plan: every point (seed-banded), the crossing, the recommendation."""

    setup: Setup
    splits: list[tuple[int, int]]
    rows: pd.DataFrame  # one row per emulation
    points: pd.DataFrame  # one row per (bound, in-flight cap, split)
    crossing: dict[int, float | None]
    recommended: pd.Series | None
    current: pd.Series | None
    sentence: str


def items_of(s: Setup, splits: list[tuple[int, int]]) -> list[tuple[int, int, int, float, int]]:
    return [(t, g, b, x, seed) for b in s.bounds for x in s.inflight for t, g in splits for seed in s.seeds]


def make_plan(s: Setup, jobs: int = JOBS, meanwhile: Callable | None = None) -> Plan:
    """Emulate every (split, bound, seed) of s and answer; `meanwhile` as workers'. The same workers
    validate the splits, then emulate the chosen ones (a split's layout worked out once for both)."""
    with workers(s.cfg, jobs, meanwhile) as run:
        splits = candidate_splits(s, lambda splits: run(split_ok, splits))
        rows = emulate(run, items_of(s, splits), jobs) if splits else None
    parts = [rows.assign(placement="disaggregated")] if rows is not None else []
    if s.colocated is not None:  # as it runs: trainer and generator time-share all s.total GPUs
        parts.append(
            emulate_all(s.colocated, items_of(s, [(s.total, s.total)]), jobs).assign(placement="colocated")
        )
    return answer(s, splits, pd.concat(parts, ignore_index=True))


def answer(s: Setup, splits: list[tuple[int, int]], rows: pd.DataFrame) -> Plan:
    """The plan of s from its emulated rows (rows without a `placement` were emulated on s.cfg)."""
    if "placement" not in rows:
        rows = rows.assign(placement=placement_of(s.cfg))
    pts = summarise(rows, s.max_staleness)
    rec, cur = recommend(pts), current_point(pts, s)
    return Plan(
        s, splits, rows, pts, crossings(pts), rec, cur, sentence(rec, cur, s.max_staleness, len(s.seeds))
    )


def to_json(p: Plan) -> dict[str, Any]:
    from bench.resolve import Resolved

    teachers = Resolved.from_config(p.setup.cfg).teacher.gpus  # dedicated teacher GPUs, held fixed
    keep = ["placement", "trainer_gpus", "generator_gpus", *KNOBS, "n_runs", "staleness_ok", "met"]
    band = [c for c in p.points.columns if c.removesuffix("_min").removesuffix("_max") in (*KEPT, USEFUL)]
    pts = []
    for _, r in p.points.sort_values([*KNOBS, "generator_gpus"]).iterrows():
        d = {k: (r[k].item() if hasattr(r[k], "item") else r[k]) for k in keep + band}
        d = {k: (None if isinstance(v, float) and v != v else v) for k, v in d.items()}
        pts.append({**d, "teacher_gpus": teachers, "emulated": True})
    return {
        "recommended": split_dict(p.recommended, teachers),
        "current": split_dict(p.current, teachers),
        "sentence": p.sentence,
        "crossing_generator_gpus": p.crossing,
        "objective": OBJECTIVE,
        "max_staleness": p.setup.max_staleness,
        "total_gpus": p.setup.total,
        "seeds": p.setup.seeds,
        "source": p.setup.source,
        "notes": p.setup.notes,
        "mode": "emulated",
        "points": pts,
    } | ({"measured": p.setup.measured} if p.setup.measured is not None else {})


# ---- on a cluster: one Slurm job array ---------------------------------------------------------


def cluster_plans(s: Setup, given: list[str], cluster: str) -> list[Any]:
    """One bench.launch JobPlan per (split, bound, seed), composed with `cluster=NAME` and checked
    as `bench run` checks them; UsageError listing every problem before anything is submitted.
    Every valid split holds whole nodes, so every point asks the same nodes: bench.submit groups
    them into one array."""
    from bench import launch

    base = [g for g in given if g.partition("=")[0] not in OWN and not g.startswith("framework=")]
    base += [f"framework={s.cfg.framework.name}", f"cluster={cluster}", "mode=emulate"]
    base += ["experiment.placement=disaggregated"] if s.colocated is not None else []  # the splits
    plans, problems = [], []
    for t, g, b, x, seed in items_of(s, candidate_splits(s)):
        point = [f"experiment.trainer_gpus={t}", f"experiment.generator_gpus={g}",
                 f"workload.staleness_budget={b}", f"experiment.oversampling={x}",
                 f"experiment.seed={seed}"]  # fmt: skip
        for p in launch.plan([*base, *point], multirun=False):
            p.point = {"trainer_gpus": str(t), "generator_gpus": str(g), "bound": str(b),
                       "inflight": str(x), "seed": str(seed)}  # fmt: skip
            problems += p.problems
            plans.append(p)
    if problems:
        raise UsageError("\n".join(dict.fromkeys(problems)))
    return plans


# ---- command line ------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """`python -m bench plan (experiment=X | RUN_DIR) [gpus=N] [max_staleness=K] [seeds=3]
    [splits=16] [bounds=K1,K2] [inflight=X1,X2] [key=value ...] [--json] [--out DIR] [--cluster NAME]`."""
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "plan",
        "Find the generator:trainer split of a fixed number of GPUs that maximises useful trained tokens "
        "per dollar within the staleness bound, by emulating every split bench validate accepts at "
        "several seeds; plan an experiment (experiment=X) or a measured run (RUN_DIR, with its calibration).",
        "conf/ and the overrides, or RUN_DIR (manifest.json, trace/) and its calibration, fitted now as "
        "bench predict does.",
        "the plan directory --out (new; default results/<experiment>/plan-<UTC>): plan.html, plan.md, "
        "plan.json, plan.png, and calibration.yaml for a RUN_DIR plan; the table goes to stdout.",
        [
            "python -m bench plan experiment=semianalysis_case1 --json --out /tmp/plan-case1",
            "python -m bench plan results/opd/verl hardware=h100_sxm gpus=4 --json",
        ],
    )
    ap.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a measured run directory (bench ingest)")
    ap.add_argument("--from", dest="from_dir", help=argparse.SUPPRESS)  # the old spelling of RUN_DIR
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    ap.add_argument(
        "--out", type=Path, help="plan directory to write (new; default results/<experiment>/plan-<UTC>)"
    )
    ap.add_argument("--cluster", help="submit the emulations to this cluster's Slurm as one job array")
    add_overrides(
        ap,
        "gpus=N, max_staleness=K, seeds=3, splits=16, bounds=K1,K2 and inflight=X1,X2 shape the search",
    )
    args = ap.parse_intermixed_args(argv)
    from bench import rundir

    # argparse gives the first positional to RUN_DIR: key=value (and Hydra's ~key) is an override
    # unless it names a directory (a sweep's run directories are named <key>=<value>)
    items = [a for a in [args.from_dir, args.run_dir, *args.overrides] if a is not None]
    dirs = [a for a in items if Path(a).is_dir() or not ("=" in a or a.startswith("~"))]
    given = [a for a in items if a not in dirs]
    if len(dirs) > 1:
        raise UsageError(f"plan takes one RUN_DIR; got {', '.join(dirs)} (overrides are key=value)")
    args.from_dir = Path(dirs[0]) if dirs else None
    if args.from_dir is not None and any(g.startswith("experiment=") for g in given):
        raise UsageError("give one of experiment=X and RUN_DIR, not both")
    out = args.out and check_out(args.out, "plan")  # None: the default directory, new by its UTC stamp
    probe = out or Path(rundir.REPO / "results" / "plan-probe-never-written")
    s = setup(args.from_dir, given, probe)
    if args.cluster:
        if args.from_dir is not None:
            raise UsageError("--cluster plans an experiment: pass experiment=X (a RUN_DIR plan runs here)")
        from bench.submit import submit

        runs = submit(cluster_plans(s, given, args.cluster))
        print(
            f"[emulated] plan: {counted(len(runs), 'emulation')} submitted to {args.cluster}; when they finish:"
        )
        print("  python -m bench report " + " ".join(str(r.root) for r in runs) + " --out <DIR>")
        return 0
    p = make_plan(s, meanwhile=preload)  # the page's plotting modules load while the workers validate
    if out is None:
        stamp = rundir.now_iso().replace(":", "").replace("-", "")
        out = rundir.REPO / s.cfg.results_dir / str(s.cfg.experiment.name) / f"plan-{stamp}"
    doc = to_json(p)  # the page's plan.json and --json's output
    html, _ = write_page(p, doc, out)
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print_table(p)
        print(p.sentence)
    print(f"[emulated] plan -> {html}", file=sys.stderr)
    return 0 if p.recommended is not None else 1
