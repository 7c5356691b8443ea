"""Bad input to `python -m bench ingest`: one line naming the problem and the fix, exit 2, nothing
written or overwritten (issue 11, section 2). Run through the real CLI in a subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", "ingest", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _errors(p: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in p.stderr
    return [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]


def test_missing_logs(tmp_path):
    p = _cli("--framework", "verl", "--logs", str(tmp_path / "nope"), "--out", str(tmp_path / "run"))
    assert p.returncode == 2
    assert _errors(p) == [f"error: --logs {tmp_path / 'nope'}: no such file or directory"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("content", [None, b""])
def test_empty_logs_write_no_run_directory(tmp_path, content):
    logs = tmp_path / "logs"
    logs.mkdir()
    if content is not None:
        (logs / "run.log").write_bytes(content)
    p = _cli("--framework", "slime", "--logs", str(logs), "--out", str(tmp_path / "run"))
    assert p.returncode == 2
    assert _errors(p) == [f"error: --logs {logs}: empty (no file with any content); nothing to ingest"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("framework", "logs", "other"),
    [("verl", "prime", "prime_rl"), ("prime_rl", "verl", "verl"), ("verl", "miles", "slime")],
)
def test_another_frameworks_logs_name_the_right_flag(tmp_path, opd_results, framework, logs, other):
    p = _cli("--framework", framework, "--logs", str(opd_results / logs), "--out", str(tmp_path / "run"))
    assert p.returncode == 2
    (line,) = _errors(p)
    shown = other.replace("_", "-")
    assert line.endswith(f"these look like {shown} logs: `--framework {other}`")
    assert not (tmp_path / "run").exists()


def test_existing_run_directory_is_never_overwritten(tmp_path, opd_results):
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text('{"kept": true}')
    p = _cli("--framework", "verl", "--logs", str(opd_results / "verl"), "--out", str(out))
    assert p.returncode == 2
    assert _errors(p) == [
        f"error: --out {out}: already exists (a run directory); runs are never overwritten, choose a new --out"
    ]
    assert (out / "manifest.json").read_text() == '{"kept": true}' and sorted(out.iterdir()) == [
        out / "manifest.json"
    ]


def test_unknown_framework_lists_the_known_ones(tmp_path, opd_results):
    p = _cli("--framework", "verll", "--logs", str(opd_results / "verl"), "--out", str(tmp_path / "run"))
    assert p.returncode == 2
    assert _errors(p) == ["error: framework 'verll' not found; choose one of prime_rl, slime, verl"]


def test_given_values_that_contradict_the_logs_are_refused_naming_both(tmp_path, opd_results):
    """The new user's mistake of issue 13: experiment=smoke (Qwen3-8B, 8 + 8 GPUs) on the 2 x H100
    Qwen3-0.6B run is refused, every contradiction named with the logged value and its line."""
    verl = ("--framework", "verl", "--logs", str(opd_results / "verl"), "--out", str(tmp_path / "run"))
    p = _cli(*verl, "experiment=smoke")
    assert p.returncode == 2
    errors = _errors(p)
    assert "error: workload.prompts_per_step=64 (given) contradicts the logs: 8 (config.yaml:467)" in errors
    assert "error: experiment.trainer_gpus=8 (given) contradicts the logs: 1 (config.yaml:905)" in errors
    assert any(
        e.startswith("error: model=qwen3_8b (given) contradicts the logs: qwen3_0_6b (") for e in errors
    )
    assert not (tmp_path / "run").exists()
    p = _cli(*verl, "workload.group_size=8")
    assert _errors(p) == ["error: workload.group_size=8 (given) contradicts the logs: 16 (config.yaml:295)"]


def test_a_run_whose_metrics_fail_is_partial_with_the_error(tmp_path, opd_results, monkeypatch):
    import bench.metrics
    from bench.ingest import main
    from bench.trace import RunPaths, read_manifest

    def broken(run_dir):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(bench.metrics, "write_metrics", broken)
    out = tmp_path / "run"
    assert main(["--framework", "verl", "--logs", str(opd_results / "verl"), "--out", str(out)]) == 1
    m = read_manifest(RunPaths(out))
    assert m["status"] == "partial"
    assert m["failure"] == {
        "kind": "MetricsError",
        "message": "ZeroDivisionError: float division by zero",
        "source": None,
        "phase": "metrics",
    }


def test_hardware_the_logs_contradict_is_refused_naming_both(tmp_path, opd_results, capsys):
    """verl's perf/max_memory_allocated_gb of 185 GB cannot be an H200 (141 GB HBM): refused in one
    line naming the given card, the logged value and its step, and the cards the suite knows."""
    from bench.ingest import main as ingest

    logs = tmp_path / "logs"
    shutil.copytree(opd_results / "verl", logs)
    text = (logs / "run.log").read_text()
    (logs / "run.log").write_text(
        text.replace(
            "perf/max_memory_allocated_gb:12.217142581939697", "perf/max_memory_allocated_gb:185.0", 1
        )
    )
    (logs / "gpu.csv").unlink()  # its device names would name the H100 first
    out = tmp_path / "run"
    assert ingest(["--framework", "verl", "--logs", str(logs), "--out", str(out), "hardware=h200"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: hardware=h200 (given) contradicts the logs: perf/max_memory_allocated_gb 185 at step 2 "
        "exceeds its 141 GB HBM; device memory total 85 GB (run.log:905) is not its 141 GB HBM; "
        "pass the GPU the run used (one of b200, gb300, h100_sxm, h20, h200)"
    ]
    assert not out.exists()


def test_hardware_given_once_is_kept_for_every_later_command(tmp_path, opd_results):
    """hardware= given at ingest is the manifest's, and calibrate / predict / plan compose it."""
    from bench import run_setup
    from bench.ingest import main as ingest
    from bench.trace import RunPaths, read_manifest

    logs = tmp_path / "logs"
    shutil.copytree(opd_results / "verl", logs)
    (logs / "gpu.csv").unlink()
    out = tmp_path / "run"
    assert ingest(["--framework", "verl", "--logs", str(logs), "--out", str(out), "hardware=h100_sxm"]) == 0
    manifest = read_manifest(RunPaths(out))
    assert manifest["inferred"]["hardware"] == {"value": "h100_sxm", "source": "given"}
    cfg, known = run_setup.compose_setup(manifest, [])
    assert known["hardware"] == "h100_sxm" and cfg.hardware.name == "H100-SXM"


def test_a_device_name_in_the_logs_names_the_hardware_and_its_contradictions_are_findings(
    tmp_path, opd_results
):
    """No telemetry names the GPU, but a log line does (torch's device print, appended): that names
    the hardware; the run's own device total (79.18 GiB, run.log:905) contradicts an H200, which
    ingest keeps as a finding (a warning), since nobody gave the value."""
    from bench.ingest import main as ingest
    from bench.trace import RunPaths, read_manifest

    logs = tmp_path / "logs"
    shutil.copytree(opd_results / "verl", logs)
    (logs / "gpu.csv").unlink()
    with open(logs / "run.log", "a") as f:
        f.write("(WorkerDict pid=42351) device: cuda:0 (NVIDIA H200)\n")
    n = (logs / "run.log").read_text().count("\n")
    out = tmp_path / "run"
    assert ingest(["--framework", "verl", "--logs", str(logs), "--out", str(out)]) == 0
    m = read_manifest(RunPaths(out))
    assert m["inferred"]["hardware"] == {"value": "h200", "source": f"run.log:{n}: device 'NVIDIA H200'"}
    assert (
        f"hardware h200 (run.log:{n}: device 'NVIDIA H200') contradicts the logs: device memory total 85 GB "
        "(run.log:905) is not its 141 GB HBM"
    ) in m["warnings"]


def test_telemetry_memory_total_contradicts_a_given_gpu(tmp_path, opd_results, capsys):
    """verl's real run with its nvidia-smi CSV (memory_total_mib 81559: an 80 GB card) given as a
    B200 (180 GB HBM): refused naming the CSV's line."""
    from bench.ingest import main as ingest

    out = tmp_path / "run"
    assert (
        ingest(
            ["--framework", "verl", "--logs", str(opd_results / "verl"), "--out", str(out), "hardware=b200"]
        )
        == 2
    )
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "device memory total 86 GB (gpu.csv:2) is not its 180 GB HBM" in err[0]
    assert err[0].startswith("error: hardware=b200 (given) contradicts the logs: ") and not out.exists()
