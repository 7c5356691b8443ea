"""Readers for SemiAnalysis's opd-benchmark result folders (github.com/SemiAnalysisAI/opd-benchmark).

A benchmark folder (`benchmarks/<name>/` in a checkout, or `<name>/` in the CI fixture copy) holds
`REPORT.md` (the published tables) and `results/<run>/` per framework run, each with the harness's
`wall_time.env` (start/end epochs) and `gpu.csv` (1-s `nvidia-smi` samples) beside the framework's
native logs. The native logs are parsed by the suite's runners; this module reads only the
harness files and the report, so it works on every folder of that layout without code changes.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.telemetry import energy_j
from bench.trace import read_env_file

GPU_CSV_COLUMNS = ("index", "power_w")  # plus a time column: `timestamp` or `epoch`
GPU_TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"  # nvidia-smi --format=csv timestamp


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


def _num(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # nvidia-smi writes "[N/A]" or "[Not Supported]"


def read_gpu_csv(path: Path | str) -> list[GpuSample]:
    """Read 1-s `nvidia-smi` samples: columns index, power_w, optionally utilization_gpu_pct and
    memory_used_mib, and a time column, either `timestamp` (nvidia-smi's own, e.g. opd-frameworks)
    or `epoch` (Unix seconds, the sampler of mopd-frameworks). A `timestamp` carries no zone and is
    read as UTC, the benchmark host's clock (its first sample falls within a second of
    wall_time.env's start_epoch)."""
    path = Path(path)
    if not path.is_file():
        raise OpdDataError(f"{path}: missing (1-s nvidia-smi telemetry)")
    samples: list[GpuSample] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh, skipinitialspace=True)
        header = reader.fieldnames or []
        missing = [c for c in GPU_CSV_COLUMNS if c not in header]
        time_col = next((c for c in ("timestamp", "epoch") if c in header), None)
        if missing or time_col is None:
            raise OpdDataError(
                f"{path}: column(s) {missing + ([] if time_col else ['timestamp|epoch'])} missing; header is {header}"
            )
        for n, row in enumerate(reader, 2):
            try:
                if time_col == "epoch":
                    t_epoch = float(row["epoch"])
                else:
                    t_epoch = (
                        datetime.strptime(row["timestamp"].strip(), GPU_TIME_FORMAT)
                        .replace(tzinfo=UTC)
                        .timestamp()
                    )
                power = _num(row["power_w"])
                if power is None:
                    continue  # a sample without power cannot enter the energy integral
                samples.append(
                    GpuSample(
                        t_epoch=t_epoch,
                        gpu=int(row["index"]),
                        util_pct=_num(row.get("utilization_gpu_pct") or ""),
                        mem_used_mib=_num(row.get("memory_used_mib") or ""),
                        power_w=power,
                    )
                )
            except (ValueError, TypeError) as e:
                raise OpdDataError(f"{path}:{n}: cannot read sample {row}: {e}") from e
    return samples


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
