"""Readers for SemiAnalysis's opd-benchmark result folders (github.com/SemiAnalysisAI/opd-benchmark).

A benchmark folder (`benchmarks/<name>/` in a checkout, or `<name>/` in the CI fixture copy) holds
`REPORT.md` (the published tables) and `results/<run>/` per framework run, each with the harness's
`wall_time.env` (start/end epochs) and `gpu.csv` (1-s `nvidia-smi` samples) beside the framework's
native logs. The native logs are parsed by the suite's runners; this module reads only the
harness files and the report, so it works on every folder of that layout without code changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from bench.telemetry import energy_j
from bench.telemetry import read_gpu_csv as read_nvidia_smi_csv
from bench.trace import read_env_file

# GPU_SCHEMA columns a gpu.csv must have (besides a time column) -> the harness's header names
GPU_CSV_COLUMNS = {"gpu": "index", "power_w": "power_w"}


class OpdDataError(ValueError):
    """An opd-benchmark file is missing or malformed; the message names the file and key."""


def resolve_benchmark(data_root: Path | str, benchmark: str) -> Path:
    """The folder of one benchmark under `data_root`.

    Accepts a checkout of the repository (`<root>/benchmarks/<benchmark>`), the CI fixture copy
    (`<root>/<benchmark>`) or the benchmark folder itself.
    """
    root = Path(data_root)
    candidates = [root / "benchmarks" / benchmark, root / benchmark]
    if root.name == benchmark:
        candidates.append(root)
    for cand in candidates:
        if (cand / "results").is_dir():
            return cand
    raise OpdDataError(
        f"benchmark {benchmark!r} not found under {root}: expected {root}/benchmarks/{benchmark}/results/ "
        f"(a checkout of SemiAnalysisAI/opd-benchmark) or {root}/{benchmark}/results/ (pass --data-root)"
    )


def read_wall_env(path: Path | str) -> dict[str, int | str]:
    """Parse the harness's `wall_time.env` (`key=value` lines; integers where the value is one).

    Keys seen: start_epoch, teacher_ready_epoch, ray_ready_epoch, training_start_epoch, end_epoch
    (Unix seconds), *_seconds (durations, s), framework, run_id.
    """
    path = Path(path)
    if not path.is_file():
        raise OpdDataError(f"{path}: missing (the harness's wall-clock file)")
    values = read_env_file(path)
    for key in ("start_epoch", "end_epoch"):
        if not isinstance(values.get(key), int):
            raise OpdDataError(f"{path}: key {key!r} missing or not an integer epoch (seconds)")
    return values


@dataclass(frozen=True)
class Wall:
    """Harness wall-clock marks of one run, Unix seconds."""

    start: int
    end: int
    training_start: int  # framework launch: after any separately started teacher / Ray

    @classmethod
    def from_env(cls, env: dict[str, int | str]) -> Wall:
        ts = env.get("training_start_epoch", env["start_epoch"])
        return cls(start=int(env["start_epoch"]), end=int(env["end_epoch"]), training_start=int(ts))

    @property
    def wall_s(self) -> float:
        """End-to-end seconds: harness start (before teacher/framework init) to the last update."""
        return float(self.end - self.start)

    @property
    def framework_wall_s(self) -> float:
        """Seconds from the framework's launch to its end (excludes a separately booted teacher)."""
        return float(self.end - self.training_start)


@dataclass(frozen=True)
class GpuSample:
    t_epoch: float  # Unix seconds (nvidia-smi prints host-local time; read as UTC, see read_gpu_csv)
    gpu: int
    util_pct: float | None
    mem_used_mib: float | None
    power_w: float


def read_gpu_csv(path: Path | str) -> list[GpuSample]:
    """The harness's 1-s `nvidia-smi` samples, read by bench.telemetry.read_gpu_csv: columns index,
    power_w, optionally utilization_gpu_pct and memory_used_mib, and a time column, either
    `timestamp` (nvidia-smi's own, e.g. opd-frameworks) or `epoch` (Unix seconds, the sampler of
    mopd-frameworks). A `timestamp` carries no zone and is read as UTC, the benchmark host's clock
    (its first sample falls within a second of wall_time.env's start_epoch). A sample without power
    cannot enter the energy integral and is left out; a record that does not parse is an error (the
    harness's file is complete)."""
    path = Path(path)
    if not path.is_file():
        raise OpdDataError(f"{path}: missing (1-s nvidia-smi telemetry)")
    read = read_nvidia_smi_csv(path, "host0")
    found = set(read.columns.values())
    if not {*GPU_CSV_COLUMNS, "t_s"} <= found:
        missing = [name for col, name in GPU_CSV_COLUMNS.items() if col not in found]
        missing += [] if "t_s" in found else ["timestamp|epoch"]
        raise OpdDataError(f"{path}: column(s) {missing} missing; header is {read.header}")
    if read.bad_lines:
        raise OpdDataError(
            f"{path}:{read.bad_lines[0]}: cannot read sample (expected a time, an integer index and numbers)"
        )
    return [
        GpuSample(r["t_s"], r["gpu"], r["util_pct"], r["mem_used_mib"], r["power_w"])
        for r in read.rows
        if r["power_w"] is not None
    ]


def energy_wh(samples: list[GpuSample], window: tuple[float, float] | None = None) -> float:
    """GPU energy in watt-hours: per GPU, the trapezoidal integral of power over consecutive samples,
    summed over GPUs (the benchmark's method; excludes CPU and host). With `window`
    (start, end Unix seconds), only intervals whose both ends fall inside it count."""
    by_gpu: dict[int, list[GpuSample]] = {}
    for s in samples:
        if window is None or window[0] <= s.t_epoch <= window[1]:
            by_gpu.setdefault(s.gpu, []).append(s)
    joules = 0.0
    for series in by_gpu.values():
        series.sort(key=lambda s: s.t_epoch)
        joules += energy_j([s.t_epoch for s in series], [s.power_w for s in series])
    return joules / 3600.0


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def parse_number(cell: str) -> float | None:
    """The first number in a report cell ("**229 s**", "~158 s", "3,619", "85.6%") or None."""
    m = _NUM.search(cell.replace("**", ""))
    return float(m.group(0).replace(",", "")) if m else None


def read_report_tables(path: Path | str) -> dict[str, list[dict[str, str]]]:
    """Markdown tables of a REPORT.md, keyed by the heading above each (later tables under the same
    heading get " (2)", " (3)" appended). Each row maps header -> cell text, emphasis removed."""
    path = Path(path)
    if not path.is_file():
        raise OpdDataError(f"{path}: missing (the benchmark's published report)")
    tables: dict[str, list[dict[str, str]]] = {}
    heading, header, rows = "", None, None
    lines = path.read_text().splitlines() + [""]
    for line in lines:
        s = line.strip()
        if s.startswith("#"):
            heading = s.lstrip("#").strip()
        if s.startswith("|") and s.endswith("|"):
            cells = [c.strip().replace("**", "") for c in s.strip("|").split("|")]
            if header is None:
                header, rows = cells, []
            elif all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
                continue
            else:
                rows.append(dict(zip(header, cells, strict=False)))
            continue
        if header is not None:
            key, k = heading, 2
            while key in tables:
                key, k = f"{heading} ({k})", k + 1
            tables[key] = rows
            header, rows = None, None
    return tables


def report_value(path: Path | str, table: str, row: str, column: str) -> float:
    """The number in one cell of a REPORT.md table: `table` is the heading above it, `row` the first
    cell of the row (case-insensitive), `column` the header."""
    tables = read_report_tables(path)
    if table not in tables:
        raise OpdDataError(f"{path}: no table under heading {table!r}; found {sorted(tables)}")
    for r in tables[table]:
        first = next(iter(r.values()), "")
        if first.lower() == row.lower():
            if column not in r:
                raise OpdDataError(f"{path}: table {table!r} has no column {column!r}; columns {list(r)}")
            value = parse_number(r[column])
            if value is None:
                raise OpdDataError(
                    f"{path}: table {table!r} row {row!r} column {column!r}: no number in {r[column]!r}"
                )
            return value
    raise OpdDataError(f"{path}: table {table!r} has no row {row!r}")
