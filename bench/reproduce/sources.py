"""The fixed set of ways to compute "ours" for a published figure (`compute.source` in data).

- `opd_logs`:   an opd-benchmark run folder, parsed by the suite's runner (bench/reproduce/opd_logs.py)
- `emulate`:    one emulated run of a composed experiment; a metrics.json key (or a ratio of two)
- `speedup`:    the ratio of one metric between two emulated runs (baseline / candidate)
- `arithmetic`: a small expression tree over numbers and the case's named inputs (no string eval)
- `cost`:       bench.cost functions (TCO -> $/GPU-hour; Tinker-equivalent $/M tokens)
- `predict`:    `bench predict` of one opd-benchmark run from another's calibration (a replay when
                the two are the same run); a bench.predict figure of the emulated run
- `run_figure`: the same bench.predict figure measured on a run's own raw logs (a `measured` reference)
- `phases`:     a published per-phase step table: fit on its synchronous row, predict the async rows
                (bench/reproduce/phases.py)
- `none`:       cannot be reproduced; `reason` says why

A source returns an Outcome; a dependency that is not installed yet gives status "pending".
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.reproduce.spec import (  # noqa: F401  (Pending, Context, ... are this module's API too)
    Case,
    Context,
    Figure,
    NotReproducible,
    Outcome,
    Pending,
    SpecError,
    import_dep,
)

# ---- arithmetic -------------------------------------------------------------------------------

ARITH_OPS: dict[str, Callable[[list[float]], float]] = {
    "ratio": lambda a: a[0] / a[1],
    "product": math.prod,
    "sum": math.fsum,
    "difference": lambda a: a[0] - a[1],
    "complement": lambda a: 1.0 - a[0],  # 1 - x, e.g. busy fraction from an idle fraction
    "reciprocal": lambda a: 1.0 / a[0],
}
ARITH_ARITY = {"ratio": 2, "difference": 2, "complement": 1, "reciprocal": 1}


def evaluate(node: Any, inputs: dict[str, float], where: str) -> float:
    """Evaluate {op, args} where each arg is a number, an input name, or another {op, args}."""
    if isinstance(node, bool):
        raise SpecError(f"{where}: {node!r} is not a number")
    if isinstance(node, int | float):
        return float(node)
    if isinstance(node, str):
        if node not in inputs:
            raise SpecError(f"{where}: input {node!r} not declared; the case's inputs are {sorted(inputs)}")
        return inputs[node]
    if not isinstance(node, dict) or "op" not in node or "args" not in node:
        raise SpecError(f"{where}: expected a number, an input name or {{op, args}}, got {node!r}")
    op = node["op"]
    if op not in ARITH_OPS:
        raise SpecError(f"{where}: op {op!r} unknown; expected one of {sorted(ARITH_OPS)}")
    args = [evaluate(a, inputs, where) for a in node["args"]]
    if op in ARITH_ARITY and len(args) != ARITH_ARITY[op]:
        raise SpecError(f"{where}: op {op!r} takes {ARITH_ARITY[op]} argument(s), got {len(args)}")
    return ARITH_OPS[op](args)


def _arithmetic(case: Case, fig: Figure, ctx: Context) -> Outcome:
    where = f"{case.path}: figure {fig.id!r}: compute"
    inputs = {k: v.value for k, v in case.inputs.items()}
    value = evaluate({"op": fig.compute.get("op"), "args": fig.compute.get("args", [])}, inputs, where)
    return Outcome(value, used="arithmetic on the case's inputs")


# ---- cost ---------------------------------------------------------------------------------------


def _cost(case: Case, fig: Figure, ctx: Context) -> Outcome:
    c = fig.compute
    where = f"{case.path}: figure {fig.id!r}: compute"
    cost = import_dep("bench.cost", "bench.cost")
    fn = c.get("function")
    if fn == "gpu_hour_usd":
        from bench.config import compose

        hw_name = c.get("hardware")
        if not hw_name:
            raise SpecError(f"{where}: key 'hardware' missing (a conf/hardware name)")
        hw = compose([f"hardware={hw_name}", *c.get("overrides", [])]).hardware
        result = cost.gpu_hour_usd(hw)
        used = f"conf/hardware/{hw_name}.yaml TCO inputs"
    elif fn == "tinker_price_per_mtok":
        inputs = {k: v.value for k, v in case.inputs.items()}
        toks = {
            k: evaluate(c.get(k), inputs, f"{where}.{k}")
            for k in ("prompt_tokens", "response_tokens", "trained_tokens")
        }
        result = cost.tinker_price_per_mtok(c.get("model"), **{k: int(round(v)) for k, v in toks.items()})
        if result is None:
            raise NotReproducible(f"bench.cost has no Tinker price for {c.get('model')!r}")
        used = f"Tinker prices for {c.get('model')}; tokens {toks}"
    else:
        raise SpecError(f"{where}: function={fn!r}; expected gpu_hour_usd or tinker_price_per_mtok")
    key = c.get("key")
    if key is None:
        return Outcome(float(result), used=used)
    if not isinstance(result, dict) or key not in result:
        raise SpecError(f"{where}: key={key!r} not in bench.cost.{fn}() result {result!r}")
    return Outcome(float(result[key]), used=used)


# ---- emulation ----------------------------------------------------------------------------------


def _emulate_once(overrides: tuple[str, ...], work_dir: Path) -> dict[str, Any]:
    run = import_dep("bench.emulator.run", "the emulator")
    from bench.config import compose

    cfg = compose(list(overrides))
    digest = hashlib.sha1("\0".join(overrides).encode()).hexdigest()[:10]
    run_dir = work_dir / "emulated" / f"{cfg.experiment.name}-{cfg.framework.name}-{digest}"
    paths = run.emulate(cfg, run_dir)
    return json.loads(Path(getattr(paths, "metrics", Path(run_dir) / "metrics.json")).read_text())


def emulated_metrics(overrides: list[str], ctx: Context) -> dict[str, Any]:
    """metrics.json of one emulated run of `overrides` (run once per session, cached)."""
    key = ("emulate", tuple(overrides))
    if key not in ctx.cache:
        ctx.cache[key] = _emulate_once(tuple(overrides), ctx.work_dir)
    return ctx.cache[key]


def _emulation_sets(cases: list[Case]) -> list[tuple[str, ...]]:
    sets: list[tuple[str, ...]] = []
    for case in cases:
        for fig in case.figures:
            c = fig.compute
            if c.get("source") == "emulate" and isinstance(c.get("overrides"), list):
                sets.append(tuple(c["overrides"]))
            elif c.get("source") == "speedup":
                for k in ("baseline", "candidate"):
                    if isinstance(c.get(k), list):
                        sets.append(tuple(list(c.get("overrides", [])) + c[k]))
    return list(dict.fromkeys(sets))


def _steps_hint(overrides: tuple[str, ...]) -> int:
    """Emulated trainer steps named in the overrides (a cost estimate; 0 when not named)."""
    for o in reversed(overrides):
        key, _, value = o.partition("=")
        if key in ("workload.steps", "emulator.steps") and value.isdigit():
            return int(value)
    return 0


def prefetch_emulations(cases: list[Case], ctx: Context, workers: int | None = None) -> None:
    """Run every distinct emulation the cases need, in parallel processes, into ctx.cache.

    Emulations are independent and CPU-bound; a failure is left uncached so the figure's own
    evaluation re-raises it (as pending or error) in the table.
    """
    import os
    from concurrent.futures import ProcessPoolExecutor

    todo = [s for s in _emulation_sets(cases) if ("emulate", s) not in ctx.cache]
    todo.sort(key=_steps_hint, reverse=True)  # longest first: the pool finishes together
    workers = workers or min(len(todo), os.cpu_count() or 1)
    if len(todo) < 2 or workers < 2:
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {s: pool.submit(_emulate_once, s, ctx.work_dir) for s in todo}
        for s, fut in futures.items():
            try:
                ctx.cache[("emulate", s)] = fut.result()
            except Exception:  # noqa: BLE001 - re-raised by the figure's own evaluation
                pass


def _metric(metrics: dict[str, Any], name: str, where: str) -> float:
    if name not in metrics:
        raise SpecError(f"{where}: metric {name!r} not in metrics.json; keys: {sorted(metrics)}")
    if metrics[name] is None:
        reason = (metrics.get("missing") or {}).get(name, "no reason given")
        raise NotReproducible(f"the emulated run has no {name}: {reason}")
    return float(metrics[name])


def _emulate(case: Case, fig: Figure, ctx: Context) -> Outcome:
    where = f"{case.path}: figure {fig.id!r}: compute"
    overrides = fig.compute.get("overrides")
    if not isinstance(overrides, list):
        raise SpecError(f"{where}: key 'overrides' must be a list of Hydra overrides")
    m = emulated_metrics(overrides, ctx)
    value = _metric(m, fig.compute.get("metric", ""), where)
    used = f"emulated {fig.compute.get('metric')}"
    if fig.compute.get("divide_by"):  # a ratio of two metrics of the same run
        value /= _metric(m, fig.compute["divide_by"], where)
        used += f" / {fig.compute['divide_by']}"
    return Outcome(value, used=f"{used}: " + " ".join(overrides), checks=list(m.get("checks", [])))


def _speedup(case: Case, fig: Figure, ctx: Context) -> Outcome:
    """baseline.metric / candidate.metric: a wall-time speed-up when metric is wall_s (the default)."""
    c = fig.compute
    where = f"{case.path}: figure {fig.id!r}: compute"
    common = list(c.get("overrides", []))
    for k in ("baseline", "candidate"):
        if not isinstance(c.get(k), list):
            raise SpecError(f"{where}: key {k!r} must be a list of Hydra overrides")
    metric = c.get("metric", "wall_s")
    base = _metric(emulated_metrics(common + c["baseline"], ctx), metric, where)
    cand = _metric(emulated_metrics(common + c["candidate"], ctx), metric, where)
    if c.get("higher_is_better", False):
        base, cand = cand, base
    return Outcome(
        base / cand,
        used=f"emulated {metric}: [{' '.join(c['baseline'])}] / [{' '.join(c['candidate'])}]",
    )


def _none(case: Case, fig: Figure, ctx: Context) -> Outcome:
    raise NotReproducible(fig.compute.get("reason") or "no computation given")


def _opd_logs(case: Case, fig: Figure, ctx: Context) -> Outcome:
    from bench.reproduce import opd_logs

    return opd_logs.compute(fig, ctx, f"{case.path}: figure {fig.id!r}: compute")


# ---- predictions from a calibration (bench calibrate / bench predict) ---------------------------


def ingested_run(c: dict[str, Any], ctx: Context, where: str) -> Path:
    """`bench ingest` of results/<run> (with the configuration the logs hold, `given` filling what they
    lack), once per session: the run directory calibrate and predict read."""
    for k in ("benchmark", "run", "framework"):
        if not isinstance(c.get(k), str):
            raise SpecError(f"{where}: key {k!r} missing (a string)")
    key = ("ingest", c["benchmark"], c["run"])
    if key not in ctx.cache:
        from bench.config import compose
        from bench.reproduce import opd

        ingest = import_dep("bench.ingest", "bench ingest")
        folder = opd.resolve_benchmark(ctx.data_root, c["benchmark"]) / "results" / c["run"]
        given = [str(g) for g in c.get("given", [])]
        out = ctx.work_dir / "ingested-config" / c["benchmark"] / c["run"]
        if out.exists():  # a previous session's: ingest never overwrites
            import shutil

            shutil.rmtree(out)
        ingest.ingest(compose([*given, f"framework={c['framework']}"]), folder, out, given)
        ctx.cache[key] = out
    return ctx.cache[key]


def _predict(case: Case, fig: Figure, ctx: Context) -> Outcome:
    """A bench.predict figure of `calibrate_on`'s run predicted under `target`'s framework and GPU
    split (a replay, status derived, when both name the same run)."""
    where = f"{case.path}: figure {fig.id!r}: compute"
    c = fig.compute
    src, tgt = c.get("calibrate_on"), c.get("target")
    if not isinstance(src, dict) or not isinstance(tgt, dict):
        raise SpecError(
            f"{where}: keys 'calibrate_on' and 'target' must be {{benchmark, run, framework, given}}"
        )
    predict = import_dep("bench.predict", "bench predict")
    metric = c.get("metric")
    if metric not in predict.FIGURES:
        raise SpecError(f"{where}: metric={metric!r}; expected one of {predict.FIGURES}")
    held_out = bool(c.get("held_out"))  # the target's profile without what it fitted on the target run
    key = ("predict", src["run"], tgt["run"], tgt["framework"], held_out)
    if key not in ctx.cache:
        from bench.model.fwprofile import run_id
        from bench.run_setup import known_setup
        from bench.trace import RunPaths, read_manifest

        run_dir = ingested_run(src, ctx, where)
        target_dir = ingested_run(tgt, ctx, where)
        manifest = read_manifest(RunPaths(target_dir))
        # the target's own setup: its GPU split, and how its framework syncs weights
        split = [f"{k}={v}" for k, v in known_setup(manifest).items() if k.startswith("experiment.")]
        sync = ((manifest.get("config") or {}).get("framework") or {}).get("weight_sync") or {}
        split += [f"framework.weight_sync.{k}={v}" for k, v in sync.items()]
        if held_out:
            split.append(f"held_out={run_id(manifest, target_dir)}")
        out = ctx.work_dir / "predicted" / f"{src['run']}-to-{tgt['run']}{'-held-out' if held_out else ''}"
        if out.exists():
            import shutil

            shutil.rmtree(out)
        given = [*map(str, src.get("given", [])), *split, f"framework={tgt['framework']}"]
        ctx.cache[key] = (predict.predict(run_dir, given, out), out)
    p, out = ctx.cache[key]
    value = p["predicted"][metric]
    if value is None:
        raise NotReproducible(f"the emulated run has no {metric}")
    replay = src["run"] == tgt["run"]
    used = f"emulated {out.name}: {src['run']} calibration, {tgt['framework']} policy on {tgt['run']}'s GPU split"
    if held_out:
        used += f", {tgt['framework']}'s profile without what it fitted on {tgt['run']}"
    return Outcome(
        float(value),
        used=used,
        derived_from=f"a replay of the run the calibration was fitted on ({src['run']}): the model's floor"
        if replay
        else "",
        calibrated_on="" if replay else fitted_on_target(p, ingested_run(tgt, ctx, where)),
    )


def fitted_on_target(predicted_from: dict[str, Any], target_dir: Path) -> str:
    """The inputs of a prediction that its target framework's profile fitted on the target run
    itself (bench.model.fwprofile), as text; "" when none (then it is a prediction)."""
    from bench.model.fwprofile import run_id
    from bench.trace import RunPaths, read_manifest

    target = run_id(read_manifest(RunPaths(target_dir)), target_dir)
    profile = (predicted_from.get("inputs_from") or {}).get("profile") or {}
    keys = [k for k, v in (profile.get("inputs") or {}).items() if target in v.get("fitted_on", [])]
    if not keys:
        return ""
    return f"{profile['framework']}'s profile fitted {', '.join(keys)} on the target run {target}"


def _run_figure(case: Case, fig: Figure, ctx: Context) -> Outcome:
    """A bench.predict figure measured on a run's parsed raw logs."""
    from bench.reproduce import opd_logs

    predict = import_dep("bench.predict", "bench predict")
    c = fig.compute
    r = opd_logs.load_run(c["benchmark"], c["run"], c["framework"], ctx)
    value = predict.figures(r.steps)[c["metric"]]
    if value is None:
        raise NotReproducible(f"{c['run']}'s logs have no {c['metric']} (a column is not logged)")
    return Outcome(value, used=f"{c['run']}/ parsed by runners.{c['framework']}")


def _phases(case: Case, fig: Figure, ctx: Context) -> Outcome:
    """A phase time of a published per-phase table's row, calibrated on its synchronous row."""
    from bench.reproduce import phases

    return phases.compute(case, fig, ctx)


SOURCES: dict[str, tuple[Callable[[Case, Figure, Context], Outcome], str]] = {
    # source -> (function, how ours was obtained: the table's "ours from" column)
    "opd_logs": (_opd_logs, "raw logs"),
    "emulate": (_emulate, "emulated"),
    "speedup": (_speedup, "emulated"),
    "arithmetic": (_arithmetic, "computed"),
    "cost": (_cost, "computed"),
    "predict": (_predict, "emulated"),
    "run_figure": (_run_figure, "raw logs"),
    "phases": (_phases, "emulated"),
    "none": (_none, "-"),
}


def compute(case: Case, fig: Figure, ctx: Context) -> Outcome:
    """Dispatch on fig.compute['source']; raises Pending / NotReproducible / SpecError."""
    source = fig.compute.get("source")
    if source not in SOURCES:
        raise SpecError(
            f"{case.path}: figure {fig.id!r}: compute.source={source!r}; expected one of {sorted(SOURCES)}"
        )
    return SOURCES[source][0](case, fig, ctx)
