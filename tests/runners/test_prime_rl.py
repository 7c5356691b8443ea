"""runners/prime_rl.py: the workload -> rl.toml translation (checked key by key against the schema
derived from prime-rl v0.8.0's pydantic classes), the multi-node layout and job.sbatch, the goldens,
and the log parser on the opd-benchmark Prime-RL run plus the verbatim lines of prime-rl.md 3.6."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from bench.config import compose
from bench.trace import read_steps, write_rollouts, write_steps
from runners.base import load_runner
from runners.data_paths import REPO
from runners.prime_rl import KEYS, check_keys, layout, load_schema, toml_dumps
from tests.conftest import repo_neutral
from tests.runners.stub_job import run_stub_job

GOLDEN = Path(__file__).parent / "golden" / "prime_rl"
EXPERIMENTS = ["smoke", "semianalysis_case1", "semianalysis_case2"]


def _cfg(exp: str, *overrides: str):
    return compose([f"experiment={exp}", "framework=prime_rl", *overrides])


def _render(exp: str, *overrides: str):
    cfg = _cfg(exp, *overrides)
    return cfg, load_runner(cfg.framework).render_launch(cfg)


def _rl(launch) -> dict:
    return tomllib.loads(launch.files["rl.toml"])


# ---- schema and translation --------------------------------------------------------------------
def test_schema_names_the_pinned_repository_and_commit():
    schema = load_schema("0.8.0")
    conf = compose(["framework=prime_rl"]).framework
    assert schema["repository"] == "https://github.com/PrimeIntellect-ai/prime-rl"
    assert schema["commit"] == "60bc29547a8824ad1de7b9af8d265e2b27b2a72d"
    assert schema["commit"].startswith(conf.commit) and conf.version == schema["version"] == "0.8.0"
    assert set(KEYS) == {"0.8.0"}


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_rendered_key_exists_at_v0_8_0_with_the_right_type(exp):
    _, launch = _render(exp)
    assert check_keys(_rl(launch), load_schema("0.8.0")) == []


def test_schema_check_fails_on_renamed_keys_wrong_types_and_bad_literals():
    doc = {
        "orchestrator": {"rollouts_per_example": 16, "batch_size": "512", "algo": {"type": "gspo"}},
        "inference": {"vllm": {"tensor_parallel_size": 8}},  # renamed on 2026-08-08, after v0.8.0
        "trainer": {"model": {"ac_offloading": "None", "ep": "auto"}},  # TOML null; literal "auto"
    }
    assert check_keys(doc, load_schema("0.8.0")) == [
        "orchestrator.rollouts_per_example: unknown key at prime-rl 0.8.0 (60bc2954)",
        "orchestrator.batch_size='512': str given, expected int | null",
        "orchestrator.algo.type='gspo': expected one of "
        "['grpo', 'echo', 'max_rl', 'rae', 'hierarchical_grpo', 'opd', 'opsd', 'sft']",
        "inference.vllm: unknown key at prime-rl 0.8.0 (60bc2954)",
    ]


def test_smoke_translation_counts_rollouts_and_sets_group_size():
    _, launch = _render("smoke")
    rl = _rl(launch)
    orch = rl["orchestrator"]
    assert orch["batch_size"] == 64 * 16 and orch["group_size"] == 16  # rollouts, not prompts
    assert orch["max_off_policy_steps"] == 1
    assert orch["train"]["sampling"] == {"max_completion_tokens": 8192, "temperature": 1.0}
    assert rl["seq_len"] == 1024 + 8192 == rl["inference"]["model"]["max_model_len"]
    assert rl["deployment"] == {
        "type": "multi_node", "gpus_per_node": 8, "num_train_nodes": 1, "num_infer_nodes": 1, "num_infer_replicas": 1,
    }  # fmt: skip
    assert rl["file_monitor"] == {}
    assert rl["trainer"]["wandb"]["offline"] is rl["orchestrator"]["wandb"]["offline"] is True
    assert [f["enforce"] for f in orch["post_batch_filters"]] == [False, False, False]
    source = orch["train"]["source"][0]
    assert source["env"]["taskset"] == {
        "id": "math-env-v1",
        "dataset_name": str(
            REPO / ".data" / "BytedTsinghua-SIA__DAPO-Math-17k" / "prime_rl"
        ),  # bench prepare's
    }
    assert orch["renderer"]["name"] == "qwen3"


def test_case1_layout_is_24_tp8_ep_replicas_and_8_fsdp_trainer_nodes():
    _, launch = _render("semianalysis_case1")
    rl = _rl(launch)
    assert rl["orchestrator"]["batch_size"] == 512 and rl["orchestrator"]["max_off_policy_steps"] == 16
    assert rl["orchestrator"]["oversampling_factor"] == 1.5
    assert (
        rl["inference"]["parallel"] == {"tp": 8, "dp": 1}
        and rl["inference"]["enable_expert_parallel"] is True
    )
    assert rl["inference"]["quantization"] == "fp8"
    assert rl["deployment"]["num_infer_replicas"] == 24 and rl["deployment"]["num_train_nodes"] == 8
    assert rl["trainer"]["model"] == {"ep": 8, "cp": 1, "optim_cpu_offload": True, "ac_offloading": {}}
    assert launch.nodes == 32
    assert sorted({p.node_rank for p in launch.processes if p.role == "inference"}) == list(range(24))
    assert [p.node_rank for p in launch.processes if p.role == "trainer"] == list(range(24, 32))
    orch = next(p for p in launch.processes if p.role == "orchestrator")
    assert orch.node_rank == 24 and "PRIME_API_KEY" in orch.secret_env


def test_case2_moe_replicas_form_one_dp_group_over_four_nodes():
    cfg, launch = _render("semianalysis_case2")
    lay = layout(cfg)
    assert (lay.infer_replicas, lay.infer_nodes_per_replica, lay.dp, lay.ep_group) == (4, 4, 32, True)
    engines = [p for p in launch.processes if p.role == "inference"]
    assert len(engines) == 128
    # node 5 is rank 1 of replica 1 (nodes 4-7): its DP ranks 8..15 join the group rooted on node 4
    extra = [json.loads(p.argv[p.argv.index("--vllm-extra") + 1]) for p in engines if p.node_rank == 5]
    assert [e["data_parallel_rank"] for e in extra] == list(range(8, 16))
    assert {e["data_parallel_address"] for e in extra} == {"${NODES[4]}"}
    router = next(p for p in launch.processes if p.role == "router")
    assert len(router.argv) - router.argv.index("--worker-urls") - 1 == 128
    assert any("without prefill/decode disaggregation" in n for n in launch.notes)


def test_notes_record_what_prime_rl_cannot_do():
    _, launch = _render("smoke")
    assert any("cannot divide advantages by the group std" in n for n in launch.notes)
    _, launch = _render("smoke", "workload.std_normalize=false")
    assert not any("group std" in n for n in launch.notes)


def test_validate_refuses_colocated_on_policy_and_trainer_tp():
    cfg = _cfg(
        "smoke", "experiment.placement=colocated", "workload.staleness_budget=0", "experiment.trainer.tp=2"
    )
    problems = load_runner(cfg.framework).validate(cfg)
    assert [p.split(":")[0] for p in problems] == [
        "experiment.placement=colocated",
        "workload.staleness_budget=0",
        "experiment.trainer tp=2 pp=1",
    ]
    with pytest.raises(ValueError, match="staleness_budget=0"):
        load_runner(cfg.framework).render_launch(cfg)
    assert load_runner(cfg.framework).validate(_cfg("smoke")) == []


def test_only_async_mode_exists():
    cfg = _cfg("smoke")
    assert load_runner(cfg.framework).resolve_mode(cfg) == "async"
    cfg = _cfg("smoke", "framework.mode=sync")
    with pytest.raises(ValueError, match=r"supports \[.async.\]"):
        load_runner(cfg.framework).resolve_mode(cfg)


def test_toml_writer_round_trips_and_is_sorted():
    doc = {"b": 1, "a": {"z": [1, 2], "y": 'q"uote', "x": {"w": 1.5}}, "s": [{"n": 1}, {"n": 2}], "e": {}}
    text = toml_dumps(doc)
    assert tomllib.loads(text) == doc
    # keys sorted at every level, scalars and small arrays of tables before [tables] (tomli-w's layout)
    assert [ln for ln in text.splitlines() if ln and not ln.startswith(" ")] == [
        "b = 1", "s = [", "]", "[a]", 'y = "q\\"uote"', "z = [", "]", "[a.x]", "w = 1.5", "[e]",
    ]  # fmt: skip


# ---- job.sbatch and goldens ----------------------------------------------------------------------
SITES = [
    (),
    ("cluster=example_site", "cluster.container.image=me/prime-rl:0.8.0"),
    ("cluster=example_site", "cluster.container.kind=apptainer", "cluster.container.image=/img/prime-rl.sif"),
]


@pytest.mark.parametrize("site", SITES, ids=["local", "pyxis", "apptainer"])
@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_sbatch_is_valid_bash_lint_clean_and_never_pkills(tmp_path, exp, site):
    _, launch = _render(exp, *site)
    script = tmp_path / "job.sbatch"
    script.write_text(launch.sbatch)
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert "pkill" not in launch.sbatch and "killall" not in launch.sbatch
    assert f"#SBATCH --nodes={launch.nodes}" in launch.sbatch
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed here")
    res = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def test_sbatch_puts_master_on_the_first_trainer_node():
    _, launch = _render("semianalysis_case1")
    assert 'MASTER_ADDR="${NODES[24]}"' in launch.sbatch
    assert '"${ON_NODE[@]}" "${NODES[24]}" uv run --no-sync rl @ "${RUN_DIR}/launch/rl.toml"' in launch.sbatch


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_golden_render(tmp_path, exp):
    _, launch = _render(exp)
    launch.write(tmp_path)
    golden = GOLDEN / exp
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.mkdir(parents=True, exist_ok=True)
        for f in tmp_path.iterdir():
            (golden / f.name).write_text(repo_neutral(f.read_text()))
    for name in ("command.json", "rl.toml", "job.sbatch"):
        assert repo_neutral((tmp_path / name).read_text()) == (golden / name).read_text(), (
            f"{exp}/{name} differs from the golden"
        )


def test_command_json_names_secrets_without_values():
    _, launch = _render("semianalysis_case1")
    cmd = launch.command_json()
    assert {r["role"] for r in cmd["processes"]} == {
        "inference",
        "router",
        "trainer",
        "env_server",
        "orchestrator",
    }
    assert all("HF_TOKEN" not in r["env"] for r in cmd["processes"])
    assert ["HF_TOKEN", "PRIME_API_KEY"] == next(r for r in cmd["processes"] if r["role"] == "orchestrator")[
        "secret_env"
    ]


# ---- parser: the opd-benchmark Prime-RL run -----------------------------------------------------
@pytest.fixture(scope="module")
def prime_run(opd_results):
    cfg = _cfg("smoke")
    return load_runner(cfg.framework).parse_logs(opd_results / "prime")


def test_parses_fifteen_steps_from_the_opd_run(prime_run):
    assert [r["step"] for r in prime_run.steps] == list(range(1, 16))
    assert prime_run.skipped_lines == 0 and prime_run.warnings == []
    assert sorted(Path(f).name for f in prime_run.files) == [
        "metrics.jsonl", "orchestrator.log", "run.log", "trainer.log", "trainer_metrics.jsonl",
    ]  # fmt: skip


def test_step_one_as_logged(prime_run):
    s = prime_run.steps[0]
    assert s["step_s"] == 78.409446226  # trainer time/step (includes the first wait for a batch)
    assert s["wait_s"] == 60.32022141499874 and s["compute_s"] == 15.245477651000328
    assert s["sync_s"] == 2.7905032399994525
    assert (s["samples"], s["prompts"], s["prompt_tokens"], s["response_tokens"]) == (128, 8, 6160, 15019)
    assert s["generated_tokens"] == 15019  # progress/tokens == input + output: nothing dropped
    assert s["native_throughput_tokens_per_s"] == 1460.3674945231483
    assert s["native_mfu"] == pytest.approx(0.00630850973736349)  # perf/mfu 0.63 (%)
    assert s["reward_mean"] == 0.13348942680172912 and s["solve_none_frac"] == 0.125


def test_report_figures_follow_from_the_trace(prime_run):
    """REPORT.md: 535.7 generated response tokens/s over 276 s; 6.79 s native steady step."""
    steps = prime_run.steps
    wall = prime_run.run_info["wall_time_env"]["wall_seconds"]
    assert wall == 276
    assert sum(s["response_tokens"] for s in steps) == 147864
    assert round(sum(s["response_tokens"] for s in steps) / wall, 1) == 535.7
    assert round(sum(s["samples"] for s in steps) / wall, 2) == 6.96
    assert round(sum(s["step_s"] for s in steps[1:]) / 14, 2) == 6.79


def test_staleness_from_the_orchestrator_console(prime_run):
    # this run (v0.7) logged no off_policy/* metrics; "Max Off-Policy k" is in the Step lines
    assert [s["staleness_max"] for s in prime_run.steps] == [0, 1, 2, 3, 2, 3, 4, 2, 3, 3, 4, 3, 4, 4, 2]


def test_time_axis_starts_at_the_harness_start(prime_run):
    assert prime_run.run_info["t0_unix_s"] == 1786108894
    last = prime_run.steps[-1]
    assert last["t_end_s"] == pytest.approx(1786109151.2183063 - 1786108894)
    assert last["t_start_s"] == pytest.approx(last["t_end_s"] - 6.413451460999568)


def test_rows_satisfy_the_trace_contract(tmp_path, prime_run):
    write_steps(tmp_path / "steps.parquet", prime_run.steps)
    df = read_steps(tmp_path / "steps.parquet")
    assert len(df) == 15 and int(df["response_tokens"].sum()) == 147864


def test_one_shared_metrics_file_parses_like_two(tmp_path, opd_results, prime_run):
    """v0.8.0 writes trainer and orchestrator rows into one metrics.jsonl, interleaved, untagged."""
    trainer = (opd_results / "prime" / "trainer_metrics.jsonl").read_text().splitlines()
    orch = (opd_results / "prime" / "metrics.jsonl").read_text().splitlines()
    mixed = [line for i in range(15) for line in (*trainer[5 * i : 5 * i + 5], orch[i])]
    (tmp_path / "metrics.jsonl").write_text("\n".join(mixed) + "\n")
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    strip = {"t_start_s", "t_end_s"}  # no wall_time.env here: the axis starts at step 1
    assert [{k: v for k, v in r.items() if k not in strip} for r in res.steps] == [
        {k: v for k, v in r.items() if k not in strip and k != "staleness_max"} for r in prime_run.steps
    ]


def test_truncated_interleaved_and_foreign_lines_are_counted_not_fatal(tmp_path, opd_results):
    orch = (opd_results / "prime" / "metrics.jsonl").read_text().splitlines()
    lines = [
        *orch[:3],
        orch[3] + orch[4],
        '{"step": 9, "time": 1.0, "custom/thing": 1}',
        "\x00\xff",
        orch[5][:500],
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    assert [r["step"] for r in res.steps] == [1, 2, 3]
    assert res.skipped_lines == 3  # two writers on one line, a binary line, a truncated tail
    assert res.warnings == [
        "1 metrics.jsonl row(s) matched neither trainer nor orchestrator",
        "3 metrics.jsonl line(s) were not valid JSON objects (skipped)",
    ]


def test_missing_directory_is_a_warning():
    res = load_runner(_cfg("smoke").framework).parse_logs("/nonexistent/prime")
    assert res.steps == [] and "no such file or directory" in res.warnings[0]


# ---- parser: verbatim console lines (prime-rl.md 3.6) -------------------------------------------
VERBATIM = [
    "02:40:53 SUCCESS Step 1 | Time: 0.60s | Loss: 12.3125 | Grad. Norm: 28.4812 | LR: 1.00e-06 | "
    "Throughput: 3324 tokens/s | MFU: 1.0% | Peak Mem.: 5.2/23.7 GiB (22.1%) | Max Vio: 0.9891",
    "02:15:51 SUCCESS Step 13 | Time: 72.00s | Reward: 0.3400 | Throughput: 2314.0 tokens/s | "
    "Seq. Length: 323.7 tokens/sample | Async Level: 1 | Max. Off-Policy Level: 0",
    "00:27:06    INFO Detected 97/128 rollouts (gibberish=2, zero_advantage=95), enforced 95",
    "00:27:06 SUCCESS Step 9 | Time: 3.20s | Reward: 0.9912 | Seq. Length: 331.1 tokens/sample | "
    "Async Level: 1 | Max. Off-Policy Level: 0",
    "00:27:08    INFO Orchestrator resumed: checkpoint 9 ready (after 2.00s)",
    "16:43:42    INFO Orchestrator paused: waiting for trainer process to complete checkpoint 14 "
    "(>1 step(s) ahead). Training is progressing normally.",
    "[default0]:20:40:37    INFO Initializing optimizer (lr=1e-06 weight_decay=0.01 max_norm=1.0 "
    "type='adamw' betas1=0.9 betas2=0.999)",
]


def test_verbatim_github_lines(tmp_path):
    (tmp_path / "console.log").write_text("\n".join(VERBATIM) + "\n")
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    by_step = {r["step"]: r for r in res.steps}
    assert by_step[1] == {
        "step": 1,
        "step_s": 0.60,
        "native_throughput_tokens_per_s": 3324.0,
        "native_mfu": 0.01,
    }
    # orchestrator-only steps 9 and 13 have no trainer row, so they are not trainer steps
    assert sorted(by_step) == [1]


def test_verbatim_orchestrator_lines_without_trainer(tmp_path):
    (tmp_path / "orchestrator.log").write_text("\n".join(VERBATIM[1:6]) + "\n")
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    assert res.steps == [
        {
            "step": 9,
            "native_orch_step_s": 3.2,
            "reward_mean": 0.9912,
            "staleness_max": 0.0,
            "filtered_samples": 95,
        },
        {"step": 13, "native_orch_step_s": 72.0, "reward_mean": 0.34, "staleness_max": 0.0},
    ]


def test_ansi_codes_and_torchrun_prefix_are_stripped(tmp_path):
    line = (
        "[default0]:\x1b[32m13:24:22\x1b[0m \x1b[1mSUCCESS\x1b[0m \x1b[22mStep 2 |    6.6s | Loss 0.0283 | "
        "Entropy 0.6012 | Mismatch KL 0.0008 | Grad. Norm 17.9561 | LR 3.00e-06 | Throughput 6183 tokens/s | "
        "MFU 2.7% | Peak Mem. 11.8 GiB\x1b[0m"
    )
    (tmp_path / "trainer.log").write_text(
        line + "\n" + "[default0]:13:25:51 SUCCESS Step 3 |  1m 18s | Loss 0.1\n"
    )
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    assert res.steps == [
        {"step": 2, "step_s": 6.6, "native_throughput_tokens_per_s": 6183.0, "native_mfu": 0.027},
        {"step": 3, "step_s": 78.0},
    ]


ORCH_LINE = (
    "13:24:03 SUCCESS Step {} |    5.1s | Reward 0.2139 | Trainable 0/128 (0.0%) | Turns 1.0 | "
    "Branches 1.0 | Max Off-Policy {} | Error 0.0% | Truncation 72.7%"
)  # the opd run's run.log line 2 format (prime-rl.md 3.5, orchestrator HEAD)


def test_a_resumed_run_logs_steps_twice_and_the_last_line_wins(tmp_path):
    lines = [ORCH_LINE.format(1, 0), ORCH_LINE.format(2, 1), ORCH_LINE.format(3, 2)]
    # resumed from the step-2 checkpoint: step 3 runs again, this time in the old colon format
    lines.append("14:00:00 SUCCESS Step 3 | Time: 9.50s | Reward: 0.5000 | Async Level: 1")
    (tmp_path / "orchestrator.log").write_text("\n".join(lines) + "\n")
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    # the whole re-logged line replaces the first: its missing Off-Policy field is not kept from before
    assert res.steps[-1] == {"step": 3, "native_orch_step_s": 9.5, "reward_mean": 0.5}
    assert [r["staleness_max"] for r in res.steps[:2]] == [0, 1]


def test_metrics_rows_of_one_step_merge_and_a_relogged_key_wins(tmp_path):
    rows = [
        {"step": 1, "time": 100.0, "time/step": 4.0, "time/forward_backward": 3.0},
        {"step": 1, "time": 100.5, "perf/throughput": 900.0, "perf/mfu": 2.5},
        {"step": 2, "time": 105.0, "time/step": 5.0, "time/forward_backward": 4.0},
        {"step": 1, "time": 110.0, "time/step": 4.5, "time/forward_backward": 3.5},  # resumed
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    assert res.steps[0] == {
        "step": 1, "step_s": 4.5, "compute_s": 3.5, "native_throughput_tokens_per_s": 900.0,
        "native_mfu": 0.025, "t_end_s": 10.0, "t_start_s": 5.5,
    }  # fmt: skip
    # no wall_time.env: t0 is the earliest step start, min(110 - 4.5, 105 - 5) = 100 (unix s)
    assert res.run_info["t0_unix_s"] == 100.0 and res.steps[1]["t_end_s"] == 5.0


def test_steps_read_like_a_list_of_dicts_and_convert_to_typed_columns(tmp_path, prime_run):
    steps = prime_run.steps
    assert len(steps) == 15 and steps[-1] == steps[14] and steps[13:] == [steps[13], steps[14]]
    assert steps == list(steps) and steps != list(steps)[:-1]
    df = steps.to_frame()
    assert str(df["samples"].dtype) == "Int64" and str(df["step_s"].dtype) == "float64"
    assert int(df["response_tokens"].sum()) == 147864 and df["step"].tolist() == list(range(1, 16))


def test_a_dense_console_log_costs_eight_bytes_per_logged_value(tmp_path):
    """30k orchestrator steps keep 4 values + the step number each: 30k x 5 x 8 B = 1.2 MB retained;
    dicts of tuples per step took ~270 B per step (8 MB here)."""
    import tracemalloc

    from runners.prime_rl_logs import parse_dir

    n = 30_000
    (tmp_path / "orchestrator.log").write_text(
        "".join(ORCH_LINE.format(i, i % 5) + "\n" for i in range(1, n + 1))
    )
    tracemalloc.start()
    try:
        rows, acc, _ = parse_dir(tmp_path)
        retained = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(rows) == n and rows[n - 1] == {
        "step": n, "native_orch_step_s": 5.1, "reward_mean": 0.2139, "staleness_max": 0.0,
    }  # fmt: skip
    assert retained < n * 5 * 8 * 1.5


# ---- parser: episode traces (rollouts/step_N/train/{all,effective}/traces.jsonl) ------------------
def _span(start: float, end: float) -> dict:
    return {"start": start, "end": end}


def _trace(tid: str, group: str, version: int, **fields) -> dict:
    """A vf.Trace.to_record() line as prime-rl v0.8.0 writes it: field names of verifiers d30a3f48
    verifiers/v1/trace.py:300-343 (Trace), 52-80 (TimeSpan, Timing), 126-128 (Reward), 153-170
    (ModelCall), graph.py:64-88 (MessageNode), types.py:107-118 (Usage); `run` and `info` as
    stamped by prime-rl 60bc2954 orchestrator.py:533-545 (record_run)."""
    rec = {
        "version": 1, "id": tid, "verifiers": {"version": "0.1.15", "commit": None},
        "run": {"type": "train", "id": "run-1", "step": fields.pop("step", 1)},
        "task": {"type": "Task", "data": {"idx": 3}}, "agent": {"config": {}, "name": "agent", "trainable": True},
        "tools": [], "nodes": [], "calls": [], "rewards": {}, "metrics": {},
        "info": {"env_name": "reverse-text", "group_id": group, "episode_id": tid, "policy_version": version},
        "extra_usage": [], "is_completed": True, "ok": True, "stop_condition": None, "errors": [],
        "timing": {"start": 995.0, **{k: _span(0.0, 0.0) for k in ("boot", "setup", "finalize", "scoring")},
                   "agent": {**_span(0.0, 0.0), "model": {"duration": 0.0}, "harness": {"duration": 0.0}}},
    }  # fmt: skip
    rec.update(fields)
    return rec


def _node(parent, sampled: bool) -> dict:
    return {"parent": parent, "message": {"role": "assistant" if sampled else "user", "content": "x"},
            "sampled": sampled, "timestamp": 0.0, "token_ids": [1, 2], "mask": [sampled, sampled]}  # fmt: skip


def _call(node: int, prompt: int, completion: int, cached=None) -> dict:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "cached_input_tokens": cached,
             "reasoning_tokens": None, "cost": None}  # fmt: skip
    return {
        "node": node,
        "model": "student",
        "finish_reason": "stop",
        "usage": usage,
        "time": _span(0.0, 0.0),
    }


def _write_traces(root: Path, step: int, subset: str, records: list, tail: str = "") -> None:
    d = root / "rollouts" / f"step_{step}" / "train" / subset
    d.mkdir(parents=True, exist_ok=True)
    (d / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_episode_traces_give_one_row_per_rollout_with_its_fate(tmp_path):
    timing = {
        "start": 1000.0, "boot": _span(1000.0, 1000.5), "setup": _span(1000.5, 1001.0),
        "agent": {**_span(1001.0, 1005.0), "model": {"duration": 3.0}, "harness": {"duration": 1.0}},
        "finalize": _span(1005.0, 1005.2), "scoring": _span(1005.2, 1006.0),
    }  # fmt: skip
    trained = _trace(
        "a1", "g1", 0, timing=timing,
        nodes=[_node(None, False), _node(0, False), _node(1, True)], calls=[_call(2, 90, 40, cached=10)],
        rewards={"correct": {"score": 1.0, "weight": 1.0}, "format": {"score": 0.5, "weight": 0.2}},
    )  # fmt: skip
    # two branches from one root: 0-1-2-3 (two model calls) and 0-4 (one)
    filtered = _trace(
        "b2", "g1", 0,
        nodes=[_node(None, False), _node(0, True), _node(1, False), _node(2, True), _node(0, True)],
        calls=[_call(1, 50, 20), _call(3, 100, 30), _call(4, 60, 25)],
        rewards={"correct": {"score": 0.0, "weight": 1.0}},
    )  # fmt: skip
    cancelled = _trace(  # dispatcher.py:605-611: the marker emitted for an off-policy cancel
        "c3",
        "g2",
        0,
        ok=False,
        stop_condition="error",
        errors=[{"type": "Cancelled", "message": "Off-policy cancel"}],
    )
    errored = _trace(
        "d4",
        "g2",
        0,
        ok=False,
        errors=[{"type": "ProviderError", "message": "502"}],
        rewards={"correct": None},
    )
    late = _trace("e5", "g3", 1, step=2, rewards={"correct": {"score": 1.0, "weight": 1.0}})
    _write_traces(tmp_path, 1, "all", [trained, filtered, cancelled, errored], tail='{"id": "f6", "nod')
    _write_traces(tmp_path, 1, "effective", [trained])
    _write_traces(tmp_path, 2, "all", [late])  # the run ended before batch 2 shipped
    (tmp_path / "wall_time.env").write_text("start_epoch=990\n")
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    none = {"policy_version_end": None, "t_dispatch_s": 5.0, "t_finish_s": None, "env_s": None}
    assert res.rollouts == [
        {"rollout_id": 0, "group_id": 0, "step_consumed": 1, "policy_version_start": 0, "policy_version_end": None,
         "t_dispatch_s": 10.0, "t_finish_s": 16.0, "prompt_tokens": 100, "response_tokens": 40, "turns": 1,
         "env_s": 3.0, "reward": 1.1, "status": "used"},
        {"rollout_id": 1, "group_id": 0, "step_consumed": None, "policy_version_start": 0, **none,
         "prompt_tokens": 140, "response_tokens": 75, "turns": 3, "reward": 0.0, "status": "filtered"},
        {"rollout_id": 2, "group_id": 1, "step_consumed": None, "policy_version_start": 0, **none,
         "prompt_tokens": 0, "response_tokens": 0, "turns": 0, "reward": None, "status": "discarded"},
        {"rollout_id": 3, "group_id": 1, "step_consumed": None, "policy_version_start": 0, **none,
         "prompt_tokens": 0, "response_tokens": 0, "turns": 0, "reward": None, "status": "aborted"},
        {"rollout_id": 4, "group_id": 2, "step_consumed": None, "policy_version_start": 1, **none,
         "prompt_tokens": 0, "response_tokens": 0, "turns": 0, "reward": 1.0, "status": "discarded"},
    ]  # fmt: skip
    assert (
        res.skipped_lines == 1
        and "1 traces.jsonl line(s) were not valid JSON objects (skipped)" in res.warnings
    )
    assert sum("traces.jsonl" in f for f in res.files) == 3
    write_rollouts(tmp_path / "rollouts.parquet", res.rollouts)  # the trace contract accepts them


@pytest.mark.parametrize("output_tokens, warned", [(40, False), (41, True)])
def test_trace_token_sums_are_checked_against_the_orchestrator_row(tmp_path, output_tokens, warned):
    trained = _trace("a1", "g1", 0, nodes=[_node(None, False), _node(0, True)], calls=[_call(1, 100, 40)])
    _write_traces(tmp_path, 1, "all", [trained])
    _write_traces(tmp_path, 1, "effective", [trained])
    row = {"step": 1, "time": 1.0e9, "progress/tokens": 140, "progress/input_tokens": 100,
           "progress/output_tokens": output_tokens, "progress/rollouts": 1}  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    assert res.rollouts[0]["status"] == "used" and res.steps[0]["response_tokens"] == output_tokens
    differ = "traces.jsonl token sums differ from metrics.jsonl progress/*_tokens at step(s) [1]"
    assert (differ in res.warnings) is warned


def test_trace_records_of_another_shape_are_counted_not_fatal(tmp_path):
    bad = [{"id": "x", "nodes": [3]}, {"id": "y", "calls": [{"node": 0, "usage": {"completion_tokens": 1}}],
                                        "nodes": [_node(None, True)]}]  # fmt: skip
    _write_traces(tmp_path, 1, "all", [*bad, _trace("a1", "g1", 0)])
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    assert [r["rollout_id"] for r in res.rollouts] == [0] and res.skipped_lines == 2
    assert "2 traces.jsonl record(s) lacked the vf.Trace fields read (skipped)" in res.warnings


def test_traces_without_an_effective_file_leave_clean_rollouts_unlabelled(tmp_path):
    _write_traces(tmp_path, 1, "all", [_trace("a1", "g1", 0), _trace("c3", "g1", 0, ok=False)])
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    assert [r["status"] for r in res.rollouts] == [None, "aborted"]
    assert f"{tmp_path}: no train/effective traces: statuses of clean rollouts unknown" in res.warnings


# ---- native hook ----------------------------------------------------------------------------------
def test_native_hook_says_when_prime_rl_is_absent(monkeypatch):
    monkeypatch.delenv("PRIME_RL_DIR", raising=False)
    monkeypatch.delenv("PRIME_RL_CONFIGS_PYTHON", raising=False)
    cfg, launch = _render("smoke")
    assert load_runner(cfg.framework).validate_native(cfg, launch) == [
        "prime-rl (PRIME_RL_DIR checkout or PRIME_RL_CONFIGS_PYTHON) not installed here"
    ]


@pytest.mark.skipif(
    not os.environ.get("PRIME_RL_CONFIGS_PYTHON"),
    reason="needs PRIME_RL_CONFIGS_PYTHON (prime-rl-configs at v0.8.0)",
)
@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_prime_rl_itself_accepts_the_render(exp):
    """prime-rl's RLConfig validators accept every rendered rl.toml; the only refusal allowed is the
    environment package (taskset) not being installed where the check runs."""
    cfg, launch = _render(exp)
    problems = load_runner(cfg.framework).validate_native(cfg, launch)
    assert all(p.startswith("taskset '") and "not found" in p for p in problems), problems


# ---- job.sbatch control flow, run against stub srun/scontrol/uv ---------------------------------
STUBS = {
    "scontrol": '#!/bin/bash\nfor i in $(seq 0 $((STUB_NODES-1))); do echo "n$i"; done\n',
    # srun [opts] -w HOST CMD...: log the host, then exec the command here
    "srun": '#!/bin/bash\nwhile [[ "$1" != -w ]]; do shift; done\nhost="$2"; shift 2\n'
    'echo "srun $host $*" >> "$STUB_LOG"\nexec "$@"\n',
    # uv run --no-sync CMD ...: the launcher's dry run and the trainer/orchestrator end; servers block
    "uv": '#!/bin/bash\necho "uv cuda=${CUDA_VISIBLE_DEVICES:-all} $*" >> "$STUB_LOG"\ncase "$3" in\n'
    "  rl) exit 0 ;;\n"
    '  torchrun) sleep "${STUB_TRAINER_S:-0.3}"; exit "${STUB_TRAINER_RC:-0}" ;;\n'
    "  orchestrator) sleep 1; exit 0 ;;\n"
    '  *) exec -a "stub-server-$STUB_TAG" sleep 30 ;;\nesac\n',
}


def _stub_job(tmp_path: Path, text: str, **env_extra: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    env = {
        "SLURM_JOB_NODELIST": "n[0-1]",
        "SLURM_JOB_ID": "42",
        "PRIME_RL_DIR": str(tmp_path),
        "STUB_NODES": "2",
        "STUB_TAG": tmp_path.name,
        **env_extra,
    }
    return run_stub_job(tmp_path, text, STUBS, env)


def _servers_left(tag: str) -> bool:
    return subprocess.run(["pgrep", "-f", f"stub-server-{tag}"], capture_output=True).returncode == 0


def test_job_runs_dry_run_then_every_process_on_its_node_and_stops_the_servers(tmp_path):
    _, launch = _render("smoke")
    res, log = _stub_job(tmp_path, launch.sbatch)
    assert res.returncode == 0, res.stderr
    assert log[0].startswith("srun n1 uv run --no-sync rl @ ") and log[0].endswith(" --dry-run")
    assert log[1].startswith("uv cuda=all run --no-sync rl @ ")
    srun = sorted(" ".join(ln.split()[1:6]) for ln in log[2:] if ln.startswith("srun "))  # host + command
    assert srun == [
        *[f"n0 env CUDA_VISIBLE_DEVICES={g} uv run" for g in range(8)],  # eight vLLM servers
        "n0 uv run --no-sync vllm-router",
        "n1 uv run --no-sync env-server",
        "n1 uv run --no-sync orchestrator",
        "n1 uv run --no-sync torchrun",
    ]
    cuda = sorted(ln.split()[1] for ln in log if ln.startswith("uv ") and " inference @ " in ln)
    assert cuda == [f"cuda={g}" for g in range(8)]
    orch = next(ln for ln in log if ln.startswith("uv ") and " orchestrator @ " in ln)
    assert "--model.client.base-url http://n0:8000/v1" in orch and "--weight_broadcast.host n1" in orch
    trainer = next(ln for ln in log if " torchrun " in ln)
    assert "--rdzv-endpoint=n1:29500" in trainer and "--rdzv-id=job_42" in trainer
    assert not _servers_left(tmp_path.name)


def test_job_fails_with_the_trainer_status(tmp_path):
    _, launch = _render("smoke")
    res, _ = _stub_job(tmp_path, launch.sbatch, STUB_TRAINER_RC="3")
    assert res.returncode == 3
    assert "job.sbatch: trainer on node 1 exited (status 3) before the run finished" in res.stderr
    assert not _servers_left(tmp_path.name)


def test_container_sites_need_an_image_because_prime_rl_ships_none():
    cfg = compose(["experiment=smoke", "framework=prime_rl", "cluster=example_site"])
    assert load_runner(cfg.framework).validate(cfg) == [
        "cluster.container.kind='pyxis': prime-rl publishes no container image; set cluster.container.image "
        "to one holding prime-rl at this version, or use kind 'none'"
    ]
    cfg = compose(
        [
            "experiment=smoke",
            "framework=prime_rl",
            "cluster=example_site",
            "cluster.container.image=me/prime-rl:0.8.0",
        ]
    )
    launch = load_runner(cfg.framework).render_launch(cfg)
    assert (
        "--container-image=me/prime-rl:0.8.0" in launch.sbatch
        and "#SBATCH --account=my-account" in launch.sbatch
    )


def test_cut_console_step_lines_are_counted(tmp_path):
    lines = [
        VERBATIM[0],
        "02:40:54 SUCCESS Step 2 | Time: 0.",
        "02:40:55 SUCCESS Step 3 | 1.0s | Entropy 0.5",
    ]
    (tmp_path / "trainer.log").write_text("\n".join(lines) + "\n")
    res = load_runner(_cfg("smoke").framework).parse_logs(tmp_path)
    assert [r["step"] for r in res.steps] == [1]
    assert res.skipped_lines == 2 and res.warnings == ["2 console Step line(s) could not be read (skipped)"]


def test_v0_8_orchestrator_row_gives_staleness_drops_and_token_waste(tmp_path):
    """Key names of prime-rl.md 3.3: off_policy/* staleness, dropped traces, progress/tokens window."""
    row = {
        "step": 3, "time": 1.0e9, "progress/tokens": 1000, "progress/input_tokens": 200,
        "progress/output_tokens": 600, "progress/rollouts": 8, "progress/tasks": 2,
        "off_policy/mean": 1.5, "off_policy/max": 3, "off_policy/dropped": 2,
        "train/agg/effective/agent/reward/mean": 0.25,
    }  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    [step] = load_runner(_cfg("smoke").framework).parse_logs(tmp_path).steps
    assert (step["staleness_mean"], step["staleness_max"], step["discarded_samples"]) == (1.5, 3, 2)
    # 1000 tokens arrived, 800 shipped: the 200 dropped split like the shipped 200 prompt / 600 response
    assert step["generated_tokens"] == 750 and step["response_tokens"] == 600
    assert step["reward_mean"] == 0.25 and step["native_tokens_processed"] == 1000


# ---- the same job through real Slurm (the local testbed, when it is up) ---------------------------
def _testbed_env():
    from bench import testbed

    tb = testbed.from_config()
    if not testbed.status(tb)["daemons"].get("slurmctld", False):
        pytest.skip("Slurm testbed not running (make testbed-up)")
    return tb.env()


def test_job_completes_on_the_slurm_testbed_with_stub_prime_rl(tmp_path):
    """Real sbatch/srun/scontrol on fake-GPU nodes; only `uv` (prime-rl) is a stub."""
    env = _testbed_env()
    cfg = _cfg("smoke", "cluster=testbed")
    launch = load_runner(cfg.framework).render_launch(cfg)
    run_dir = tmp_path / "run"
    launch.write(run_dir / "launch")
    (run_dir / "logs").mkdir()
    bindir, record = tmp_path / "bin", tmp_path / "uv.log"
    bindir.mkdir()
    (bindir / "uv").write_text(
        f'#!/bin/bash\necho "$SLURMD_NODENAME $3" >> {record}\ncase "$3" in\n'
        "  rl) exit 0 ;;\n  torchrun) sleep 2; exit 0 ;;\n  orchestrator) sleep 3; exit 0 ;;\n"
        "  *) exec sleep 120 ;;\nesac\n"
    )
    (bindir / "uv").chmod(0o755)
    env |= {"PATH": f"{bindir}:{os.environ['PATH']}", "PRIME_RL_DIR": str(tmp_path), "HF_TOKEN": "x"}
    res = subprocess.run(
        ["sbatch", "--wait", "launch/job.sbatch"],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr + "".join(
        p.read_text() for p in (run_dir / "logs").glob("slurm-*.out")
    )
    roles = sorted(record.read_text().split("\n")[1:-1])
    first = record.read_text().split("\n")[0].split()
    assert first[1] == "rl"  # the dry run comes first, on the trainer node
    infer_node = {r.split()[0] for r in roles if r.endswith(" inference")}
    trainer_node = {r.split()[0] for r in roles if r.split()[1] in ("torchrun", "orchestrator", "env-server")}
    assert len(infer_node) == len(trainer_node) == 1 and infer_node != trainer_node == {first[0]}
    assert [r.split()[1] for r in roles].count("inference") == 8
