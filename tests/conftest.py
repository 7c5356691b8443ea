"""Shared test fixtures. The real logs the tests read live outside the checkout, found through
bench/fixtures.py: $RLBENCH_FIXTURES (default ../shared/fixtures), $RLBENCH_CORPUS (default the
corpus folder beside it), $RLBENCH_REFERENCE (the research notes beside it). `make fixtures` fetches
the public ones. A test that needs an absent folder skips, naming the folder and how to get it;
under CI=true it fails instead, so CI can never pass without its real inputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import fixtures

REPO = Path(__file__).resolve().parents[1]
REPO_MARK = "<repo>"


def repo_neutral(text: str) -> str:
    """A render with this checkout's absolute path written as <repo>: cluster=local and testbed keep
    prepared data under the checkout (.data/, .models/), and a golden must not depend on where the
    repository was cloned."""
    return text.replace(str(REPO), REPO_MARK)


def need(path: Path, what: str, fix: str) -> Path:
    """`path` when it is a folder; otherwise skip the test with one line naming it and `fix`
    (fail under CI=true: CI runs with every fixture, so an absent one is a broken CI set-up)."""
    if path.is_dir():
        return path
    reason = f"{what} absent at {path}: {fix}"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


FETCH = "run `make fixtures` or set RLBENCH_FIXTURES"


def opd_benchmark() -> Path:
    """SemiAnalysis opd-benchmark's opd-frameworks folder (REPORT.md, prime.toml, results/), for
    helpers called inside a test; skips (fails under CI) when absent."""
    return need(fixtures.fixtures_dir() / "opd-benchmark" / "opd-frameworks", "real-log fixtures", FETCH)


@pytest.fixture(scope="session")
def opd_results() -> Path:
    """SemiAnalysis opd-benchmark results: one folder per framework (prime, verl, miles); its
    REPORT.md and prime.toml are in the parent folder."""
    return opd_benchmark() / "results"


@pytest.fixture(scope="session")
def verl_corpus() -> Path:
    """Public verl console logs, one folder per source repository (corpus/README.md lists them)."""
    return need(
        fixtures.corpus_dir() / "verl", "verl log corpus", "run `make fixtures` or set RLBENCH_CORPUS"
    )


@pytest.fixture(scope="session")
def h200_probe() -> Path:
    """The measured H200 (probe-*.json, nvidia-smi CSVs): in no public repository, so not fetched."""
    path = fixtures.fixtures_dir() / "h200-probe"
    return need(
        path,
        "H200 probe measurements",
        "they are not public (`make fixtures` cannot fetch them); set RLBENCH_FIXTURES to a folder holding h200-probe/",
    )


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The project's research notes (reference/*.md): not public, so not fetched."""
    return need(
        fixtures.reference_dir(),
        "research notes",
        "they are not public (`make fixtures` cannot fetch them); set RLBENCH_REFERENCE",
    )


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
