"""`emulate(cfg, run_dir)`: wire generator -> environment -> queue -> trainer -> weight sync under a
framework policy, and write the run directory (manifest.json, trace/, metrics.json), stamped emulated.

CLI: `python -m bench emulate <hydra overrides> --out RUN_DIR`. Sweep overrides
(`experiment.generator_gpus=range(64,321,32)`, `a=1,2`) give one run per point, each in
RUN_DIR/<key>=<value>[,...].
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.emulator.draws import Draws
from bench.emulator.generator import GenerationEngine, Pool
from bench.emulator.loop import Loop
from bench.emulator.policies import Schedule, load_policy
from bench.emulator.scoring import Scorer
from bench.emulator.trace_out import step_rows, write_trace
from bench.model import costmodel
from bench.resolve import Resolved
from bench.trace import RunPaths, write_steps


def build(
    cfg: Any, r: Resolved | None = None, generator: Callable[[int, int], GenerationEngine] = Pool
) -> tuple[Loop, Schedule, dict[str, Any]]:
    """The Loop for cfg, its Schedule, and provenance (mode, policy path, notes); the layout,
    engines and mode -> policy choice are cfg's resolved ones (`r`, worked out here when not given).
    `generator(engines, group_size)` makes the generation engine (the exact oracle swaps it)."""
    r = r or Resolved.from_config(cfg)
    if not r.policy:
        raise ValueError(r.mode_notes[0])
    notes = list(r.mode_notes)
    sched = load_policy(r.policy)(cfg)
    if sched.colocated != r.colocated:
        notes.append(
            f"policy {sched.name} is {'colocated' if sched.colocated else 'disaggregated'} but "
            f"experiment.placement={r.placement}: trainer_gpus={r.trainer.gpus} and "
            f"generator_gpus={cfg.experiment.generator_gpus} are emulated as given"
        )
    if r.engines < 1:
        raise ValueError(
            f"experiment.generator_gpus={cfg.experiment.generator_gpus} is fewer than one engine of "
            f"{r.engine_gpus} GPUs (experiment.generator tp x dp); expected a multiple of {r.engine_gpus}"
        )
    engines = generator(r.engines, int(cfg.workload.group_size))
    # teachers (workload.algorithm=opd): with_generator ones pause the generator's decoding
    scorer = Scorer(costmodel.teacher_models(cfg, r), engines.pause) if r.teachers else None
    loop = Loop(
        sched,
        costmodel.engine_model(cfg, r),
        costmodel.trainer_model(cfg, r),
        Draws(cfg, int(cfg.experiment.seed)),
        engines,
        max_concurrency=int(cfg.experiment.generator.max_concurrency),
        prompts_per_step=int(cfg.workload.prompts_per_step),
        steps=int(cfg.emulator.steps or cfg.workload.steps),
        scorer=scorer,
        domain=str(cfg.workload.task),
    )
    return loop, sched, {"native_mode": r.mode, "policy": r.policy, "notes": notes}


def stream_steps(paths: RunPaths, rows: list[dict[str, Any]], pace_s: float) -> None:
    """Write trace/steps.parquet one step at a time, `pace_s` wall seconds per emulated step, as a
    real run logs its steps: a watcher (or `bench status`) sees the trace grow, and a job stays
    running for len(rows) x pace_s seconds by design, so it can be cancelled or requeued mid-run.
    A requeued attempt resumes after the steps already streamed (as a framework resumes from its
    checkpoint) instead of pacing them again."""
    import pyarrow.parquet as pq

    done = pq.read_metadata(paths.steps).num_rows if paths.steps.exists() else 0
    t0 = time.monotonic()
    for k in range(done + 1, len(rows) + 1):
        time.sleep(max(0.0, t0 + (k - done) * pace_s - time.monotonic()))
        write_steps(paths.steps, rows[:k])


def emulate_into(cfg: Any, paths: RunPaths, r: Resolved | None = None) -> dict[str, Any]:
    """Emulate cfg's framework on cfg's experiment: write trace/ into `paths` (streamed at
    `emulator.pace` seconds per step when set) and return the emulator's manifest keys (mode
    "emulated", wall_s, emulator provenance, resources). Deterministic for `experiment.seed`."""
    t0 = time.perf_counter()
    loop, sched, prov = build(cfg, r)
    result = loop.run()
    elapsed = time.perf_counter() - t0
    pace = float(cfg.emulator.pace)
    if pace > 0:
        stream_steps(paths, step_rows(result), pace)
    counts = write_trace(paths, result, loop.G, steps_written=pace > 0)
    trainer_busy = sum(r.logprob_s + r.compute_s + r.sync_s for r in result.steps)
    out = {
        "mode": "emulated",
        "seed": int(cfg.experiment.seed),
        "wall_s": result.wall_s,
        "emulator": {
            **prov,
            "schedule": {k: getattr(sched, k) for k in sched.__dataclass_fields__},
            "engines": result.engines,
            "engine_gpus": loop.em.gpus,
            "concurrency_per_engine": result.concurrency,
            "weight_sync_s": loop.tm.sync_s,
            # whose physics every emulated figure rests on: the datasheet or a measured profile
            "hardware_source": costmodel.hardware_source(cfg),
            "events": result.events,
            "rollouts": counts,
            "elapsed_s": round(elapsed, 3),
            "pace_s_per_step": pace,
        },
        "resources": {
            "trainer": {"busy_s": trainer_busy, "idle_s": result.wall_s - trainer_busy},
            "generator": {
                "busy_s": result.generator_busy_s,
                "idle_s": result.wall_s - result.generator_busy_s,
            },
        },
    }
    if result.teachers is not None:
        _teacher_keys(out, result, float(cfg.emulator.score_fixed_s))
    return out


def _teacher_keys(out: dict[str, Any], result: Any, score_fixed_s: float) -> None:
    """The scoring stage's manifest keys: per-teacher counts under emulator.teachers, and the
    dedicated teacher pool's busy/idle seconds (engine-seconds scoring / engines) under resources."""
    out["emulator"]["teachers"] = result.teachers
    out["emulator"]["score_fixed_s"] = score_fixed_s
    dedicated = [t for t in result.teachers if not t["with_generator"]]
    engines = sum(t["engines"] for t in dedicated)
    if engines:
        busy = sum(t["busy_s"] for t in dedicated) / engines
        out["resources"]["teacher"] = {"busy_s": busy, "idle_s": result.wall_s - busy}


def emulate(cfg: Any, run_dir: Path | str) -> RunPaths:
    """One emulated run straight into `run_dir` (`bench emulate`): trace/, manifest.json and
    metrics.json, through the run directory's own writers (bench.rundir)."""
    from bench import rundir

    paths = RunPaths(Path(run_dir)).make()
    r = Resolved.from_config(cfg)
    manifest = rundir.run_identity(cfg, paths, "emulated", r)
    rundir.start(paths, manifest)
    with rundir.ends_if_failed(paths):  # never left `running` by a failure
        rundir.write_resolved_config(paths, manifest["config"], manifest["resolved"])
        rundir.finish(paths, True, extra=emulate_into(cfg, paths, r))
    return paths


def main(argv: list[str]) -> int:
    """`python -m bench emulate <overrides> --out RUN_DIR`: one run (or one per sweep point).

    Every point is composed and put through `bench validate`'s checks, and every output directory
    is checked to be new, before the first run starts: a refusal (UsageError, exit 2) writes nothing.
    """
    from bench.cli import add_overrides, command_parser
    from bench.config import number_arg

    ap = command_parser(
        "emulate",
        "Emulate one framework on one experiment (or one run per sweep point) with the discrete-event "
        "model of docs/emulator.md, after bench validate's checks; every number it writes is emulated.",
        "conf/ (experiment, framework, model, hardware, emulator inputs) and the overrides, including "
        "calibration=FILE from bench calibrate.",
        "the run directory --out (new): manifest.json (mode emulated), trace/ and metrics.json; for a "
        "sweep, one such directory per point under --out, named <key>=<value>.",
        [
            "python -m bench emulate experiment=smoke framework=verl --out /tmp/verl-emulated",
            "python -m bench emulate experiment=smoke framework=slime 'experiment.generator_gpus=2,4' --out /tmp/sweep",
        ],
    )
    ap.add_argument("--out", type=Path, required=True, help="run directory (a parent dir for sweeps)")
    ap.add_argument("--max-points", type=number_arg(1, True, int), help="confirm a sweep over 256 points")
    add_overrides(ap, "sweeps a=1,2 and range(lo,hi,step) give one run per point")
    args = ap.parse_intermixed_args(argv)
    overrides = args.overrides
    runs = preflight(overrides, args.out, args.max_points)
    for cfg, out in runs:
        try:
            paths = emulate(cfg, out)
        except OSError as e:  # a full or read-only disk: one line naming --out, not a traceback
            from bench.outdir import os_refusal

            raise os_refusal(out, e, kept=not out.exists()) from None
        _summary(cfg, paths)
    return 0


def preflight(overrides: list[str], out_dir: Path, max_points: int | None = None) -> list[tuple[Any, Path]]:
    """(composed config, run directory) per sweep point, or UsageError listing every problem:
    the validate checks of each point and any run directory that already exists."""
    from hydra.errors import HydraException

    from bench.config import compose
    from bench.errors import UsageError
    from bench.outdir import check_out
    from bench.redact import redact
    from bench.sweep import MAX_POINTS, expand
    from bench.validate import validate

    try:
        points = expand(overrides, multirun=True, max_points=max_points or MAX_POINTS)
    except HydraException as e:
        raise UsageError(f"cannot parse the overrides: {str(e).splitlines()[0]}") from None
    runs, problems = [], []
    for swept, point in points:
        # a directory name: a swept secret is named by its redacted form (bench.redact)
        label = ",".join(f"{k}={v}".replace("/", "_") for k, v in redact(swept).items())
        out = out_dir / label if swept else out_dir
        cfg = compose(point)
        if not any(o.startswith(("framework=", "+framework=")) for o in point):
            # no framework named: the experiment's own (e.g. prime_rl for the SemiAnalysis cases 1-2)
            cfg = compose([*point, f"framework={cfg.experiment.frameworks[0]}"])
        problems += [f"[{label}] {m}" if swept else m for m in validate(cfg)]
        try:
            check_out(out, "emulate")
        except UsageError as e:
            problems.append(str(e))
        runs.append((cfg, out))
    if problems:
        raise UsageError("\n".join(dict.fromkeys(problems)))
    return runs


def _summary(cfg: Any, paths: RunPaths) -> None:
    import json

    m = json.loads(paths.metrics.read_text()) if paths.metrics.exists() else {}
    keys = (
        "trainer_idle_frac",
        "consumption_samples_per_s",
        "production_samples_per_s",
        "oversampling_waste",
    )
    shown = ", ".join(
        f"{k}={m[k]:.3g}" for k in keys if isinstance(m.get(k), int | float) and math.isfinite(m[k])
    )
    from bench.model.hwprofile_conf import source_label

    hardware = source_label(costmodel.hardware_source(cfg))  # whose physics these figures rest on
    print(
        f"[emulated] {cfg.framework.name} {cfg.experiment.name} -> {paths.root} {shown} ({hardware})",
        file=sys.stderr,
    )
