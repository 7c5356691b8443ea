"""mode=native on the testbed: verl's and slime's rendered job.sbatch, run inside the dispatched
allocation with real Ray (CPU wheel). Head on node 0, a worker on node 1, the readiness wait sees
both in `ray status`, and only then the driver starts. No GPU and no framework here: the framework
entry point is replaced (BENCH_DRIVER) by a script that records where it ran and what Ray showed,
and a `ray` shim first on PATH records which node ran each `ray start`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from bench import launch, monitor
from bench.trace import read_gpu
from tests.prepare.hub import make_hub, run_prepare

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

DRIVER = """#!/bin/bash
# Stands in for the framework's entry point ($1..: the real argv). Records node and Ray's view.
set -eu
exec "{python}" - "$@" >> "$BENCH_RUN_DIR/logs/roles.jsonl" <<'PY'
import json, os, sys, time, ray
ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
alive = [n for n in ray.nodes() if n["Alive"]]
print(json.dumps({{"role": "driver", "node": os.environ["SLURMD_NODENAME"], "t": time.time(),
                  "entry": sys.argv[1:], "ray_ips": sorted(n["NodeManagerAddress"] for n in alive),
                  "ray_gpus": sum(n["Resources"].get("GPU", 0) for n in alive)}}))
PY
"""

RAY_SHIM = """#!/bin/bash
# Records which node ran `ray start ...`, then runs the real ray.
if [[ "$1" == start ]]; then
  role=ray_worker; [[ " $* " == *" --head "* ]] && role=ray_head
  printf '{{"role": "%s", "node": "%s", "t": %s}}\\n' "$role" "$SLURMD_NODENAME" "$(date +%s.%N)" \\
    >> "$BENCH_RUN_DIR/logs/roles.jsonl"
fi
exec "{ray}" "$@"
"""


NVIDIA_SMI = """#!/bin/bash
# Stands in for nvidia-smi on a GPU-less node: the suite's query, in nvidia-smi's CSV format
# (--format=csv,noheader,nounits), 8 idle GPUs, once a second, until the sampler is stopped.
while true; do
  now=$(date +"%Y/%m/%d %H:%M:%S.%3N")
  for i in 0 1 2 3 4 5 6 7; do echo "$now, $i, 0, 0, 70.00"; done
  sleep 1
done
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def ray_bin() -> str:
    ray = shutil.which("ray", path=str(Path(os.sys.executable).parent))
    if ray is None:
        if os.environ.get("CI") == "true":
            pytest.fail("ray is not installed (pip install -e '.[dev,testbed]')")
        pytest.skip("ray is not installed (pip install -e '.[dev,testbed]')")
    return ray


@pytest.mark.parametrize("framework", ["verl", "slime"])
def test_ray_bootstrap_spans_the_nodes_before_the_driver_starts(
    framework: str, testbed, results: Path, tmp_path: Path, monkeypatch, ray_bin: str
):
    # One framework at a time: two Ray clusters on this one host would share 127.0.0.10:6379.
    shims = tmp_path / "bin"
    shims.mkdir()
    _script(shims / "ray", RAY_SHIM.format(ray=ray_bin))
    _script(shims / "nvidia-smi", NVIDIA_SMI)
    driver = _script(tmp_path / "driver.sh", DRIVER.format(python=os.sys.executable))
    # Read by job.sbatch (inherited through sbatch --export=ALL and the job's environment):
    monkeypatch.setenv("PATH", f"{shims}:{Path(os.sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("BENCH_DRIVER", str(driver))
    monkeypatch.setenv("RAY_NODE_IP_TEMPLATE", "127.0.0.1{rank}")  # one loopback address per node
    monkeypatch.setenv("RAY_READY_POLL_S", "1")
    monkeypatch.setenv("RAY_READY_TIMEOUT_S", "120")
    # bench run mode=native inspects the site first: the dataset and model must be prepared
    hub = make_hub(tmp_path)
    assert run_prepare(hub, "experiment=smoke", "cluster=testbed", f"framework={framework}").returncode == 0
    rc = launch.main(
        [
            "experiment=smoke",
            "cluster=testbed",
            f"framework={framework}",
            "mode=native",
            f"results_dir={results}",
            *hub["site"],
        ]
    )
    assert rc == 0
    runs = sorted(p for p in (results / "smoke").iterdir() if not p.name.startswith("."))
    statuses = monitor.wait([launch.RunPaths(r) for r in runs], timeout_s=180)
    assert len(runs) == 1
    for run, status in zip(runs, statuses, strict=True):
        manifest = json.loads((run / "manifest.json").read_text())
        nodes = manifest["dispatch"]["node_list"]
        rows = [json.loads(line) for line in (run / "logs" / "roles.jsonl").read_text().splitlines()]
        by_role = {r["role"]: r for r in rows}
        assert sorted(by_role) == ["driver", "ray_head", "ray_worker"], rows
        head, worker, drv = by_role["ray_head"], by_role["ray_worker"], by_role["driver"]
        assert head["node"] != worker["node"] and drv["node"] == head["node"]
        assert {head["node"], worker["node"]} == set(_hostnames(nodes, testbed))
        # the readiness wait held the driver until both Ray nodes were up: it saw 2 nodes x 8 GPUs
        assert drv["t"] > max(head["t"], worker["t"])
        assert (drv["ray_ips"], drv["ray_gpus"]) == (["127.0.0.10", "127.0.0.11"], 16.0)
        entry = {"verl": "verl.trainer.main_ppo", "slime": "/root/slime/train_async.py"}[framework]
        assert entry in " ".join(drv["entry"])  # the real argv reached the stand-in
        prepared = {"verl": "verl/train.parquet", "slime": "slime/train.jsonl"}[framework]
        assert str(hub["data"] / "BytedTsinghua-SIA__DAPO-Math-17k" / prepared) in " ".join(drv["entry"])
        # the stub trains nothing: the run fails honestly, with the reason, after a clean launch
        assert status == "failed"
        assert manifest["dispatch"]["reason"].startswith("parse_logs found no steps")
        assert "all 2 Ray node(s) active" in (run / "logs" / "job.out").read_text()
        # 1-s GPU telemetry from every node of the allocation -> trace/gpu.parquet
        gpu = read_gpu(run / "trace" / "gpu.parquet")
        assert sorted(gpu["node"].unique()) == sorted(_hostnames(nodes, testbed))
        per_node = gpu.groupby("node")["gpu"].agg(lambda g: sorted(set(g)))
        assert all(v == list(range(8)) for v in per_node) and len(gpu) >= 2 * 8 * 10  # >= 10 s sampled


def _hostnames(node_list: str, testbed) -> list[str]:
    import subprocess

    out = subprocess.run(
        ["scontrol", "show", "hostnames", node_list],
        capture_output=True,
        text=True,
        env=testbed.env(),
        check=True,
    )
    return out.stdout.split()
