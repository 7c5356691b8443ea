"""A secret typed into the config reaches no file `bench run` writes: the run directory, and on
Slurm submitit's `.submitit/` folder, where the job's config is pickled (docs/security.md).

A Hugging Face token is planted in `experiment.notes` (an emulated run uses no secret, so the run
is not refused) and the whole results directory is searched byte for byte with `grep -a`:
pickles are binary, but pickled strings are stored as UTF-8.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


def bench_run(results: Path, *overrides: str) -> subprocess.CompletedProcess:
    args = ["run", "experiment=smoke", "framework=verl", "workload.steps=3", f"results_dir={results}"]
    return subprocess.run(
        [sys.executable, "-m", "bench", *args, f"experiment.notes=ask for {TOKEN}", *overrides, "--wait"],
        cwd=results.parent,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def files_holding(root: Path, text: str) -> list[str]:
    """Every file under root (hidden ones included) whose bytes hold `text` (grep -rla)."""
    res = subprocess.run(["grep", "-rla", "--", text, str(root)], capture_output=True, text=True)
    assert res.returncode in (0, 1), res.stderr  # 1: no match; 2: grep itself failed
    return res.stdout.splitlines()


def test_a_local_run_writes_the_secret_nowhere(results: Path):
    res = bench_run(results, "cluster=local")
    assert res.returncode == 0, res.stderr
    assert TOKEN not in res.stdout + res.stderr
    (run,) = (results / "smoke").iterdir()
    assert files_holding(results, TOKEN) == []
    written = sorted(files_holding(results, "ask for <redacted>"))
    assert written == [str(run / "config.resolved.yaml"), str(run / "manifest.json")]


@pytest.mark.slurm
def test_a_slurm_run_pickles_the_redacted_config(testbed, results: Path):
    res = bench_run(results, "cluster=testbed")
    assert res.returncode == 0, res.stderr
    pickles = sorted((results / "smoke" / ".submitit").glob("*_submitted.pkl"))
    assert len(pickles) == 1  # the job's callable and its config, as submitit pickled them
    assert files_holding(results, TOKEN) == []
    assert str(pickles[0]) in files_holding(results, "ask for <redacted>")  # the config is there, redacted
