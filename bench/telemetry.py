"""1-s GPU telemetry of native runs: nvidia-smi on every node of the allocation -> trace/gpu.parquet.

One `srun --overlap` step with one task per node runs
`nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw --format=csv,noheader,nounits -l 1`
into logs/gpu-<node>.csv (outside Slurm: on this host only). Stopping the step and merging the CSVs
gives one row per (second, node, GPU) in the GPU_SCHEMA of bench.trace. Without nvidia-smi (the
testbed, a laptop) nothing is sampled and no gpu.parquet is written.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from bench.trace import RunPaths, write_gpu

QUERY = "timestamp,index,utilization.gpu,memory.used,power.draw"
NVSMI = ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-l", "1"]


def energy_j(t_s: Any, power_w: Any) -> float:
    """Energy of one device in joules: the trapezoidal integral of power (W) over its samples'
    times (s, ascending). The suite's one energy definition: metrics and reproduce both use it
    (it is the opd-benchmark's own method, so the published energies are comparable)."""
    import numpy as np

    t, p = np.asarray(t_s, dtype=np.float64), np.asarray(power_w, dtype=np.float64)
    return float(np.sum(np.diff(t) * (p[:-1] + p[1:]) / 2.0)) if len(t) > 1 else 0.0


def sampler_argv(logs: Path, in_slurm: bool) -> list[str]:
    """argv of the sampler: one srun step over every node (Slurm) or nvidia-smi itself (local)."""
    if not in_slurm:
        return NVSMI
    inner = " ".join(NVSMI) + f' > "{logs}/gpu-$SLURMD_NODENAME.csv"'
    return ["srun", "--overlap", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "bash", "-c", inner]


def start_sampler(paths: RunPaths) -> subprocess.Popen | None:
    """Start sampling (returns None when this machine has no nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return None
    in_slurm = "SLURM_JOB_ID" in os.environ
    out = (
        subprocess.DEVNULL if in_slurm else open(paths.logs / f"gpu-{socket.gethostname()}.csv", "ab")  # noqa: SIM115 - owned by the child
    )
    return subprocess.Popen(sampler_argv(paths.logs, in_slurm), stdout=out, start_new_session=True)


def stop_sampler(proc: subprocess.Popen | None, paths: RunPaths, t0_epoch_s: float) -> int:
    """Stop the sampler and write trace/gpu.parquet from logs/gpu-*.csv; return the rows written."""
    if proc is None:
        return 0
    # SIGTERM: srun forwards it to the step's tasks and exits (one SIGINT only prints its status)
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    rows = []
    for csv in sorted(paths.logs.glob("gpu-*.csv")):
        rows += parse_nvidia_smi(csv.read_text(errors="replace"), csv.stem.removeprefix("gpu-"), t0_epoch_s)
    if rows:
        write_gpu(paths.gpu, rows)
    return len(rows)


def _number(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_nvidia_smi(text: str, node: str, t0_epoch_s: float) -> list[dict[str, Any]]:
    """Rows of GPU_SCHEMA from `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits` output.

    `t_s` is seconds since `t0_epoch_s` (the run's start, Unix time); the timestamp column is the
    node's local time 'YYYY/MM/DD HH:MM:SS.mmm'. Lines that do not parse (a cut-off last line)
    are skipped.
    """
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            stamp = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            gpu = int(parts[1])
        except ValueError:
            continue
        rows.append(
            {
                "t_s": round(stamp - t0_epoch_s, 3),  # nvidia-smi stamps have ms resolution
                "node": node,
                "gpu": gpu,
                "util_pct": _number(parts[2]),
                "mem_used_mib": _number(parts[3]),
                "power_w": _number(parts[4]),
            }
        )
    return rows


def role_summary(gpu: Any, gpu_ids: dict[str, list[int]]) -> dict[str, Any]:
    """Per-role telemetry of a one-node run: for each role, its devices' mean utilisation (%, over
    every sample of the run), peak memory (MiB) and energy (Wh, energy_j like
    metrics.energy_wh). `gpu` is trace/gpu.parquet as a DataFrame; gpu_ids maps a role to its
    nvidia-smi indices. A role whose devices have no samples is left out."""
    out: dict[str, Any] = {}
    for role, ids in gpu_ids.items():
        g = gpu[gpu["gpu"].isin(ids)]
        if g.empty:
            continue
        powered = g.dropna(subset=["power_w"]).sort_values("t_s")
        energy = sum(energy_j(d["t_s"], d["power_w"]) for _, d in powered.groupby(["node", "gpu"]))
        out[role] = {
            "gpus": sorted(int(i) for i in ids),
            "util_mean_pct": float(g["util_pct"].mean()),
            "mem_peak_mib": float(g["mem_used_mib"].max()),
            "energy_wh": energy / 3600.0,
        }
    return out
