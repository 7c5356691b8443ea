"""docs/frameworks.md is read off the renders (runners/docs.py, bench/render.py) and must be current."""

from pathlib import Path

import pytest

from bench.render import frameworks_doc
from runners.docs import changes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def page() -> str:
    return frameworks_doc()


def test_frameworks_md_is_current(page):
    assert (REPO / "docs" / "frameworks.md").read_text() == page, (
        "docs/frameworks.md is stale: run `python -m bench render --frameworks-doc > docs/frameworks.md`"
    )


def _row(page: str, override: str) -> list[str]:
    line = next(ln for ln in page.splitlines() if ln.startswith(f"| `{override}`"))
    return [c.strip() for c in line.strip("|").split(" | ")][1:]


@pytest.mark.parametrize(
    "override",
    [
        "workload.prompts_per_step=128",
        "workload.group_size=8",
        "workload.staleness_budget=2",
        "workload.max_response_len=4096",
        "workload.steps=40",
        "experiment.generator.tp=2",
    ],
)
def test_the_shared_workload_keys_set_a_native_key_in_every_framework(page, override):
    cells = _row(page, override)
    assert len(cells) == 3
    for cell in cells:
        assert cell.startswith("`") and "->" in cell, (override, cell)


def test_group_size_is_counted_in_samples_by_prime_rl_and_in_prompts_by_verl(page):
    prime_rl, slime, verl = _row(page, "workload.group_size=8")
    assert "`orchestrator.batch_size: 1024 -> 512`" in prime_rl  # 64 prompts x 8 samples
    assert "`--global-batch-size: 1024 -> 512`" in slime
    assert verl == "`actor_rollout_ref.rollout.n: 16 -> 8`"  # train_batch_size stays 64 prompts


def test_a_refusal_is_shown_with_the_runners_reason(page):
    prime_rl, _, _ = _row(page, "experiment.placement=colocated")
    assert prime_rl.startswith("refused: experiment.placement=colocated: prime-rl 0.8.0 runs trainer")


def test_changes_lists_added_removed_and_changed_keys():
    assert changes({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": ""}) == ["b: 2 -> 3", "c: - -> "]
    assert changes({"a": "1"}, {}) == ["a: 1 -> -"]
