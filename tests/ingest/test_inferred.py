"""`bench ingest` with no experiment: every real opd-benchmark run (2 x H100, Qwen3-0.6B student and
teacher) tells its own model, GPU roles, group size, prompts per step and max lengths. Each
expected value below is read off the fixture's own file at the line the manifest cites."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import flops
from bench.infer import conf_models
from bench.ingest import main as ingest
from bench.trace import RunPaths, read_manifest, read_steps


def _line(path: Path, n: int) -> str:
    return path.read_text(errors="replace").splitlines()[n - 1]


def _run(tmp_path_factory, fw: str, logs: Path, *overrides: str) -> Path:
    out = tmp_path_factory.mktemp(fw) / "run"
    assert ingest(["--framework", fw, "--logs", str(logs), "--out", str(out), *overrides]) == 0
    return out


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory, opd_results):
    return _run(tmp_path_factory, "verl", opd_results / "verl")


@pytest.fixture(scope="module")
def miles_run(tmp_path_factory, opd_results):
    return _run(tmp_path_factory, "slime", opd_results / "miles")


@pytest.fixture(scope="module")
def prime_run(tmp_path_factory, opd_results):
    return _run(tmp_path_factory, "prime_rl", opd_results / "prime")


def _values(run: Path) -> dict:
    inf = read_manifest(RunPaths(run))["inferred"]
    return {
        "model": inf["model_arch"]["value"],
        "gpus": {role: e["value"] for role, e in inf["gpus"].items()},
        **{
            k: inf[k]["value"]
            for k in ("group_size", "prompts_per_step", "max_prompt_len", "max_response_len")
        },
        "total_steps": inf["total_steps"]["value"],
        "nodes": inf["nodes"]["value"],
    }


def test_verl_run_infers_its_configuration(verl_run, opd_results):
    d = opd_results / "verl"
    assert _values(verl_run) == {
        "model": "qwen3_0_6b",
        "gpus": {"hybrid": 1, "teacher": 1},  # actor + rollout on GPU 0, the teacher on GPU 1
        "group_size": 16,
        "prompts_per_step": 8,
        "max_prompt_len": 512,
        "max_response_len": 128,
        "total_steps": 15,
        "nodes": 1,
    }
    inf = read_manifest(RunPaths(verl_run))["inferred"]
    # the sources name the dumped config's lines, which hold exactly these values
    assert (
        inf["group_size"]["source"] == "config.yaml:295"
        and _line(d / "config.yaml", 295).strip() == "'n': 16"
    )
    assert _line(d / "config.yaml", 467).strip() == "train_batch_size: 8"
    assert inf["prompts_per_step"]["source"] == "config.yaml:467"
    assert _line(d / "config.yaml", 466).strip() == "max_response_length: 128"
    assert inf["gpus"]["hybrid"]["source"] == "config.yaml:905"
    assert _line(d / "config.yaml", 905).strip() == "n_gpus_per_node: 1"
    assert _line(d / "config.yaml", 841).strip() == "n_gpus_per_node: 1"  # distillation: (the teacher)
    # the model from the only architecture line verl prints, against conf/model's parameter count
    assert inf["model_arch"]["source"] == "run.log:904"
    assert _line(d / "run.log", 904).endswith("Qwen3ForCausalLM contains 596.05M parameters")
    assert "matches conf/model/qwen3_0_6b.yaml" in inf["model_evidence"]
    assert inf["model_path"]["value"] == "/root/opd-bench/models/student"  # a local path, not a model id
    assert inf["mode"] == {"value": "sync", "source": "config.yaml:923"}
    assert _line(d / "config.yaml", 923).strip() == "trainer_mode: sync"
    assert inf["staleness_bound"] == {"value": 0, "source": "mode sync (config.yaml:923)"}  # on-policy


def test_verl_config_is_read_from_the_console_dump_alone(tmp_path, opd_results):
    """Without config.yaml the same values come from TaskRunner's pprint'ed config in run.log."""
    from runners import verl_config

    src = opd_results / "verl"
    (tmp_path / "run.log").write_bytes((src / "run.log").read_bytes())
    facts = verl_config.read(tmp_path)
    got = {k: (f.value, f.source) for k, f in facts.items() if k != "architecture"}
    assert got == {
        "group_size": (16, "run.log:357"),
        "prompts_per_step": (8, "run.log:627"),
        "max_prompt_len": (512, "run.log:614"),
        "max_response_len": (128, "run.log:615"),
        "total_steps": (15, "run.log:845"),
        "nodes": (1, "run.log:836"),
        "model_path": ("/root/opd-bench/models/student", "run.log:192"),
        "gpus.hybrid": (1, "run.log:835"),
        "gpus.teacher": (1, "run.log:652"),
        "algorithm": ("opd", "run.log:651"),  # distillation.enabled
        "kl_coef": (1.0, "run.log:643"),  # distillation.distillation_loss.distillation_loss_coef
        "teacher.placement": ("dedicated", "run.log:652 (verl's teacher_pool)"),
        "teacher.model_path": ("/root/opd-bench/models/teacher", "run.log:680"),
        "teacher.tp": (1, "run.log:678"),
        "rollout.tp": (1, "run.log:408"),
        "trainer.tp": (1, "run.log:138 (strategy fsdp: no tensor or pipeline parallelism)"),
        "trainer.pp": (1, "run.log:138 (strategy fsdp: no tensor or pipeline parallelism)"),
        "trainer.dp": (1, "run.log:835: 1 GPUs / (TP 1 x PP 1)"),
    }
    log = src / "run.log"
    assert _line(log, 357).endswith("'n': 16,") and _line(log, 627).endswith("'train_batch_size': 8,")
    assert _line(log, 835).endswith("'n_gpus_per_node': 1,") and _line(log, 652).endswith(
        "'n_gpus_per_node': 1,"
    )


def test_miles_run_infers_its_configuration(miles_run, opd_results):
    d = opd_results / "miles"
    v = _values(miles_run)
    assert v == {
        "model": "qwen3_0_6b",
        "gpus": {"hybrid": 1, "teacher": 1},  # --colocate trainer + SGLang rollout; external teacher
        "group_size": 16,
        "prompts_per_step": 8,
        "max_prompt_len": None,  # rollout_max_prompt_len ... None in the argument dump
        "max_response_len": 128,
        "total_steps": 15,
        "nodes": 1,
    }
    inf = read_manifest(RunPaths(miles_run))["inferred"]
    assert inf["group_size"]["source"] == "run.log:658"
    assert _line(d / "run.log", 658).split() == ["n_samples_per_prompt", "." * 28, "16"]
    assert _line(d / "run.log", 835).split()[::2] == ["rollout_batch_size", "8"]
    assert _line(d / "run.log", 847).split()[::2] == ["rollout_max_response_len", "128"]
    assert _line(d / "run.log", 37).split()[::2] == ["actor_num_gpus_per_node", "1"]
    assert inf["gpus"]["teacher"]["source"] == "teacher.log:6"
    assert "tp_size=1," in _line(d / "teacher.log", 6) and "dp_size=1," in _line(d / "teacher.log", 6)
    arch = inf["architecture"]["value"]
    assert (arch["layers"], arch["hidden"], arch["q_heads"], arch["kv_heads"], arch["head_dim"]) == (
        28,
        1024,
        16,
        8,
        128,
    )
    assert (arch["ffn"], arch["vocab"], arch["params"]) == (3072, 151936, 596049920.0)
    assert _line(d / "run.log", 1755).endswith("model parallel rank (0, 0): 596049920")


def test_prime_run_infers_what_its_logs_hold_and_says_what_they_lack(prime_run, opd_results):
    d = opd_results / "prime"
    v = _values(prime_run)
    assert v == {
        "model": None,  # prime-rl prints no architecture and the path names no model
        "gpus": {"rollout": 1, "trainer": 1},
        "group_size": 16,  # progress/rollouts 128 / progress/tasks 8
        "prompts_per_step": 8,
        "max_prompt_len": None,
        "max_response_len": None,  # only in the config prime-rl was started with (not in this folder)
        "total_steps": 15,
        "nodes": 1,
    }
    row = json.loads(_line(d / "metrics.jsonl", 1))
    assert (row["progress/tasks"], row["progress/rollouts"]) == (8, 128)
    assert _line(d / "run.log", 7).endswith("Starting inference on GPU(s) 0")
    assert _line(d / "run.log", 11).endswith("Starting trainer on GPU(s) 1")
    assert "max_steps=15" in _line(d / "orchestrator.log", 35)
    m = read_manifest(RunPaths(prime_run))
    assert m["inferred"]["model_evidence"].startswith("model unknown: the logs print no architecture")
    metrics = json.loads(RunPaths(prime_run).metrics.read_text())
    assert metrics["mfu"] is None and metrics["missing"]["mfu"].startswith("model unknown")


def test_prime_config_toml_beside_the_logs_gives_the_rest(tmp_path, opd_results):
    """The run's own rl.toml (what `rl` writes under <output>/configs/) fills max_response_len."""
    from runners import prime_rl_config

    for f in (opd_results / "prime").iterdir():
        os.symlink(f, tmp_path / f.name)
    (tmp_path / "configs").mkdir()
    os.symlink(opd_results.parent / "prime.toml", tmp_path / "configs" / "rl.toml")
    facts = prime_rl_config.read(tmp_path)
    toml = opd_results.parent / "prime.toml"
    assert (facts["max_response_len"].value, facts["max_response_len"].source) == (128, "configs/rl.toml:25")
    assert _line(toml, 25) == "max_completion_tokens = 128"
    assert (facts["group_size"].value, facts["group_size"].source) == (16, "configs/rl.toml:11")
    assert _line(toml, 11) == "group_size = 16" and _line(toml, 10) == "batch_size = 128"
    assert facts["prompts_per_step"].value == 8 and facts["total_steps"].value == 15


def test_hardware_is_never_a_default(verl_run):
    m = read_manifest(RunPaths(verl_run))
    assert m["inferred"]["hardware"] == {
        "value": None,
        "source": None,
        "reason": "hardware unknown: pass hardware=<name> (one of b200, gb300, h100_sxm, h20, h200)",
    }
    assert m["config"]["hardware"] is None
    metrics = json.loads(RunPaths(verl_run).metrics.read_text())
    for key in ("mfu", "usd_per_gpu_hour", "cost_per_mtok_usd"):
        assert metrics[key] is None and "hardware unknown: pass hardware=<name>" in metrics["missing"][key]
    assert metrics["tinker_ratio"] is None
    # GPU-hours count every role the logs name: 229 s x (1 hybrid + 1 teacher)
    assert metrics["gpu_hours"] == pytest.approx(229 * 2 / 3600)


def test_mfu_uses_the_inferred_model(tmp_path_factory, opd_results):
    run = _run(tmp_path_factory, "verl", opd_results / "verl", "hardware=h100_sxm")
    m = read_manifest(RunPaths(run))
    assert m["inferred"]["hardware"] == {"value": "h100_sxm", "source": "given"}
    metrics = json.loads(RunPaths(run).metrics.read_text())
    # suite FLOPs of Qwen3-0.6B over the window / (compute time x 989 TFLOP/s x 1 trainer GPU)
    from types import SimpleNamespace

    model = SimpleNamespace(**conf_models()["qwen3_0_6b"])
    steps = read_steps(RunPaths(run).steps).sort_values("step")
    w = steps[steps.step >= metrics["window"]["first_step"]]
    tokens = w.prompt_tokens.fillna(0) + w.response_tokens
    fl = sum(
        t * flops.flops_per_token(model, int(max(1, t / s)), "suite")
        for t, s in zip(tokens, w.samples, strict=True)
    )
    assert metrics["mfu"] == pytest.approx(fl / (w.compute_s.sum() * 989e12 * 1), rel=1e-9)
    assert 0.05 < metrics["mfu"] < 0.2  # REPORT.md: verl's actor reported ~9.9% steady MFU


def test_given_values_fill_what_the_logs_lack(tmp_path_factory, opd_results):
    run = _run(
        tmp_path_factory,
        "prime_rl",
        opd_results / "prime",
        "model=qwen3_0_6b",
        "workload.max_response_len=128",
    )
    inf = read_manifest(RunPaths(run))["inferred"]
    assert inf["model_arch"]["value"] == "qwen3_0_6b" and inf["model_arch"]["source"] == "given"
    # the name stays the run's own (its model path), the given entry is the architecture
    assert inf["model"]["value"] == "student" and inf["model"]["source"] == "trainer.log:7"
    assert inf["max_response_len"] == {"value": 128, "source": "given"}
    assert inf["group_size"]["source"].startswith("metrics.jsonl:1")  # logged values stay logged


@pytest.mark.parametrize(
    ("run", "wall", "per_s", "wh"),
    # REPORT.md: end-to-end 229 / 335 / 276 s; 8.38 / 5.73 / 6.96 trajectories/s; 14.9 / 22.4 / 18.7 Wh
    [("verl_run", 229, 8.38, 14.9), ("miles_run", 335, 5.73, 22.4), ("prime_run", 276, 6.96, 18.7)],
)
def test_one_wall_clock_for_every_framework(request, run, wall, per_s, wh):
    """Rates use the harness window (wall_time.env start_epoch -> end_epoch) for all three: prime-rl's
    nested wall_seconds is no longer missed (it was 257 s from its step span, flattering it by 7%)."""
    path = request.getfixturevalue(run)
    m = read_manifest(RunPaths(path))
    assert m["wall_s"] == wall and m["wall_window"]["window"] == "harness"
    assert m["wall_window"]["source"].endswith("wall_time.env")
    metrics = json.loads(RunPaths(path).metrics.read_text())
    assert metrics["wall_window"].startswith("harness: harness start")
    assert (
        metrics["trajectories_per_s"] == pytest.approx(1920 / wall)
        and round(metrics["trajectories_per_s"], 2) == per_s
    )
    assert metrics["energy_wh"] == pytest.approx(wh, abs=0.1)  # both GPUs' 1-s nvidia-smi samples


def test_without_a_wall_time_file_the_window_is_the_step_span(tmp_path_factory, opd_results):
    logs = tmp_path_factory.mktemp("prime_logs")
    for f in (opd_results / "prime").iterdir():
        if f.name != "wall_time.env":
            os.symlink(f, logs / f.name)
    run = _run(tmp_path_factory, "prime_rl", logs)
    m = read_manifest(RunPaths(run))
    w = m["wall_window"]
    assert w["window"] == "trace" and w["definition"].startswith("first step's start to the last step's end")
    steps = read_steps(RunPaths(run).steps)
    assert m["wall_s"] == pytest.approx(steps.t_end_s.max() - steps.t_start_s.min())


def test_per_role_telemetry_where_the_logs_name_each_roles_devices(prime_run, verl_run):
    """prime-rl's launcher names its devices (inference on GPU 0, trainer on GPU 1): REPORT.md's
    12.5% / 6.3% mean utilisation and 64.7 / 13.1 GiB peak memory, now by role."""
    m = read_manifest(RunPaths(prime_run))
    assert m["inferred"]["gpu_ids"] == {
        "rollout": {"value": [0], "source": "run.log:7"},
        "trainer": {"value": [1], "source": "run.log:11"},
        # the frozen teacher served outside prime-rl: telemetry (tests/ingest/test_inferred_teacher.py)
        "teacher": {
            "value": [0],
            "source": "gpu.csv: GPUs holding >= 1024 MiB at teacher_ready_epoch (wall_time.env)",
        },
    }
    roles = json.loads(RunPaths(prime_run).metrics.read_text())["gpu_roles"]
    assert (roles["rollout"]["gpus"], roles["trainer"]["gpus"]) == ([0], [1])
    assert (
        round(roles["rollout"]["util_mean_pct"], 1) == 12.5
        and round(roles["trainer"]["util_mean_pct"], 1) == 6.3
    )
    assert (
        round(roles["rollout"]["mem_peak_mib"] / 1024, 1) == 64.7
        and round(roles["trainer"]["mem_peak_mib"] / 1024, 1) == 13.1
    )
    total = json.loads(RunPaths(prime_run).metrics.read_text())["energy_wh"]
    assert roles["rollout"]["energy_wh"] + roles["trainer"]["energy_wh"] == pytest.approx(total)
    # verl logs no device per role (Ray places them): no split is guessed
    assert json.loads(RunPaths(verl_run).metrics.read_text())["gpu_roles"] == {
        "missing": "the run does not name each role's devices"
    }


def test_hardware_from_the_telemetry_gpu_name(tmp_path_factory, opd_results):
    """nvidia-smi's own CSV (`--query-gpu=timestamp,name,index,... --format=csv`, units kept) names
    the GPU: the run's hardware comes from it, with the name as evidence."""
    logs = tmp_path_factory.mktemp("verl_named")
    for f in (opd_results / "verl").iterdir():
        if f.name != "gpu.csv":
            os.symlink(f, logs / f.name)
    rows = (opd_results / "verl" / "gpu.csv").read_text().splitlines()[1:]
    out = ["timestamp, name, index, utilization.gpu [%], memory.used [MiB], power.draw [W]"]
    for r in rows:
        t, i, util, mem, _, power, _ = (c.strip() for c in r.split(","))
        out.append(f"{t}, NVIDIA H100 80GB HBM3, {i}, {util} %, {mem} MiB, {power} W")
    (logs / "nvsmi.csv").write_text("\n".join(out) + "\n")
    run = _run(tmp_path_factory, "verl", logs)
    m = read_manifest(RunPaths(run))
    assert m["inferred"]["hardware"] == {
        "value": "h100_sxm",
        "source": "telemetry: nvidia-smi name 'NVIDIA H100 80GB HBM3'",
    }
    metrics = json.loads(RunPaths(run).metrics.read_text())
    assert metrics["mfu"] is not None and metrics["energy_wh"] == pytest.approx(14.9, abs=0.1)
    # a given hardware that contradicts the telemetry is refused
    assert (
        ingest(
            ["--framework", "verl", "--logs", str(logs), "--out", str(run.parent / "b200"), "hardware=b200"]
        )
        == 2
    )


def test_runs_the_suite_launches_carry_the_same_inferred_block(verl_run):
    """bench.infer.inferred_from_config: a composed experiment -> the same keys an ingested run has."""
    from bench.config import compose
    from bench.infer import inferred_from_config

    cfg = compose(
        [
            "experiment=smoke",
            "framework=verl",
            "experiment.placement=colocated",
            "experiment.generator_gpus=8",
        ]
    )
    native = inferred_from_config(cfg)
    ingested = read_manifest(RunPaths(verl_run))["inferred"]
    assert set(native) <= set(ingested)
    assert native["model"] == {"value": "Qwen/Qwen3-8B", "source": "config: model.name"}
    assert native["model_arch"]["value"] == "qwen3_8b"
    assert native["hardware"] == {"value": "h100_sxm", "source": "config: hardware"}
    assert native["gpus"] == {"hybrid": {"value": 8, "source": "config: experiment.trainer_gpus"}}
    assert (native["group_size"]["value"], native["prompts_per_step"]["value"], native["nodes"]["value"]) == (
        16,
        64,
        1,
    )


def test_hardware_from_the_suite_manifest_of_the_run_the_logs_belong_to(tmp_path_factory, opd_results):
    """Logs under a suite run directory (<run>/logs): the run's own manifest names its hardware."""
    run_dir = tmp_path_factory.mktemp("suite_run")
    (run_dir / "manifest.json").write_text(json.dumps({"config": {"hardware": {"name": "H100-SXM"}}}))
    (run_dir / "logs").mkdir()
    for f in (opd_results / "verl").iterdir():
        os.symlink(f, run_dir / "logs" / f.name)
    out = _run(tmp_path_factory, "verl", run_dir / "logs")
    assert read_manifest(RunPaths(out))["inferred"]["hardware"] == {
        "value": "h100_sxm",
        "source": str(run_dir / "manifest.json"),
    }
