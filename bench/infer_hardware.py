"""The GPU an ingested run ran on, from every clue its logs leave, and the checks of a given one.

Clues: telemetry device names (nvidia-smi's `name` column), device names a log prints (torch,
vLLM: `NVIDIA H100 80GB HBM3`), a suite manifest beside the logs, and memory: a device's total
(verl's `device memory used/total (GB)`) and the peak allocated (`perf/max_memory_allocated_gb`).
A hardware the user gives is checked against them (hardware_conflicts): allocated memory above its
HBM, a device total far from it, a native MFU above 1 or more than MFU_RATIO_LIMIT x the suite's
MFU on its peak all say the log is not from that GPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from bench.config import CONF_DIR

HARDWARE_UNKNOWN = "hardware unknown: pass hardware=<name>"  # + the names conf/hardware knows
# nvidia-smi `name` -> conf/hardware file; only names whose variant is unambiguous
GPU_NAMES = (
    (r"GB300", "gb300"),
    (r"B200", "b200"),
    (r"H200", "h200"),
    (r"H100 80GB HBM3|H100 SXM", "h100_sxm"),
    (r"\bH20\b", "h20"),
)


def hardware_names() -> list[str]:
    """The hardware a user may name (conf/hardware/<name>.yaml)."""
    return sorted(p.stem for p in (CONF_DIR / "hardware").glob("*.yaml"))


def hardware_unknown() -> str:
    """The one line every command says when a run's hardware is not known."""
    return f"{HARDWARE_UNKNOWN} (one of {', '.join(hardware_names())})"


def hardware_hbm_gb(name: str) -> float:
    return float((yaml.safe_load((CONF_DIR / "hardware" / f"{name}.yaml").read_text()) or {})["hbm_gb"])


# Clues a console log leaves about its GPU: a device name (`NVIDIA H100 80GB HBM3`, as torch,
# vLLM and nvidia-smi print it) and a device's total memory (verl: `device memory used/total (GB):
# 17.01/79.14`, torch.cuda.mem_get_info, GiB; telemetry's memory.total).
# a model token holds a digit (H100, A100-SXM4-80GB, GB200, RTX 4090): "NVIDIA Corporation" is no device
DEVICE_NAME = re.compile(
    r"\bNVIDIA (?:GeForce )?(?:RTX )?[A-Z]*\d[\w-]*(?: \d+GB)?(?: (?:HBM\w*|SXM\w*|PCIe|NVL))*"
)
DEVICE_TOTAL_GB = re.compile(r"device memory used/total \(GB\): [\d.]+/([\d.]+)")
GIB = 1024**3 / 1e9  # GB per GiB
MEMORY_TOLERANCE = 0.25  # a device total within 25% of the card's HBM (GiB vs GB, reserved memory)
MFU_RATIO_LIMIT = 3.0  # native MFU this many times the suite's: the peak it was taken against differs


def _telemetry_total_gb(log_dir: Path, csvs: list[Path]) -> tuple[float, str] | None:
    """A device's total memory from a telemetry CSV's memory-total column (nvidia-smi's
    `memory.total [MiB]`, the suite's `memory_total_mib`), in GB, with its file:line."""
    from runners.run_config import source

    for path in csvs:
        with open(path, encoding="utf-8", errors="replace") as f:
            header, row = f.readline(), f.readline()
        cols = [c.strip().lower() for c in header.split(",")]
        at = next((i for i, c in enumerate(cols) if "memory" in c and "total" in c), None)
        cells = row.split(",")
        if at is None or at >= len(cells):
            continue
        m = re.match(r"\s*([\d.]+)", cells[at])
        if m:
            return float(m.group(1)) * 1024**2 / 1e9, source(log_dir, path, 2)
    return None


def hardware_clues(log_dir: Path, files: list[Path], csvs: list[Path] = ()) -> dict[str, Any]:
    """{"device_names": [(name, source)], "device_total_gb": (GB, source) or None} from text logs
    and telemetry CSVs (their memory-total column)."""
    from runners.run_config import find_line, head_text, source

    names: list[tuple[str, str]] = []
    total = _telemetry_total_gb(log_dir, list(csvs))
    for path in files:
        text = head_text(path, 8 << 20)
        for m in DEVICE_NAME.finditer(text):
            if all(m.group(0) != n for n, _ in names):
                names.append((m.group(0), source(log_dir, path, text.count("\n", 0, m.start()) + 1)))
        if total is None:
            m, line = find_line(text, DEVICE_TOTAL_GB.pattern)
            if m:
                total = (float(m.group(1)) * GIB, source(log_dir, path, line))
    return {"device_names": names, "device_total_gb": total}


def hardware_conflicts(
    name: str, clues: dict[str, Any], steps: list[dict[str, Any]], suite_mfu: float | None
) -> list[str]:
    """Why the logs say the run was not on `name` (conf/hardware): a device name of another card,
    allocated memory above its HBM, a device total far from it, a native MFU above 1 or more than
    MFU_RATIO_LIMIT x the suite's MFU on that card's peak. One line each, naming both values."""
    hbm = hardware_hbm_gb(name)
    out = []
    for dev, src in clues.get("device_names") or []:
        conf = hardware_from_name(dev)
        if conf and conf != name:
            out.append(f"the logs name device {dev!r} ({src}), conf/hardware/{conf}.yaml")
    peak = max(
        ((r["native_max_memory_allocated_gb"], r["step"]) for r in steps
         if r.get("native_max_memory_allocated_gb") is not None), default=None,
    )  # fmt: skip
    if peak and peak[0] > hbm:
        out.append(f"perf/max_memory_allocated_gb {peak[0]:g} at step {peak[1]} exceeds its {hbm:g} GB HBM")
    total = clues.get("device_total_gb")
    if total and abs(total[0] - hbm) > MEMORY_TOLERANCE * hbm:
        out.append(f"device memory total {total[0]:.0f} GB ({total[1]}) is not its {hbm:g} GB HBM")
    native = [r["native_mfu"] for r in steps if r.get("native_mfu") is not None]
    if native:
        mean = sum(native) / len(native)
        if mean > 1:
            out.append(f"native MFU {mean:.3f} is above 1 on its peak")
        elif suite_mfu and mean > MFU_RATIO_LIMIT * suite_mfu:
            out.append(
                f"native MFU {mean:.3f} is {mean / suite_mfu:.1f}x the suite's {suite_mfu:.3f} on its peak "
                f"(more than {MFU_RATIO_LIMIT:g}x: the framework measured against another GPU's peak)"
            )
    return out


def hardware_from_name(gpu_name: str) -> str | None:
    for pattern, conf in GPU_NAMES:
        if re.search(pattern, gpu_name):
            return conf
    return None


def hardware_from_logs(
    log_dir: Path, gpu_names: list[str], clues: dict[str, Any] | None = None
) -> tuple[str | None, str | None, str]:
    """(conf/hardware name, source, note) from telemetry GPU names, a device name the logs print
    (hardware_clues), or a suite manifest."""
    for name in gpu_names:
        conf = hardware_from_name(name)
        if conf:
            return conf, f"telemetry: nvidia-smi name {name!r}", ""
        return None, None, f"telemetry GPU {name!r} has no conf/hardware entry"
    devices = (clues or {}).get("device_names") or []
    for dev, src in devices:
        conf = hardware_from_name(dev)
        if conf:
            return conf, f"{src}: device {dev!r}", ""
    if devices:
        dev, src = devices[0]
        return None, None, f"the logs name device {dev!r} ({src}), which has no conf/hardware entry"
    for m in (log_dir / "manifest.json", log_dir.parent / "manifest.json"):
        if m.is_file():
            try:
                hw = (json.loads(m.read_text()).get("config") or {}).get("hardware") or {}
            except (json.JSONDecodeError, AttributeError):
                continue
            conf = next((p.stem for p in (CONF_DIR / "hardware").glob("*.yaml")
                         if yaml.safe_load(p.read_text()).get("name") == hw.get("name")), None)  # fmt: skip
            if conf:
                return conf, str(m), ""
    return None, None, ""
