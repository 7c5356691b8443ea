"""slime runner: log parsing on real Miles / slime lines, flag translation, schema check, goldens.

Regenerate goldens after an intended render change: UPDATE_GOLDEN=1 pytest tests/runners/test_slime.py
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
from pathlib import Path

import pytest

from bench.config import compose
from runners import slime
from runners.base import load_runner
from runners.data_paths import REPO
from runners.slime_logs import LogState, build_steps, parse_payload
from tests.conftest import repo_neutral

GOLDEN = Path(__file__).parent / "golden" / "slime"
H100_PEAK = 989.0e12  # conf/hardware/h100_sxm.yaml, FLOP/s


def cfg_for(*overrides: str):
    return compose([*overrides, "framework=slime"])


@pytest.fixture(scope="module")
def miles(opd_results: Path):
    return load_runner(cfg_for().framework).parse_logs(opd_results / "miles", peak_flops=H100_PEAK)


# ---- parse: the real Miles run of the opd-benchmark (REPORT.md: wait ratio 85.6%, steady step 11.49 s)


def test_miles_fifteen_steps_with_native_step_times(miles):
    steps = miles.steps
    assert [r["step"] for r in steps] == list(range(15))
    assert steps[0]["step_s"] == 9.19837760925293
    assert steps[1]["step_s"] == 12.342404127120972
    assert steps[14]["step_s"] == 11.150671005249023
    assert round(statistics.mean(r["step_s"] for r in steps[1:]), 2) == 11.49
    assert miles.skipped_lines == 0


def test_miles_wait_ratio_as_printed(miles):
    ratios = [r["native_wait_time_ratio"] for r in miles.steps]
    assert ratios[0] == 0.34734963450205997
    assert ratios[14] == 0.8616160291801649
    assert round(statistics.mean(ratios[1:]), 3) == 0.856  # REPORT.md: 85.6% after the first step
    assert miles.steps[0]["wait_s"] == 3.1950531005859375


def test_miles_update_weights_belongs_to_the_previous_step(miles):
    # perf 1 prints update_weights 0.0673... which ran after step 0's training
    assert miles.steps[0]["sync_s"] == 0.06730031967163086
    assert miles.steps[13]["sync_s"] == 0.06666374206542969
    assert "sync_s" not in miles.steps[14]
    assert miles.run_info["initial_update_weights_s"] == 0.0872030258178711
    assert any("step 14: sync_s unknown" in w for w in miles.warnings)


def test_miles_phases_tokens_and_mfu(miles):
    s0 = miles.steps[0]
    assert s0["gen_s"] == 1.8359794616699219  # rollout-side perf 0
    assert s0["compute_s"] == 3.7966468334198
    assert s0["logprob_s"] == 0.20662450790405273 + 1.91172194480896
    assert (s0["samples"], s0["prompts"]) == (128, 8)
    assert s0["response_tokens"] == 15390  # 120.234375 mean response x 128 samples
    assert s0["prompt_tokens"] == 6720  # (172.734375 - 120.234375) x 128
    assert s0["generated_tokens"] == 15390  # tokens/GPU/s x rollout_time x 1 GPU: nothing discarded
    assert s0["native_mfu"] == 18.413116308843197e12 / H100_PEAK
    assert s0["staleness_mean"] == 0.0 and s0["staleness_max"] == 0.0  # colocated, synchronous
    assert s0["solve_all_frac"] == 0.0 and s0["solve_none_frac"] == 0.0  # Miles' zero_std shares
    assert miles.steps[14]["response_tokens"] == 7298  # 57.015625 x 128
    # first update at 13:45:12.196, launcher start 13:42:31 (REPORT.md: Miles first update 161 s)
    assert s0["t_end_s"] == pytest.approx(161.196, abs=1e-3)
    assert s0["t_start_s"] == pytest.approx(161.196 - 9.19837760925293, abs=1e-3)


def test_miles_run_info(miles):
    info = miles.run_info
    assert info["mode"] == "colocate_sync"
    assert info["staleness_bound"] == 0
    assert info["driver_argv"][:2] == ["python3", "train.py"]
    assert info["batch_shape"]["rollout_batch_size"] == 8
    assert info["records"] == {"perf": 30, "rollout": 15, "step": 30}  # step dicts are printed twice
    assert info["env_files"]["wall_time.env"]["framework_wall_seconds"] == 300
    assert (info["start_epoch"], info["end_epoch"], info["wall_seconds"]) == (1786110151, 1786110486, 335)
    assert sorted(Path(f).name for f in miles.files) == ["ray.log", "run.log", "teacher.log"]


def test_peak_comes_from_the_composed_hardware(opd_results: Path):
    runner = load_runner(cfg_for("hardware=h100_sxm").framework)
    steps = runner.parse_logs(opd_results / "miles" / "run.log").steps
    assert steps[0]["native_mfu"] == 18.413116308843197e12 / H100_PEAK


def test_single_file_parses_like_its_folder(opd_results: Path, miles):
    one = load_runner(cfg_for().framework).parse_logs(opd_results / "miles" / "run.log", peak_flops=H100_PEAK)
    assert [r["step_s"] for r in one.steps] == [r["step_s"] for r in miles.steps]


# ---- parse: verbatim slime lines from GitHub issues (the research notes' slime.md section 3.4)


@pytest.fixture(scope="module")
def issue_lines(reference_dir: Path) -> list[str]:
    text = (reference_dir / "slime.md").read_text()
    section = text[text.index("### 3.4") : text.index("## 4.")]
    return [
        ln.strip()
        for ln in section.splitlines()
        if ln.strip().startswith(("(RolloutManager", "(MegatronTrainRayActor"))
    ]


def feed(lines: list[str | bytes]) -> LogState:
    state = LogState()
    for ln in lines:
        state.feed(ln if isinstance(ln, bytes) else ln.encode() + b"\n")
    return state


def test_issue_rollout_side_perf(issue_lines):
    state = feed(issue_lines[:1])
    assert state.rollout_perf[0]["perf/rollout_time"] == 371.1796889305115
    assert state.rollout_perf[0]["rollout/zero_std/count_1"] == 14
    rows, _, _ = build_steps(state)
    assert rows == [
        {"step": 0, "gen_s": 371.1796889305115, "native_tokens_per_gpu_per_s": 239.12643295688667}
    ]
    # with the batch shape known (argument dump: 32 prompts), zero_std counts become solve fractions
    state = feed(["  rollout_batch_size .............................. 32", issue_lines[0]])
    row = build_steps(state)[0][0]
    assert (row["solve_all_frac"], row["solve_none_frac"]) == (14 / 32, 12 / 32)


def test_issue_train_side_lines(issue_lines):
    state = feed(issue_lines[1:])
    assert state.counts == {"passrate": 1, "multi_turn": 1, "perf": 1}
    assert state.skipped == 0  # "Timer actor_train start" carries no dict: not a record
    row = build_steps(state)[0][0]
    assert row["step"] == 2
    assert row["step_s"] == 14.182998418807983
    assert row["wait_s"] == 11.333874011039734
    assert row["native_wait_time_ratio"] == 0.7994600137133985
    assert row["compute_s"] == 1.0247735977717285


def test_teacher_forward_is_score_s_not_logprob_s(miles):
    """--opd-type megatron times the teacher's forward as `teacher_log_probs` (slime v0.3.1
    backends/megatron_utils/actor.py: timer(f"{store_prefix}log_probs"), store_prefix "teacher_").
    The line below is Miles' real `perf 0` record with that key as slime writes it."""
    line = (
        "(MegatronTrainRayActor pid=48367) [2026-08-07 13:45:12.196 actor_cell0_rank0] train_metric_utils.py:50"
        " - perf 0: {'perf/train_wait_time': 3.1950531005859375, 'perf/ref_log_probs_time': 1.91172194480896,"
        " 'perf/teacher_log_probs_time': 0.8421, 'perf/log_probs_time': 0.20662450790405273,"
        " 'perf/actor_train_time': 3.7966468334198, 'perf/step_time': 9.19837760925293}"
    )
    row = build_steps(feed([line]))[0][0]
    assert row["score_s"] == 0.8421
    assert row["logprob_s"] == 0.20662450790405273 + 1.91172194480896
    # Miles' external SGLang teacher is asked during rollout: no teacher timer in the real run
    assert not any("score_s" in r for r in miles.steps)


def test_legacy_total_train_time_is_step_time():
    line = "(MegatronTrainRayActor pid=7) [2025-09-20 10:00:00] train.py:90 - perf 3: {'perf/total_train_time': 287.2645092010498}"
    row = build_steps(feed([line]))[0][0]
    assert row["step_s"] == 287.2645092010498


# ---- parse: robustness


def test_payload_is_parsed_safely():
    assert math.isnan(parse_payload("{'train/grad_norm': nan, 'a': 1}")["train/grad_norm"])
    assert parse_payload("{'x': inf, 'y': -inf}") == {"x": math.inf, "y": -math.inf}
    assert parse_payload("{'x': np.float64(0.5)}") == {"x": 0.5}
    assert parse_payload("{'perf/nan_count': 2}") == {"perf/nan_count": 2}
    assert parse_payload("{'a': __import__('os').system('true')}") is None
    assert parse_payload("[1, 2]") is None
    assert parse_payload("{'a': 1, 'b'") is None


def test_truncated_interleaved_and_foreign_lines_never_crash():
    good = "(MegatronTrainRayActor pid=1) [2026-01-05 12:20:29] x.py:1 - perf {i}: {{'perf/step_time': {s}, 'perf/train_wait_time': 1.0, 'perf/new_timer_time': 3.0}}"
    lines: list[str | bytes] = [
        good.format(i=0, s=10.0),
        good.format(i=1, s=12.0) + " [repeated 2x across cluster]",
        "(MegatronTrainRayActor pid=1) [2026-01-05 12:20:30] x.py:1 - perf 2: {'perf/step_time': 1(RolloutManager pid=2) noise",
        b"\xff\xfe binary garbage: {\n",
        "step 7: {'train/loss': 0.5}",
        good.format(i=3, s=9.0)[:-20],  # truncated last line
    ]
    state = feed(lines)
    rows, warnings, _ = build_steps(state)
    assert [r["step"] for r in rows] == [0, 1]
    assert [r["step_s"] for r in rows] == [10.0, 12.0]
    assert state.skipped == 2  # the interleaved and the truncated record; garbage is not a record
    assert any("2 record line(s)" in w for w in warnings)
    assert state.counts["step"] == 1


def test_partial_samples_are_attributed_to_their_rollout():
    perf = "(RolloutManager pid=2) [2026-01-05 12:20:{s:02d}] rollout.py:1 - perf {i}: {{'perf/rollout_time': 5.0}}"
    partial = "(RolloutManager pid=2) [2026-01-05 12:20:{s:02d}] sglang_rollout.py:9 - Collected {n} partial samples into the data buffer"
    block = "\n".join(
        [partial.format(s=1, n=24), perf.format(s=2, i=0), perf.format(s=3, i=1), partial.format(s=4, n=8), perf.format(s=5, i=2)]
    )  # fmt: skip
    state = feed([block])
    assert state.partial_by_rollout == {0: 24, 2: 8}
    rows = build_steps(state)[0]
    assert [r.get("native_partial_samples_buffered") for r in rows] == [24.0, None, 8.0]


def test_parse_logs_on_missing_or_empty_dir(tmp_path):
    runner = load_runner(cfg_for().framework)
    assert runner.parse_logs(tmp_path / "nope").warnings == [
        f"{tmp_path / 'nope'}: no such file or directory"
    ]
    (tmp_path / "driver.log").write_text("nothing here\n")
    result = runner.parse_logs(tmp_path)
    assert result.steps == [] and any("no slime perf records" in w for w in result.warnings)


# ---- render: translation keeps the workload identical


def flags_of(cfg) -> dict[str, str | None]:
    runner = load_runner(cfg.framework)
    pairs = slime.driver_flags(cfg, runner.resolve_mode(cfg))
    return {f: (None if v is None else " ".join(slime._word(v))) for f, v in pairs}


def test_smoke_translation():
    cfg = cfg_for("experiment=smoke")
    f = flags_of(cfg)
    assert f["--rollout-batch-size"] == "64"  # prompts
    assert f["--n-samples-per-prompt"] == "16"
    assert f["--global-batch-size"] == "1024"  # samples
    assert f["--actor-num-nodes"] == "1" and f["--actor-num-gpus-per-node"] == "8"
    assert f["--rollout-num-gpus"] == "8"
    assert f["--rotary-base"] == "1000000"  # Megatron parses it as int
    assert "--use-kl-loss" not in f and "--colocate" not in f and "--use-wandb" not in f
    assert f["--update-weights-interval"] == "1"
    launch = load_runner(cfg.framework).render_launch(cfg)
    assert launch.processes[-1].argv[1] == "/root/slime/train_async.py"
    assert launch.nodes == 2


@pytest.mark.parametrize(
    ("overrides", "mode", "script"),
    [
        (["experiment.placement=colocated"], "colocate_sync", "train.py"),
        (["workload.staleness_budget=0"], "sync", "train.py"),
        (["workload.staleness_budget=2"], "async", "train_async.py"),
        (["experiment.partial_rollout=true"], "partial_rollout", "train_async.py"),
    ],
)
def test_resolve_mode(overrides, mode, script):
    cfg = cfg_for("experiment=smoke", *overrides)
    runner = load_runner(cfg.framework)
    assert runner.resolve_mode(cfg) == mode
    assert runner.render_launch(cfg).processes[-1].argv[1].endswith("/" + script)
    assert runner.validate(cfg) == []


def test_colocated_train_async_is_refused():
    cfg = cfg_for("experiment=smoke", "experiment.placement=colocated", "framework.mode=async")
    problems = load_runner(cfg.framework).validate(cfg)
    assert any("train_async.py refuses --colocate" in p for p in problems)


def test_kl_wandb_oversampling_and_filter():
    cfg = cfg_for(
        "experiment=smoke", "workload.kl_coef=0.001", "experiment.oversampling=1.5",
        "experiment.filter_zero_advantage=true", "framework.native.wandb=true", "workload.std_normalize=false",
    )  # fmt: skip
    f = flags_of(cfg)
    assert f["--kl-loss-coef"] == "0.001" and "--use-kl-loss" in f
    assert f["--ref-load"] == str(REPO / ".models" / "Qwen" / "Qwen3-8B_torch_dist")  # cluster.model_root
    assert f["--over-sampling-batch-size"] == "96"  # ceil(64 x 1.5) prompts
    assert f["--dynamic-sampling-filter-path"] == slime.DYNAMIC_FILTER
    assert f["--wandb-mode"] == "offline" and f["--wandb-group"] == "smoke-slime"
    assert "--disable-grpo-std-normalization" in f
    assert load_runner(cfg.framework).validate(cfg) == []


def test_unknown_extra_flag_is_reported():
    cfg = cfg_for("experiment=smoke", "framework.native.extra_args=[--rollout-batch-sise 3]")
    problems = load_runner(cfg.framework).validate(cfg)
    assert problems == ["flag --rollout-batch-sise is not accepted by slime 0.3.1"]


def test_bad_value_type_is_reported():
    problems = slime.check_values(
        [("--rotary-base", "1e6"), ("--colocate", "yes"), ("--advantage-estimator", "ppo2")]
    )
    assert problems == [
        "--rotary-base='1e6'; expected int",
        "--colocate is a switch; got value 'yes'",
        "--advantage-estimator='ppo2'; expected one of "
        "['grpo', 'gspo', 'cispo', 'reinforce_plus_plus', 'reinforce_plus_plus_baseline', 'ppo']",
    ]


EXPERIMENTS = [
    ["experiment=smoke"],
    ["experiment=semianalysis_case4"],
    ["experiment=semianalysis_case1", "experiment.frameworks=[prime_rl,slime]"],
    ["experiment=semianalysis_case2", "experiment.frameworks=[prime_rl,slime]"],
]


@pytest.mark.parametrize("overrides", EXPERIMENTS, ids=lambda o: o[0].split("=")[1])
def test_every_rendered_flag_is_in_the_schema(overrides):
    cfg = cfg_for(*overrides)
    runner = load_runner(cfg.framework)
    launch = runner.render_launch(cfg)
    argv = launch.processes[-1].argv
    assert slime.unknown_flags(argv) == []
    assert slime.check_values(slime.driver_flags(cfg, runner.resolve_mode(cfg))) == []
    assert runner.validate(cfg) == []
    assert "pkill" not in launch.sbatch


def test_glm5_gets_mla_and_dsa_flags():
    f = flags_of(cfg_for("experiment=semianalysis_case2", "experiment.frameworks=[slime]"))
    assert f["--spec"] == "slime_plugins.models.glm5.glm5 get_glm5_spec"
    assert "--multi-latent-attention" in f and "--allgather-cp" in f
    assert (f["--q-lora-rank"], f["--kv-lora-rank"], f["--qk-head-dim"], f["--v-head-dim"]) == (
        "2048",
        "512",
        "192",
        "256",
    )
    assert f["--moe-layer-freq"] == "[0]*3+[1]*75"
    assert f["--moe-shared-expert-intermediate-size"] == "2048"
    assert f["--rollout-num-gpus-per-engine"] == "32"  # tp 1 x dp 32 (DP attention)
    assert f["--sglang-dp-size"] == "32" and "--sglang-enable-dp-attention" in f


@pytest.mark.parametrize(
    "model, rotary_base, eps, rotary_percent, qk_layernorm, qkv_bias, router",
    [
        ("qwen3_8b", "1000000", "1e-6", "1.0", True, False, None),
        ("qwen3_235b_a22b_2507", "5000000", "1e-6", "1.0", True, False, "softmax"),
        ("glm4_5_air", "1000000", "1e-5", "0.5", False, True, "sigmoid"),
    ],
)
def test_model_facts_come_from_conf_model(
    model, rotary_base, eps, rotary_percent, qk_layernorm, qkv_bias, router
):
    f = flags_of(cfg_for("experiment=smoke", f"model={model}"))
    assert (f["--rotary-base"], f["--norm-epsilon"], f["--rotary-percent"]) == (
        rotary_base,
        eps,
        rotary_percent,
    )
    assert ("--qk-layernorm" in f, "--add-qkv-bias" in f) == (qk_layernorm, qkv_bias)
    assert f.get("--moe-router-score-function") == router


def test_a_model_without_its_layer_facts_is_refused_by_key():
    problems = load_runner(cfg_for().framework).validate(cfg_for("experiment=smoke", "model=qwen2_5_7b"))
    assert problems[0] == (
        "model.rope_theta is unknown for Qwen/Qwen2.5-Math-7B: slime passes it to Megatron; "
        "add it from the model's config.json to its conf/model YAML"
    )
    assert len(problems) == 5  # rope_theta, rms_norm_eps, partial_rotary_factor, qk_norm, qkv_bias


def test_schema_provenance_and_coverage():
    schema = slime.load_schema()
    assert schema["sources"]["slime"]["commit"].startswith("a6272da0d4f3")
    assert schema["sources"]["megatron"]["commit"] == "1dcf0dafa884ad52ffb243625717a3471643e087"
    assert schema["sources"]["sglang"]["package"] == "sglang==0.5.15.post1"
    assert sorted(schema["megatron"]) == sorted(slime.MEGATRON_FLAGS)
    assert sorted(schema["sglang"]) == sorted(slime.SGLANG_FLAGS)
    assert schema["slime"]["--rollout-batch-size"] == {"type": "int"}
    assert schema["megatron"]["--rotary-base"]["type"] == "int"


def test_sbatch_is_valid_bash():
    launch = load_runner(cfg_for("experiment=semianalysis_case4").framework).render_launch(
        cfg_for("experiment=semianalysis_case4")
    )
    out = subprocess.run(["bash", "-n"], input=launch.sbatch, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "train_async.py" in launch.sbatch and "RAY_DEDUP_LOGS" in launch.sbatch


@pytest.mark.parametrize("exp", ["smoke", "semianalysis_case4"])
def test_golden_render(exp, tmp_path):
    cfg = cfg_for(f"experiment={exp}")
    load_runner(cfg.framework).render_launch(cfg).write(tmp_path)
    golden = GOLDEN / exp
    names = ["command.json", "flags.txt", "job.sbatch"]
    if os.environ.get("UPDATE_GOLDEN"):
        golden.mkdir(parents=True, exist_ok=True)
        for n in names:
            (golden / n).write_text(repo_neutral((tmp_path / n).read_text()))
    for n in names:
        assert repo_neutral((tmp_path / n).read_text()) == (golden / n).read_text(), (
            f"{exp}/{n} differs from the golden"
        )
    assert json.loads((tmp_path / "command.json").read_text())["framework"] == "slime"


def test_native_hook_without_slime_installed():
    cfg = cfg_for("experiment=smoke")
    runner = load_runner(cfg.framework)
    if __import__("importlib").util.find_spec("slime") is not None:
        pytest.skip("slime is installed: the hook would run its real parser")
    assert runner.validate_native(cfg, runner.render_launch(cfg)) == ["slime is not installed here"]


def test_derivation_reads_argparse_calls_and_rejects_missing_flags():
    from runners.schemas.derive_slime import argparse_calls, pick

    src = (
        "def add(parser):\n"
        "    parser.add_argument('--offload-train', action=argparse.BooleanOptionalAction)\n"
        "    parser.add_argument('--kl-loss-type', type=str, choices=['k1', 'k3'], default='k1')\n"
        "    reset_arg(parser, '--lr', type=float, default=1e-6)\n"
    )
    flags = argparse_calls(src)
    assert flags["--no-offload-train"] == {"action": "BooleanOptionalAction", "type": "bool"}
    assert flags["--kl-loss-type"] == {"type": "str", "choices": ["k1", "k3"]}
    assert flags["--lr"] == {"type": "float"}
    with pytest.raises(SystemExit, match="--nope"):
        pick(["--nope"], flags, "arguments.py")
