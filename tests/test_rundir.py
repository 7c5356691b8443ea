"""The run directory's writers (bench.rundir, bench.trace.write_manifest): redaction always, the
derived layout written with the config, metrics computed once at finish, and a run whose metrics
fail never called completed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from bench import rundir
from bench.config import compose
from bench.emulator.run import emulate
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
    assert (manifest["inferred"]["model"]["value"], manifest["inferred"]["hardware"]["value"]) == (
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
