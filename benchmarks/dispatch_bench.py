"""Dispatch overhead on the local Slurm testbed: `python benchmarks/dispatch_bench.py [--cluster testbed]`.

Runs the whole smoke sweep (`bench run experiment=smoke cluster=<cluster> --wait`) into a fresh
results directory and reports, from the run directories' manifests:

- sweep wall time: from calling `bench run` to the last job finished (target < 60 s);
- per job, the suite's overhead: from sbatch's answer (`dispatch.submitted_at`) to the emulator's
  first step (`dispatch.emulator_started_at`, written just before the emulator is called), split
  into queue + start (submitted -> job started) and job set-up (started -> emulator called)
  (target < 5 s per job).

Exit 1 if a target is missed. The numbers are wall-clock seconds on this machine; the emulated
runs themselves are labelled emulated in their manifests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SWEEP_TARGET_S = 60.0
OVERHEAD_TARGET_S = 5.0


def _t(iso: str | None) -> float | None:
    return dt.datetime.fromisoformat(iso).timestamp() if iso else None


def measure(cluster: str, results: Path, extra: list[str]) -> dict:
    """Run the smoke sweep with --wait; return wall time and per-job overheads (seconds)."""
    from bench import launch

    t0 = time.time()
    rc = launch.main(["experiment=smoke", f"cluster={cluster}", f"results_dir={results}", "--wait", *extra])
    wall_s = time.time() - t0
    jobs = []
    for manifest in sorted((results / "smoke").glob("*/manifest.json")):
        m = json.loads(manifest.read_text())
        d = m["dispatch"]
        sub, start, emu = _t(d["submitted_at"]), _t(d["started_at"]), _t(d.get("emulator_started_at"))
        jobs.append(
            {
                "run": m["run_id"],
                "status": m["status"],
                "job_id": d.get("slurm_job_id"),
                "node_list": d.get("node_list"),
                "queue_and_start_s": round(start - sub, 3) if sub and start else None,
                "job_setup_s": round(emu - start, 3) if emu and start else None,
                "overhead_s": round(emu - sub, 3) if emu and sub else None,
            }
        )
    return {"cluster": cluster, "rc": rc, "sweep_wall_s": round(wall_s, 2), "jobs": jobs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", default="testbed", help="testbed (default) or local")
    ap.add_argument("--results", type=Path, default=None, help="results dir (default: a fresh temp dir)")
    ap.add_argument("extra", nargs="*", help="more Hydra overrides")
    args = ap.parse_args(argv)
    if args.cluster == "testbed":
        from bench import testbed

        testbed.up()
    results = args.results or Path(tempfile.mkdtemp(prefix="dispatch_bench-"))
    r = measure(args.cluster, results, args.extra)
    print(json.dumps(r, indent=2))
    overheads = [j["overhead_s"] for j in r["jobs"] if j["overhead_s"] is not None]
    ok = (
        r["rc"] == 0
        and r["sweep_wall_s"] < SWEEP_TARGET_S
        and len(overheads) == len(r["jobs"])
        and max(overheads) < OVERHEAD_TARGET_S
    )
    # "Overhead" of a job that waited for free nodes includes its queue time: report the worst
    # job both ways so a queueing testbed is not mistaken for a slow dispatcher.
    setup = [j["job_setup_s"] for j in r["jobs"] if j["job_setup_s"] is not None]
    print(
        f"sweep wall {r['sweep_wall_s']:.1f} s (target < {SWEEP_TARGET_S:.0f}); overhead per job "
        f"max {max(overheads, default=float('nan')):.2f} s (target < {OVERHEAD_TARGET_S:.0f}), "
        f"in-job set-up max {max(setup, default=float('nan')):.2f} s; {'OK' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
