"""Fixtures for `bench prepare` and `bench inspect`: the offline Hub cache of tests/prepare/hub.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.prepare.hub import make_hub, run_prepare


@pytest.fixture
def hub(tmp_path: Path) -> dict:
    """Offline Hub cache with DAPO-Math-17k (10 rows) and a tiny Qwen/Qwen3-8B; site roots in tmp."""
    return make_hub(tmp_path)


@pytest.fixture
def prepare(hub: dict):
    """Run `python -m bench prepare ARGS` on the hub's site roots."""
    return lambda *args: run_prepare(hub, *args)
