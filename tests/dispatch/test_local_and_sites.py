"""cluster=local (in-process), site sbatch options (Pyxis, Apptainer), GPU telemetry parsing."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from bench import launch, telemetry
from bench.config import compose
from bench.submit import python_command, sbatch_params


def test_local_run_is_the_same_job_in_process_and_lands_a_complete_run(results: Path, capsys):
    rc = launch.main(["experiment=smoke", "framework=prime_rl", "workload.steps=4", f"results_dir={results}"])
    assert rc == 0  # local has no queue: `run` returns when the run is done
    (run,) = (results / "smoke").iterdir()
    m = json.loads((run / "manifest.json").read_text())
    d = m["dispatch"]
    assert (m["status"], m["mode"], m["cluster"], d["executor"], d["exit_state"]) == (
        "completed",
        "emulated",
        "local",
        "local",
        "COMPLETED",
    )
    assert (d["node_list"], d["slurm_job_id"]) == (socket.gethostname(), None)
    assert m["emulator"]["policy"].startswith("bench.emulator.policies.")  # the emulator's own keys kept
    metrics = json.loads((run / "metrics.json").read_text())
    assert (metrics["status"], metrics["mode"], metrics["run_id"]) == ("completed", "emulated", run.name)
    assert not (run / ".emulator").exists()  # staging folder gone
    assert (run / "launch" / "command.json").is_file() and (run / "config.resolved.yaml").is_file()


def test_example_site_sbatch_has_account_partition_and_pyxis_container():
    cfg = compose(["experiment=smoke", "cluster=example_site", "framework=verl"])
    p = sbatch_params(cfg, 2, "bench-smoke", "/shared/results/smoke/.submitit")
    assert (p["partition"], p["account"], p["nodes"], p["gpus_per_node"], p["exclusive"]) == (
        "gpu",
        "my-account",
        2,
        "h100:8",
        True,
    )
    assert p["additional_parameters"] == {
        "signal": "B:USR2@90",  # to the batch shell, which exec's the job: submitit's checkpoint
        "container-image": "verlai/verl:vllm011.latest",  # from conf/framework/verl.yaml
        "container-mounts": "/shared:/shared",
    }
    assert p["setup"][0] == "source /etc/profile.d/modules.sh"
    assert p["setup"][-1].startswith("exec ") and p["setup"][-1].endswith(
        "-u -m submitit.core._submit /shared/results/smoke/.submitit"
    )


def test_apptainer_site_runs_the_job_python_inside_the_image():
    cfg = compose(
        ["experiment=smoke", "cluster=example_site", "framework=slime", "cluster.container.kind=apptainer",
         "cluster.container.image=/images/slime.sif"]
    )  # fmt: skip
    assert python_command(cfg) == "apptainer exec --nv --bind /shared:/shared /images/slime.sif python"
    assert "container-image" not in sbatch_params(cfg, 2, "x", "/f")["additional_parameters"]


def test_unreachable_testbed_is_a_preflight_problem_but_dry_run_still_works(results: Path):
    overrides = [
        "experiment=smoke",
        "cluster=testbed",
        "framework=verl",
        "cluster.slurm_conf=.nowhere/slurm.conf",
    ]
    (p,) = launch.plan(overrides, False)
    assert p.problems == [
        "cluster=testbed (conf/cluster/testbed.yaml): cluster.slurm_conf=.nowhere/slurm.conf does not exist; "
        "expected a running testbed (make testbed-up)"
    ]
    assert launch.plan(overrides, False, dry_run=True)[0].problems == []


# nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw --format=csv,noheader,nounits
NVSMI_OUT = """2026/11/22 01:00:00.500, 0, 97, 71234, 612.48
2026/11/22 01:00:00.500, 1, 0, 0, [N/A]
2026/11/22 01:00:01.502, 0, 88, 71300, 598.10
2026/11/22 01:00:02.50"""


def test_nvidia_smi_csv_becomes_gpu_rows_relative_to_the_run_start():
    import datetime as dt

    t0 = dt.datetime(2026, 11, 22, 1, 0, 0).timestamp()  # nvidia-smi prints the node's local time
    rows = telemetry.parse_nvidia_smi(NVSMI_OUT, "n1", t0)
    assert rows == [
        {"t_s": 0.5, "node": "n1", "gpu": 0, "util_pct": 97.0, "mem_used_mib": 71234.0, "power_w": 612.48},
        {"t_s": 0.5, "node": "n1", "gpu": 1, "util_pct": 0.0, "mem_used_mib": 0.0, "power_w": None},
        {"t_s": 1.502, "node": "n1", "gpu": 0, "util_pct": 88.0, "mem_used_mib": 71300.0, "power_w": 598.1},
    ]  # the cut-off last line (sampler stopped mid-write) is skipped


def test_sampler_runs_one_step_per_node_inside_slurm():
    argv = telemetry.sampler_argv(Path("/r/logs"), in_slurm=True)
    assert argv[:4] == ["srun", "--overlap", "--ntasks-per-node=1", "--kill-on-bad-exit=0"]
    assert argv[-1].endswith('-l 1 > "/r/logs/gpu-${SLURMD_NODENAME}.csv"')
