"""Fixtures for dispatch tests: a per-test results directory and the local Slurm testbed.

Slurm tests (marker `slurm`) need the testbed of bench/testbed.py. Outside CI they use it only when
it is already up (`make testbed-up`) and skip otherwise, saying so: `make test` never starts Slurm
daemons by surprise. Under CI=true the fixture brings it up and fails when it cannot, so a broken
testbed can never pass CI silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import testbed as tb_mod


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A fresh results directory; pass as `results_dir=<path>` so nothing lands in the repo."""
    d = tmp_path / "results"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def testbed() -> tb_mod.Testbed:
    """The running testbed (under CI started here if needed, and then stopped at the end)."""
    tb = tb_mod.from_config()
    was_up = tb_mod.status(tb)["daemons"].get("slurmctld", False)
    if not was_up and os.environ.get("CI") != "true":
        pytest.skip("the Slurm testbed is not up: run `make testbed-up` first (CI brings it up itself)")
    try:
        tb_mod.up(tb)
    except (tb_mod.TestbedError, OSError) as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Slurm testbed cannot start under CI: {e}")
        pytest.skip(f"Slurm testbed cannot start: {e}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(tb.slurm_conf)
    yield tb
    if old is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = old
    if not was_up:
        tb_mod.down(tb)
