"""On-policy distillation (workload.algorithm=opd, experiment.teachers) rendered per framework at
its pinned version, checked three ways: byte-for-byte goldens (tests/runners/golden/opd/<framework>/,
written with UPDATE_GOLDEN=1 and reviewed by hand), the framework's own schema, and the keys the
opd-benchmark's real runs used (../shared/fixtures/opd-benchmark: verl overrides.yaml, Miles'
driver argv in run.log, prime.toml) wherever the render sets the same key. What a framework
cannot express is refused with one line naming the key."""

from __future__ import annotations

import os
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from verl_wheel import verl_config_root

from bench.config import compose
from runners.base import load_runner
from runners.prime_rl_job import layout as prime_layout
from runners.verl import layout as verl_layout

GOLDEN = Path(__file__).parent / "golden" / "opd"
SITE = ["cluster.model_root=/shared/models", "cluster.data_root=/shared/data"]
TEACHER_URL = "http://127.0.0.1:13141/generate"
TEACHER_DIR = (
    "/shared/models/PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL"  # Miles' --rm-url in the opd-benchmark
)
# Each framework as the opd-benchmark ran it (conf/experiment/opd_2xh100.yaml's header): verl as the
# experiment is; slime with Miles' external SGLang teacher and the task's reward left to the teacher;
# prime-rl disaggregated on 1-GPU nodes with the teacher beside inference, its reverse-text taskset.
RUNS = {
    "verl": [],
    "slime": [f"+framework.native.opd_teacher_url={TEACHER_URL}"],
    "prime_rl": [
        "experiment.placement=disaggregated",
        "workload.staleness_budget=1",
        "cluster.gpus_per_node=1",
        "experiment.teachers=[{model:qwen3_0_6b,placement:with_generator,checkpoint:PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL}]",
        "+framework.native.taskset={taskset:{id:reverse-text-v1},harness:'null',runtime:subprocess}",
    ],
}


def _cfg(framework: str, *overrides: str):
    return compose(["experiment=opd_2xh100", *SITE, *RUNS[framework], *overrides, f"framework={framework}"])


def _launch(framework: str, *overrides: str):
    cfg = _cfg(framework, *overrides)
    return load_runner(cfg.framework).render_launch(cfg)


def _problems(framework: str, *overrides: str) -> list[str]:
    cfg = _cfg(framework, *overrides)
    return load_runner(cfg.framework).validate(cfg)


@pytest.mark.parametrize("framework", sorted(RUNS))
def test_opd_render_matches_its_golden_and_the_frameworks_schema(framework, tmp_path):
    launch = _launch(framework)
    runner = load_runner(_cfg(framework).framework)
    root = verl_config_root(launch.version) if framework == "verl" else None
    assert runner.schema_problems(launch, root) == []
    launch.write(tmp_path)
    golden = GOLDEN / framework
    if os.environ.get("UPDATE_GOLDEN"):
        golden.mkdir(parents=True, exist_ok=True)
        for p in tmp_path.iterdir():
            (golden / p.name).write_text(p.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in golden.iterdir())
    for p in golden.iterdir():
        assert (tmp_path / p.name).read_text() == p.read_text(), f"opd/{framework}/{p.name} differs"


def test_verl_distillation_keys_are_the_ones_the_real_run_used(opd_results):
    """Every distillation.* override rendered is one the opd-benchmark's verl run set, to the same
    value (the teacher's path is site layout: bench prepare's, not /root/opd-bench's)."""
    launch = _launch("verl")
    ours = load_runner(_cfg("verl").framework).native_settings(launch)
    real = dict(
        o.split("=", 1) for o in yaml.safe_load((opd_results / "verl" / "overrides.yaml").read_text())
    )
    distill = {k for k in ours if k.startswith("distillation.")}
    assert distill <= set(real)
    path = "distillation.teacher_models.teacher_model.model_path"
    assert {k: ours[k] for k in distill - {path}} == {k: real[k] for k in distill - {path}}
    assert ours[path] == "/shared/models/PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL"
    for key in ("data.train_batch_size", "actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.ppo_mini_batch_size",
                "actor_rollout_ref.actor.use_kl_loss", "trainer.n_gpus_per_node", "trainer.total_training_steps",
                "algorithm.adv_estimator", "actor_rollout_ref.rollout.gpu_memory_utilization"):  # fmt: skip
        assert ours[key] == real[key], key
    assert launch.nodes == 1  # actor + rollout on one GPU, the teacher pool on another, one node


def _miles_argv(opd_results: Path) -> dict[str, str]:
    line = (opd_results / "miles" / "run.log").read_text().splitlines()[13]
    words = shlex.split(line.split("python3 train.py ", 1)[1])
    out, flag = {}, None
    for w in words:
        if w.startswith("--"):
            flag = w
            out[flag] = ""
        elif flag:
            out[flag] = w
    return out


def test_slime_opd_flags_are_the_ones_miles_ran(opd_results):
    """Miles (slime's fork) ran slime's sglang-teacher OPD: the same flags, its package renamed."""
    ours = load_runner(_cfg("slime").framework).native_settings(_launch("slime"))
    real = _miles_argv(opd_results)
    for flag in ("--use-opd", "--opd-type", "--opd-kl-coef", "--rm-url", "--colocate", "--actor-num-gpus-per-node",
                 "--rollout-num-gpus-per-engine", "--num-rollout", "--rollout-batch-size", "--n-samples-per-prompt",
                 "--rollout-max-response-len", "--rollout-temperature", "--global-batch-size", "--seed",
                 "--advantage-estimator"):  # fmt: skip
        assert ours[flag] == real[flag], flag
    for flag in ("--custom-rm-path", "--custom-reward-post-process-path"):
        assert ours[flag] == real[flag].replace("miles.", "slime.", 1), flag
    assert "--rm-type" not in ours  # the teacher's reward function is the reward


def test_prime_rl_opd_tables_are_the_ones_the_real_run_used(opd_results):
    doc = tomllib.loads(_launch("prime_rl").files["rl.toml"])
    real = tomllib.loads((opd_results.parent / "prime.toml").read_text())
    assert doc["orchestrator"]["algo"]["type"] == real["orchestrator"]["algo"]["type"] == "opd"
    assert set(doc["orchestrator"]["algo"]["teacher"]) == set(real["orchestrator"]["algo"]["teacher"])
    for key in ("batch_size", "group_size"):
        assert doc["orchestrator"][key] == real["orchestrator"][key]
    assert doc["orchestrator"]["train"]["sampling"] == real["orchestrator"]["train"]["sampling"]
    assert (
        doc["orchestrator"]["train"]["source"][0]["env"] == real["orchestrator"]["train"]["source"][0]["env"]
    )
    assert (
        doc["max_steps"] == real["max_steps"]
        and doc["trainer"]["optim"]["lr"] == real["trainer"]["optim"]["lr"]
    )
    assert doc["inference"]["gpu_memory_utilization"] == real["inference"]["gpu_memory_utilization"]


def test_prime_rl_teacher_server_shares_the_first_inference_gpu():
    launch = _launch("prime_rl")
    teacher = [p for p in launch.processes if p.role == "teacher"]
    inference = [p for p in launch.processes if p.role == "inference"]
    assert len(teacher) == 1 and teacher[0].node_rank == inference[0].node_rank == 0
    assert teacher[0].env == inference[0].env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert teacher[0].argv[teacher[0].argv.index("--gpu-memory-utilization") + 1] == "0.4"
    orch = next(p for p in launch.processes if p.role == "orchestrator")
    assert orch.argv[-2:] == ["--algo.teacher.base-url", "http://${NODES[0]}:8001/v1"]
    # served as prime-rl's docs start a frozen model; its name is rl.toml's teacher name
    assert teacher[0].argv[:6] == ["uv", "run", "--no-sync", "inference", "--model.name", TEACHER_DIR]
    assert tomllib.loads(launch.files["rl.toml"])["orchestrator"]["algo"]["teacher"] == {
        "name": TEACHER_DIR,
        "base_url": ["http://localhost:8001/v1"],  # prime-rl's single-node address; argv names the node
    }


def test_dedicated_teachers_get_their_own_nodes_or_pool():
    """8 trainer GPUs + an 8-GPU teacher on 8-GPU nodes: verl's teacher_pool is a second node;
    prime-rl's teacher servers sit on a node after the trainer's, one per tp=2 GPUs."""
    cfg = _cfg(
        "verl",
        "experiment.trainer_gpus=8",
        "experiment.generator_gpus=8",
        "experiment.teachers=[{model:qwen3_0_6b,gpus:8}]",
    )
    assert verl_layout(cfg, "sync") | {} == {
        "trainer_nnodes": 1, "trainer_gpus_per_node": 8, "gpus_per_node": 8, "teacher_nnodes": 1,
        "teacher_gpus_per_node": 8, "rollout_nnodes": 0, "rollout_gpus_per_node": 0, "nodes": 2,
    }  # fmt: skip
    ded = ["cluster.gpus_per_node=8", "experiment.trainer_gpus=8", "experiment.generator_gpus=8",
           "experiment.teachers=[{model:qwen3_0_6b,gpus:8,tp:2,placement:dedicated}]"]  # fmt: skip
    cfg = _cfg("prime_rl", *ded)
    lay = prime_layout(cfg)
    assert (lay.infer_nodes, lay.train_nodes, lay.teacher_nodes, lay.nodes) == (1, 1, 1, 3)
    launch = _launch("prime_rl", *ded)
    teachers = [p for p in launch.processes if p.role == "teacher"]
    assert [(p.node_rank, p.env["CUDA_VISIBLE_DEVICES"]) for p in teachers] == [
        (2, "0,1"), (2, "2,3"), (2, "4,5"), (2, "6,7")
    ]  # fmt: skip


def test_what_each_pinned_framework_cannot_express_is_refused_naming_the_key():
    with_gen = "experiment.teachers=[{model:qwen3_0_6b,placement:with_generator}]"
    assert _problems("verl", with_gen) == [
        "experiment.teachers[0].placement=with_generator: verl 0.9.1 serves teachers only in their own "
        "resource pool (distillation.nnodes x n_gpus_per_node > 0); use placement=dedicated with gpus >= 1"
    ]
    assert _problems("verl", "workload.kl_coef=0.5") == [
        "workload.kl_coef=0.5 with workload.algorithm=opd: verl 0.9.1 fixes the distillation coefficient at 1.0 "
        "without task rewards (trainer/distillation/losses.py); expected 1.0"
    ]
    one_step = _problems("verl", "framework.mode=one_step_off", "experiment.placement=disaggregated")
    assert any(p.startswith("framework.mode='one_step_off' with workload.algorithm=opd") for p in one_step)
    no_url = compose(["experiment=opd_2xh100", *SITE, "framework=slime"])
    assert (
        load_runner(no_url.framework)
        .validate(no_url)[0]
        .startswith("experiment.teachers[0].placement=dedicated: slime 0.3.1 places no teacher")
    )
    assert _problems("slime", with_gen, "experiment.placement=disaggregated", "framework.mode=sync")[
        0
    ].startswith(
        "experiment.teachers[0].placement=with_generator on disaggregated GPUs: slime 0.3.1 forwards"
    )
    other_arch = "experiment.teachers=[{model:qwen3_8b,placement:with_generator}]"
    assert _problems("slime", other_arch)[0].startswith(
        "experiment.teachers[0].model=qwen3_8b: slime 0.3.1's in-process teacher (--opd-type megatron) must"
    )
    assert _problems("prime_rl", "experiment.generator.gpu_memory_utilization=0.85") == [
        "experiment.generator.gpu_memory_utilization=0.85: a with_generator teacher is a second vLLM server on "
        "the generator's GPUs with the same share; expected <= 0.45 so both fit"
    ]
    assert _problems("prime_rl", "workload.kl_coef=2.0")[0].startswith(
        "workload.kl_coef=2.0 with workload.algorithm=opd"
    )
    two = "experiment.teachers=[{model:qwen3_0_6b,gpus:1},{model:qwen3_0_6b,gpus:1}]"
    for fw in ("verl", "slime"):
        assert (
            f"experiment.teachers[1]: a second teacher for workload.task=reverse_text; {fw} is rendered with one "
            "teacher per run (routing rollouts by domain needs a multi-task workload); remove it"
            in _problems(fw, two)
        )


def test_slime_in_process_teacher_when_colocated_on_the_generators_gpus():
    with_gen = "experiment.teachers=[{model:qwen3_0_6b,placement:with_generator,checkpoint:PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL}]"
    ours = load_runner(_cfg("slime").framework).native_settings(
        _launch("slime", with_gen, "+framework.native.tasks.reverse_text={}")
    )
    assert (ours["--opd-type"], ours["--opd-teacher-load"]) == (
        "megatron",
        "/shared/models/PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL_torch_dist",
    )
    assert "--rm-url" not in ours and "--use-kl-loss" not in ours  # kl_coef is the teacher's here


def test_grpo_renders_are_unchanged_by_the_teacher_code():
    """A GRPO workload keeps its reference-model KL (kl_coef > 0) and gets no distillation key."""
    cfg = compose(["experiment=smoke", *SITE, "workload.kl_coef=0.001", "framework=verl"])
    settings = load_runner(cfg.framework).native_settings(load_runner(cfg.framework).render_launch(cfg))
    assert settings["actor_rollout_ref.actor.use_kl_loss"] == "True"
    assert not any(k.startswith("distillation.") for k in settings)
