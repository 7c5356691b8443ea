"""`bench plan RUN_DIR` on held-out real runs ingested as a new user ingests them (`bench ingest`):
the opd-benchmark's prime-rl run (1 trainer + 1 inference GPU, the teacher beside the generator)
and its verl run (1 GPU colocated, the teacher on its own GPU). The plan answers for the run's own
GPUs, the measured run is its baseline row on the same clock as the emulated points, and the run's
own configuration is never refused for a value its logs state.

Facts (opd-benchmark): each run is 15 updates of 8 prompts x 16 samples (1,920 samples); the
distillation weight is 1 in all three (verl config.yaml:833 `distillation_loss_coef: 1.0`, Miles
`--opd-kl-coef 1.0`, prime-rl's fixed ref_kl weight); verl's steps run from 135.85 s to 229.00 s
of the harness's wall (steps 1..15, logged timing_s/step ending at wall_seconds=229)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main as bench_main
from bench.plan_splits import valid_splits
from tests.calibrate.test_predict_held_out import TEACHER, ingest

# what the prime-rl run's folder does not log: the model, GPU, lengths and the teacher beside the
# generator, whose vLLM share is prime.toml:50's (`gpu_memory_utilization = 0.4`, beside results/)
PRIME_GIVEN = [
    "hardware=h100_sxm", "model=qwen3_0_6b", "workload.max_response_len=128", "workload.max_prompt_len=1920",
    "experiment.teachers=[{model:qwen3_0_6b,gpus:0,placement:with_generator,tp:1}]",
    "experiment.generator.gpu_memory_utilization=0.4",
]  # fmt: skip
QUICK = ["seeds=1", "emulator.steps=4", "--json"]


@pytest.mark.parametrize(
    ("folder", "framework", "source"),
    [
        ("verl", "verl", "config.yaml:833"),
        ("miles", "slime", "run.log:"),
        ("prime", "prime_rl", "(prime-rl's ref_kl weight is fixed at 1)"),
    ],
)
def test_a_distillation_runs_weight_is_read_from_its_logs(opd_results, tmp_path, folder, framework, source):
    run = ingest(opd_results / folder, tmp_path / folder, framework)
    m = json.loads((run / "manifest.json").read_text())
    assert (m["config"]["workload"]["algorithm"], m["config"]["workload"]["kl_coef"]) == ("opd", 1.0)
    assert m["inferred"]["kl_coef"]["value"] == 1.0 and source in m["inferred"]["kl_coef"]["source"]


def test_a_prime_rl_distillation_run_is_planned_on_its_own_two_gpus(opd_results, tmp_path, capsys):
    """Before the weight was read, its default 0 made prime-rl's own rule refuse every split of the
    run that ran (`gpus=2: ... workload.kl_coef=0.0 ... choose another gpus=`): a value the logs
    state is the run's, never a default its own framework refuses."""
    run = ingest(opd_results / "prime", tmp_path / "prime", "prime_rl")
    capsys.readouterr()  # ingest's own lines
    assert bench_main(["plan", str(run), *PRIME_GIVEN, *QUICK, "--out", str(tmp_path / "p")]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total_gpus"] == 2
    assert [(p["placement"], p["trainer_gpus"], p["generator_gpus"]) for p in d["points"]] == [
        ("disaggregated", 1, 1)
    ]
    assert d["current"]["trainer_gpus"] == 1 and d["measured"]["gpus"] == 2
    # the zero-advantage shape is the run's (it logs solve_all / solve_none), the lengths' defaults named
    assert d["notes"][0].startswith("zero-advantage share from the run: solve_all 0.0%, solve_none 0.0%")


def test_the_measured_row_is_on_the_emulated_points_clock(opd_results, tmp_path, capsys):
    """verl's 1,920 samples over its steps (229.00 - 135.85 = 93.15 s), not over the harness's 229 s
    of which 136 s are start-up the emulator does not model (8.4/s against an emulated ~26/s)."""
    run = ingest(opd_results / "verl", tmp_path / "verl", "verl")
    capsys.readouterr()  # ingest's own lines
    given = ["hardware=h100_sxm", TEACHER, *QUICK, "--out", str(tmp_path / "p")]
    assert bench_main(["plan", str(run), *given]) == 0
    d = json.loads(capsys.readouterr().out)
    m = d["measured"]
    assert m["wall_s"] == pytest.approx(93.147, abs=1e-3)
    assert m["trajectories_per_s"] == pytest.approx(1920 / 93.147, rel=1e-4)
    assert (d["total_gpus"], m["placement"], m["gpus"]) == (1, "colocated", 1)  # the teacher's GPU apart
    page = (tmp_path / "p" / "plan.md").read_text()
    assert (
        "The measured row is the run's own trace (over its steps: start-up before the first step left out"
        in page
    )


def test_every_split_a_plan_proposes_is_one_validate_accepts(opd_results, tmp_path, capsys):
    from bench import plan

    run = ingest(opd_results / "prime", tmp_path / "prime", "prime_rl")
    capsys.readouterr()  # ingest's own lines
    assert bench_main(["plan", str(run), *PRIME_GIVEN, *QUICK, "gpus=4", "--out", str(tmp_path / "p")]) == 0
    d = json.loads(capsys.readouterr().out)
    s = plan.setup(Path(run), PRIME_GIVEN, tmp_path / "probe")
    accepted = set(valid_splits(s.cfg, 4))
    proposed = {(p["trainer_gpus"], p["generator_gpus"]) for p in d["points"]}
    assert proposed and proposed <= accepted
    assert d["measured"]["gpus"] == 2 and d["current"] is None  # gpus=4 is not the run's own count


def test_the_report_names_runs_of_other_gpus_and_models_by_their_conf_entry(verl_corpus, tmp_path):
    """Corpus log D ingested as a new user would, without and with hardware=h100_sxm: the report
    tells the two apart by the GPU's name, not by the dozens of fields of its conf entry (HBM,
    links, TCO inputs, all null on the run whose logs name no GPU)."""
    from bench.report.load import load

    log = verl_corpus / "eric-haibin-lin-verl-data/Qwen2.5-0.5B-bsz256_2-prompt1024-resp512-0.567.log"
    runs = [ingest(log, tmp_path / "d"), ingest(log, tmp_path / "d-h100", "verl", "hardware=h100_sxm")]
    _, df = load(runs, all_runs=True)
    assert sorted(df["sweep"]) == ["hardware=H100-SXM", "hardware=None"]
