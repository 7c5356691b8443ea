"""Users' own runs where they live: the real verl fixture's logged values written into a W&B run (the
`wandb` package, offline), TensorBoard event files (TensorBoard's own writer), an MLflow file store
(MLflow itself) and a W&B history table; each ingests to the same steps and phase times as the
console log they came from."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench import stores
from bench.trace import RunPaths, read_steps

REPO = Path(__file__).resolve().parents[2]
STEP_LINE = re.compile(r"step:(\d+) - (.*)$")
DURATIONS = ["step", "step_s", "gen_s", "logprob_s", "compute_s", "sync_s", "response_tokens", "samples"]


def bench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def verl_run(opd_results: Path) -> dict:
    """The verl fixture's per-step values as its console logged them, and its config dump."""
    history = {}
    for line in (opd_results / "verl" / "run.log").read_text(errors="replace").splitlines():
        if m := STEP_LINE.search(line):
            pairs = (kv.rsplit(":", 1) for kv in m.group(2).split(" - "))
            history[int(m.group(1))] = {k: float(v) for k, v in pairs}
    config = yaml.safe_load((opd_results / "verl" / "config.yaml").read_text())
    return {"history": history, "config": config, "logs": opd_results / "verl"}


@pytest.fixture(scope="module")
def console_steps(verl_run, tmp_path_factory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("console") / "run"
    r = bench("ingest", "--framework", "verl", "--logs", str(verl_run["logs"]), "--out", str(out))
    assert r.returncode == 0, r.stderr
    return read_steps(RunPaths(out).steps)


def ingest(logs: Path, out: Path, *extra: str) -> tuple[pd.DataFrame, dict]:
    r = bench("ingest", "--framework", "verl", "--logs", str(logs), "--out", str(out), *extra)
    assert r.returncode == 0, r.stderr
    return read_steps(RunPaths(out).steps), json.loads((out / "manifest.json").read_text())


def same_steps(store: pd.DataFrame, console: pd.DataFrame, rel: float = 1e-9) -> None:
    cols = [c for c in DURATIONS if c in console]
    assert store["step"].tolist() == console["step"].tolist()
    pd.testing.assert_frame_equal(
        store[cols].reset_index(drop=True), console[cols].reset_index(drop=True), check_dtype=False, rtol=rel
    )


def test_a_wandb_offline_run_ingests_like_its_console(verl_run, console_steps, tmp_path):
    wandb = pytest.importorskip("wandb")
    run = wandb.init(project="rl-bench-test", dir=str(tmp_path), mode="offline", config=verl_run["config"])
    for step, values in sorted(verl_run["history"].items()):
        run.log(values, step=step)
    run.finish()
    assert stores.detect(tmp_path) == "wandb"
    steps, manifest = ingest(tmp_path, tmp_path / "run")
    same_steps(steps, console_steps)
    assert manifest["source"]["kind"] == "wandb"
    assert "GPU telemetry: the run logged no W&B system metrics" in manifest["source"]["lacks"]
    # the config the run logged is read: the model path and group size come from it
    assert manifest["inferred"]["group_size"]["value"] == 16


def test_tensorboard_event_files_ingest_like_the_console(verl_run, console_steps, tmp_path):
    from tensorboard.summary import Writer

    writer = Writer(str(tmp_path / "tb"))
    for step, values in sorted(verl_run["history"].items()):
        for key, value in values.items():
            writer.add_scalar(key, value, step=step)
    writer.close()
    steps, manifest = ingest(tmp_path / "tb", tmp_path / "run")
    same_steps(steps, console_steps, rel=1e-6)  # event files hold float32 scalars
    assert manifest["source"]["kind"] == "tensorboard"
    assert any(x.startswith("the run's config") for x in manifest["source"]["lacks"])


def test_an_mlflow_file_store_run_ingests_like_the_console(verl_run, console_steps, tmp_path):
    script = (
        "import json, sys, mlflow\n"
        "data = json.load(sys.stdin)\n"
        f"mlflow.set_tracking_uri({(tmp_path / 'mlruns').as_uri()!r})\n"
        "with mlflow.start_run():\n"
        "    mlflow.log_params({'actor_rollout_ref.rollout.n': 16, 'trainer.n_gpus_per_node': 1})\n"
        "    for step, values in data.items():\n"
        "        mlflow.log_metrics(values, step=int(step))\n"
    )
    pytest.importorskip("mlflow")
    r = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(verl_run["history"]),
        text=True,
        capture_output=True,
        env={**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"},
    )
    assert r.returncode == 0, r.stderr
    steps, manifest = ingest(tmp_path / "mlruns", tmp_path / "run")
    same_steps(steps, console_steps)
    assert manifest["source"]["kind"] == "mlflow"


def test_a_wandb_history_table_ingests_like_the_console(verl_run, console_steps, tmp_path):
    frame = pd.DataFrame([{"_step": s, **v} for s, v in sorted(verl_run["history"].items())])
    frame.to_csv(tmp_path / "history.csv", index=False)
    steps, manifest = ingest(tmp_path / "history.csv", tmp_path / "run")
    same_steps(steps, console_steps)
    assert manifest["source"]["kind"] == "table"


def test_two_wandb_runs_in_one_folder_are_refused_naming_both(tmp_path):
    wandb = pytest.importorskip("wandb")
    for _ in range(2):
        run = wandb.init(project="rl-bench-test", dir=str(tmp_path), mode="offline")
        run.log({"timing_s/step": 1.0}, step=1)
        run.finish()
    r = bench("ingest", "--framework", "verl", "--logs", str(tmp_path), "--out", str(tmp_path / "run"))
    assert r.returncode == 2
    assert re.fullmatch(
        r"error: --logs \S+: 2 W&B runs found \(.*\.wandb, .*\.wandb\); give one of them as --logs\n",
        r.stderr,
    )
    assert not (tmp_path / "run").exists()


def test_a_file_that_is_not_a_wandb_record_file_is_refused(tmp_path):
    bad = tmp_path / "run-x.wandb"
    bad.write_bytes(b"not a record file")
    r = bench("ingest", "--framework", "verl", "--logs", str(bad), "--out", str(tmp_path / "run"))
    assert r.returncode == 2
    assert r.stderr == f"error: {bad}: not a W&B record file (no ':W&B' header); expected run-<id>.wandb\n"
