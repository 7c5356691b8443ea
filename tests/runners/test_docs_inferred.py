"""docs/frameworks.md "Where ingest reads what ran": every name the table cites is one its reader
reads (runners/<framework>_config.py, or bench/infer.py for model and hardware matching)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runners.docs import INFERRED_SOURCES, inferred_sources

REPO = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("prime_rl", "slime", "verl")
IDENT = re.compile(r"[A-Za-z_][\w./>-]*\w")


def _cited(cell: str) -> list[str]:
    """Identifiers inside the cell's `backticked` spans (e.g. `actor_rollout_ref.rollout.n`)."""
    return [w for span in re.findall(r"`([^`]+)`", cell) for w in IDENT.findall(span)]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_cited_key_is_in_the_reader(fw):
    reader = (REPO / "runners" / f"{fw}_config.py").read_text()
    infer = (REPO / "bench" / "infer.py").read_text()
    for value, by_fw in INFERRED_SOURCES:
        cited = _cited(by_fw[fw])
        where = reader + infer if value.startswith(("model", "hardware")) else reader
        absent = [w for w in cited if w.lstrip("*.") not in where]
        assert not absent, f"{fw} {value}: {absent} not in runners/{fw}_config.py"


def test_the_table_has_a_row_per_inferred_value_and_a_column_per_framework():
    lines = inferred_sources(list(FRAMEWORKS))
    rows = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| value")]
    names = [r.split(" | ")[0][2:] for r in rows]
    assert [n.split(" ")[0] for n in names] == [
        "model", "hardware", "gpus:", "gpus:", "gpu_ids", "nodes", "group_size", "prompts_per_step",
        "max_prompt_len", "max_response_len", "total_steps", "rollout_tp,", "mode", "staleness_bound", "kl_coef",
    ]  # fmt: skip
    assert all(r.count(" | ") == len(FRAMEWORKS) for r in rows)
    assert "| group_size | `orchestrator.group_size`" in "\n".join(lines)
