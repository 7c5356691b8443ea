"""Log-parser throughput and memory: `python benchmarks/parse_bench.py --framework verl [--size-gb 2]`.

Synthesises a large console log by repeating a real fixture log (step numbers renumbered so every
copy adds new steps, as a long run would), parses it with the framework's runner, and prints MB/s
and the peak RSS of the process (resource.getrusage; Linux reports KiB). Targets: >= 50 MB/s and
peak RSS < 500 MiB for a 2 GB log. Each framework adds its case to CASES.
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.fixtures import fixtures_dir  # noqa: E402  (after the checkout is on sys.path)

FIXTURES = fixtures_dir() / "opd-benchmark" / "opd-frameworks" / "results"  # `make fixtures`


def _verl_chunk(copy: int, text: str, steps_per_copy: int) -> str:
    """One copy of the verl fixture log with its step numbers shifted past the previous copies."""
    offset = copy * steps_per_copy

    def shift(m: re.Match) -> str:
        return f"{m.group(1)}step:{int(m.group(2)) + offset} - "

    return re.sub(r"(\) )step:(\d+) - ", shift, text)


def _verl_parse(path: Path) -> int:
    from runners.verl_logs import parse_dir

    return len(parse_dir(path).steps)


def _slime_chunk(copy: int, text: str, steps_per_copy: int) -> str:
    """One copy of the Miles (slime fork) fixture log with its record ids shifted past the previous copies."""
    offset = copy * steps_per_copy

    def shift(m: re.Match) -> str:
        return f" - {m.group(1)} {int(m.group(2)) + offset}: {{"

    return re.sub(r" - (perf|rollout|step) (\d+): \{", shift, text)


def _slime_parse(path: Path) -> int:
    from runners.slime import SlimeRunner

    return len(SlimeRunner().parse_logs(path).steps)


def _prime_rl_chunk(copy: int, text: str, steps_per_copy: int) -> str:
    """One copy of the Prime-RL launcher console (orchestrator Step lines) with step numbers shifted."""
    offset = copy * steps_per_copy
    return re.sub(r" Step (\d+) \|", lambda m: f" Step {int(m.group(1)) + offset} |", text)


def _prime_rl_parse(path: Path) -> int:
    from runners.prime_rl import PrimeRLRunner

    # the runner's ParseResult, steps held as columns (StepRows) as the suite receives them
    return len(PrimeRLRunner(version="0.8.0").parse_logs(path).steps)


# framework -> (fixture log, steps in the fixture, chunk maker, parse(path) -> steps parsed)
CASES: dict[str, tuple[Path, int, Callable[[int, str, int], str], Callable[[Path], int]]] = {
    "verl": (FIXTURES / "verl" / "run.log", 15, _verl_chunk, _verl_parse),
    "slime": (FIXTURES / "miles" / "run.log", 15, _slime_chunk, _slime_parse),
    "prime_rl": (FIXTURES / "prime" / "run.log", 15, _prime_rl_chunk, _prime_rl_parse),
}


def synthesise(framework: str, out: Path, size_bytes: int) -> int:
    """Write ~size_bytes of log to `out` (a fresh folder); returns the bytes written."""
    src, steps, chunk, _ = CASES[framework]
    text = src.read_text(errors="replace")
    out.mkdir(parents=True, exist_ok=True)
    written, copy = 0, 0
    with open(out / "console.log", "w") as f:
        while written < size_bytes:
            piece = chunk(copy, text, steps)
            f.write(piece)
            written += len(piece.encode())
            copy += 1
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, choices=sorted(CASES))
    ap.add_argument("--size-gb", type=float, default=2.0, help="synthetic log size (1e9 bytes)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/parse_bench"), help="where the log is written")
    args = ap.parse_args(argv)
    log_dir = args.dir / args.framework
    if log_dir.exists():
        for p in log_dir.iterdir():
            p.unlink()
    size = synthesise(args.framework, log_dir, int(args.size_gb * 1e9))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0, c0 = time.perf_counter(), time.process_time()
    steps = CASES[args.framework][3](log_dir)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"framework={args.framework} size_mb={size / 1e6:.0f} steps={steps} wall_s={dt:.1f} cpu_s={cpu:.1f}"
    )
    # CPU-time rate too: on a shared machine the wall-clock rate also measures the neighbours' load
    print(
        f"throughput_mb_per_s={size / 1e6 / dt:.1f} cpu_throughput_mb_per_s={size / 1e6 / cpu:.1f} "
        f"peak_rss_mib={rss:.0f} (before parse {rss_before:.0f})"
    )
    for p in log_dir.iterdir():
        p.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
