"""Emulated runs shared by the emulator tests: one short run per policy on the smoke experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.config import compose
from bench.emulator.run import emulate
from bench.trace import RunPaths, read_rollouts, read_steps

POLICIES = ("colocated_sync", "disaggregated_sync", "one_step_off", "fully_async", "partial_rollout")


def run(tmp: Path, overrides: list[str]) -> dict:
    """Emulate `overrides` into tmp; return its manifest, steps, rollouts and metrics."""
    paths = emulate(compose(overrides), tmp)
    return {
        "paths": paths,
        "manifest": json.loads(paths.manifest.read_text()),
        "steps": read_steps(paths.steps),
        "rollouts": read_rollouts(paths.rollouts),
        "metrics": json.loads(paths.metrics.read_text()),
    }


def policy_overrides(policy: str) -> list[str]:
    """Smoke (Qwen3-8B, 8+8 H100) for 6 steps with 2x oversampling, so every policy has surplus."""
    extra = ["experiment.placement=colocated", "experiment.trainer_gpus=16", "experiment.generator_gpus=16"]
    return [
        "experiment=smoke",
        "framework=verl",
        f"emulator.policy=bench.emulator.policies.{policy}",
        "emulator.steps=6",
        "experiment.oversampling=2",
        "workload.staleness_budget=2",
        *(extra if policy == "colocated_sync" else []),
    ]


@pytest.fixture(scope="session")
def policy_runs(tmp_path_factory) -> dict[str, dict]:
    return {p: run(tmp_path_factory.mktemp(p), policy_overrides(p)) for p in POLICIES}


@pytest.fixture(scope="session")
def case1(tmp_path_factory) -> dict:
    """SemiAnalysis case 1 as published (prime-rl, 50 steps), with the calibrated emulator inputs."""
    return run(tmp_path_factory.mktemp("case1"), ["experiment=semianalysis_case1", "framework=prime_rl"])


__all__ = ["POLICIES", "RunPaths", "run", "policy_overrides"]
