"""The run directory's writers (bench.rundir, bench.trace.write_manifest): redaction always, the
derived layout written with the config, metrics computed once at finish, and a run whose metrics
fail never called completed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bench import rundir
from bench.config import compose
from bench.emulator.run import emulate
from bench.errors import UsageError
from bench.resolve import Resolved
from bench.trace import RunPaths, write_manifest


def _manifest(paths: RunPaths, **extra) -> dict:
    return {"experiment": "x", "run_id": paths.root.name, "framework": "verl", "framework_version": "0",
            "mode": "emulated", "status": "running", **extra}  # fmt: skip


def test_every_manifest_write_redacts_the_config(tmp_path: Path):
    paths = RunPaths(tmp_path / "run").make()
    write_manifest(
        paths, _manifest(paths, config={"framework": {"native": {"hf_token": "hf_abc", "lr": 1e-6}}})
    )
    written = json.loads(paths.manifest.read_text())
    assert written["config"]["framework"]["native"] == {"hf_token": "<redacted>", "lr": 1e-6}
    assert "hf_abc" not in paths.manifest.read_text()


def test_emulated_run_writes_its_resolved_layout_and_metrics_once(tmp_path: Path):
    cfg = compose(["experiment=smoke", "framework=verl", "emulator.steps=3"])
    paths = emulate(cfg, tmp_path / "run")
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "completed"
    assert manifest["resolved"] == Resolved.from_config(cfg).to_dict()
    # the same `inferred` block an ingested run carries, each value sourced from the config
    assert manifest["inferred"]["gpus"] == {
        "trainer": {"value": 8, "source": "config: experiment.trainer_gpus"},
        "rollout": {"value": 8, "source": "config: experiment.generator_gpus"},
    }
    assert (manifest["inferred"]["model_arch"]["value"], manifest["inferred"]["hardware"]["value"]) == (
        "qwen3_8b",
        "h100_sxm",
    )
    on_disk = yaml.safe_load(paths.resolved_config.read_text())
    assert on_disk["resolved"]["engines"] == 8 and on_disk["experiment"]["name"] == "smoke"
    assert json.loads(paths.metrics.read_text())["status"] == "completed"


def test_a_run_whose_metrics_fail_is_partial_with_the_error(tmp_path: Path):
    paths = RunPaths(tmp_path / "run").make()
    write_manifest(paths, _manifest(paths))
    pq.write_table(pa.table({"not_a_step_column": [1, 2]}), paths.steps)  # 2 rows, off-contract
    assert rundir.finish(paths, ok=True) == "partial"
    m = json.loads(paths.manifest.read_text())
    assert m["status"] == "partial" and m["reason"].startswith(
        "metrics.json could not be computed: TraceError"
    )
    assert not paths.metrics.exists() and (paths.logs / "metrics-error.txt").is_file()


def test_a_run_that_traced_nothing_failed(tmp_path: Path):
    paths = RunPaths(tmp_path / "run").make()
    write_manifest(paths, _manifest(paths, dispatch={"state": "RUNNING"}))
    assert rundir.finish(paths, ok=False, reason="boom", exit_state="FAILED") == "failed"
    d = json.loads(paths.manifest.read_text())["dispatch"]
    assert (d["state"], d["reason"]) == ("FAILED", "boom") and d["ended_at"]


@pytest.mark.parametrize("name", ["../../x", "", "..", "/tmp/elsewhere", "smoke/../.."])
def test_a_run_directory_is_never_allocated_outside_results(tmp_path: Path, name: str):
    results = tmp_path / "deep" / "results"
    with pytest.raises(UsageError) as e:
        rundir.allocate(results, name, "verl", {})
    assert str(e.value) == (
        f"experiment.name={name!r}: its runs would land in {results / name}, outside {results}/<experiment>/; "
        "expected one folder name (not empty, no '/' or '..')"
    )
    assert list(tmp_path.rglob("*")) == []  # nothing created, not even results/


def test_a_failure_inside_a_run_marks_it_ended_never_left_running(tmp_path: Path):
    paths = RunPaths(tmp_path / "run").make()
    write_manifest(paths, _manifest(paths))
    with pytest.raises(OSError), rundir.ends_if_failed(paths):
        raise OSError(28, "No space left on device")
    m = json.loads(paths.manifest.read_text())
    assert (m["status"], m["reason"]) == ("failed", "OSError: [Errno 28] No space left on device")
    with pytest.raises(KeyboardInterrupt), rundir.ends_if_failed(paths := RunPaths(tmp_path / "run2").make()):
        write_manifest(paths, _manifest(paths))
        raise KeyboardInterrupt
    m = json.loads(paths.manifest.read_text())
    assert (m["status"], m["reason"]) == ("cancelled", "cancelled: SIGINT (Ctrl-C)")
