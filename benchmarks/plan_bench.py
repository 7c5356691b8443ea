"""`bench plan experiment=semianalysis_case1` speed: 16 splits x 3 seeds x 300 steps, wall and CPU
seconds, optionally side by side with a baseline tree in one run.

Case 1 holds 256 H200. The timed sweep takes 16 of the 31 whole-node splits (bench.plan_splits.choose:
evenly spaced, 64:192 among them) and emulates them through the plan's own path (bench.plan.emulate_all,
then bench.plan.answer) on a pool of 2 processes (`pool`) and serially (`serial`); `command` is the
command as a user runs it (`python -m bench plan experiment=semianalysis_case1 emulator.steps=300
--json --out DIR`: compose, validate every split, emulate 16 of prime-rl's 31 valid splits x 3 seeds,
write the page). Each measurement runs in its own process; CPU seconds are user + sys of that process
and of the workers and commands it waited for (os.times), so they count the work whatever else the
shared machine runs, while wall seconds rise with its load. The load (uptime) and the other busy
processes are printed before and after.

`--baseline TREE` (e.g. `git worktree add --detach /tmp/baseline HEAD`) measures the same rows on
TREE's bench/ too, alternating baseline and the current tree row by row so both share the machine's
state of the moment (this VM's speed drifts by up to 2x within an hour), and checks that both trees
give the same recommendation. `--tree TREE` measures TREE as the current one (e.g. a worktree holding
one change on top of the baseline, when the checkout also holds other work in progress).

    .venv/bin/python benchmarks/plan_bench.py                                  # this checkout
    .venv/bin/python benchmarks/plan_bench.py --baseline /tmp/baseline --skip serial
    .venv/bin/python benchmarks/plan_bench.py --baseline /tmp/baseline --tree /tmp/current
    .venv/bin/python benchmarks/plan_bench.py --steps 30                       # quicker look
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

HERE = Path(__file__).resolve().parents[1]
KINDS = ("pool", "serial", "command")


def machine() -> dict:
    """Load average and the other processes using CPU right now (the machine is shared)."""
    load = os.getloadavg()
    ps = subprocess.run(["ps", "-eo", "pcpu,args", "--sort=-pcpu"], capture_output=True, text=True).stdout
    busy = [
        line.strip()[:90] for line in ps.splitlines()[1:6] if line.strip() and float(line.split()[0]) >= 5
    ]
    return {"loadavg_1_5_15": [round(x, 2) for x in load], "cpus": os.cpu_count(), "busy": busy}


def cpu_s() -> float:
    """User + sys CPU seconds of this process and of every child it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed_sweep(steps: int, seeds: int, n_splits: int, jobs: int) -> dict:
    """The plan's own path over n_splits whole-node splits of case 1 x seeds, on `jobs` processes."""
    from bench import plan
    from bench.config import compose
    from bench.plan_splits import choose

    overrides = ["experiment=semianalysis_case1", "framework=prime_rl", f"emulator.steps={steps}"]
    cfg = compose(overrides)
    whole_nodes = [(256 - g, g) for g in range(8, 256, 8)]
    splits = choose(whole_nodes, (64, 192), n_splits)
    s = plan.Setup(cfg=cfg, total=256, current=(64, 192), max_staleness=16, bounds=[16], inflight=[1.5],
                   seeds=list(range(seeds)), source="benchmark", splits=n_splits)  # fmt: skip
    t0, c0 = time.perf_counter(), cpu_s()
    p = plan.answer(s, splits, plan.emulate_all(cfg, plan.items_of(s, splits), jobs))
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "emulations": len(p.rows),
        "sentence": p.sentence,
    }


def command(steps: int, tree: Path) -> dict:
    """The command as a user runs it (validate-legal splits, 3 seeds, page written)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "plan",
            "experiment=semianalysis_case1",
            f"emulator.steps={steps}",
            "--json",
            "--out",
            f"{tmp}/p",
        ]
        t0, c0 = time.perf_counter(), cpu_s()
        out = subprocess.run(
            [sys.executable, "-m", "bench", *args],
            capture_output=True,
            text=True,
            check=True,
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
        )
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    d = json.loads(out.stdout)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "points": len(d["points"]),
        "sentence": d["sentence"],
    }


def one(kind: str, args: argparse.Namespace, tree: Path) -> dict:
    """Measure `kind` on TREE's bench/ in a fresh process (its imports are not in the figures)."""
    cmd = [sys.executable, __file__, "--only", kind, "--tree", str(tree), "--steps", str(args.steps),
           "--seeds", str(args.seeds), "--splits", str(args.splits)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env)
    if done.returncode != 0:  # e.g. a tree with work in progress: say which and why, then stop
        raise SystemExit(f"plan_bench: {kind} on {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--splits", type=int, default=16)
    ap.add_argument("--baseline", type=Path, help="another tree (a git worktree) measured side by side")
    ap.add_argument("--skip", action="append", default=[], choices=KINDS, help="leave a row out")
    ap.add_argument(
        "--tree", type=Path, default=HERE, help="the tree measured as current (default: this one)"
    )
    ap.add_argument("--only", choices=KINDS, help=argparse.SUPPRESS)  # one measurement, in a child
    args = ap.parse_args()
    if args.only:
        sys.path.insert(0, str(args.tree))
        if args.only == "command":
            r = command(args.steps, args.tree)
        else:
            r = timed_sweep(args.steps, args.seeds, args.splits, jobs=2 if args.only == "pool" else 1)
        print(json.dumps(r))
        return 0
    current = args.tree.resolve()
    trees = (
        {"baseline": args.baseline.resolve(), "current": current} if args.baseline else {"current": current}
    )
    print(json.dumps({"machine_before": machine()}))
    rows, same = [], True
    for kind in (k for k in KINDS if k not in args.skip):
        got = {}
        for label, tree in trees.items():
            rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip()  # fmt: skip
            got[label] = one(kind, args, tree)
            print(json.dumps({"kind": kind, "tree": label, "rev": rev, **got[label]}))
        if args.baseline:
            same &= got["baseline"]["sentence"] == got["current"]["sentence"]
            b, c = got["baseline"], got["current"]
            rows.append(f"| {kind} | {b['wall_s']} | {b['cpu_s']} | {c['wall_s']} | {c['cpu_s']} | "
                        f"{b['cpu_s'] / c['cpu_s']:.2f}x |")  # fmt: skip
    print(json.dumps({"machine_after": machine()}))
    if args.baseline:
        print("| row | baseline wall s | baseline CPU s | current wall s | current CPU s | CPU speed-up |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
        print("same recommendation in both trees" if same else "THE RECOMMENDATIONS DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
