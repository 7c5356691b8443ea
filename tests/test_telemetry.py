"""bench.telemetry.read_gpu_csv, the suite's one reader of nvidia-smi CSV telemetry: every form
(the opd-benchmark harness's gpu.csv, nvidia-smi's own header with units, our sampler's noheader
files) in, GPU_SCHEMA rows out (t_s, node, gpu, util_pct, mem_used_mib, power_w)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from bench import telemetry


def test_the_harness_gpu_csv_becomes_rows_from_the_run_start(opd_results: Path):
    """prime's gpu.csv: 530 samples of GPUs 0 and 1; wall_time.env start_epoch 1786108894 is
    2026/08/07 13:21:34 UTC, the first sample is 0.555 s later (timestamps read as UTC)."""
    read = telemetry.read_gpu_csv(opd_results / "prime" / "gpu.csv", "host0", 1786108894)
    assert read.is_telemetry and read.bad_lines == [] and read.names == []
    assert len(read.rows) == 530
    assert read.rows[0] == {
        "t_s": 0.555,
        "node": "host0",
        "gpu": 0,
        "util_pct": 0.0,
        "mem_used_mib": 0.0,
        "power_w": 70.69,
    }
    peaks = {g: max(r["mem_used_mib"] for r in read.rows if r["gpu"] == g) for g in (0, 1)}
    assert peaks == {0: 66229.0, 1: 13403.0}
    # energy: the benchmark's summary.json gives 18.687307 Wh for this run
    joules = sum(
        telemetry.energy_j([r["t_s"] for r in rs], [r["power_w"] for r in rs])
        for rs in ([r for r in read.rows if r["gpu"] == g] for g in (0, 1))
    )
    assert joules / 3600 == pytest.approx(18.687307, abs=1e-5)


def test_nvidia_smis_own_header_with_units_and_gpu_names(tmp_path: Path):
    p = tmp_path / "telemetry.csv"  # nvidia-smi --query-gpu=timestamp,name,index,... --format=csv
    p.write_text(
        "timestamp, name, index, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
        "2026/11/22 01:00:00.500, NVIDIA H100 80GB HBM3, 0, 97 %, 71234 MiB, 612.48 W\n"
        "2026/11/22 01:00:00.500, NVIDIA H100 80GB HBM3, 1, 0 %, 0 MiB, [Not Supported]\n"
    )
    t0 = dt.datetime(2026, 11, 22, 1, 0, 0, tzinfo=dt.UTC).timestamp()
    read = telemetry.read_gpu_csv(p, "n7", t0)
    assert read.names == ["NVIDIA H100 80GB HBM3"]
    assert read.rows == [
        {"t_s": 0.5, "node": "n7", "gpu": 0, "util_pct": 97.0, "mem_used_mib": 71234.0, "power_w": 612.48},
        {"t_s": 0.5, "node": "n7", "gpu": 1, "util_pct": 0.0, "mem_used_mib": 0.0, "power_w": None},
    ]


def test_our_samplers_noheader_file_in_the_nodes_local_time(tmp_path: Path):
    """logs/gpu-<node>.csv as bench.telemetry's sampler writes it: QUERY columns, no header, no units;
    a crash leaves a zero-filled block and the stopped sampler a cut-off last line (lines 3 and 5)."""
    p = tmp_path / "gpu-n1.csv"
    p.write_bytes(
        b"2026/11/22 01:00:00.500, 0, 97, 71234, 612.48\n"
        b"2026/11/22 01:00:00.500, 1, 0, 0, [N/A]\n"
        b"\0\0\0\0\n"
        b"2026/11/22 01:00:01.502, 0, 88, 71300, 598.10\n"
        b"2026/11/22 01:00:02.50"
    )
    t0 = dt.datetime(2026, 11, 22, 1, 0, 0).timestamp()  # the run's start on this machine's clock
    read = telemetry.read_gpu_csv(p, "n1", t0, local_time=True, header=telemetry.QUERY.split(","))
    assert [(r["t_s"], r["gpu"], r["power_w"]) for r in read.rows] == [
        (0.5, 0, 612.48),
        (0.5, 1, None),
        (1.502, 0, 598.1),
    ]
    assert read.bad_lines == [5]
    # the same text in memory reads the same (parse_nvidia_smi)
    assert telemetry.parse_nvidia_smi(p.read_text().replace("\0", ""), "n1", t0) == read.rows


def test_the_mopd_samplers_epoch_column_is_unix_seconds(tmp_path: Path):
    p = tmp_path / "gpu.csv"
    p.write_text(
        "epoch,index,uuid,name,utilization_gpu_pct,memory_used_mib,memory_total_mib,power_w\n"
        "1786114848,0,GPU-a,NVIDIA H100 80GB HBM3,3,1024,81559,71.19\n"
        "1786114849,0,GPU-a,NVIDIA H100 80GB HBM3,0,1024,81559,71.25\n"
    )
    read = telemetry.read_gpu_csv(p, "host0", 1786114848)
    assert [(r["t_s"], r["util_pct"], r["mem_used_mib"]) for r in read.rows] == [
        (0.0, 3.0, 1024.0),
        (1.0, 0.0, 1024.0),
    ]


def test_a_csv_that_is_not_telemetry_gives_no_rows(opd_results: Path):
    """The harness's step_metrics.csv has no time and index columns."""
    read = telemetry.read_gpu_csv(opd_results / "step_metrics.csv", "x")
    assert not read.is_telemetry and read.rows == []
    assert read.header[:2] == ["framework", "step"]


def test_with_both_time_columns_the_first_is_the_time(tmp_path: Path):
    p = tmp_path / "gpu.csv"
    p.write_text("timestamp,epoch,index,power_w\n2026/08/07 13:21:34.555,1786108894,0,70.69\n")
    assert telemetry.read_gpu_csv(p, "host0", 1786108894).rows[0]["t_s"] == 0.555
