"""Emulator speed vs a naive SimPy baseline, side by side (CPU seconds on one core).

Baseline: the textbook discrete-event model of the same queue, one SimPy process per rollout slot:
1,024 worker processes each run rollouts of 4 turns (decode, then environment), put them in a store,
and a trainer process takes 512 a step. Ours: `bench.emulator` on experiment=semianalysis_case1
(multi-turn, 512 rollouts a step), which additionally models KV-limited concurrency, the decode
roofline, staleness, oversampling and writes nothing here (the trace writer is timed separately).
Case 1 as published cancels what is in flight at each batch fill, so it dispatches ~2.5x the
rollouts it trains (`rollouts` counts every dispatched one); the `carry` rows run the same case with
in-flight rollouts carried over, which dispatches ~512 a step, the size of the SimPy baseline.

    .venv/bin/python benchmarks/emulator_bench.py            # scaling table (~1-2 min)
    .venv/bin/python benchmarks/emulator_bench.py --quick    # one point each
    .venv/bin/python benchmarks/emulator_bench.py --quick --repeat 10  # before/after comparisons
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def simpy_baseline(steps: int, batch: int = 512, workers: int = 1024, turns: int = 4, seed: int = 0) -> dict:
    """Process-per-slot SimPy model: returns rollouts completed, SimPy events and CPU seconds."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    done = simpy.Store(env)
    # per-turn decode (s) and env latency (s), drawn in numpy like ours, consumed one by one
    n_draw = (steps + 2) * batch * 2 * turns
    decode = iter(rng.lognormal(np.log(60.0), 0.6, n_draw).tolist())
    env_s = iter(rng.lognormal(np.log(8.0), 1.0, n_draw).tolist())
    stats = {"trained": 0}

    def worker(env: simpy.Environment):
        while True:
            for _ in range(turns):
                yield env.timeout(next(decode))
                yield env.timeout(next(env_s))
            yield done.put(1)

    def trainer(env: simpy.Environment):
        for _ in range(steps):
            for _ in range(batch):
                yield done.get()
            stats["trained"] += batch
            yield env.timeout(180.0)

    for _ in range(workers):
        env.process(worker(env))
    finish = env.process(trainer(env))
    t0 = time.process_time()
    env.run(until=finish)
    cpu = time.process_time() - t0
    produced = stats["trained"] + len(done.items)
    return {
        "model": "simpy",
        "steps": steps,
        "batch": batch,
        "rollouts": produced,
        "events": next(env._eid),
        "cpu_s": cpu,
    }


def emulator(steps: int, prompts: int = 32, surplus: str = "", repeat: int = 1) -> dict:
    """bench.emulator on semianalysis_case1 with `prompts` x 16 rollouts a step; the least CPU time
    of `repeat` runs (each on a fresh Loop)."""
    from bench.config import compose
    from bench.emulator.run import build

    cfg = compose(
        [
            "experiment=semianalysis_case1",
            "framework=prime_rl",
            f"emulator.steps={steps}",
            f"workload.prompts_per_step={prompts}",
            *([f"emulator.surplus={surplus}"] if surplus else []),
        ]
    )
    cpu = np.inf
    for _ in range(repeat):
        loop, _, _ = build(cfg)
        t0 = time.process_time()
        r = loop.run()
        cpu = min(cpu, time.process_time() - t0)
    return {
        "model": "bench.emulator" + (f" {surplus}" if surplus else ""),
        "steps": steps,
        "batch": prompts * 16,
        "rollouts": len(r.segments["rollout"]),
        "events": r.events,
        "cpu_s": cpu,
    }


def _row(r: dict) -> dict:
    r["rollouts_per_s"] = r["rollouts"] / r["cpu_s"]
    r["events_per_s"] = r["events"] / r["cpu_s"]
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 steps only")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="emulator rows: least CPU time of N runs (a shared VM varies by 2x; compare with N >= 5)",
    )
    args = ap.parse_args(argv)
    rows = []
    sim_steps = [100] if args.quick else [100, 300]
    for s in sim_steps:
        rows.append(_row(simpy_baseline(s)))
    for s in [100] if args.quick else [100, 300, 1000]:
        rows.append(_row(emulator(s, repeat=args.repeat)))
    for s in [100] if args.quick else [300, 1000]:
        rows.append(_row(emulator(s, surplus="carry", repeat=args.repeat)))
    if not args.quick:
        for p in (16, 64):  # scaling with rollouts per step (256, 1,024)
            rows.append(_row(emulator(300, p, repeat=args.repeat)))
    print(
        f"{'model':<21} {'steps':>5} {'batch':>5} {'rollouts':>9} {'events':>9} {'cpu_s':>7} "
        f"{'rollouts/s':>11} {'events/s':>10}"
    )
    for r in rows:
        print(
            f"{r['model']:<21} {r['steps']:>5} {r['batch']:>5} {r['rollouts']:>9} {r['events']:>9} "
            f"{r['cpu_s']:>7.2f} {r['rollouts_per_s']:>11.0f} {r['events_per_s']:>10.0f}"
        )
    # side by side: same steps and rollouts per step
    pairs = {(r["steps"], r["batch"]): r for r in rows if r["model"] == "simpy"}
    ratios = [
        r["rollouts_per_s"] / pairs[(r["steps"], r["batch"])]["rollouts_per_s"]
        for r in rows
        if r["model"] != "simpy" and (r["steps"], r["batch"]) in pairs
    ]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    shown = ", ".join(f"{x:.1f}x" for x in ratios)
    print(f"speed-up at equal size (rollouts/s, ours / SimPy): {shown}; peak RSS {peak_mb:.0f} MB")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "speedups": ratios, "peak_rss_mb": peak_mb}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
