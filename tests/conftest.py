"""Shared test fixtures. Real logs live in ../shared/fixtures (beside the checkout, also in CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
OPD = SHARED / "fixtures" / "opd-benchmark" / "opd-frameworks"
REPO_MARK = "<repo>"


def repo_neutral(text: str) -> str:
    """A render with this checkout's absolute path written as <repo>: cluster=local and testbed keep
    prepared data under the checkout (.data/, .models/), and a golden must not depend on where the
    repository was cloned."""
    return text.replace(str(REPO), REPO_MARK)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing: the real-log fixtures must sit beside the checkout")
    return SHARED


@pytest.fixture(scope="session")
def opd_results(shared_dir: Path) -> Path:
    """SemiAnalysis opd-benchmark results: one folder per framework (prime, verl, miles)."""
    return OPD / "results"


# Slurm tests (marker `slurm`) need the testbed of bench/testbed.py. Outside CI they use it only when
# it is already up (`make testbed-up`) and skip otherwise, saying so: `make test` never starts Slurm
# daemons by surprise. Under CI=true the fixture brings it up and fails when it cannot, so a broken
# testbed can never pass CI silently.
@pytest.fixture(scope="session")
def testbed():
    """The running testbed (under CI started here if needed, and then stopped at the end)."""
    from bench import testbed as tb_mod

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
