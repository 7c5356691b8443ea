"""Benchmark of `python -m bench report` on synthetic run directories (issue 6 budgets).

    .venv/bin/python benchmarks/report_bench.py [--work DIR] [--check]

Case "three": three frameworks x 1,000 steps x 1,024 rollouts per step (the smoke workload's
64 prompts x 16), with rollouts.parquet: budget 10 s.
Case "sweep": 100 runs (2 frameworks x 50 generator-GPU counts) x 200 steps x 256 rollouts:
budget 60 s and 2 GiB peak resident memory.

The report runs in a child process (`python -m bench report`), timed end to end including
interpreter start-up and imports (wall seconds, and CPU seconds of the child and its workers,
which a loaded machine does not inflate); peak memory is the largest resident set among the child
and its figure workers (getrusage RUSAGE_CHILDREN). Inputs are synthetic and stamped
emulated (bench.report.synthetic); the figures say nothing about any framework.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.report.synthetic import make_run  # noqa: E402

BUDGETS = {"three": {"seconds": 10.0}, "sweep": {"seconds": 60.0, "peak_gib": 2.0}}


def metrics(i: int, gpus: int = 8) -> dict:
    prod = min(14.0, 2.0 + 0.5 * gpus)
    return {
        "wall_s": 3000.0,
        "trajectories_per_s": prod,
        "production_samples_per_s": prod,
        "consumption_samples_per_s": 14.0,
        "trainer_idle_frac": 1 - prod / 14.0,
        "mfu": 0.3,
        "staleness_mean": 0.05 * gpus,
        "staleness_max": float(gpus // 8),
        "cost_per_mtok_usd": 0.2 + 0.01 * gpus,
        "tinker_equiv_per_mtok_usd": 0.9,
        "window": {"first_step": 3, "last_step": 1000, "rule": "skip 2"},
        "missing": {"mfu_native": "emulated"},
        "checks": [],
    }


def make_three(root: Path) -> Path:
    for i, fw in enumerate(("verl", "slime", "prime_rl")):
        make_run(root / fw, fw, steps=1000, samples_per_step=1024, metrics=metrics(i), seed=i)
    return root


def make_sweep(root: Path) -> Path:
    for fw in ("verl", "slime"):
        for j in range(50):
            gpus = 8 + 2 * j
            cfg = {"experiment": {"name": "sweep", "generator_gpus": gpus}}
            make_run(
                root / f"{fw}-g{gpus}",
                fw,
                steps=200,
                samples_per_step=256,
                config=cfg,
                metrics=metrics(j, gpus),
                seed=j,
            )
    return root


# The child builds the report, then prints its own peak RSS and its figure workers' (KiB), so
# each case is measured alone rather than as the largest child so far.
CHILD = """
import json, resource, sys
from bench.report import main
rc = main(sys.argv[1:])
own = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "self_kib": own.ru_maxrss, "workers_kib": kids.ru_maxrss}))
"""


def run_report(results: Path, out: Path) -> dict:
    """Time one report child; return wall and CPU seconds and peak RSS (GiB) of child and workers."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(results), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"report failed ({done.returncode}): {done.stderr[-3000:]}")
    mem = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "seconds": round(seconds, 2),
        "cpu_s": round((ru.ru_utime + ru.ru_stime) - (ru0.ru_utime + ru0.ru_stime), 2),
        "peak_gib": round(max(mem["self_kib"], mem["workers_kib"]) / 2**20, 3),
        "index_html_mb": round((out / "index.html").stat().st_size / 1e6, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, help="keep inputs and reports here (default: a temp dir)")
    p.add_argument("--check", action="store_true", help="exit 1 when a budget is exceeded")
    p.add_argument("--cases", nargs="+", default=list(BUDGETS), choices=list(BUDGETS))
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="report_bench."))
    results, over = {}, []
    for case in args.cases:
        t0 = time.perf_counter()
        src = {"three": make_three, "sweep": make_sweep}[case](work / "results" / case)
        made = time.perf_counter() - t0
        r = run_report(src, work / "reports" / case)
        r |= {"runs": len(list(src.iterdir())), "generate_s": round(made, 1), "budget": BUDGETS[case]}
        r["load_avg_1min"] = round(os.getloadavg()[0], 2)
        results[case] = r
        over += [f"{case}: {k} {r[k]} > {v}" for k, v in BUDGETS[case].items() if r[k] > v]
        print(f"{case}: {json.dumps(r)}", flush=True)
    (work / "report_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"reports and inputs under {work}")
    if over:
        print("over budget: " + "; ".join(over), file=sys.stderr)
    return 1 if over and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
