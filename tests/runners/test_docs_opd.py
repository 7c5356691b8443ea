"""docs/frameworks.md's on-policy-distillation table (runners/docs.py OPD_ROWS): two keys at once
(workload.algorithm=opd and a teacher), composed and rendered per framework, so each cell is what
the runner really renders for the teacher and the algorithm, or its refusal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.render import frameworks_doc
from runners.docs import OPD_ROWS, opd_key, with_notes

DEDICATED, URL, BESIDE_GENERATOR, COLOCATED = (opd_key(r) for r, _ in OPD_ROWS)


@pytest.fixture(scope="module")
def table() -> dict[str, dict[str, list[str]]]:
    """{row: {framework: the cell's items}} of the OPD section (frameworks in the page's order)."""
    page = frameworks_doc()
    section = page.split("## On-policy distillation", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| `")]
    out = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        row = cells[0].split("` (", 1)[0].strip("`")
        out[row] = dict(zip(("prime_rl", "slime", "verl"), (c.split("<br>") for c in cells[1:]), strict=True))
    return out


def test_every_opd_row_is_in_the_table(table):
    assert list(table) == [DEDICATED, URL, BESIDE_GENERATOR, COLOCATED]


def test_verl_puts_a_dedicated_teacher_in_its_own_pool_reading_the_prepared_weights(table):
    verl = table[DEDICATED]["verl"]
    for item in (
        "`distillation.enabled: - -> True`",
        "`distillation.nnodes: - -> 1`",
        "`distillation.n_gpus_per_node: - -> 8`",  # gpus: 8
        "`distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size: - -> 2`",  # tp: 2
        "`distillation.teacher_models.teacher_model.model_path: - -> <repo>/.models/Qwen/Qwen3-30B-A3B`",
        "`distillation.distillation_loss.loss_mode: - -> k1`",
        "`job nodes: 2 -> 3`",  # 8 trainer + 8 generator + 8 teacher GPUs on 8-GPU nodes
    ):
        assert item in verl
    assert table[BESIDE_GENERATOR]["verl"][0].startswith(
        "refused: experiment.teachers[0].placement=with_generator: verl 0.9.1 serves teachers only"
    )


def test_slime_needs_a_teacher_url_or_an_in_process_teacher_on_colocated_gpus(table):
    assert table[DEDICATED]["slime"][0].startswith("refused: experiment.teachers[0].placement=dedicated:")
    assert "pass +framework.native.opd_teacher_url=http://HOST:PORT/generate" in table[DEDICATED]["slime"][0]
    url = table[URL]["slime"]
    assert "`--opd-type: - -> sglang`" in url and "`--rm-url: - -> http://teacher-host:30000/generate`" in url
    assert not [i for i in url if i.startswith("`job nodes")]  # the server is outside the job
    colocated = table[COLOCATED]["slime"]
    assert "`--opd-type: - -> megatron`" in colocated
    assert "`--opd-teacher-load: - -> <repo>/.models/Qwen/Qwen3-8B_torch_dist`" in colocated


def test_prime_rl_starts_the_teachers_vllm_servers_as_job_steps(table):
    dedicated = table[DEDICATED]["prime_rl"]
    assert '`orchestrator.algo.type: "grpo" -> "opd"`' in dedicated
    assert '`orchestrator.algo.teacher.name: - -> "<repo>/.models/Qwen/Qwen3-30B-A3B"`' in dedicated
    assert "`teacher processes: 0 -> 4`" in dedicated  # 8 teacher GPUs / 2 per server
    beside = table[BESIDE_GENERATOR]["prime_rl"]
    assert "`teacher processes: 0 -> 1`" in beside and not [i for i in beside if i.startswith("`job nodes")]
    assert table[COLOCATED]["prime_rl"][0].startswith("refused: experiment.placement=colocated:")


def test_with_notes_adds_nodes_processes_per_role_and_new_notes():
    proc = lambda role: SimpleNamespace(role=role)  # noqa: E731
    base = SimpleNamespace(nodes=2, processes=[proc("trainer")], notes=["kept"])
    launch = SimpleNamespace(nodes=3, processes=[proc("trainer"), proc("teacher"), proc("teacher")],
                             notes=["kept", "opd: why"])  # fmt: skip
    assert with_notes(["a: 1 -> 2"], base, launch) == [
        "a: 1 -> 2",
        "job nodes: 2 -> 3",
        "teacher processes: 0 -> 2",
        "note: opd: why",
    ]
