"""1-s GPU telemetry of native runs: nvidia-smi on every node of the allocation -> trace/gpu.parquet.

One `srun --overlap` step with one task per node runs
`nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw --format=csv,noheader,nounits -l 1`
into logs/gpu-<node>.csv (outside Slurm: on this host only). Stopping the step and merging the CSVs
gives one row per (second, node, GPU) in the GPU_SCHEMA of bench.trace. Without nvidia-smi (the
testbed, a laptop) nothing is sampled and no gpu.parquet is written.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
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
    from runners.shell import shell_word  # the run directory holds user text (results_dir, experiment.name)

    inner = " ".join(NVSMI) + " > " + shell_word(f"{logs}/gpu-${{SLURMD_NODENAME}}.csv")
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
    for path in sorted(paths.logs.glob("gpu-*.csv")):
        node = path.stem.removeprefix("gpu-")
        rows += read_gpu_csv(path, node, t0_epoch_s, local_time=True, header=QUERY.split(",")).rows
    if rows:
        write_gpu(paths.gpu, rows)
    return len(rows)


# Header name -> GPU_SCHEMA column (bench.trace), for every form of nvidia-smi CSV the suite reads:
# nvidia-smi's own header (`--format=csv`: "utilization.gpu [%]"), its query names (our sampler's
# `noheader` files, read with header=QUERY), and the snake_case of the opd-benchmark harness.
# `name` (the GPU model) is read beside the schema's columns, for the hardware a run had.
GPU_CSV_COLUMNS = {
    "timestamp": "t_s",  # 'YYYY/MM/DD HH:MM:SS.mmm', no zone
    "epoch": "t_s",  # Unix seconds (the mopd-frameworks sampler)
    "index": "gpu",
    "utilization.gpu": "util_pct",
    "utilization.gpu [%]": "util_pct",
    "utilization_gpu_pct": "util_pct",
    "memory.used": "mem_used_mib",
    "memory.used [MiB]": "mem_used_mib",
    "memory_used_mib": "mem_used_mib",
    "power.draw": "power_w",
    "power.draw [W]": "power_w",
    "power_w": "power_w",
    "name": "name",
}
TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"  # nvidia-smi's timestamp column
VALUE_COLUMNS = ("util_pct", "mem_used_mib", "power_w")


@dataclass
class GpuCsv:
    """One nvidia-smi CSV, read: `rows` of GPU_SCHEMA (t_s in seconds since the t0 given, util_pct
    in %, mem_used_mib in MiB, power_w in W; None where the board reports "[N/A]" or the file has
    no such column), the GPU model names of a `name` column (first-seen order), and the 1-based
    line numbers of records that did not parse (a cut-off last line, a zero-filled block)."""

    header: list[str]
    columns: dict[int, str]  # header position -> GPU_SCHEMA column (or "name")
    rows: list[dict[str, Any]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)

    @property
    def is_telemetry(self) -> bool:
        """The header names a time column (timestamp or epoch) and the device index."""
        return {"t_s", "gpu"} <= set(self.columns.values())


def read_gpu_csv(
    path: Path | str,
    node: str,
    t0_epoch_s: float = 0.0,
    *,
    local_time: bool = False,
    header: list[str] | None = None,
) -> GpuCsv:
    """The suite's one reader of nvidia-smi CSV telemetry: `path` -> GpuCsv of `node`'s devices.

    The file's first line is its header unless `header` is given (our sampler's `noheader` files:
    header=QUERY.split(",")); a header without a time and an index column gives no rows
    (GpuCsv.is_telemetry is False). Values may carry units ("71.29 W"). A `timestamp` has no zone:
    it is the sampling host's clock, read as UTC (the opd-benchmark hosts) or, with local_time,
    as this machine's zone (our own job, whose t0 is this machine's time.time()). t_s counts from
    t0_epoch_s (Unix seconds; 0 gives Unix time), rounded to the ms nvidia-smi prints.
    """
    # utf-8-sig: a CSV saved on Windows (Excel) starts with a byte-order mark before its header
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
        lines = (line.replace("\0", "") for line in f)  # a crash can leave zero-filled blocks
        first = 1
        if header is None:
            header, first = [h.strip() for h in next(lines, "").split(",")], 2
        return _read_records(lines, header, first, node, t0_epoch_s, local_time)


def _read_records(
    lines: Iterable[str], header: list[str], first: int, node: str, t0: float, local_time: bool
) -> GpuCsv:
    cols = {i: GPU_CSV_COLUMNS[h] for i, h in enumerate(header) if h in GPU_CSV_COLUMNS}
    times = [i for i, c in cols.items() if c == "t_s"]
    for i in times[1:]:  # both timestamp and epoch: the first one is the time
        del cols[i]
    out = GpuCsv(header, cols)
    if not out.is_telemetry:
        return out
    epoch = header[times[0]] == "epoch"
    zone = None if local_time else dt.UTC
    reader = csv.reader(lines)
    for rec in reader:
        cells = [c.strip() for c in rec]
        if not any(cells) or cells == header:  # blank line, or the header again (sampler restarted)
            continue
        row = _record(cells, cols, node, epoch, zone)
        if row is None:
            out.bad_lines.append(reader.line_num + first - 1)
            continue
        name = row.pop("name", None)
        if name and name not in out.names:
            out.names.append(name)
        row["t_s"] = round(row["t_s"] - t0, 3)
        out.rows.append(row)
    return out


def _record(cells: list[str], cols: dict[int, str], node: str, epoch: bool, zone: Any) -> dict | None:
    """One CSV record -> a GPU_SCHEMA row (t_s in Unix seconds), or None when it does not parse."""
    row: dict[str, Any] = {"t_s": None, "node": node, "gpu": None, **dict.fromkeys(VALUE_COLUMNS)}
    try:
        for i, col in cols.items():
            v = cells[i]
            if col == "t_s":
                row["t_s"] = (
                    float(v)
                    if epoch
                    else dt.datetime.strptime(v, TIME_FORMAT).replace(tzinfo=zone).timestamp()
                )
            elif col == "gpu":
                row["gpu"] = int(v)
            elif col == "name":
                row["name"] = v
            else:
                row[col] = _number(v)
    except (IndexError, ValueError):
        return None
    return row


def _number(text: str) -> float | None:
    """A value cell: '612.48', '71.29 W' (csv without nounits); None for '[N/A]', '[Not Supported]'."""
    try:
        v = float(text.split(" ")[0])
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_nvidia_smi(text: str, node: str, t0_epoch_s: float) -> list[dict[str, Any]]:
    """Rows of GPU_SCHEMA from our sampler's output (`--query-gpu=QUERY --format=csv,noheader,nounits`):
    read_gpu_csv's rules on text already in memory, the node's local time, lines that do not parse
    (a cut-off last line) skipped."""
    return _read_records(text.splitlines(), QUERY.split(","), 1, node, t0_epoch_s, True).rows


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
