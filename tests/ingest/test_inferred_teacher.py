"""`bench ingest` tells an on-policy-distillation run by its own logs: algorithm=opd and the teacher
(path, placement, GPUs, engine size), each with the file:line it was read from. The three
opd-benchmark runs placed the teacher three ways the logs show differently: verl in its own
`teacher_pool` (config), Miles as an external SGLang server on GPU 1 (telemetry), prime-rl as a
frozen model served on the inference GPU 0 (telemetry + the launcher's GPU line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.infer_teacher import BUSY_MIB, complete, harness_epochs
from bench.ingest import main as ingest
from bench.ingest import read_gpu_csvs
from bench.trace import RunPaths, read_manifest
from runners import prime_rl_config, slime_config, verl_config


def _line(path: Path, n: int) -> str:
    return path.read_text(errors="replace").splitlines()[n - 1]


@pytest.fixture(scope="module")
def inferred(tmp_path_factory, opd_results):
    """framework -> the manifest's inferred block of its ingested opd-benchmark run."""
    out = {}
    for fw, folder in (("verl", "verl"), ("slime", "miles"), ("prime_rl", "prime")):
        run = tmp_path_factory.mktemp(fw) / "run"
        assert ingest(["--framework", fw, "--logs", str(opd_results / folder), "--out", str(run)]) == 0
        out[fw] = read_manifest(RunPaths(run))["inferred"]
    return out


def _values(teacher: dict) -> dict:
    return {k: teacher[k]["value"] for k in ("model_path", "placement", "gpus", "gpu_ids", "tp")}


def test_verl_teacher_is_its_dedicated_teacher_pool(inferred, opd_results):
    inf, d = inferred["verl"], opd_results / "verl"
    assert inf["algorithm"] == {"value": "opd", "source": "config.yaml:827"}
    assert _line(d / "config.yaml", 827).strip() == "enabled: true"
    assert _line(d / "config.yaml", 825) == "distillation:"
    t = inf["teacher"]
    assert _values(t) == {
        "model_path": "/root/opd-bench/models/teacher",
        "placement": "dedicated",
        "gpus": 1,
        "gpu_ids": None,  # verl's resource pool names no device
        "tp": 1,
    }
    assert t["model_path"]["source"] == "config.yaml:847"
    assert _line(d / "config.yaml", 847).strip() == "model_path: /root/opd-bench/models/teacher"
    assert t["placement"]["source"] == "config.yaml:841 (verl's teacher_pool)"
    assert _line(d / "config.yaml", 841).strip() == "n_gpus_per_node: 1"
    assert _line(d / "config.yaml", 859).strip() == "tensor_model_parallel_size: 1"
    # the path names no conf/model entry: unknown, said so
    assert t["model"]["value"] is None and "names no conf/model entry" in t["model"]["reason"]


def test_miles_external_teacher_is_found_on_gpu_1_by_telemetry(inferred, opd_results):
    inf, d = inferred["slime"], opd_results / "miles"
    assert inf["algorithm"] == {"value": "opd", "source": "run.log:1539"}
    assert _line(d / "run.log", 1539).split() == ["use_opd", "." * 41, "True"]
    t = inf["teacher"]
    assert _values(t) == {
        "model_path": "/root/opd-bench/models/teacher",
        "placement": "dedicated",
        "gpus": 1,
        "gpu_ids": [1],
        "tp": 1,
    }
    assert t["model_path"]["source"] == t["tp"]["source"] == "teacher.log:6"
    assert "model_path='/root/opd-bench/models/teacher'" in _line(d / "teacher.log", 6)
    assert (
        t["gpu_ids"]["source"] == "gpu.csv: GPUs holding >= 1024 MiB at teacher_ready_epoch (wall_time.env)"
    )
    assert t["placement"]["source"].endswith("the framework's 1 GPU(s) ran on [0] after training_start_epoch")


def test_prime_teacher_shares_the_inference_gpu(inferred, opd_results):
    inf, d = inferred["prime_rl"], opd_results / "prime"
    assert inf["algorithm"] == {"value": "opd", "source": "orchestrator.log:2"}
    assert _line(d / "orchestrator.log", 2).endswith("INFO Starting orchestrator (algorithm: opd)")
    t = inf["teacher"]
    assert _values(t) == {
        "model_path": "/root/opd-bench/models/teacher",
        "placement": "with_generator",
        "gpus": 0,  # no GPUs of its own
        "gpu_ids": [0],
        "tp": None,  # a server outside prime-rl: its engine size is not logged
    }
    assert t["model_path"]["source"] == "orchestrator.log:30"
    assert "Initializing frozen model pool (model=/root/opd-bench/models/teacher," in _line(
        d / "orchestrator.log", 30
    )
    assert t["placement"]["source"].endswith("generator GPUs [0] (run.log:7)")
    assert _line(d / "run.log", 7).endswith("Starting inference on GPU(s) 0")


def test_teacher_gpus_are_the_ones_loaded_when_the_harness_saw_the_teacher_ready(opd_results):
    """prime: teacher_ready_epoch 1786108955 (13:22:35 UTC); GPU 0 then holds 33127 MiB, GPU 1 none."""
    d = opd_results / "prime"
    epochs, src = harness_epochs(d)
    assert (epochs["teacher_ready_epoch"], src) == (1786108955.0, "wall_time.env")
    rows, _, _ = read_gpu_csvs(d, 0.0)
    at_ready = {}
    for r in rows:
        if r["t_s"] <= epochs["teacher_ready_epoch"]:
            at_ready[r["gpu"]] = r["mem_used_mib"]
    assert at_ready == {0: 33127.0, 1: 0.0}
    assert at_ready[0] >= BUSY_MIB > at_ready[1]


def test_without_telemetry_the_external_teachers_placement_is_unknown_with_the_reason(tmp_path, opd_results):
    for f in ("run.log", "teacher.log"):  # Miles' logs, no gpu.csv and no wall-time file
        os.symlink(opd_results / "miles" / f, tmp_path / f)
    facts = slime_config.read(tmp_path)
    why = complete(facts, tmp_path, [], None)
    assert "teacher.placement" not in facts and "gpu_ids.teacher" not in facts
    assert why.startswith("the teacher was served outside the framework and its GPUs are not logged")


def test_grpo_runs_name_their_estimator_and_have_no_teacher(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "actor_rollout_ref:\n  rollout:\n    n: 8\n  actor:\n    policy_loss:\n      loss_mode: gspo\n"
        "algorithm:\n  adv_estimator: grpo\ntrainer:\n  nnodes: 1\n  n_gpus_per_node: 8\n"
    )
    facts = verl_config.read(tmp_path)
    assert (facts["algorithm"].value, facts["algorithm"].source) == ("gspo", "config.yaml:6")
    assert "teacher.placement" not in facts and "gpus.teacher" not in facts


def test_prime_config_names_the_opd_algorithm_and_teacher(tmp_path, opd_results):
    toml = opd_results.parent / "prime.toml"
    os.symlink(toml, tmp_path / "rl.toml")
    facts = prime_rl_config.read(tmp_path)
    assert (facts["algorithm"].value, facts["algorithm"].source) == ("opd", "rl.toml:14")
    assert _line(toml, 14) == 'type = "opd"' and _line(toml, 13) == "[orchestrator.algo]"
    assert (facts["teacher.model_path"].value, facts["teacher.model_path"].source) == (
        "/root/opd-bench/models/teacher",
        "rl.toml:17",
    )
    assert _line(toml, 17) == 'name = "/root/opd-bench/models/teacher"'


def test_slime_in_process_teacher_is_on_the_trainers_gpus(tmp_path, opd_results):
    """--opd-type megatron (slime v0.3.1 arguments.py): the teacher checkpoint is forwarded in the
    training actor. Miles' real argument dump with the two lines such a run prints instead."""
    lines = (opd_results / "miles" / "run.log").read_text().splitlines(keepends=True)
    assert lines[713].split() == ["opd_teacher_load", "." * 32, "None"]
    assert lines[717].split() == ["opd_type", "." * 40, "sglang"]
    lines[713] = lines[713].replace("None", "/ckpt/teacher_torch_dist")
    lines[717] = lines[717].replace("sglang", "megatron")
    (tmp_path / "run.log").write_text("".join(lines))
    facts = slime_config.read(tmp_path)
    assert (facts["algorithm"].value, facts["algorithm"].source) == ("opd", "run.log:1539")
    assert facts["teacher.model_path"].value == "/ckpt/teacher_torch_dist"
    assert facts["teacher.model_path"].source == "run.log:714"
    # colocated (--colocate): the trainer's GPUs are the generator's
    assert facts["teacher.placement"].value == "with_generator"
    assert facts["teacher.placement"].source.startswith("run.log:718 (opd_type megatron")
    assert "gpus.teacher" not in facts  # no GPUs of its own


def test_runs_the_suite_launches_name_their_teacher_and_its_gpus():
    """bench.infer.inferred_from_config: the same algorithm/teacher keys, from the composed config;
    a dedicated teacher's GPUs are a role of the job (metrics' GPU hours count them)."""
    from bench.config import compose
    from bench.infer import inferred_from_config

    inf = inferred_from_config(compose(["experiment=opd_2xh100", "framework=verl"]))
    assert inf["algorithm"] == {"value": "opd", "source": "config: workload.algorithm"}
    assert inf["gpus"]["teacher"] == {"value": 1, "source": "config: experiment.teachers[].gpus (dedicated)"}
    assert {k: inf["teacher"][k]["value"] for k in ("model", "model_path", "placement", "gpus", "tp")} == {
        "model": "qwen3_0_6b",
        "model_path": "PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL",
        "placement": "dedicated",
        "gpus": 1,
        "tp": 1,
    }
    grpo = inferred_from_config(compose(["experiment=smoke", "framework=verl"]))
    assert grpo["teacher"]["value"] is None and "teacher" not in grpo["gpus"]


def test_slime_before_use_opd_named_distillation_as_its_advantage_estimator(tmp_path, opd_results):
    """slime PR #673 (2025-11) added `--advantage-estimator on_policy_distillation` with the teacher
    behind --rm-url; PR #1538 made it `--use-opd`. Miles' dump and teacher server, as such a run
    prints them."""
    lines = (opd_results / "miles" / "run.log").read_text().splitlines(keepends=True)
    est = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["advantage_estimator"])
    assert lines[est].split()[::2] == ["advantage_estimator", "grpo"]
    assert lines[1538].split()[::2] == ["use_opd", "True"]
    lines[est] = lines[est].replace("grpo", "on_policy_distillation")
    lines[1538] = lines[1538].replace("True", "False")
    (tmp_path / "run.log").write_text("".join(lines))
    os.symlink(opd_results / "miles" / "teacher.log", tmp_path / "teacher.log")
    facts = slime_config.read(tmp_path)
    assert (facts["algorithm"].value, facts["algorithm"].source) == ("opd", f"run.log:{est + 1}")
    assert (facts["gpus.teacher"].value, facts["gpus.teacher"].source) == (1, "teacher.log:6")
    assert "gpus.reward" not in facts
