"""`python -m bench probe`: measure a node with plain PyTorch, for the cost model (docs/probe.md).

    python -m bench probe [model=<conf/model>] [--out DIR] [--quick] [--fs-path PATH]
    python -m bench probe cluster=<site> [model=<conf/model>] [--out DIR] [--quick] [--fs-path PATH]
    python -m bench probe fit PROBE.json... --out PROFILE.yaml [--models a,b]
    python -m bench probe check PROBE.json --profile PROFILE.yaml [--json]

The measurement writes DIR/probe.json in the schema of the shared H200 probe files: bf16 GEMM at the
model's trainer shapes, device copy, pinned and pageable host copies, taking and releasing most of the
card, a checkpoint-sized write + fsync and cold read on --fs-path, one decode iteration replayed from
a CUDA graph over a batch x context grid, prefill and train steps over a token grid, NCCL all-reduce
and broadcast with more than one GPU, and nvidia-smi samples throughout (read by bench.telemetry's
one reader). Without a GPU the same code runs on the CPU with tiny shapes (what the tests run);
every figure then says device "cpu". With cluster=<site> the same measurement runs as one Slurm job
per node type of the site (bench.probe_cluster), into DIR/<node type>/probe.json. `fit` and `check`
are bench.model.hwprofile's.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench import probe_sections as ps
from bench import telemetry
from bench.errors import UsageError
from bench.model import hwprofile, hwprofile_conf

# (batch, context) of the decode grid and (batch, seq) of prefill / train, on a GPU and with --quick
DECODE_GRID = [
    (1, 1024),
    (1, 8192),
    (4, 2048),
    (16, 1024),
    (16, 8192),
    (64, 1024),
    (64, 4096),
    (256, 1024),
    (512, 512),
]
DECODE_QUICK = [(1, 1024), (16, 4096), (128, 1024)]
PREFILL_GRID = [(1, 512), (1, 2048), (4, 2048), (8, 2048)]
TRAIN_GRID = [(1, 1024), (1, 4096), (2, 4096)]
# on the CPU: tiny shapes, so the same code runs in seconds
CPU_DECODE_GRID = [(1, 64), (4, 64), (16, 128)]
CPU_TOKEN_GRID = [(1, 32), (2, 64)]
DEFAULT_MODELS = ["qwen3_0_6b", "qwen3_1_7b", "qwen3_4b"]  # three widths: a fit can hold one out


def _torch():
    try:
        import torch
    except ImportError:
        raise UsageError(
            "bench probe needs PyTorch: pip install -e '.[probe]' (a CUDA build on a GPU node)"
        ) from None
    return torch


# ---------------------------------------------------------------------------------------------------


def measure(
    models: list[str], out: Path, quick: bool, fs_path: Path, progress: bool = True
) -> dict[str, Any]:
    """Every section on this node, into out/probe.json (written once, at the end, atomically)."""
    torch = _torch()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cpu = device == "cpu"
    shapes = {name: ps.model_shape(name, cpu) for name in models}
    clock = ps.Clock(torch, device)
    decode_grid = CPU_DECODE_GRID if cpu else (DECODE_QUICK if quick else DECODE_GRID)
    token_grid = CPU_TOKEN_GRID if cpu else (PREFILL_GRID[1:3] if quick else PREFILL_GRID)
    train_grid = CPU_TOKEN_GRID if cpu else (TRAIN_GRID[:2] if quick else TRAIN_GRID)
    sections: list[tuple[str, Callable[[], dict]]] = [
        ("env", lambda: ps.section_env(torch, device)),
        ("matmul", lambda: ps.section_matmul(torch, clock, device, list(shapes.values()), cpu)),
        ("hbm", lambda: ps.section_hbm(torch, clock, device, cpu)),
        ("host", lambda: ps.section_host(torch, clock, device)),
        ("alloc", lambda: ps.section_alloc(torch, device)),
        ("filesystem", lambda: ps.section_filesystem(torch, device, fs_path, cpu, quick)),
        ("decode", lambda: ps.section_decode(torch, clock, device, shapes, decode_grid)),
        ("prefill", lambda: ps.section_tokens(torch, clock, device, shapes, token_grid, train=False)),
        ("train", lambda: ps.section_tokens(torch, clock, device, shapes, train_grid, train=True)),
        ("nccl", lambda: ps.section_nccl(torch, device)),
    ]
    sampler = _start_sampler(out)
    probe: dict[str, Any] = {
        "started": time.time(),
        "device": device,
        "torch": torch.__version__,
        "epoch_start": time.time(),
        "quick": quick,
        "dtype": str(ps.dtype_for(torch, device)),
        "models": models,
        "sections": {},
    }
    from rich.progress import Progress

    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("bench probe", total=len(sections))
        for name, run in sections:
            bar.update(task, description=f"probe: {name}")
            t0 = time.perf_counter()
            try:
                result = run()
            except Exception as e:  # a failed section is recorded, the rest still measured
                result = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
            result["section_wall_s"] = time.perf_counter() - t0
            probe["sections"][name] = result
            bar.advance(task)
    probe["epoch_end"] = time.time()
    probe["sections"]["telemetry"] = {**_stop_sampler(sampler, out), "section_wall_s": 0.0}
    return probe


def _start_sampler(out: Path) -> subprocess.Popen | None:
    if not shutil.which("nvidia-smi"):
        return None
    f = open(out / "nvidia-smi.csv", "w")  # noqa: SIM115 - closed by _stop_sampler
    return subprocess.Popen(telemetry.NVSMI, stdout=f, stderr=subprocess.DEVNULL)


def _stop_sampler(proc: subprocess.Popen | None, out: Path) -> dict[str, Any]:
    """nvidia-smi's samples, read by the suite's one telemetry reader: power and memory over the probe."""
    if proc is None:
        return {"skipped": "nvidia-smi not found: no GPU telemetry"}
    proc.terminate()
    proc.wait()
    proc.stdout.close()
    read = telemetry.read_gpu_csv(out / "nvidia-smi.csv", "probe")
    power = [r["power_w"] for r in read.rows if r.get("power_w") is not None]
    return {
        "file": "nvidia-smi.csv",
        "samples": len(read.rows),
        "power_max_w": max(power, default=None),
        "mem_used_max_mib": max(
            (r["mem_used_mib"] for r in read.rows if r.get("mem_used_mib")), default=None
        ),
    }


def _write_new(path: Path, text: str) -> None:
    """Write a file the command owns: refused (one line) when it exists; OS errors named, no traceback."""
    if path.exists():
        raise UsageError(f"--out {path}: already exists; choose a new path")
    from bench.outdir import check_out

    check_out(path, "probe fit", is_file=True)  # never inside a run directory or under a file
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as e:
        raise UsageError(f"--out {path}: {e.strerror}") from None


def main(argv: list[str]) -> int:
    if argv[:1] == ["fit"]:
        return fit_main(argv[1:])
    if argv[:1] == ["check"]:
        return check_main(argv[1:])
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "probe",
        "Measure this node with plain PyTorch for the cost model: GEMM at the model's trainer shapes, "
        "device and host copies, allocation, a checkpoint-sized write and read, decode iterations from a "
        "CUDA graph, prefill and train steps, NCCL with several GPUs, and nvidia-smi samples throughout. "
        "Without a GPU it runs the same code on the CPU with tiny shapes. "
        "With cluster=<site> it submits the same measurement as one Slurm job per node type of the site "
        "(one whole node each, the way `bench run` submits), waits for them and prints one line per node type. "
        "`probe fit` and `probe check` turn probe files into a hardware profile and test it.",
        "conf/model/<name>.yaml for each model= (default: qwen3_0_6b, qwen3_1_7b, qwen3_4b); --fs-path for the write test; "
        "with cluster=, conf/cluster/<site>.yaml (a node type is its partition, GPU type and constraint; cluster=a,b probes several).",
        "DIR/probe.json (docs/probe.md) and DIR/nvidia-smi.csv when nvidia-smi is present; refuses a DIR that holds a probe.json. "
        "With cluster=: DIR/<node type>/probe.json, job.log and submitit/ (the Slurm job's script, pickles and log) for each node type; "
        "refuses a DIR that holds results.",
        [
            "python -m bench probe --out probes/h200",
            "python -m bench probe cluster=example_site --quick --out probes/example_site",
            "python -m bench probe model=qwen3_8b --quick --fs-path /shared/scratch",
            "python -m bench probe fit probes/h200/probe.json --out h200.yaml",
            "python -m bench probe check probes/h200/probe.json --profile h200.yaml --json",
        ],
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("probe"),
        help="directory for probe.json, or with cluster= for one folder per node type (default ./probe)",
    )
    ap.add_argument(
        "--quick", action="store_true", help="smaller grids and a 1-GiB filesystem test (minutes, not tens)"
    )
    ap.add_argument(
        "--fs-path",
        type=Path,
        help="where to write the checkpoint-sized file (default: --out; with cluster=, each node type's folder)",
    )
    add_overrides(
        ap,
        "model=<conf/model> (repeatable: model=a model=b); cluster=<conf/cluster> (a Slurm site: one job "
        "per node type; cluster=a,b for several)",
    )
    args = ap.parse_intermixed_args(argv)
    models, clusters = [], []
    for o in args.overrides:
        key, _, value = o.partition("=")
        if key == "model" and value:
            models.append(value)
        elif key == "cluster" and value:
            clusters.append(value)
        else:
            raise UsageError(
                f"{o}: bench probe takes model=<conf/model> and cluster=<conf/cluster> only "
                "(e.g. model=qwen3_0_6b cluster=testbed)"
            )
    models = models or DEFAULT_MODELS
    for name in models:  # an unknown or MoE model is refused before anything is written or submitted
        ps.model_shape(name, cpu=True)
    if clusters:
        from bench import probe_cluster

        return probe_cluster.main(clusters, models, args.out, args.quick, args.fs_path, measure_into)
    target = args.out / "probe.json"
    if target.exists():
        raise UsageError(f"--out {args.out}: already holds probe.json; choose a new directory")
    from bench.outdir import check_out

    check_out(args.out, "probe")  # never inside a run directory, over others' files or under a file
    print(measure_into(args.out, models, args.quick, args.fs_path, sys.stderr.isatty()))
    return 0


def measure_into(
    out: Path, models: list[str], quick: bool, fs_path: Path | None, progress: bool = False
) -> str:
    """This node measured into out/probe.json (out checked by the caller); the one-line summary.
    `bench probe` calls it here; with cluster=, bench.probe_cluster submits it (pickled by submitit)
    as the Slurm job of each node type, so both measure with the same code."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out}: {e.strerror}") from None
    probe = measure(models, out, quick, fs_path or out, progress)
    probe["host"] = socket.gethostname()
    if "SLURM_JOB_ID" in os.environ:  # where the measurement ran: the job of its node type
        names = ("job_id", "job_nodelist", "job_partition", "job_gpus")
        probe["slurm"] = {
            k: os.environ[f"SLURM_{k.upper()}"] for k in names if f"SLURM_{k.upper()}" in os.environ
        }
    target = out / "probe.json"
    _write_new(target, json.dumps(probe, indent=1))
    failed = [k for k, v in probe["sections"].items() if "error" in v]
    return (
        f"{target}: {len(probe['sections'])} sections on {probe['sections']['env'].get('name', probe['device'])}"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )


def fit_main(argv: list[str]) -> int:
    from bench.cli import command_parser

    ap = command_parser(
        "probe fit",
        "Fit a GPU's hardware profile (the cost model's constants, each with the rows it was fitted on "
        "and its residual) to one or more probe files of that GPU.",
        "the PROBE.json files given.",
        "PROFILE.yaml (--out); refuses an existing file.",
        [
            "python -m bench probe fit probe-sizes.json probe-primitives.json --out h200.yaml --models qwen3_0_6b,qwen3_1_7b"
        ],
    )
    ap.add_argument("probes", nargs="+", type=Path, metavar="PROBE.json")
    ap.add_argument("--out", type=Path, required=True, help="the profile to write (YAML)")
    ap.add_argument(
        "--models", help="fit on these models' rows only (comma-separated), holding out the others"
    )
    args = ap.parse_args(argv)
    models = [m for m in (args.models or "").split(",") if m]
    profile = hwprofile.fit([(p.name, hwprofile.load_probe(p)) for p in args.probes], models or None)
    _write_new(args.out, yaml.safe_dump(profile, sort_keys=False))
    d = profile["decode"]
    print(
        f"{args.out}: decode fitted on {d['launch_s_per_kernel']['rows']} rows "
        f"(median residual {d['launch_s_per_kernel']['residual_median']:.1%}), "
        f"prefill {profile['prefill']['launch_s_per_layer']['rows']}, train {profile['train']['launch_s_per_layer']['rows']}"
    )
    return 0


def check_main(argv: list[str]) -> int:
    from bench.cli import command_parser

    ap = command_parser(
        "probe check",
        "For every measured row of a probe file, what a hardware profile predicts, the measured time and the error.",
        "PROBE.json and the --profile YAML.",
        "nothing to disk; a table, or JSON with --json.",
        ["python -m bench probe check probe-sizes.json --profile h200.yaml --json"],
    )
    ap.add_argument("probe", type=Path, metavar="PROBE.json")
    ap.add_argument("--profile", type=Path, required=True, help="PROFILE.yaml from `bench probe fit`")
    ap.add_argument(
        "--json", action="store_true", help="print {rows, median_abs_error, max_abs_error, sections}"
    )
    args = ap.parse_args(argv)
    result = hwprofile.check(
        hwprofile.load_probe(args.probe), hwprofile_conf.load_profile(args.profile), args.probe.name
    )
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for r in result["rows"]:
        length = f"context {r['context']}" if "context" in r else f"seq {r['seq']}"
        err = r["predicted_s"] / r["measured_s"] - 1
        print(
            f"{r['section']:<8} {r['model']:<12} batch {r['batch']:<4} {length:<14} "
            f"measured {r['measured_s'] * 1e3:9.3f} ms  predicted {r['predicted_s'] * 1e3:9.3f} ms  {err:+.1%}"
        )
    for sec, s in result["sections"].items():
        print(
            f"{sec}: {s['rows']} rows, median |error| {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%}"
        )
    return 0
