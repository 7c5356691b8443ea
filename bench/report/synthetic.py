"""Synthetic run directories for the report's tests and benchmark (never real results).

Each run is stamped `mode="emulated"` unless told otherwise and its manifest says
`"synthetic": true`, so nothing made here can pass for a measurement. The trace follows the
contract in bench/trace.py; metrics.json carries the numbers a test asserts on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.trace import RolloutWriter, RunPaths, write_json, write_manifest, write_steps


def make_run(
    root: Path | str,
    framework: str = "verl",
    steps: int = 50,
    samples_per_step: int = 64,
    mode: str = "emulated",
    status: str = "completed",
    metrics: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
    rollouts: bool = True,
    gpu: bool = False,
    seed: int = 0,
    **manifest_extra: Any,
) -> RunPaths:
    """Write one synthetic run directory under `root` and return its paths.

    Step times are seconds; `metrics` (flat metrics.json keys) is written as given, None
    writes no metrics.json at all (a run that failed before metrics).
    """
    rng = np.random.default_rng(seed)
    paths = RunPaths(Path(root)).make()
    manifest = {
        "experiment": "synthetic",
        "run_id": paths.root.name,
        "framework": framework,
        "framework_version": "0.0-synthetic",
        "mode": mode,
        "status": status,
        "synthetic": True,
        "config": config or {},
        **({"sweep": sweep} if sweep else {}),
        **manifest_extra,
    }
    write_manifest(paths, manifest)
    i = np.arange(1, steps + 1)
    wait = rng.gamma(2.0, 2.0, steps)
    compute = 20 + rng.normal(0, 1, steps)
    logprob, sync = np.full(steps, 4.0), np.full(steps, 2.0)
    step_s = wait + compute + logprob + sync
    t_end = np.cumsum(step_s)
    resp = (300 + 2 * i + rng.normal(0, 20, steps)) * samples_per_step  # lengths drift up: the moving target
    discarded = rng.integers(0, samples_per_step // 4 + 1, steps)
    filtered = rng.integers(0, samples_per_step // 8 + 1, steps)
    write_steps(
        paths.steps,
        pd.DataFrame(
            {
                "step": i,
                "t_start_s": t_end - step_s,
                "t_end_s": t_end,
                "step_s": step_s,
                "wait_s": wait,
                "gen_s": step_s * rng.uniform(0.6, 0.95, steps),
                "logprob_s": logprob,
                "compute_s": compute,
                "sync_s": sync,
                "samples": np.full(steps, samples_per_step),
                "prompts": np.full(steps, samples_per_step // 16 or 1),
                "prompt_tokens": np.full(steps, 256 * samples_per_step),
                "response_tokens": resp.astype(np.int64),
                "dispatched_samples": samples_per_step + discarded + filtered,
                "discarded_samples": discarded,
                "filtered_samples": filtered,
                "generated_tokens": (resp * 1.2).astype(np.int64),
                "staleness_mean": rng.uniform(0, 2, steps),
                "staleness_max": np.full(steps, 3.0),
            }
            | ({"native_mfu": rng.uniform(0.2, 0.3, steps)} if mode == "native" else {})
        ),
    )
    if rollouts:
        with RolloutWriter(paths.rollouts) as w:
            chunk = 100  # steps per row group: memory stays flat, reads stay fast
            for lo in range(0, steps, chunk):
                k = np.repeat(
                    np.arange(lo, min(lo + chunk, steps)), samples_per_step
                )  # step index per rollout
                n = len(k)
                ids = lo * samples_per_step + np.arange(n)
                start = t_end[k] - step_s[k]
                w.write(
                    {
                        "rollout_id": ids,
                        "group_id": ids // 16,
                        "step_consumed": k + 1,
                        "policy_version_start": np.maximum(k + 1 - rng.integers(0, 3, n), 0),
                        "policy_version_end": k + 1,
                        "t_dispatch_s": start - 30.0,
                        "t_finish_s": start - rng.uniform(0, 25, n),
                        "response_tokens": rng.integers(50, 800, n),
                        "status": np.full(n, "used"),
                    }
                )
    if gpu:
        from bench.trace import write_gpu

        t = np.arange(0, int(t_end[-1]), 5.0)
        write_gpu(
            paths.gpu,
            pd.DataFrame(
                {
                    "t_s": t,
                    "node": ["n0"] * len(t),
                    "gpu": np.zeros(len(t), dtype=np.int64),
                    "util_pct": rng.uniform(20, 95, len(t)),
                    "mem_used_mib": np.full(len(t), 6e4),
                    "power_w": rng.uniform(300, 700, len(t)),
                }
            ),
        )
    if metrics is not None:
        from bench.metrics import steady_window
        from bench.phases import phases
        from bench.trace import read_steps

        # the step phases as bench.metrics computes them from this trace, unless the caller gives them
        trace = read_steps(paths.steps)
        w = steady_window(trace)
        steady = trace[(trace.step >= w.first) & (trace.step <= w.last)]
        write_json(
            paths.metrics,
            {
                "framework": framework,
                "mode": mode,
                "run_id": paths.root.name,
                "phases": phases(steady, manifest),
                **metrics,
            },
        )
    return paths
