"""`bench probe cluster=<site>`: one Slurm job per node type through the suite's submitit path, end to
end on the slurm-wlm testbed (a real sbatch; the job runs the CPU path, tiny shapes), and every
refusal of bad input before anything is submitted: those run `bench` with a stand-in `sbatch` first
on PATH that records any call, so "nothing submitted" is seen, not assumed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import probe_cluster
from bench.config import compose

REPO = Path(__file__).resolve().parents[1]
SECTIONS = {"env", "matmul", "hbm", "host", "alloc", "filesystem", "decode", "prefill", "train", "nccl"}


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("PyTorch is not installed: CI installs '.[probe]'")
        pytest.skip("PyTorch is not installed: pip install -e '.[probe]'")


@pytest.fixture
def no_submit(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """(env, marker): PATH starts with an `sbatch` that writes `marker` and fails, so a refusal that
    came too late (after a submission) leaves the marker."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "sbatch-called"
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\necho \"$@\" >> '{marker}'\nexit 1\n")
    sbatch.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, marker


def refused(r: subprocess.CompletedProcess, marker: Path, line: str) -> None:
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"error: {line}\n")
    assert not marker.exists(), "sbatch was called before the refusal"


@pytest.mark.slurm
def test_one_job_per_node_type_writes_its_probe_json(testbed, tmp_path, no_submit):
    need_torch()
    out = tmp_path / "probes"
    r = bench("probe", "cluster=testbed", "model=qwen3_0_6b", "--quick", "--out", str(out))
    assert r.returncode == 0, r.stderr
    kind = out / "testbed-h100"  # the testbed's node type: partition testbed, GRES h100
    line = re.fullmatch(
        rf"testbed-h100: {re.escape(str(kind / 'probe.json'))}: 11 sections on cpu "
        rf"\(Slurm job (\d+), log {re.escape(str(kind / 'job.log'))}\)\n",
        r.stdout,
    )
    assert line, r.stdout
    job_id = line.group(1)
    assert f"testbed-h100: submitted Slurm job {job_id} (cluster=testbed, partition testbed" in r.stderr
    # the measurement of the local probe, run inside the job on a testbed node
    probe = json.loads((kind / "probe.json").read_text())
    sections = probe["sections"]
    assert probe["device"] == "cpu" and probe["quick"] is True and probe["models"] == ["qwen3_0_6b"]
    assert set(sections) == SECTIONS | {"telemetry"}
    assert not [name for name, s in sections.items() if "error" in s]
    assert probe["slurm"]["job_id"] == job_id and probe["slurm"]["job_partition"] == "testbed"
    assert probe["slurm"]["job_nodelist"] in testbed.node_names
    assert [(r["batch"], r["context"]) for r in sections["decode"]["qwen3_0_6b"]["rows"]] == [
        (1, 64),
        (4, 64),
        (16, 128),
    ]
    assert "Job completed successfully" in (kind / "job.log").read_text()
    # submitted as `bench run` submits (bench.submit.sbatch_params): one whole node with its GPUs
    script = (kind / "submitit" / f"{job_id}_submission.sh").read_text()
    for header in (
        "--nodes=1",
        "--exclusive",
        "--gpus-per-node=h100:8",
        "--partition=testbed",
        "--job-name=bench-probe-testbed-h100",
        "--signal=B:USR2@90",
    ):
        assert f"#SBATCH {header}\n" in script, header
    assert f"exec {sys.executable} -u -m submitit.core._submit {kind / 'submitit'}\n" in script
    # the file fits and checks like a local probe's
    profile = tmp_path / "cpu.yaml"
    assert bench("probe", "fit", str(kind / "probe.json"), "--out", str(profile)).returncode == 0
    check = bench("probe", "check", str(kind / "probe.json"), "--profile", str(profile), "--json")
    assert len(json.loads(check.stdout)["rows"]) == 3 + 2 + 2
    # the same --out again: refused before any submission
    env, marker = no_submit
    again = bench("probe", "cluster=testbed", "model=qwen3_0_6b", "--out", str(out), env=env)
    refused(again, marker, f"--out {out}: already holds testbed-h100/probe.json; choose a new directory")


def test_an_unknown_site_is_refused(tmp_path, no_submit):
    env, marker = no_submit
    r = bench("probe", "cluster=nosuch", "--out", str(tmp_path / "p"), env=env)
    refused(r, marker, "cluster 'nosuch' not found; choose one of example_site, local, testbed")
    assert not (tmp_path / "p").exists()


def test_a_site_without_slurm_is_refused(tmp_path, no_submit):
    env, marker = no_submit
    r = bench("probe", "cluster=local", "--out", str(tmp_path / "p"), env=env)
    refused(
        r,
        marker,
        "cluster=local: executor local has no Slurm to submit to; run `python -m bench probe` without "
        "cluster= on the node itself, or choose a site with executor: slurm",
    )
    assert not (tmp_path / "p").exists()


def test_an_out_holding_results_is_refused(tmp_path, no_submit):
    env, marker = no_submit
    out = tmp_path / "p"
    (out / "testbed-h100").mkdir(parents=True)
    (out / "testbed-h100" / "probe.json").write_text("{}")
    r = bench("probe", "cluster=testbed", "--out", str(out), env=env)
    refused(r, marker, f"--out {out}: already holds testbed-h100/probe.json; choose a new directory")
    other = tmp_path / "q"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    r = bench("probe", "cluster=testbed", "--out", str(other), env=env)
    refused(
        r,
        marker,
        f"--out {other}: already exists (not empty, holds files bench probe did not write); "
        "outputs are never overwritten, choose a new --out",
    )


def test_an_out_that_cannot_go_into_a_sbatch_line_is_refused(tmp_path, no_submit):
    env, marker = no_submit
    out = tmp_path / "a\nb"
    r = bench("probe", "cluster=testbed", "--out", str(out), env=env)
    refused(
        r,
        marker,
        f"--out={str(out)!r}: contains a line break or control character, which a #SBATCH line "
        "cannot hold; remove it",
    )


def test_an_unknown_model_is_refused_before_submission(tmp_path, no_submit):
    env, marker = no_submit
    r = bench("probe", "cluster=testbed", "model=nosuch", "--out", str(tmp_path / "p"), env=env)
    assert r.returncode == 2 and r.stderr.startswith("error: model=nosuch: no conf/model/nosuch.yaml")
    assert not marker.exists() and not (tmp_path / "p").exists()


def test_no_sbatch_on_this_machine_is_refused(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # the interpreter is called by its full path
    r = bench("probe", "cluster=testbed", "--out", str(tmp_path / "p"), env=env)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (
        "error: cluster=testbed: sbatch not found on this machine; run `bench probe cluster=...` where "
        "Slurm's commands are (the site's login node)\n"
    )


def test_a_node_type_is_partition_gpu_type_and_constraint():
    cluster = compose(["cluster=example_site"]).cluster
    assert probe_cluster.node_type_name(cluster) == "gpu-h100"
    odd = SimpleNamespace(name="site", partition="a,b", gpu_type="h200", constraint="ib&nvl")
    assert probe_cluster.node_type_name(odd) == "a_b-h200-ib_nvl"
    bare = SimpleNamespace(name="mysite", partition="", gpu_type="", constraint="")
    assert probe_cluster.node_type_name(bare) == "mysite"
    # one site named twice is one node type, one job
    assert [k.name for k in probe_cluster.node_types(["testbed,testbed"])] == ["testbed-h100"]


def test_a_job_slurm_no_longer_knows_ends_the_wait(tmp_path):
    """A job that left no result and that Slurm does not know is reported, not waited on forever."""
    job = SimpleNamespace(job_id="999999999", paths=SimpleNamespace(result_pickle=tmp_path / "none.pkl"))
    env = {**os.environ, "PATH": str(tmp_path)}  # no squeue, scontrol or sacct answers
    assert probe_cluster._ended(job, env) == (
        False,
        "Slurm knows no job 999999999 (squeue, scontrol, sacct)",
    )
