"""runners/slurm.py: the sbatch text is valid bash, lint-clean, quoted, deterministic, and its Ray
bootstrap really runs (against stub srun/scontrol/ray executables) in the documented order."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.config import compose
from runners.base import Process
from runners.shell import shell_join, shell_word
from runners.slurm import ray_processes, render_sbatch, render_steps_sbatch
from tests.runners.stub_job import run_stub_job


def _render(overrides=(), **kw):
    cfg = compose(["cluster=example_site", *overrides])
    args = dict(
        job_name="smoke-verl",
        nodes=3,
        gpus_per_node=8,
        driver_argv=["python3", "-m", "verl.trainer.main_ppo", "trainer.default_local_dir={run_dir}/ckpt"],
        env={"VERL_FILE_LOGGER_PATH": "{run_dir}/logs/verl.jsonl", "WANDB_MODE": "offline"},
        secret_env=["HF_TOKEN"],
        container_image="verlai/verl:vllm011.latest",
    )
    args.update(kw)
    return render_sbatch(cfg.cluster, **args)


def _lint(tmp_path: Path, text: str) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is required under CI (apt-get install -y shellcheck)")
        pytest.skip("shellcheck not installed here")
    res = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("kind", ["none", "pyxis", "apptainer"])
def test_every_container_kind_passes_bash_n_and_shellcheck(tmp_path, kind):
    text = _render(
        [f"cluster.container.kind={kind}"], processes=[Process("inference", 2, ["python3", "-m", "srv"])]
    )
    _lint(tmp_path, text)


def test_header_carries_the_cluster_options():
    text = _render(["cluster.qos=high", "cluster.constraint='h100&ib'", "cluster.time_min=90"])
    header = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert header == [
        "#SBATCH --job-name=smoke-verl",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=h100:8",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=my-account",
        "#SBATCH --qos=high",
        "#SBATCH --constraint='h100&ib'",
        "#SBATCH --time=90",
        "#SBATCH --exclusive",
        "#SBATCH --output=logs/slurm-%j.out",
        "#SBATCH --error=logs/slurm-%j.out",
    ]


def test_gpu_type_none_drops_the_gres_request():
    text = _render(["cluster.gpu_type=none"])
    assert "--gpus-per-node" not in text
    assert "--num-gpus=8" in text  # Ray still advertises the workload's GPUs


def test_container_kinds_wrap_every_step():
    pyxis = _render(["cluster.container.kind=pyxis"])
    assert "--container-image=verlai/verl:vllm011.latest" in pyxis
    assert '"--container-mounts=/shared:/shared,${RUN_DIR}:${RUN_DIR}"' in pyxis
    appt = _render(["cluster.container.kind=apptainer", "cluster.container.image=/img/verl.sif"])
    assert 'IN_CONTAINER=(apptainer exec --nv --bind "/shared:/shared,${RUN_DIR}" /img/verl.sif)' in appt
    none = _render(["cluster.container.kind=none"])
    assert "IN_CONTAINER=()" in none and "container-image" not in none


def test_bad_container_kind_and_missing_image_are_named():
    with pytest.raises(ValueError, match="cluster.container.kind='docker'"):
        _render(["cluster.container.kind=docker"])
    with pytest.raises(ValueError, match="needs an image"):
        _render(["cluster.container.kind=pyxis"], container_image="")


def test_values_are_quoted_and_secrets_named_only():
    text = _render(
        ["cluster.partition='gpu; rm -rf /'"],
        env={"X": "a b'c", "P": "{run_dir}/logs/x y"},
        secret_env=["HF_TOKEN"],
    )
    assert "#SBATCH --partition='gpu; rm -rf /'" in text
    assert "export X='a b'\"'\"'c'" in text
    assert 'export P="${RUN_DIR}/logs/x y"' in text
    assert '[[ -n "${HF_TOKEN:-}" ]]' in text and "HF_TOKEN=" not in text
    assert "pkill" not in text


def test_render_is_deterministic():
    assert _render() == _render()


def test_shell_word_keeps_only_the_suites_references_expandable():
    assert shell_word("{run_dir}/logs/a.jsonl") == '"${RUN_DIR}/logs/a.jsonl"'
    assert shell_word("x={run_dir}") == '"x=${RUN_DIR}"'
    assert shell_join(["a b", "c"]) == "'a b' c"
    # with a reference: double quotes, every character that acts there escaped
    assert shell_word("/a:/b$(touch x),${RUN_DIR}") == '"/a:/b\\$(touch x),${RUN_DIR}"'
    assert shell_word("${HOME}/x") == "'${HOME}/x'"  # not the suite's: literal
    assert shell_word("${RUN_DIR:-$(touch x)}") == "'${RUN_DIR:-$(touch x)}'"


def test_ray_processes_roles_and_ranks():
    procs = ray_processes(3, 4)
    assert [(p.role, p.node_rank) for p in procs] == [("ray_head", 0), ("ray_worker", 1), ("ray_worker", 2)]
    assert "--num-gpus=4" in procs[1].argv and "--address=${HEAD_IP}:6379" in procs[1].argv


STUBS = {
    # scontrol show hostnames LIST -> n0 n1 n2
    "scontrol": '#!/bin/bash\nfor i in $(seq 0 $((STUB_NODES-1))); do echo "n$i"; done\n',
    # srun [opts] -w HOST CMD...: log the host and the command, then exec it
    "srun": '#!/bin/bash\nwhile [[ "$1" != -w ]]; do shift; done\nhost="$2"; shift 2\n'
    'echo "srun $host $*" >> "$STUB_LOG"\nexec "$@"\n',
    # ray start ... --block: record, then block; ray status: one node line per start so far
    "ray": '#!/bin/bash\nif [[ "$1" == start ]]; then echo "ray $*" >> "$STUB_LOG"; exec sleep 60; fi\n'
    'echo "Node status"; echo "Active:"\n'
    'grep "^ray start" "$STUB_LOG" | while read -r _; do echo " 1 node_abc"; done\n'
    'echo "Pending:"\n',
    "hostname": "#!/bin/bash\necho 10.0.0.1 fe80::1\n",
    # the recorder that replaces the driver
    "recorder": '#!/bin/bash\necho "driver RAY_ADDRESS=$RAY_ADDRESS VERL=$VERL_FILE_LOGGER_PATH argv=$*" >> "$STUB_LOG"\n',
}


def _stub_run(
    tmp_path: Path, text: str, extra_env: dict[str, str], stubs: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, list[str]]:
    env = {
        "SLURM_JOB_NODELIST": "n[0-2]",
        "STUB_NODES": "3",
        "RAY_READY_POLL_S": "0.2",
        "RAY_READY_TIMEOUT_S": "20",
        "BENCH_DRIVER": str(tmp_path / "bin" / "recorder"),
        **extra_env,
    }
    return run_stub_job(tmp_path, text, STUBS | (stubs or {}), env)


def test_bootstrap_runs_head_then_workers_then_driver_with_template_ips(tmp_path):
    text = _render(["cluster.container.kind=none", "cluster.setup=[]"])
    res, log = _stub_run(tmp_path, text, {"RAY_NODE_IP_TEMPLATE": "127.0.0.1{rank}"})
    assert res.returncode == 0, res.stderr
    starts = [ln for ln in log if ln.startswith("ray start")]
    assert starts[0].startswith("ray start --head --node-ip-address=127.0.0.10 --port=6379 --num-gpus=8")
    assert sorted(starts[1:]) == [
        "ray start --address=127.0.0.10:6379 --node-ip-address=127.0.0.11 --num-gpus=8 --disable-usage-stats --block",
        "ray start --address=127.0.0.10:6379 --node-ip-address=127.0.0.12 --num-gpus=8 --disable-usage-stats --block",
    ]
    driver = [ln for ln in log if ln.startswith("driver")]
    run_dir = tmp_path / "run dir"
    assert driver == [
        f"driver RAY_ADDRESS=127.0.0.10:6379 VERL={run_dir}/logs/verl.jsonl "
        f"argv=python3 -m verl.trainer.main_ppo trainer.default_local_dir={run_dir}/ckpt"
    ]
    # the driver ran on node 0, after every ray start
    assert log.index(driver[0]) > max(log.index(s) for s in starts)
    assert any(ln.startswith("srun n0 ") and ln.endswith(driver[0].split("argv=")[1]) for ln in log)
    assert (run_dir / "logs" / "driver.log").exists()


def test_bootstrap_without_template_uses_head_hostname_ip(tmp_path):
    text = _render(["cluster.container.kind=none", "cluster.setup=[]"], nodes=2)
    res, log = _stub_run(tmp_path, text, {"STUB_NODES": "2", "SLURM_JOB_NODELIST": "n[0-1]"})
    assert res.returncode == 0, res.stderr
    assert "ray start --address=10.0.0.1:6379 --num-gpus=8 --disable-usage-stats --block" in log


def test_bootstrap_times_out_with_a_clear_message(tmp_path):
    text = _render(["cluster.container.kind=none", "cluster.setup=[]"])
    # the head comes up, the workers never join
    head_only = (
        '#!/bin/bash\n[[ "$1" == start ]] && exec sleep 60\nprintf "Active:\\n 1 node_h\\nPending:\\n"\n'
    )
    res, log = _stub_run(tmp_path, text, {"RAY_READY_TIMEOUT_S": "1"}, stubs={"ray": head_only})
    assert res.returncode == 1
    assert "only 1 of 3 Ray node(s) active after 1 s" in res.stderr
    assert not [ln for ln in log if ln.startswith("driver")]


def test_too_few_nodes_fails_before_ray(tmp_path):
    text = _render(["cluster.container.kind=none", "cluster.setup=[]"])
    res, log = _stub_run(tmp_path, text, {"STUB_NODES": "2"})
    assert res.returncode == 1
    assert "got 2 node(s), expected 3" in res.stderr
    assert log == []


def test_steps_job_runs_each_process_on_its_node_and_waits_for_the_main_roles(tmp_path):
    cfg = compose(["cluster=example_site", "cluster.container.kind=none"])
    procs = [
        Process(
            "server",
            0,
            ["python3", "-m", "srv", "--port", "8000"],
            {"CUDA_VISIBLE_DEVICES": "0,1"},
            log="srv-a.log",
        ),
        Process(
            "trainer", 1, ["python3", "-m", "train", "--out", "${RUN_DIR}/ckpt"], secret_env=["HF_TOKEN"]
        ),
    ]
    text = render_steps_sbatch(
        cfg.cluster, job_name="x", nodes=2, gpus_per_node=8, processes=procs, main_roles=("trainer",)
    )
    lines = text.splitlines()
    assert "#   node 0: server" in lines and "#   node 1: trainer" in lines
    assert '"${ON_NODE[@]}" "${NODES[0]}" env CUDA_VISIBLE_DEVICES=0,1 python3 -m srv --port 8000 \\' in lines
    assert '  > "${RUN_DIR}/logs/srv-a.log" 2>&1 &' in lines
    assert '"${ON_NODE[@]}" "${NODES[1]}" python3 -m train --out "${RUN_DIR}/ckpt" \\' in lines
    assert lines[lines.index('  > "${RUN_DIR}/logs/trainer-1.log" 2>&1 &') + 2] == "MAIN[$!]=1"
    assert text.count("MAIN[$!]=1") == 1  # the server is not waited for: its exit ends the job
    assert '[[ -n "${HF_TOKEN:-}" ]] || echo "job.sbatch: warning: HF_TOKEN is not set" >&2' in lines
    _lint(tmp_path, text)
