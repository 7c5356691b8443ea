"""`python -m bench <command> ...`: one module per stage, each with `main(argv) -> int`.

A stage raises bench.errors.UsageError for input that is wrong; it is printed here as
`error: <line>` on stderr with exit status 2, and no traceback.
"""

from __future__ import annotations

import importlib
import sys

from bench.errors import EXIT_USAGE, UsageError
from bench.redact import redact_text

# command -> "module:function"; each stage stays importable and testable on its own
COMMANDS = {
    "run": ("bench.launch:main", "compose an experiment and submit one job per framework"),
    "status": ("bench.monitor:status_main", "state of each job of an experiment"),
    "validate": ("bench.validate:main", "pre-flight checks of an experiment"),
    "prepare": ("bench.prepare:main", "datasets and model weights onto the site's shared filesystem"),
    "inspect": ("bench.inspect:main", "pre-flight of a site: partition, account, runtime, storage, data"),
    "render": ("bench.render:main", "write a framework's native launch"),
    "ingest": ("bench.ingest:main", "native logs -> trace + metrics.json"),
    "metrics": ("bench.metrics:main", "recompute a run directory's metrics.json"),
    "flops": ("bench.flops:main", "FLOPs per token of a model"),
    "cost": ("bench.cost:main", "$/GPU-hour and $/M tokens from TCO inputs"),
    "emulate": ("bench.emulator.run:main", "emulate one framework on one experiment into a run dir"),
    "calibrate": ("bench.calibrate:main", "fit the emulator's inputs to a measured run -> calibration YAML"),
    "profile": (
        "bench.profile_fit:main",
        "profile fit: a framework's own costs pooled over its measured runs",
    ),
    "predict": (
        "bench.predict:main",
        "emulate a measured run under another framework (its costs from that framework's profile)",
    ),
    "plan": ("bench.plan:main", "sweep the generator:trainer split by emulation and recommend one"),
    "report": ("bench.report:main", "comparison report from run directories"),
    "compare": ("bench.compare:main", "what changed between two runs, and whether it is beyond noise"),
    "nightly": (
        "bench.nightly:main",
        "a Slurm schedule: run every framework, compare with the last good run",
    ),
    "reproduce": ("bench.reproduce:main", "recompute published figures"),
    "probe": (
        "bench.probe:main",
        "measure a node with plain PyTorch; probe fit / probe check: its hardware profile",
    ),
    "sol": ("bench.speed_of_light:main", "each phase of a run next to what its GPU's profile allows"),
    "testbed": ("bench.testbed:main", "local multi-node Slurm testbed: up | down | status"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m bench <command> [args]", ""]
    lines += [f"  {name:<{width}}  {doc}" for name, (_, doc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in {"-h", "--help"} or argv[0] not in COMMANDS:
        print(usage(), file=sys.stderr if argv and argv[0] not in {"-h", "--help"} else sys.stdout)
        return 0 if not argv or argv[0] in {"-h", "--help"} else 2
    module, func = COMMANDS[argv[0]][0].split(":")
    try:
        return int(getattr(importlib.import_module(module), func)(argv[1:]) or 0)
    except UsageError as e:  # the user's input is wrong: its line(s), no traceback
        for line in redact_text(str(e)).splitlines():  # it may echo an override that holds a secret
            print(f"error: {line}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:  # a full or read-only disk mid-write: one line naming the file, no traceback
        from bench.outdir import disk_refusal

        if (refusal := disk_refusal(e)) is None:
            raise
        print(f"error: {redact_text(str(refusal))}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
