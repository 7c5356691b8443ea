"""Every second of a real run attributed, and verdicts that hold on it: the eight public verl
console logs of ../shared/corpus (README: per-step timing sums with line numbers) and the
opd-benchmark campaign (verl, Miles, Prime-RL), each ingested with `bench ingest` as a user would.

Specification: the phases of each step (bench.trace.step_phases) sum to its step_s within 1%;
checkpoint and validation timers land in their own phases with the sums the README states; the
verdict names the phase that dominates; no action rests on a premise the run contradicts; the
report's first lines say what each run was and where its time went, from metrics.json `phases`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.report.diagnose import Resources, diagnose
from bench.trace import read_steps, step_phases

pytestmark = pytest.mark.slow  # ingests seven corpus logs (up to 1,119 steps) and three fixture runs

CORPUS = {  # corpus/verl/<file> -> README facts: Σ timing_s/step, Σ testing, Σ save_checkpoint (s)
    "yushengsu-thu-verl_training_log/grpo_run_deepseek7b_llm.log": (86416.363, 3521.912, None),
    "yushengsu-thu-verl_training_log/ppo_run_deepseek7b_llm.log": (45383.332, 3214.438, None),
    "diqiuzhuanzhuan-verldata/qwen2-7b_math_megatron.log": (23701.503, 624.587, 1065.285),
    "eric-haibin-lin-verl-data/Qwen2.5-0.5B-bsz256_2-prompt1024-resp512-0.567.log": (None, 2457.291, None),
    "eric-haibin-lin-verl-data/Qwen2.5-0.5B-bsz256_2-prompt512-resp256-0.538.log": (None, 1918.466, None),
    "eric-haibin-lin-verl-data/gemma-2-2b-it-ppo-bsz512_4-prompt1024-resp-512-0.640.log": (
        None,
        767.050,
        None,
    ),
    "eric-haibin-lin-verl-data/deepseek-llm-7b-chat-megatron-bsz256_4-prompt512-resp512-0.695.log": (
        16153.391,
        988.849,
        None,
    ),
}
# The phase that dominates each corpus run (README per-step key sums): generation in the two
# yushengsu runs (timing_s/gen ~50% of timing_s/step), the trainer's own passes in the others.
BOTTLENECK = {
    "grpo_run_deepseek7b_llm.log": "generator-bound",
    "ppo_run_deepseek7b_llm.log": "generator-bound",
}
FIXTURES = {"verl": "verl", "slime": "miles", "prime_rl": "prime"}


@pytest.fixture(scope="module")
def ingested(verl_corpus: Path, opd_results: Path, tmp_path_factory) -> dict[str, Path]:
    """Run directories of every corpus RL log and every opd-benchmark framework run."""
    from bench.ingest import main as ingest

    root = tmp_path_factory.mktemp("phases")
    out: dict[str, Path] = {}
    for rel in CORPUS:
        run = root / Path(rel).stem
        assert ingest(["--framework", "verl", "--logs", str(verl_corpus / rel), "--out", str(run)]) == 0
        out[Path(rel).name] = run
    for fw, d in FIXTURES.items():
        run = root / fw
        assert ingest(["--framework", fw, "--logs", str(opd_results / d), "--out", str(run)]) == 0
        out[fw] = run
    return out


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def test_phases_sum_to_every_step_within_one_percent(ingested):
    for name, run in ingested.items():
        steps = read_steps(run / "trace" / "steps.parquet")
        ph = step_phases(steps)
        assert ph["unattributed_s"].notna().all(), f"{name}: a step without unattributed_s"
        gap = (ph.sum(axis=1) - steps["step_s"]).abs()
        assert (gap <= 0.01 * steps["step_s"]).all(), f"{name}: phases miss the step by {gap.max():.3g} s"
        # the trace carries unattributed_s itself, as step_phases computes it
        assert steps["unattributed_s"].round(9).equals(ph["unattributed_s"].round(9)), name


def test_corpus_timers_land_in_their_phases_with_the_readme_sums(ingested):
    for rel, (step_sum, testing, ckpt) in CORPUS.items():
        steps = read_steps(ingested[Path(rel).name] / "trace" / "steps.parquet")
        assert math.isclose(steps["validation_s"].sum(), testing, abs_tol=1e-3), rel
        # every verl timer is mapped: what no timer covers stays under 1% of the run's step time
        assert abs(steps["unattributed_s"].sum()) <= 0.01 * steps["step_s"].sum(), rel
        if step_sum is not None:
            assert math.isclose(steps["step_s"].sum(), step_sum, abs_tol=1e-3), rel
        if ckpt is None:
            assert steps["checkpoint_s"].isna().all(), rel  # never timed: unknown, not 0
        else:
            assert math.isclose(steps["checkpoint_s"].sum(), ckpt, abs_tol=1e-3), rel
            # six saves (steps 20, 40, 60, 80, 100, 105; README lines 933 ... 1366)
            assert steps.loc[steps["checkpoint_s"].notna(), "step"].tolist() == [20, 40, 60, 80, 100, 105]


def test_old_verl_without_a_step_timer_says_its_step_is_the_sum_of_its_timers(ingested):
    manifest = json.loads(
        (ingested["Qwen2.5-0.5B-bsz256_2-prompt512-resp256-0.538.log"] / "manifest.json").read_text()
    )
    assert any(
        w.startswith("435 step(s) have timing/* timers but no whole-step timer") for w in manifest["warnings"]
    ), manifest["warnings"]


def test_metrics_phases_and_the_table_describe_the_same_step(ingested):
    for name, run in ingested.items():
        m = metrics(run)
        ph = m["phases"]
        assert math.isclose(ph["step_s"], m["steady_step_s"], rel_tol=1e-9), name
        assert math.isclose(sum(p["s_per_step"] for p in ph["parts"].values()), ph["step_s"], rel_tol=0.01), (
            name
        )
        assert "unattributed_s" in ph["parts"], name
    c = metrics(ingested["qwen2-7b_math_megatron.log"])["phases"]["parts"]
    assert c["checkpoint_s"]["name"] == "checkpoint save" and c["validation_s"]["name"] == "validation"
    # colocated verl: the wait is the generation phase on the trainer's own GPUs
    assert c["wait_s"]["name"].startswith("generation")


def test_trainer_idle_is_wait_over_the_time_that_passed(ingested):
    for name, run in ingested.items():
        m = metrics(run)
        steps = read_steps(run / "trace" / "steps.parquet")
        w = steps[(steps.step >= m["window"]["first_step"]) & (steps.step <= m["window"]["last_step"])]
        assert math.isclose(m["trainer_idle_frac"], w.wait_s.sum() / w.step_s.sum(), rel_tol=1e-9), name


def test_trajectory_rate_is_shown_on_both_windows_for_every_framework(ingested):
    for fw in FIXTURES:
        m = metrics(ingested[fw])
        steps = read_steps(ingested[fw] / "trace" / "steps.parquet")
        assert math.isclose(
            m["trajectories_per_s_steps"], steps.samples.sum() / steps.step_s.sum(), rel_tol=1e-9
        )
        assert math.isclose(m["trajectories_per_s"], steps.samples.sum() / m["wall_s"], rel_tol=1e-9)
        assert m["trajectories_per_s"] < m["trajectories_per_s_steps"], fw  # the wall adds start-up


def test_wall_breakdown_accounts_for_the_whole_wall(ingested):
    for fw in FIXTURES:
        b = metrics(ingested[fw])["wall_breakdown"]
        assert b["window"].startswith("harness"), fw  # wall_time.env in every opd-benchmark run
        parts = b["startup_s"] + b["steps_s"] + b["gaps_s"] - b["overlap_s"] + b["teardown_s"]
        assert math.isclose(parts, b["wall_s"], rel_tol=0.01), (fw, b)
    # a console log without a wall-time file: start-up and teardown are unknown, with the reason
    b = metrics(ingested["qwen2-7b_math_megatron.log"])["wall_breakdown"]
    assert "startup_s" not in b and "start-up and teardown are not seen" in b["missing"]["startup_s"]


def _verdict(run: Path):
    from bench.report import _numbers, _with_evidence
    from bench.report.diagnose import run_resources
    from bench.report.load import load
    from bench.report.series import load_series

    runs, df = load([run])
    series = [load_series(r) for r in runs]
    return diagnose(_numbers(_with_evidence(df, series, runs), 0), run_resources(runs[0].manifest))


def test_verdict_names_the_phase_that_dominates_and_no_cap_it_does_not_reach(ingested):
    for rel in CORPUS:
        name = Path(rel).name
        v = _verdict(ingested[name])
        assert v.label == BOTTLENECK.get(name, "trainer-bound"), (name, v)
        # verl's response_length/clip_ratio: under 0.2% of responses reach the cap in every corpus run
        assert "response cap" not in v.action, (name, v.action)


def test_a_checkpoint_bound_run_is_called_so_with_the_actions_that_fit():
    # The 105-step run: six saves of ~2,360 s, 49% of the steady window; generation 25%.
    v = diagnose(
        {"trainer_idle_frac": 0.25, "checkpoint_share": 0.49, "validation_share": 0.02, "clip_frac": 0.002},
        Resources(placement="colocated", trainer_gpus=8, generator_gpus=8),
    )
    assert (v.label, v.rule) == ("checkpoint-bound", "VC")
    assert v.action == (
        "save less often (a larger save interval, e.g. verl trainer.save_freq), save asynchronously, "
        "or write checkpoints to faster storage"
    )
    v = diagnose({"trainer_idle_frac": 0.25, "validation_share": 0.30}, Resources(placement="colocated"))
    assert (v.label, v.rule) == ("validation-bound", "VV")
    assert "validate less often" in v.action


def test_lower_the_cap_only_when_responses_reach_it():
    res = Resources(placement="colocated", trainer_gpus=8, generator_gpus=8)
    below = diagnose({"trainer_idle_frac": 0.5, "trainer_work_share": 0.3, "clip_frac": 0.002}, res)
    at = diagnose({"trainer_idle_frac": 0.5, "trainer_work_share": 0.3, "clip_frac": 0.12}, res)
    assert below.label == at.label == "generator-bound"
    assert "response cap" not in below.action
    assert at.action.endswith("or lower the response cap")


def test_report_first_screen_says_what_ran_and_names_checkpoint_time(ingested, tmp_path):
    from bench.report import build

    runs = tmp_path / "runs"
    runs.mkdir()
    for key in ("qwen2-7b_math_megatron.log", "prime_rl"):
        (runs / ingested[key].name).symlink_to(ingested[key])
    build([runs], tmp_path / "report")
    md = (tmp_path / "report" / "summary.md").read_text()
    first = md.split("## Verdicts\n\n")[1].split("\n- **")[0]  # what ran, before any verdict
    assert "Not one experiment: these runs differ in mode, placement, gpus" in first
    assert "colocated, 8 GPUs (hybrid 8)" in first and "disaggregated, 2 GPUs (rollout 1, trainer 1)" in first
    m = metrics(ingested["qwen2-7b_math_megatron.log"])["phases"]["parts"]
    share = 100 * m["checkpoint_s"]["share"]
    assert f"checkpoint save {share:.1f}%" in first
    html = (tmp_path / "report" / "index.html").read_text()
    assert html.index('class="what-ran"') < html.index('class="verdict ')


def test_where_time_goes_puts_the_largest_phase_first(ingested):
    from bench.report.load import load
    from bench.report.overview import where_time_goes

    runs, _ = load([ingested["grpo_run_deepseek7b_llm.log"]])
    line = where_time_goes(runs[0])
    assert line.startswith("largest phase: generation (colocated: the trainer's GPUs generate) 49.")
    assert "validation 4.1%" in line


def test_emulated_trace_closes_its_steps_too(tmp_path):
    from bench.emulator.run import main as emulate

    assert emulate(["experiment=smoke", "framework=verl", "--out", str(tmp_path / "run")]) == 0
    steps = read_steps(tmp_path / "run" / "trace" / "steps.parquet")
    parts = steps[["wait_s", "logprob_s", "compute_s", "sync_s"]].sum(axis=1)
    assert len(steps) > 0 and (steps["unattributed_s"] - (steps["step_s"] - parts)).abs().max() < 1e-9


def test_miles_hand_off_is_its_own_phase_carved_out_of_the_wait(ingested):
    # miles/run.log `perf 0`: sleep_time 1.8266 + wake_up_time 1.0176 inside train_wait_time 3.1951
    steps = read_steps(ingested["slime"] / "trace" / "steps.parquet")
    first = steps.iloc[0]
    assert first["handoff_s"] == 1.8265876770019531 + 1.0175905227661133
    assert first["wait_s"] == 3.1950531005859375  # trainer idle keeps the whole wait
    assert step_phases(steps).iloc[0]["wait_s"] == first["wait_s"] - first["handoff_s"]
    assert _verdict(ingested["slime"]).label == "hand-off-bound"
