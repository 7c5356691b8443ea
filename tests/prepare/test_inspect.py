"""`bench inspect`: each check as a function of the command output it reads (no Slurm needed), the
compute-node probe script run for real in a local bash, the `bench run mode=native` gate, and the
whole inspection against the local Slurm testbed (marker slurm: partition `testbed`, 6 nodes x 8
h100, docs/testbed.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bench import inspect as insp
from bench.config import compose, for_framework

TESTBED_SINFO = "".join(f"testbed n{k} gpu:h100:8 idle\n" for k in range(1, 7))


def _cluster(*overrides: str):
    return compose(["cluster=testbed", *overrides]).cluster


def test_gres_of_typed_untyped_and_socket_bound_gpus():
    assert insp.gres_gpus("gpu:h100:8(S:0-1)") == {"h100": 8}
    assert insp.gres_gpus("gpu:4,shard:8") == {"": 4}
    assert insp.gres_gpus("gpu:a100:2,gpu:h100:6") == {"a100": 2, "h100": 6}
    assert insp.gres_gpus("(null)") == {}


def test_partition_with_enough_nodes_passes():
    ch = insp.check_partition(_cluster(), 2, TESTBED_SINFO)
    assert ch.line() == "ok    partition testbed: 6 of 6 nodes usable with gpu:h100:8 (the job needs 2)"


def test_missing_partition_names_the_ones_there():
    ch = insp.check_partition(_cluster("cluster.partition=gpu"), 2, TESTBED_SINFO)
    assert ch.line() == (
        "FAIL  partition gpu: not found (partitions here: testbed) -> fix: set cluster.partition in "
        "conf/cluster/testbed.yaml"
    )


def test_gpu_count_the_nodes_do_not_have():
    ch = insp.check_partition(_cluster("cluster.gpus_per_node=16"), 2, TESTBED_SINFO)
    assert ch.line() == (
        "FAIL  partition testbed: 0 of 6 nodes usable with gpu:h100:16, the job needs 2 (nodes have gpu:h100:8) "
        "-> fix: set cluster.gpus_per_node / gpu_type to what the nodes have, or a smaller experiment"
    )


def test_sinfo_that_cannot_reach_slurm_says_so():
    err = "sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
    assert insp.check_partition(_cluster(), 2, "", err).line() == (
        "FAIL  partition testbed: sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host "
        "-> fix: run inspect on a login node of the cluster (for the testbed: make testbed-up)"
    )


def test_drained_and_down_nodes_do_not_count():
    sinfo = TESTBED_SINFO.replace("n1 gpu:h100:8 idle", "n1 gpu:h100:8 drain").replace(
        "n2 gpu:h100:8 idle", "n2 gpu:h100:8 down*"
    )
    assert insp.check_partition(_cluster(), 5, sinfo).detail.startswith("4 of 6 nodes usable")


def test_account_refused_by_sbatch_test_only():
    err = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified\n"
    ch = insp.check_account(_cluster("cluster.account=nobody"), 1, err)
    assert ch.ok is False and ch.detail == (
        "account nobody, qos (default): sbatch: error: Batch job submission failed: Invalid account or "
        "account/partition combination specified"
    )
    ok = insp.check_account(
        _cluster(), 0, "sbatch: Job 1234 to start at 2026-11-25T01:30:00 using 16 processors\n"
    )
    assert ok.ok is True


def test_runtime_lines():
    apptainer = _cluster("cluster.container.kind=apptainer")
    missing = insp.check_runtime(apptainer, "", {"runtime": (1, "")})
    assert missing.line() == (
        "FAIL  runtime apptainer: on the compute node: apptainer/singularity not found -> fix: install "
        "Apptainer on the compute nodes, or set cluster.container.kind=none"
    )
    pyxis = _cluster("cluster.container.kind=pyxis")
    assert insp.check_runtime(pyxis, "Usage: srun [OPTIONS...]", {}).detail.startswith(
        "srun has no --container-image"
    )
    assert insp.check_runtime(
        pyxis, "  --container-image=[USER@][REGISTRY#]IMAGE[:TAG]", {"runtime": (0, "/usr/bin/enroot\n3.5.0")}
    ).ok


def test_framework_import_checks_the_pinned_version():
    assert insp.check_import("verl", "0.9.1", "", {"import verl": (0, "0.9.1")}).ok is True
    old = insp.check_import("verl", "0.9.1", "", {"import verl": (0, "0.8.0")})
    assert old.ok is False and old.detail == "python3 on the compute node: 0.8.0"
    gone = insp.check_import(
        "slime", "0.3.1", "", {"import slime": (1, "importlib.metadata.PackageNotFoundError: slime")}
    )
    assert gone.detail == "python3 on the compute node: importlib.metadata.PackageNotFoundError: slime"
    assert insp.check_import("verl", "0.9.1", "/x/recorder", {}).ok is None  # BENCH_DRIVER: said, not hidden


def local_run(calls: list):
    """bench.inspect.run with Slurm's commands answered as the testbed would, and the srun probe
    run for real in a local bash (its mkdir, mktemp and df are the real ones)."""

    def run(argv, env, timeout=60):
        calls.append(argv)
        if argv[0] == "sinfo":
            return 0, TESTBED_SINFO, ""
        if argv[0] == "sbatch":
            return (
                0,
                "",
                "sbatch: Job 7 to start at 2026-11-25T01:30:00 using 16 processors on nodes n[1-2]\n",
            )
        if argv[0] == "srun" and argv[-3:-1] == ["bash", "-c"]:
            r = subprocess.run(["bash", "-c", argv[-1]], capture_output=True, text=True, timeout=60)
            return r.returncode, r.stdout, r.stderr
        return 0, "", ""

    return run


def test_probe_script_runs_and_parses(tmp_path):
    cfgs = {"verl": for_framework(["cluster=testbed"], "verl")}
    roots = {"data_root": tmp_path / "d", "model_root": Path("/proc/no-such-dir")}
    out = subprocess.run(
        ["bash", "-c", insp.probe_script(cfgs, roots, "")], capture_output=True, text=True
    ).stdout
    probe = insp.parse_probe(out)
    assert sorted(probe) == ["import verl", "write data_root", "write model_root"]
    assert insp.check_storage("data_root", tmp_path / "d", 0, "", probe).ok is True
    bad = insp.check_storage("model_root", Path("/proc/no-such-dir"), 0, "", probe)
    assert bad.ok is False and bad.detail.startswith(
        "not writable from a compute node: mkdir: cannot create directory"
    )
    huge = insp.check_storage("data_root", tmp_path / "d", 10**18, "a model", probe)
    assert huge.ok is False and huge.detail.endswith("needs 1000000000.0 GB (a model)")


def test_inspect_site_lines_before_and_after_prepare(hub, prepare, monkeypatch):
    calls: list = []
    monkeypatch.setattr(insp, "run", local_run(calls))
    monkeypatch.setenv("BENCH_DRIVER", "/stub/recorder")
    over = ["experiment=smoke", "cluster=testbed", *hub["site"], f"results_dir={hub['tmp'] / 'results'}"]
    cfgs = {fw: for_framework(over, fw) for fw in ("verl", "slime")}
    failed = [c for c in insp.inspect_site(cfgs, {"verl": 2, "slime": 2}) if c.ok is False]
    assert [c.name for c in failed] == ["data verl", "data slime", "model Qwen/Qwen3-8B"]
    assert failed[0].fix == "python -m bench prepare experiment=smoke cluster=testbed --only data"
    assert (prepare("experiment=smoke", "cluster=testbed").returncode) == 0
    checks = insp.inspect_site(cfgs, {"verl": 2, "slime": 2})
    assert [c.ok for c in checks if c.ok is False] == []
    names = [c.name for c in checks]
    assert (
        names[:2] == ["partition testbed", "account/QoS"] and "rules verl" in names and "rules slime" in names
    )
    sbatch = next(a for a in calls if a[0] == "sbatch")
    assert sbatch == ["sbatch", "--test-only", "--partition=testbed", "--nodes=2", "--gpus-per-node=h100:8",
                      "--time=10", "--exclusive", "--wrap", "true"]  # fmt: skip


def test_rules_are_validates_own_lines():
    over = ["experiment=smoke", "cluster=testbed", "workload.prompts_per_step=3", "workload.group_size=3"]
    cfg = for_framework(over, "verl")
    from bench.resolve import Resolved
    from bench.validate import validate

    lines = insp.check_rules("verl", cfg, Resolved.from_config(cfg))
    assert [c.detail for c in lines] == validate(cfg) and all(c.ok is False for c in lines)
    assert any("not divisible by the trainer's data-parallel size 8" in c.detail for c in lines)


# ---- against the local Slurm testbed ----------------------------------------------------------------


@pytest.fixture
def inspect_cli(testbed, hub):
    def run(*overrides: str) -> subprocess.CompletedProcess:
        env = {**hub["env"], "BENCH_DRIVER": "/stub/recorder", "SLURM_CONF": str(testbed.slurm_conf)}
        results = f"results_dir={hub['tmp'] / 'results'}"
        argv = ["inspect", "experiment=smoke", "cluster=testbed", *hub["site"], results, *overrides]
        return subprocess.run([os.sys.executable, "-m", "bench", *argv], cwd=insp.data_paths.REPO, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip

    return run


@pytest.mark.slurm
def test_testbed_passes_once_prepared(inspect_cli, prepare, hub):
    before = inspect_cli()
    assert before.returncode == 2 and "FAIL  data verl:" in before.stdout
    assert prepare("experiment=smoke", "cluster=testbed").returncode == 0
    after = inspect_cli()
    assert after.returncode == 0, after.stdout + after.stderr
    assert "ok    partition testbed: 6 of 6 nodes usable with gpu:h100:8 (the job needs 2)" in after.stdout
    assert after.stdout.rstrip().endswith("OK: the site can run this experiment natively")


@pytest.mark.slurm
@pytest.mark.parametrize(
    "override, line",
    [
        ("cluster.partition=nosuch", "FAIL  partition nosuch: not found (partitions here: testbed)"),
        ("cluster.gpus_per_node=16", "FAIL  partition testbed: 0 of 6 nodes usable with gpu:h100:16"),
        ("cluster.data_root=/proc/bench-unwritable", "FAIL  data_root /proc/bench-unwritable: not writable from a compute node"),
        ("cluster.container.kind=apptainer", "FAIL  runtime apptainer: on the compute node: apptainer/singularity not found"),
    ],
)  # fmt: skip
def test_testbed_failures_one_line_each(inspect_cli, prepare, override, line):
    assert prepare("experiment=smoke", "cluster=testbed").returncode == 0
    res = inspect_cli(override)
    assert res.returncode == 2
    assert [ln for ln in res.stdout.splitlines() if ln.startswith(line)], res.stdout
