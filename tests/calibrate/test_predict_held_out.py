"""`bench predict` on held-out real runs, ingested as a new user ingests them (`bench ingest`): the
corpus's verl console logs and the opd-benchmark's Miles run. Each answer holds the run's GPUs,
bills the GPUs emulated x the time emulated, takes the workload's shape from the run where it logs
it, and refuses in one line naming what to give where it cannot answer.

Corpus facts (corpus/README.md): A logs `total_num_tokens` (verl before the `perf/` prefix), 1,024
prompts x rollout.n 5 (lines 13, 31) and prompt / response means on every step line (line 53:
83.496 / 192.360, 1,412,385 tokens); C trains with Megatron TP 2 x PP 2 on 8 GPUs colocated; D
logs no token count at all."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench import predict
from bench.__main__ import main as bench_main

A = "yushengsu-thu-verl_training_log/grpo_run_deepseek7b_llm.log"
C = "diqiuzhuanzhuan-verldata/qwen2-7b_math_megatron.log"
D = "eric-haibin-lin-verl-data/Qwen2.5-0.5B-bsz256_2-prompt1024-resp512-0.567.log"
TEACHER = "experiment.teachers=[{model:qwen3_0_6b,gpus:1,placement:dedicated,tp:1}]"


def ingest(logs: Path, out: Path, framework: str = "verl", *given: str) -> Path:
    assert (
        bench_main(["ingest", "--framework", framework, "--logs", str(logs), "--out", str(out), *given]) == 0
    )
    return out


@pytest.fixture(scope="module")
def corpus_runs(verl_corpus, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("held-out")
    return {
        "A": ingest(verl_corpus / A, root / "a", "verl", "hardware=h100_sxm"),
        "C": ingest(verl_corpus / C, root / "c"),  # its logs contradict every H100/H200 given
        "D": ingest(verl_corpus / D, root / "d", "verl", "hardware=h100_sxm"),
    }


def test_a_log_with_verls_older_token_count_gives_its_samples_and_length_shape(corpus_runs, tmp_path):
    """A's `total_num_tokens:1412385` over the logged means 83.496 + 192.360 is 5,120 samples
    (1,024 prompts x 5): the run's own calibration fits its lengths, no default stands in."""
    steps = pd.read_parquet(corpus_runs["A"] / "trace" / "steps.parquet")
    first = steps.sort_values("step").iloc[0]
    assert (first.samples, first.prompts) == (5120, 1024)
    assert (first.prompt_tokens, first.response_tokens) == (round(83.496 * 5120), round(192.360 * 5120))
    cfg, frm, _ = predict.plan(corpus_runs["A"], ["framework=slime", "model=qwen2_5_7b"], tmp_path / "out")
    assert {"workload.response_len_mean_frac", "workload.prompt_len_mean"} <= set(frm["inputs_from"]["run"])
    assert cfg.workload.prompt_len_mean == 83  # the steady steps' logged prompt mean
    assert frm["run_gpus"] == 8 and not frm["gpus_given"]


def test_a_run_no_input_can_be_fitted_on_is_refused_naming_the_fix(corpus_runs, tmp_path, capsys):
    """D logs no token count: a prediction would stand on defaults alone, so it is refused in one
    line naming the run and calibration=FILE, never a temporary file."""
    out = tmp_path / "out"
    args = ["predict", str(corpus_runs["D"]), "framework=slime", "model=qwen3_0_6b", "--out", str(out)]
    assert bench_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(
        f"error: {corpus_runs['D']}: no input of the prediction could be fitted on the run ("
    )
    assert "workload.response_len_mean_frac: response_tokens or samples missing on some steps" in err[0]
    # D times generation (timing/gen) but counts no token: the decode fit says so, not "no gen_s"
    assert (
        "emulator.decode_bw_eff: needs gen_s and token counts (samples, prompt and response tokens)" in err[0]
    )
    assert err[0].endswith("); pass calibration=FILE (`bench calibrate` of a run that logs them)")
    assert not out.exists()


def test_no_split_of_the_runs_gpus_is_refused_naming_what_no_gpu_count_changes(corpus_runs, tmp_path, capsys):
    """C trains with Megatron TP 2 x PP 2: prime-rl (FSDP only) refuses every split of its 8 GPUs
    for that, so the line names it instead of asking for other GPUs."""
    out = tmp_path / "out"
    args = ["predict", str(corpus_runs["C"]), "framework=prime_rl", "hardware=h100_sxm", "--out", str(out)]
    assert bench_main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: framework=prime_rl on the run's 8 GPUs: experiment.placement=colocated: prime-rl 0.8.0 runs "
        "trainer and inference on disjoint GPUs; expected disaggregated; no trainer:generator split of them "
        "passes bench validate (engines of 2 GPUs; at every split: experiment.trainer tp=2 pp=2: prime-rl "
        "trains with FSDP (+ EP/CP) only; expected tp=1, pp=1); no GPU count changes that: set the key it names"
    ]
    assert not out.exists()


def test_json_prints_what_the_manifest_records_gpu_hours_are_gpus_times_time(opd_results, tmp_path, capsys):
    """The Miles run as verl, on its own GPUs: 1 colocated + the teacher's dedicated 1 (2 x H100)."""
    run = ingest(opd_results / "miles", tmp_path / "miles", "slime")
    capsys.readouterr()  # ingest's own lines
    out = tmp_path / "as-verl"
    given = ["framework=verl", "hardware=h100_sxm", "workload.max_prompt_len=3968", TEACHER]
    assert bench_main(["predict", str(run), *given, "--json", "--out", str(out)]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p == json.loads((out / "manifest.json").read_text())["predicted_from"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (p["run_gpus"], p["gpus"]) == (1, 2)
    assert p["gpu_hours"] == pytest.approx(2 * metrics["wall_s"] / 3600)
    assert p["chosen"] == ["emulator.handoff_fixed_s = 0 (default: verl states no sleep + wake)",
                           "emulator.score_fixed_s = 0.1 (default: per scoring batch)"]  # fmt: skip
