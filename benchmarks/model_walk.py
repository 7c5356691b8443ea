"""The walk of `bench predict` through the code: which bench modules a prediction enters, and how
often a call climbs back up the layers (a model module calling into the emulator or a command, the
emulator into a command, a command into another command's module).

Issue 22 §6 counted this walk on one run directory; this script counts it so a change to the model
layer is measured, not asserted. It traces every Python call (sys.setprofile) while
bench.predict.predict runs on verl's opd-benchmark run (verl -> prime_rl), and counts, for calls
whose caller and callee are different bench modules:

  modules entered   distinct bench modules any call enters
  commands entered  distinct command modules entered (bench.predict itself included)
  climbs            distinct (caller -> callee) module edges going up the layers
  climb calls       how many calls took such an edge

Layers, lowest first: foundation (config, resolve, flops, trace, run_setup, ...), model
(bench/model/; in a tree from before it, hwprofile, calibrate_fit, emulator.costmodel), emulator
(bench/emulator/), commands (COMMANDS; before bench/model, calibrate and fwprofile held their fits).

Run it from the repository root (needs ../shared, or RLBENCH_FIXTURES):

    .venv/bin/python benchmarks/model_walk.py                        # this checkout
    .venv/bin/python benchmarks/model_walk.py --tree /tmp/baseline   # another tree, same run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
OLD_MODEL = ("bench.hwprofile", "bench.calibrate_fit", "bench.emulator.costmodel")
COMMANDS = ("bench.predict", "bench.plan", "bench.calibrate", "bench.fwprofile",
            "bench.profile_fit", "bench.probe", "bench.speed_of_light")  # fmt: skip


def layer(mod: str) -> int:
    """0 foundation, 1 model, 2 emulator, 3 command."""
    if mod.startswith("bench.model") or mod in OLD_MODEL:
        return 1
    if mod.startswith("bench.emulator"):
        return 2
    return 3 if mod in COMMANDS else 0


def walk() -> dict:
    """Trace one prediction (verl -> prime_rl) in this process; the counts above."""
    from bench import predict
    from bench.fixtures import fixtures_dir
    from bench.reproduce import opd_logs
    from bench.reproduce.spec import Context
    from tests.calibrate.test_predict import SETUP  # the prediction tests/calibrate runs

    tmp = Path(tempfile.mkdtemp(prefix="walk-"))
    ctx = Context(data_root=fixtures_dir() / "opd-benchmark", work_dir=tmp)
    run = opd_logs.load_run("opd-frameworks", "verl", "verl", ctx).run_dir.root
    given = [*SETUP, "experiment.placement=disaggregated", "framework=prime_rl"]

    stack: list[str] = []  # the bench module of each frame on the traced stack, outermost first
    entered: set[str] = set()
    climbs: dict[str, int] = {}

    def tracer(frame, event, arg):
        if event == "call":
            mod = frame.f_globals.get("__name__", "")
            caller = stack[-1] if stack else ""
            if mod.startswith("bench") and mod != caller:
                entered.add(mod)
                up = layer(mod) > layer(caller) or (layer(mod) == layer(caller) == 3)
                if caller.startswith("bench") and up:
                    edge = f"{caller} -> {mod}"
                    climbs[edge] = climbs.get(edge, 0) + 1
            stack.append(mod if mod.startswith("bench") else caller)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(tracer)
    try:
        predict.predict(run, given, tmp / "pred")
    finally:
        sys.setprofile(None)
    return {
        "modules_entered": len(entered),
        "modules": sorted(entered),
        "commands_entered": sorted(m for m in entered if layer(m) == 3),
        "climbs": len(climbs),
        "climb_calls": sum(climbs.values()),
        "climb_edges": dict(sorted(climbs.items())),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="measure this tree's bench/ instead of the checkout's")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        print(json.dumps(walk()))
        return 0
    tree = (args.tree or HERE).resolve()
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--inner"],
        cwd=tree,
        env={**__import__("os").environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    res = json.loads(out.strip().splitlines()[-1])
    print(f"tree {tree}")
    print(f"  modules entered: {res['modules_entered']}")
    print(f"  commands entered: {', '.join(res['commands_entered'])}")
    print(f"  climbs: {res['climbs']} edges, {res['climb_calls']} calls")
    for edge, n in res["climb_edges"].items():
        print(f"    {edge}  x{n}")
    print(f"  modules: {', '.join(res['modules'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
