"""`bench run mode=native` inspects the site first: it refuses to submit while inspect fails (here:
data and model not prepared) and submits once `bench prepare` has run, with the prepared paths in
the framework's argv. Slurm's answers come from tests/prepare/test_inspect.py's local_run (the
compute-node probe runs in a local bash); the same path against the testbed is
tests/dispatch/test_ray_bootstrap.py."""

from __future__ import annotations

from bench import inspect as insp
from tests.prepare.test_inspect import local_run


def test_run_native_refuses_when_inspect_fails_and_submits_when_it_passes(hub, prepare, monkeypatch):
    from bench import launch, submit

    calls: list = []
    submitted: list = []
    monkeypatch.setattr(insp, "run", local_run(calls))
    monkeypatch.setattr(launch, "cluster_problems", lambda cfg: [])  # no sbatch on this machine
    monkeypatch.setattr(submit, "submit", lambda plans, dry_run=False: submitted.extend(plans) or [])
    monkeypatch.setenv("BENCH_DRIVER", "/stub/recorder")
    argv = ["experiment=smoke", "cluster=testbed", "framework=verl", "mode=native", *hub["site"],
            f"results_dir={hub['tmp'] / 'results'}"]  # fmt: skip
    assert launch.main(argv) == 2 and submitted == []
    assert prepare("experiment=smoke", "cluster=testbed", "framework=verl").returncode == 0
    assert launch.main(argv) == 0 and [p.framework for p in submitted] == ["verl"]
    train = hub["data"] / "BytedTsinghua-SIA__DAPO-Math-17k" / "verl" / "train.parquet"
    assert any(f"data.train_files={train}" in p.argv for p in submitted[0].launch.processes)
