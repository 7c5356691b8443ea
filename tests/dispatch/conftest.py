"""Fixtures for dispatch tests: a per-test results directory and the local Slurm testbed.

Slurm tests (marker `slurm`) need the testbed of bench/testbed.py. Outside CI they skip, with the
reason, when it cannot start (not root, no apt); under CI=true they fail instead, so a broken
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
    """The running testbed (started here if needed, and then stopped at the end of the session)."""
    tb = tb_mod.from_config()
    was_up = tb_mod.status(tb)["daemons"].get("slurmctld", False)
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
