"""`source: opd_logs`: recompute an opd-benchmark figure from one run's raw files.

The run folder (`results/<run>/`) is parsed by the suite's runner for `framework` (Miles by the
slime runner), its `wall_time.env` and `gpu.csv` by bench/reproduce/opd.py. The parsed trace is
also written as a run directory (manifest, trace/steps.parquet, trace/gpu.parquet) under the
work dir, so `metric: suite:<key>` can read bench.metrics' definition of the same quantity.

Metrics (units as named; "steady" = every step after the first `skip`, default 1, which is how
the benchmark's analysis averages):
  wall_s, framework_wall_s           harness end - start / end - framework launch (s)
  trajectories                       trained samples, summed over steps
  trajectories_per_s                 trajectories / wall_s (window: framework -> framework_wall_s,
                                     active -> active_step_s)
  generated_tokens_per_s             generated response tokens / wall_s (tokens/s; same windows)
  first_update_s                     harness start -> end of the first optimizer step (s);
                                     method: timestamp (default) | tail (see first_update_s)
  steady_step_s, median_step_s       mean / median native step time over steady steps (s)
  active_step_s                      sum of native step times (s)
  energy_wh                          trapezoidal GPU energy (window: all | framework) (Wh)
  wait_ratio                         mean over steady steps of wait_s / step_s (fraction)
  native_mean                        mean over steady steps of `column` (a native_* trace column)
  suite:<key>                        <key> of bench.metrics.compute on the ingested run dir
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from bench.reproduce import opd
from bench.reproduce.spec import Context, NotReproducible, Outcome, Pending, SpecError, import_dep
from bench.trace import RunPaths, write_gpu, write_manifest, write_steps

# ParseResult.run_info key for the absolute time (Unix s) a runner's t_start_s / t_end_s count
# from; with it, first_update_s is read from the logged timestamps (method "timestamp").
EPOCH_KEYS = ("t0_unix_s",)


@dataclass
class OpdRun:
    """One opd-benchmark run, parsed."""

    name: str
    framework: str
    wall: opd.Wall
    steps: pd.DataFrame  # one row per optimizer step, sorted by step
    gpu: list[opd.GpuSample]
    run_info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    run_dir: RunPaths | None = None

    def steady(self, skip: int) -> pd.DataFrame:
        return self.steps.iloc[skip:]


def load_run(benchmark: str, run: str, framework: str, ctx: Context) -> OpdRun:
    """Parse results/<run>/ of `benchmark` with the `framework` runner (cached per session)."""
    key = ("opd", benchmark, run, framework)
    if key in ctx.cache:
        return ctx.cache[key]
    folder = opd.resolve_benchmark(ctx.data_root, benchmark) / "results" / run
    if not folder.is_dir():
        raise opd.OpdDataError(f"{folder}: run folder missing")
    wall = opd.Wall.from_env(opd.read_wall_env(folder / "wall_time.env"))
    gpu = opd.read_gpu_csv(folder / "gpu.csv") if (folder / "gpu.csv").is_file() else []
    import_dep(f"runners.{framework}", f"the {framework} runner's parse_logs")
    from bench.config import compose
    from runners.base import load_runner

    runner = load_runner(compose([f"framework={framework}"]).framework)
    parsed = runner.parse_logs(folder)
    if not parsed.steps:
        raise NotReproducible(f"the {framework} runner parsed no steps from {folder}: {parsed.warnings}")
    steps = pd.DataFrame.from_records(parsed.steps).sort_values("step").reset_index(drop=True)
    r = OpdRun(run, framework, wall, steps, gpu, dict(parsed.run_info), list(parsed.warnings))
    r.run_dir = _ingest(r, parsed, ctx.work_dir / "ingested" / benchmark / run)
    ctx.cache[key] = r
    return r


def _ingest(r: OpdRun, parsed: Any, root) -> RunPaths:
    """Write the parsed run as a suite run directory (mode native) for bench.metrics."""
    paths = RunPaths(root).make()
    write_steps(paths.steps, parsed.steps)
    if parsed.rollouts:
        from bench.trace import write_rollouts

        write_rollouts(paths.rollouts, parsed.rollouts)
    if r.gpu:
        rows = [
            {
                "t_s": s.t_epoch - r.wall.start,
                "node": "host0",
                "gpu": s.gpu,
                "util_pct": s.util_pct,
                "mem_used_mib": s.mem_used_mib,
                "power_w": s.power_w,
            }
            for s in r.gpu
        ]
        write_gpu(paths.gpu, rows)
    write_manifest(
        paths,
        {
            "experiment": "opd-benchmark",
            "run_id": r.name,
            "framework": r.framework,
            "framework_version": str(r.run_info.get("version", "unknown")),
            "mode": "native",
            "status": "completed",
            "start_epoch": r.wall.start,
            "end_epoch": r.wall.end,
            "wall_s": r.wall.wall_s,
            "source": "SemiAnalysisAI/opd-benchmark raw logs (ingested by bench reproduce)",
            "warnings": r.warnings,
        },
    )
    return paths


def _col(df: pd.DataFrame, col: str, what: str) -> pd.Series:
    if col not in df.columns or df[col].isna().all():
        raise NotReproducible(f"the parsed trace has no {col!r} ({what}); columns: {sorted(df.columns)}")
    s = df[col]
    if s.isna().any():
        raise NotReproducible(f"{col!r} ({what}) is missing on {int(s.isna().sum())} of {len(s)} steps")
    return s.astype(float)


def first_update_s(r: OpdRun, method: str) -> tuple[float, str]:
    """Seconds from the harness start to the end of the first optimizer step, and how.

    method "timestamp": the first step's logged end time, which needs the runner's absolute time
    base (ParseResult.run_info["t0_unix_s"], Unix s, that t_end_s counts from); the benchmark reads
    Prime-RL's and Miles's this way. method "tail": the benchmark's approximation for verl, wall
    time minus the native time of every later step (exact only for a synchronous loop that ends
    with its last step).
    """
    if method == "timestamp":
        epoch = next((r.run_info[k] for k in EPOCH_KEYS if r.run_info.get(k) is not None), None)
        first = r.steps.iloc[0]
        if epoch is None or pd.isna(first.get("t_end_s")):
            raise Pending(
                f"pending: runners.{r.framework} parse_logs gives no absolute time base "
                f"(run_info['t0_unix_s'] that t_end_s counts from) for the first step's end"
            )
        return float(epoch) + float(first["t_end_s"]) - r.wall.start, "the first step's logged end time"
    later = _col(r.steps.iloc[1:], "step_s", "native step time")
    return r.wall.wall_s - float(later.sum()), "wall - native time of steps 2..N"


def _trajectories(r: OpdRun) -> float:
    return float(_col(r.steps, "samples", "trained samples per step").sum())


def compute(fig: Any, ctx: Context, where: str) -> Outcome:
    """Evaluate one `opd_logs` figure (see the module docstring for the metric names)."""
    c = fig.compute
    for k in ("benchmark", "run", "framework", "metric"):
        if not isinstance(c.get(k), str):
            raise SpecError(f"{where}: key {k!r} missing (a string)")
    metric, skip, window = c["metric"], int(c.get("skip", 1)), c.get("window", "all")
    if window not in ("all", "framework", "active"):
        raise SpecError(f"{where}: window={window!r}; expected all | framework | active")
    if window == "active" and metric not in ("trajectories_per_s", "generated_tokens_per_s"):
        raise SpecError(f"{where}: window=active applies to rates only, not {metric!r}")
    if metric in ("wall_s", "framework_wall_s"):
        # Needs only the harness file: no runner, so it never waits on a parser.
        folder = opd.resolve_benchmark(ctx.data_root, c["benchmark"]) / "results" / c["run"]
        wall = opd.Wall.from_env(opd.read_wall_env(folder / "wall_time.env"))
        return Outcome(getattr(wall, metric), used=f"{c['run']}/wall_time.env")
    if metric == "energy_wh":
        folder = opd.resolve_benchmark(ctx.data_root, c["benchmark"]) / "results" / c["run"]
        wall = opd.Wall.from_env(opd.read_wall_env(folder / "wall_time.env"))
        span = (wall.training_start, wall.end) if window == "framework" else None
        return Outcome(opd.energy_wh(opd.read_gpu_csv(folder / "gpu.csv"), span), used=f"{c['run']}/gpu.csv")
    r = load_run(c["benchmark"], c["run"], c["framework"], ctx)
    used = f"{c['run']}/ parsed by runners.{c['framework']}"
    checks: list[str] = []  # parser warnings stay in the ingested run's manifest
    den = {"all": r.wall.wall_s, "framework": r.wall.framework_wall_s}.get(window)
    if window == "active":  # the sum of native step times (mopd-frameworks' "active step time")
        den = float(_col(r.steps, "step_s", "native step time").sum())
    steady = r.steady(skip)
    if metric == "trajectories":
        value = _trajectories(r)
    elif metric == "trajectories_per_s":
        value = _trajectories(r) / den
    elif metric == "generated_tokens_per_s":
        col = (
            "generated_tokens"
            if "generated_tokens" in r.steps and r.steps["generated_tokens"].notna().all()
            else "response_tokens"
        )
        value = float(_col(r.steps, col, "generated response tokens").sum()) / den
    elif metric == "first_update_s":
        method = c.get("method", "timestamp")
        if method not in ("timestamp", "tail"):
            raise SpecError(f"{where}: method={method!r}; expected timestamp | tail")
        value, how = first_update_s(r, method)
        used += f"; {how}"
    elif metric == "steady_step_s":
        value = float(_col(steady, "step_s", "native step time").mean())
    elif metric == "median_step_s":
        value = float(_col(steady, "step_s", "native step time").median())
    elif metric == "active_step_s":
        value = float(_col(r.steps, "step_s", "native step time").sum())
    elif metric == "wait_ratio":
        value = float((_col(steady, "wait_s", "trainer wait") / _col(steady, "step_s", "step time")).mean())
    elif metric == "native_mean":
        column = c.get("column")
        if not isinstance(column, str) or not column.startswith("native_"):
            raise SpecError(f"{where}: metric native_mean needs `column: native_<name>`")
        value = float(_col(steady, column, "framework-reported value").mean())
    elif metric.startswith("suite:"):
        key = metric.split(":", 1)[1]
        mod = import_dep("bench.metrics", "bench.metrics")
        m = mod.write_metrics(r.run_dir.root)
        if key not in m:
            raise SpecError(f"{where}: {key!r} is not a bench.metrics key; keys: {sorted(m)}")
        if m[key] is None:
            raise NotReproducible(f"bench.metrics gives no {key}: {m['missing'].get(key)}")
        value = float(m[key])
        used += f"; bench.metrics {key} (window {json.dumps(m.get('window'))})"
    else:
        raise SpecError(f"{where}: metric {metric!r} unknown for opd_logs (see bench/reproduce/opd_logs.py)")
    return Outcome(value, used=used, checks=checks)
