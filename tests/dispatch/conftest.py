"""Fixtures for dispatch tests: a per-test results directory (the `testbed` fixture of the local
Slurm testbed lives in tests/conftest.py, shared with tests/prepare)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A fresh results directory; pass as `results_dir=<path>` so nothing lands in the repo."""
    d = tmp_path / "results"
    d.mkdir()
    return d
