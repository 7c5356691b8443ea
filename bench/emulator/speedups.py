"""Relative speed-ups of asynchronous RL over colocated synchronous RL on the same GPUs, emulated
and set against the published figures. Nothing here is calibrated on these figures: the emulator
runs each published setup (conf/experiment/<name>.yaml) and its baseline with default efficiencies.

`compare()` returns one dict per figure and prints a table; the reproduce stage calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.config import compose
from bench.emulator.run import build


@dataclass(frozen=True)
class Figure:
    id: str
    figure: str
    published: float  # speed-up (x) = baseline wall time / candidate wall time
    experiment: str
    candidate: tuple[str, ...]  # overrides on the experiment
    baseline_gpus: int  # colocated sync on this many GPUs
    source: str


VERL_FA = "https://github.com/volcengine/verl/blob/2147009822388b70cda46ab4a27c5400d3d113ed/docs/advance/fully_async.md"
VERL_1OFF = "https://github.com/volcengine/verl/blob/e55d143181568d5232e4c2c6ba0d3a2ea1f7ebcd/docs/advance/one_step_off.md"
AREAL = "https://www.scholarfeed.org/paper/2505.24298v3"

FIGURES = (
    Figure("verl_fully_async_128gpu_100steps", "verl fully_async 64:64 vs colocated sync, 128 H20, 100 steps",
           2.67, "verl_fully_async_h20", ("emulator.steps=100",), 128, VERL_FA),
    Figure("verl_fully_async_128gpu_400steps", "verl fully_async 64:64 vs colocated sync, 128 H20, 400 steps",
           2.35, "verl_fully_async_h20", ("emulator.steps=400",), 128, VERL_FA),
    Figure("verl_one_step_off_fsdp2", "verl one-step-off 12:4 vs colocated sync, 16 H20, FSDP2, 20K",
           1.23, "verl_one_step_off_h20", (), 16, VERL_1OFF),
    Figure("verl_one_step_off_megatron", "verl one-step-off 12:4 vs colocated sync, 16 H20, Megatron, 8K",
           1.40, "verl_one_step_off_h20", ("workload.max_response_len=8192", "experiment.trainer.sharding=megatron"),
           16, VERL_1OFF),
    Figure("areal_vs_sync", "AReaL async vs sync, 1.5B math model, same GPUs (up to)",
           2.77, "areal_async_1_5b", (), 64, AREAL),
)  # fmt: skip


def _wall_s(overrides: list[str]) -> tuple[float, Any]:
    loop, _, _ = build(compose(overrides))
    return loop.run().wall_s, loop.s


def emulate_figure(f: Figure) -> dict[str, Any]:
    """Run candidate and baseline for one figure; return emulated vs published (x) and the error (%)."""
    base = [f"experiment={f.experiment}", "framework=verl", *f.candidate]
    cand_s, sched = _wall_s(base)
    sync = [
        "experiment.placement=colocated",
        f"experiment.trainer_gpus={f.baseline_gpus}",
        f"experiment.generator_gpus={f.baseline_gpus}",
        "experiment.partial_rollout=false",
        "framework.mode=sync",
        "emulator.policy=",
    ]
    base_s, _ = _wall_s([*base, *sync])
    x = base_s / cand_s
    return {
        "id": f.id,
        "figure": f.figure,
        "published": f.published,
        "emulated": round(x, 3),
        "error_pct": round(100 * (x - f.published) / f.published, 1),
        "baseline_wall_s": round(base_s, 1),
        "candidate_wall_s": round(cand_s, 1),
        "candidate_policy": sched.name,
        "mode": "emulated",
        "source": f.source,
    }


def compare(figures: tuple[Figure, ...] = FIGURES, show: bool = True) -> list[dict[str, Any]]:
    """Emulated vs published speed-ups, one dict per figure (printed as a table when `show`)."""
    rows = [emulate_figure(f) for f in figures]
    if show:
        print(f"{'figure':<66} {'published':>9} {'emulated':>9} {'error':>7}")
        for r in rows:
            print(f"{r['figure']:<66} {r['published']:>8.2f}x {r['emulated']:>8.2f}x {r['error_pct']:>6.1f}%")
    return rows


if __name__ == "__main__":
    compare()
