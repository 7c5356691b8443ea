"""`bench prepare` and `bench inspect` for on-policy distillation teachers (experiment.teachers):
each teacher's snapshot is fetched like the student's (offline, from the Hub cache the test writes),
recorded with hashes, not fetched twice, and sits where every runner's OPD render names it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench import inspect as insp
from bench.config import compose, for_framework
from runners.base import load_runner
from tests.prepare.hub import hub_repo

TEACHER = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL"
TEACHER_COMMIT = "5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f"
SMALL = "Qwen/Qwen3-0.6B"  # conf/model/qwen3_0_6b.yaml's name
SMALL_COMMIT = "00112233445566778899aabbccddeeff00112233"
OPD = ["experiment=smoke", "workload.algorithm=opd", "workload.kl_coef=1.0"]
BY_CHECKPOINT = f"{{model:qwen3_0_6b,gpus:8,placement:dedicated,checkpoint:{TEACHER}}}"


def _ok(res) -> str:
    assert res.returncode == 0, res.stderr
    return res.stdout


def _snapshot(hub: dict, repo: str, commit: str) -> bytes:
    """A tiny model snapshot in the offline Hub cache; returns its weights' bytes."""
    weights = os.urandom(2048)
    hub_repo(Path(hub["env"]["HF_HUB_CACHE"]), "model", repo, commit, {
        "config.json": b'{"model_type": "qwen3"}', "model.safetensors": weights,
        "tokenizer.json": b"{}", "README.md": b"not fetched",
    })  # fmt: skip
    return weights


def test_each_teacher_is_fetched_recorded_and_a_second_run_is_a_noop(hub, prepare):
    t_weights, s_weights = _snapshot(hub, TEACHER, TEACHER_COMMIT), _snapshot(hub, SMALL, SMALL_COMMIT)
    # two teachers: one by checkpoint, one by its conf/model option's name
    teachers = f"experiment.teachers=[{BY_CHECKPOINT},{{model:qwen3_0_6b,gpus:8,domains:[code]}}]"
    out = _ok(prepare(*OPD, teachers, "--only", "models"))
    target, small = hub["models"] / TEACHER, hub["models"] / SMALL
    assert (
        f"teacher experiment.teachers[0] {TEACHER}: wrote {target} (0.00 GB, revision {TEACHER_COMMIT})"
        in out
    )
    assert f"teacher experiment.teachers[1] {SMALL}: wrote {small} (0.00 GB, revision {SMALL_COMMIT})" in out
    assert (target / "model.safetensors").read_bytes() == t_weights
    assert (small / "model.safetensors").read_bytes() == s_weights
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    rec = json.loads((hub["models"] / (TEACHER + ".prepared.json")).read_text())
    assert rec["model"] == TEACHER and rec["revision"] == TEACHER_COMMIT
    from bench.prepare import sha256

    assert rec["files"]["model.safetensors"] == {"size": 2048, "sha256": sha256(target / "model.safetensors")}
    stamps = {p: p.stat().st_mtime_ns for p in target.iterdir()}
    again = _ok(prepare(*OPD, teachers, "--only", "models", "--verify"))
    assert (
        f"teacher experiment.teachers[0] {TEACHER}: present at {target} (revision {TEACHER_COMMIT}, 3 files verified)"
        in again
    )
    assert "wrote" not in again and {p: p.stat().st_mtime_ns for p in target.iterdir()} == stamps


def test_every_opd_render_names_the_prepared_teacher_snapshot(hub, prepare):
    _snapshot(hub, TEACHER, TEACHER_COMMIT)
    teachers = f"experiment.teachers=[{BY_CHECKPOINT}]"
    _ok(prepare(*OPD, teachers, "--only", "models"))
    target = str(hub["models"] / TEACHER)
    over = [*OPD, teachers, *hub["site"]]
    verl = compose([*over, "framework=verl"])
    settings = load_runner(verl.framework).native_settings(load_runner(verl.framework).render_launch(verl))
    assert settings["distillation.teacher_models.teacher_model.model_path"] == target
    from runners.prime_rl import rl_config

    prime = compose([*over, "framework=prime_rl"])
    rl_toml, _ = rl_config(prime, str(prime.framework.version))
    assert rl_toml["orchestrator"]["algo"]["teacher"]["name"] == target
    from runners.slime_opd import flags

    slime = compose([*OPD, *hub["site"], "framework=slime", "experiment.placement=colocated",
                     f"experiment.teachers=[{{model:qwen3_0_6b,placement:with_generator,checkpoint:{TEACHER}}}]"])  # fmt: skip
    assert dict(flags(slime))["--opd-teacher-load"] == target + "_torch_dist"  # converted beside it


def test_a_teacher_with_the_students_weights_is_prepared_once(hub, prepare):
    out = _ok(prepare(*OPD, "experiment.teachers=[{model:qwen3_8b,gpus:8}]", "--only", "models"))
    assert out.count("wrote") == 1  # the student Qwen/Qwen3-8B
    assert "teacher experiment.teachers[0] Qwen/Qwen3-8B: the snapshot of model.name, prepared once" in out


def test_a_teacher_missing_from_the_hub_is_one_line_naming_its_key(hub, prepare):
    res = prepare(*OPD, f"experiment.teachers=[{BY_CHECKPOINT}]", "--only", "models")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: experiment.teachers[0].checkpoint={TEACHER}: cannot fetch it from the Hub or its cache "
        "(LocalEntryNotFoundError); set HF_TOKEN for a gated model, or run prepare where the Hub is reachable "
        "(HF_HUB_OFFLINE unset)"
    ]
    assert not (hub["models"] / (TEACHER + ".prepared.json")).exists()


def test_a_teacher_model_option_without_a_hub_name_is_refused(hub, prepare):
    res = prepare(*OPD, "experiment.teachers=[{model:nosuch,gpus:8}]", "--only", "models")
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "error: experiment.teachers[0].model=nosuch: no conf/model/nosuch.yaml with a `name` to fetch; use a "
        "conf/model option or set the teacher's checkpoint=<Hub id or absolute path>"
    )


def test_a_site_checkpoint_is_used_as_given_or_refused_when_absent(hub, prepare, tmp_path):
    ckpt = tmp_path / "ckpts" / "teacher-step-900"
    ckpt.mkdir(parents=True)
    teachers = f"experiment.teachers=[{{model:qwen3_0_6b,gpus:8,checkpoint:{ckpt}}}]"
    out = _ok(prepare(*OPD, teachers, "--only", "models"))
    assert f"teacher experiment.teachers[0] {ckpt}: a site checkpoint, used as given (not fetched)" in out
    gone = str(ckpt) + "-gone"
    res = prepare(
        *OPD, f"experiment.teachers=[{{model:qwen3_0_6b,gpus:8,checkpoint:{gone}}}]", "--only", "models"
    )
    assert res.returncode == 2 and res.stderr.strip().startswith(
        f"error: experiment.teachers[0].checkpoint={gone}: no such folder from here"
    )


def test_slimes_in_process_teacher_conversion_is_named_not_faked(hub, prepare):
    _snapshot(hub, TEACHER, TEACHER_COMMIT)
    teachers = f"experiment.teachers=[{{model:qwen3_0_6b,placement:with_generator,checkpoint:{TEACHER}}}]"
    out = _ok(prepare(*OPD, "experiment.placement=colocated", teachers, "--only", "models"))
    load = hub["models"] / (TEACHER + "_torch_dist")
    assert (
        f"slime --opd-teacher-load: {load} is not made by prepare; convert the teacher's snapshot with slime's "
        "tools/convert_hf_to_torch_dist.py --save <that folder> before a slime run"
    ) in out.splitlines()
    assert not load.exists()
    verl_only = _ok(
        prepare(*OPD, "experiment.placement=colocated", teachers, "framework=verl", "--only", "models")
    )
    assert "--opd-teacher-load" not in verl_only  # verl serves the HF snapshot with vLLM


def test_inspect_checks_each_teacher_one_line_each(hub, prepare):
    _snapshot(hub, TEACHER, TEACHER_COMMIT)
    teachers = f"experiment.teachers=[{{model:qwen3_0_6b,placement:with_generator,checkpoint:{TEACHER}}}]"
    over = [*OPD, "experiment.placement=colocated", teachers, "cluster=testbed", *hub["site"]]
    cfgs = {fw: for_framework(over, fw) for fw in ("verl", "slime")}
    before = [c.line() for c in insp.check_teachers(cfgs)]
    fix = "-> fix: python -m bench prepare experiment=smoke cluster=testbed --only models"
    record = hub["models"] / (TEACHER + ".prepared.json")
    load = hub["models"] / (TEACHER + "_torch_dist")
    assert before == [
        f"FAIL  teacher experiment.teachers[0] {TEACHER}: not cached ({record} missing) {fix}",
        f"FAIL  slime --opd-teacher-load: {load} not found -> fix: convert the teacher's snapshot with "
        f"slime's tools/convert_hf_to_torch_dist.py --save {load}",
    ]
    need, why = insp.uncached_bytes(cfgs["verl"], insp.check_teachers(cfgs))
    assert (
        why == f"teacher {TEACHER} in BF16, not yet cached" and 1.1e9 < need < 1.3e9
    )  # Qwen3-0.6B: 0.6B x 2 bytes
    _ok(prepare(*OPD, "experiment.placement=colocated", teachers, "cluster=testbed", "--only", "models"))
    load.mkdir()  # the conversion, as slime's tool would leave it
    assert [c.line() for c in insp.check_teachers(cfgs)] == [
        f"ok    teacher experiment.teachers[0] {TEACHER}: 3 files at {hub['models'] / TEACHER}",
        f"ok    slime --opd-teacher-load: {load}",
    ]
    (hub["models"] / TEACHER / "model.safetensors").write_bytes(b"cut")
    assert insp.check_teachers({"verl": cfgs["verl"]})[0].line() == (
        f"FAIL  teacher experiment.teachers[0] {TEACHER}: 1 file(s) missing or of another size "
        f"(model.safetensors) {fix}"
    )


def test_inspect_site_fails_the_unprepared_teacher_and_counts_its_room(hub, prepare, monkeypatch):
    from tests.prepare.test_inspect import local_run

    monkeypatch.setattr(insp, "run", local_run([]))
    monkeypatch.setenv("BENCH_DRIVER", "/stub/recorder")
    _snapshot(hub, TEACHER, TEACHER_COMMIT)
    over = [*OPD, f"experiment.teachers=[{BY_CHECKPOINT}]", "cluster=testbed", *hub["site"],
            f"results_dir={hub['tmp'] / 'results'}"]  # fmt: skip
    cfgs = {"verl": for_framework(over, "verl")}
    checks = insp.inspect_site(cfgs, {"verl": 3})
    storage = next(c for c in checks if c.name.startswith("model_root"))
    # Qwen3-8B's 8.2 B and Qwen3-0.6B's 0.6 B parameters at 2 bytes (conf/model)
    assert storage.detail.endswith(
        f"(needs 17.6 GB: Qwen/Qwen3-8B, teacher {TEACHER} in BF16, not yet cached)"
    )
    names = [c.name for c in checks if c.ok is False and not c.name.startswith("rules")]
    assert names == ["data verl", "model Qwen/Qwen3-8B", f"teacher experiment.teachers[0] {TEACHER}"]
    _ok(prepare(*OPD, f"experiment.teachers=[{BY_CHECKPOINT}]", "cluster=testbed", "framework=verl"))
    after = insp.inspect_site(cfgs, {"verl": 3})
    assert [c.line() for c in after if c.ok is False and not c.name.startswith("rules")] == []
    assert f"ok    teacher experiment.teachers[0] {TEACHER}: 3 files at {hub['models'] / TEACHER}" in [
        c.line() for c in after
    ]
