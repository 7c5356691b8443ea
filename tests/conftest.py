"""Shared test fixtures. Real logs live in ../shared/fixtures (beside the checkout, also in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
OPD = SHARED / "fixtures" / "opd-benchmark" / "opd-frameworks"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing: the real-log fixtures must sit beside the checkout")
    return SHARED


@pytest.fixture(scope="session")
def opd_results(shared_dir: Path) -> Path:
    """SemiAnalysis opd-benchmark results: one folder per framework (prime, verl, miles)."""
    return OPD / "results"
