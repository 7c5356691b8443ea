"""`bench plan experiment=semianalysis_case1` speed: 16 splits x 3 seeds x 300 steps, emulated on a
pool of 2 processes (both cores) and serially, side by side in one run (wall seconds).

Case 1 holds 256 H200. `bench validate` admits only 5 of its splits (trainer 8, 16, 32, 64 or 128
GPUs: 512 samples over the trainer's data-parallel ranks, EP 8, whole nodes), so the timed sweep
takes 16 of the 31 whole-node splits (bench.plan.choose: evenly spaced, 64:192 among them) and
emulates them through the plan's own path (bench.plan.emulate_all, then bench.plan.answer); the
5-split plan the command itself runs is timed too (`command` row, parallel only). The load of the
machine (uptime) and its other busy processes are printed before and after: it is shared.

    .venv/bin/python benchmarks/plan_bench.py            # 16 x 3 x 300, parallel and serial (~4 min)
    .venv/bin/python benchmarks/plan_bench.py --steps 30 # quicker look
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import plan  # noqa: E402
from bench.config import compose  # noqa: E402


def machine() -> dict:
    """Load average and the other processes using CPU right now (the machine is shared)."""
    load = os.getloadavg()
    ps = subprocess.run(["ps", "-eo", "pcpu,args", "--sort=-pcpu"], capture_output=True, text=True).stdout
    busy = [
        line.strip()[:90] for line in ps.splitlines()[1:6] if line.strip() and float(line.split()[0]) >= 5
    ]
    return {"loadavg_1_5_15": [round(x, 2) for x in load], "cpus": os.cpu_count(), "busy": busy}


def timed_sweep(steps: int, seeds: int, n_splits: int, jobs: int) -> dict:
    overrides = ["experiment=semianalysis_case1", "framework=prime_rl", f"emulator.steps={steps}"]
    cfg = compose(overrides)
    whole_nodes = [(256 - g, g) for g in range(8, 256, 8)]
    splits = plan.choose(whole_nodes, (64, 192), n_splits)
    s = plan.Setup(cfg=cfg, total=256, current=(64, 192), max_staleness=16, bounds=[16], inflight=[1.5],
                   seeds=list(range(seeds)), source="benchmark", splits=n_splits)  # fmt: skip
    t0 = time.perf_counter()
    p = plan.answer(s, splits, plan.emulate_all(cfg, plan.items_of(s, splits), jobs))
    return {"wall_s": round(time.perf_counter() - t0, 2), "emulations": len(p.rows), "sentence": p.sentence}


def command(steps: int) -> dict:
    """The command as a user runs it (validate-legal splits, 3 seeds, page written)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        args = [
            "plan",
            "experiment=semianalysis_case1",
            f"emulator.steps={steps}",
            "--json",
            "--out",
            f"{tmp}/p",
        ]
        out = subprocess.run(
            [sys.executable, "-m", "bench", *args], capture_output=True, text=True, check=True
        )
        wall = time.perf_counter() - t0
    d = json.loads(out.stdout)
    return {"wall_s": round(wall, 2), "points": len(d["points"]), "sentence": d["sentence"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--splits", type=int, default=16)
    args = ap.parse_args()
    print(json.dumps({"machine_before": machine()}))
    par = timed_sweep(args.steps, args.seeds, args.splits, jobs=2)
    print(json.dumps({"parallel_2": par}))
    ser = timed_sweep(args.steps, args.seeds, args.splits, jobs=1)
    print(json.dumps({"serial": ser, "speedup": round(ser["wall_s"] / par["wall_s"], 2)}))
    print(json.dumps({"command": command(args.steps)}))
    print(json.dumps({"machine_after": machine()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
