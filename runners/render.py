"""`python -m bench render <hydra overrides> framework=X --out DIR`: write a framework's native launch.

Composes conf/ with the overrides, asks the framework's runner (cfg.framework._target_) for its
Launch and writes DIR/launch/: command.json, job.sbatch and the native files (overrides.txt, ...).
Framework-neutral: nothing here knows a framework. `--native` also checks the rendered launch
against the framework installed on this machine (the runner's `validate_native`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.config import compose
from runners.base import NOT_INSTALLED, load_runner


def main(argv: list[str]) -> int:
    """Render; returns 0, or 2 with the problems on stderr when the runner rejects the config."""
    ap = argparse.ArgumentParser(prog="python -m bench render", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="run directory; the launch goes to OUT/launch/")
    ap.add_argument("--native", action="store_true", help="also validate against the installed framework")
    args, overrides = ap.parse_known_args(argv)
    cfg = compose(overrides)
    runner = load_runner(cfg.framework)
    problems = runner.validate(cfg)
    if problems:
        for p in problems:
            print(f"{cfg.framework.name}: {p}", file=sys.stderr)
        return 2
    launch = runner.render_launch(cfg)
    written = launch.write(args.out / "launch")
    for path in written:
        print(path)
    for note in launch.notes:
        print(f"note: {note}")
    if args.native:
        native_problems = runner.validate_native(cfg, launch)
        for p in native_problems:
            print(f"{cfg.framework.name} (native): {p}", file=sys.stderr)
        return 2 if any(not p.endswith(NOT_INSTALLED) for p in native_problems) else 0
    return 0
