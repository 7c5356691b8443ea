"""The opd-benchmark harness readers on the real files: wall_time.env, gpu.csv energy, REPORT.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reproduce import opd


def test_wall_env_prime_has_teacher_boot_outside_framework_window(opd_results: Path):
    env = opd.read_wall_env(opd_results / "prime" / "wall_time.env")
    assert env["framework"] == "prime-rl"
    assert env["start_epoch"] == 1786108894
    wall = opd.Wall.from_env(env)
    assert wall.wall_s == 276.0
    assert wall.framework_wall_s == 215.0  # 61 s of teacher boot excluded
    assert wall.training_start - wall.start == env["teacher_start_seconds"] == 61


def test_wall_env_verl_without_training_start_uses_start(tmp_path: Path):
    p = tmp_path / "wall_time.env"
    p.write_text("framework=verl\nstart_epoch=100\nend_epoch=329\n")
    wall = opd.Wall.from_env(opd.read_wall_env(p))
    assert (wall.wall_s, wall.framework_wall_s) == (229.0, 229.0)


def test_wall_env_bad_input_names_file_and_key(tmp_path: Path):
    p = tmp_path / "wall_time.env"
    p.write_text("start_epoch=abc\nend_epoch=5\n")
    with pytest.raises(opd.OpdDataError, match=r"wall_time.env: key 'start_epoch'"):
        opd.read_wall_env(p)
    p.write_text("start_epoch 1\n")  # not key=value: the line is skipped, so the key is missing
    with pytest.raises(opd.OpdDataError, match=r"wall_time.env: key 'start_epoch' missing"):
        opd.read_wall_env(p)
    with pytest.raises(opd.OpdDataError, match="missing"):
        opd.read_wall_env(tmp_path / "nope.env")


@pytest.mark.parametrize(
    ("run", "samples", "wh"),
    # 1-s samples for 2 GPUs; energy as the benchmark's analysis integrates it (summary.json:
    # prime 18.687307, verl 14.898801, miles 22.410497 Wh; REPORT.md rounds to 18.7 / 14.9 / 22.4)
    [("prime", 530, 18.687307), ("verl", 442, 14.898801), ("miles", 646, 22.410497)],
)
def test_gpu_energy_matches_the_benchmark(opd_results: Path, run: str, samples: int, wh: float):
    s = opd.read_gpu_csv(opd_results / run / "gpu.csv")
    assert len(s) == samples
    assert {x.gpu for x in s} == {0, 1}
    assert opd.energy_wh(s) == pytest.approx(wh, abs=1e-5)


def test_gpu_energy_window_and_time_base(opd_results: Path):
    wall = opd.Wall.from_env(opd.read_wall_env(opd_results / "prime" / "wall_time.env"))
    s = opd.read_gpu_csv(opd_results / "prime" / "gpu.csv")
    # timestamps read as UTC land within a second of the harness start: same clock
    assert 0 <= s[0].t_epoch - wall.start < 1
    framework_only = opd.energy_wh(s, (wall.training_start, wall.end))
    assert framework_only == pytest.approx(15.641247, abs=1e-5)
    assert framework_only < opd.energy_wh(s)


def test_gpu_energy_trapezoid_exact(tmp_path: Path):
    p = tmp_path / "gpu.csv"
    p.write_text(
        "timestamp,index,utilization_gpu_pct,memory_used_mib,memory_total_mib,power_w,temperature_c\n"
        "2026/08/07 13:00:00.000, 0, 0, 0, 81559, 100.0, 30\n"
        "2026/08/07 13:00:00.000, 1, 0, 0, 81559, [N/A], 30\n"
        "2026/08/07 13:00:36.000, 0, 0, 0, 81559, 300.0, 30\n"
    )
    # GPU 0: 36 s x (100 + 300) / 2 W = 7200 J = 2 Wh; GPU 1 has no power sample
    assert opd.energy_wh(opd.read_gpu_csv(p)) == pytest.approx(2.0)


def test_gpu_csv_missing_column_is_named(tmp_path: Path):
    p = tmp_path / "gpu.csv"
    p.write_text("timestamp,index\n")
    with pytest.raises(opd.OpdDataError, match=r"column\(s\) \['power_w'\] missing"):
        opd.read_gpu_csv(p)
    p.write_text("index,power_w\n")
    with pytest.raises(opd.OpdDataError, match=r"column\(s\) \['timestamp\|epoch'\] missing"):
        opd.read_gpu_csv(p)


def test_gpu_csv_record_that_does_not_parse_is_named_by_line(tmp_path: Path):
    """The harness's file is complete: a cut-off record is an error, not a silently lost sample."""
    p = tmp_path / "gpu.csv"
    p.write_text(
        "timestamp,index,utilization_gpu_pct,memory_used_mib,memory_total_mib,power_w,temperature_c\n"
        "2026/08/07 13:00:00.000, 0, 0, 0, 81559, 100.0, 30\n"
        "2026/08/07 13:00:0"
    )
    with pytest.raises(opd.OpdDataError, match=r"gpu.csv:3: cannot read sample"):
        opd.read_gpu_csv(p)


def test_gpu_csv_epoch_layout(tmp_path: Path):
    """The mopd-frameworks sampler writes Unix seconds in `epoch` (and uuid, name columns)."""
    p = tmp_path / "gpu.csv"
    p.write_text(
        "epoch,index,uuid,name,utilization_gpu_pct,memory_used_mib,memory_total_mib,power_w\n"
        "1786114848,0,GPU-a,NVIDIA H100 80GB HBM3,0,0,81559,71.19\n"
        "1786114848,1,GPU-b,NVIDIA H100 80GB HBM3,0,0,81559,69.43\n"
        "1786114849,0,GPU-a,NVIDIA H100 80GB HBM3,0,0,81559,71.25\n"
        "1786114849,1,GPU-b,NVIDIA H100 80GB HBM3,0,0,81559,69.45\n"
    )
    s = opd.read_gpu_csv(p)
    assert [(x.t_epoch, x.gpu) for x in s] == [
        (1786114848.0, 0),
        (1786114848.0, 1),
        (1786114849.0, 0),
        (1786114849.0, 1),
    ]
    # 1 s x ((71.19 + 71.25) / 2 + (69.43 + 69.45) / 2) W / 3600
    assert opd.energy_wh(s) == pytest.approx((71.22 + 69.44) / 3600)


def test_report_table_cells(opd_results: Path):
    report = opd_results.parent / "REPORT.md"
    tables = opd.read_report_tables(report)
    assert list(tables) == ["Comparable results", "Did the policy transfer?"]
    verl = tables["Comparable results"][1]
    assert verl["Framework"] == "verl" and verl["End-to-end"] == "229 s"  # bold removed
    assert opd.report_value(report, "Comparable results", "miles", "Native steady step") == 11.49
    assert opd.report_value(report, "Comparable results", "verl", "First update") == 158.0  # "~158 s"
    with pytest.raises(opd.OpdDataError, match="no row 'NeMo-RL'"):
        opd.report_value(report, "Comparable results", "NeMo-RL", "End-to-end")
    with pytest.raises(opd.OpdDataError, match="no column 'Cost'"):
        opd.report_value(report, "Comparable results", "verl", "Cost")


@pytest.mark.parametrize(
    ("cell", "value"),
    [("**229 s**", 229.0), ("~158 s", 158.0), ("3,619", 3619.0), ("85.6%", 85.6), ("-", None)],
)
def test_parse_number(cell: str, value: float | None):
    assert opd.parse_number(cell) == value


def test_resolve_benchmark_accepts_checkout_and_fixture_layouts(tmp_path: Path, opd_results: Path):
    fixture_root = opd_results.parents[1]  # .../opd-benchmark with opd-frameworks/ inside
    assert opd.resolve_benchmark(fixture_root, "opd-frameworks") == opd_results.parent
    (tmp_path / "benchmarks" / "mopd-frameworks" / "results").mkdir(parents=True)
    assert opd.resolve_benchmark(tmp_path, "mopd-frameworks") == tmp_path / "benchmarks" / "mopd-frameworks"
    with pytest.raises(opd.OpdDataError, match="benchmark 'opd-frameworks' not found"):
        opd.resolve_benchmark(tmp_path, "opd-frameworks")
