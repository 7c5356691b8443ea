"""Policy contract: any dotted path given as `emulator.policy` must return a Schedule and drive the
queue to completion with the invariants intact. Aim it at your own policy with
`BENCH_POLICY=mylab.policies.mine .venv/bin/python -m pytest tests/emulator/test_policy_contract.py`."""

from __future__ import annotations

import os

import pytest

from bench.config import compose
from bench.emulator.policies import Schedule, load_policy
from tests.emulator.conftest import POLICIES, run

PATHS = [f"bench.emulator.policies.{p}" for p in POLICIES] + (
    [os.environ["BENCH_POLICY"]] if os.environ.get("BENCH_POLICY") else []
)


@pytest.mark.parametrize("path", PATHS)
def test_policy_contract(path, tmp_path):
    overrides = ["experiment=smoke", "framework=verl", f"emulator.policy={path}", "emulator.steps=3"]
    sched = load_policy(path)(compose(overrides))
    assert isinstance(sched, Schedule)
    r = run(tmp_path, overrides)
    assert r["manifest"]["mode"] == "emulated" and r["manifest"]["emulator"]["policy"] == path
    assert list(r["steps"]["step"]) == [1, 2, 3]
    last = r["rollouts"].groupby("rollout_id", sort=False)["status"].last()
    assert set(last) <= {"used", "discarded", "aborted", "filtered"}
