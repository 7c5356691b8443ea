"""docs/frameworks.md is generated from the runners' SEMANTICS tables and must be current."""

from pathlib import Path

from runners.docs import frameworks, render

REPO = Path(__file__).resolve().parents[2]


def test_frameworks_md_is_current():
    assert (REPO / "docs" / "frameworks.md").read_text() == render(), (
        "docs/frameworks.md is stale: run `python -m runners.docs > docs/frameworks.md`"
    )


def test_every_framework_documents_the_shared_workload_keys():
    shared = {
        "workload.prompts_per_step",
        "workload.group_size",
        "workload.staleness_budget",
        "workload.max_response_len",
    }
    for name, _, module in frameworks():
        assert shared <= {row[0] for row in module.SEMANTICS}, name
