"""The scoring stage (bench/emulator/scoring.py): teachers scoring finished groups, FIFO in batches,
routed by domain, on their own GPUs or on the generator's; the schema's checks and GPU accounting."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from bench.config import compose
from bench.emulator.run import build, emulate
from bench.emulator.scoring import Scorer
from bench.emulator.trace_out import step_rows
from bench.model.costmodel import TeacherModel, teacher_models
from bench.resolve import Resolved
from bench.validate import validate, validate_workload

OPD = ["experiment=opd_2xh100", "framework=verl"]
# Prime-RL's layout of the same job: trainer and inference on separate GPUs, the teacher beside inference
PRIME_LAYOUT = [
    "experiment=opd_2xh100",
    "framework=prime_rl",
    "experiment.placement=disaggregated",
    "workload.staleness_budget=1",
    "experiment.teachers=[{model:qwen3_0_6b,placement:with_generator}]",
]
QWEN3_0_6B_ACTIVE = (
    595_984_384  # bench.flops.param_counts(qwen3_0_6b)["active"], embedding and LM head included
)
H100_PEAK = 989e12  # conf/hardware/h100_sxm.yaml peak_bf16_flops


def teacher(fixed_s=0.05, active=1e9, flop_rate=1e14, engines=1, share=0.0, domains=()) -> TeacherModel:
    return TeacherModel("t", engines, 1, flop_rate, active, fixed_s, share, tuple(domains))


# --- the queue, by hand -------------------------------------------------------------------------
def test_one_engine_scores_fifo_batches_with_the_hand_computed_time():
    # batch_s = 0.05 + 2 x 1e9 x tokens / 1e14: 5,000 tokens -> 0.15 s
    s = Scorer([teacher()])
    s.submit(0, 5000, "math", 1.0)  # engine free: a batch of one group, 1.0 -> 1.15
    s.submit(1, 3000, "math", 1.05)  # engine busy: queued
    s.submit(2, 2000, "math", 1.10)
    assert s.next_time() == pytest.approx(1.15)
    t, groups = s.step()
    assert (t, groups) == (pytest.approx(1.15), [0])
    # the engine takes both waiting groups as one batch: 5,000 tokens, 1.15 -> 1.30
    t, groups = s.step()
    assert (t, groups) == (pytest.approx(1.30), [1, 2])
    assert s.next_time() == np.inf
    assert s.span_s([1, 2]) == pytest.approx(0.15)
    assert s.span_s([0, 1]) == pytest.approx(0.30)  # the union of the two batches' intervals
    summary = s.summary()[0]
    assert (summary["batches"], summary["groups"], summary["tokens"]) == (2, 3, 10000)
    assert summary["busy_s"] == pytest.approx(0.30)


def test_teacher_model_from_the_config_uses_prefill_mfu_and_score_fixed_s():
    cfg = compose([*OPD, "emulator.prefill_mfu=0.5", "emulator.score_fixed_s=0.2"])
    (m,) = teacher_models(cfg, Resolved.from_config(cfg))
    assert (m.engines, m.engine_gpus, m.generator_share) == (1, 1, 0.0)
    # 10,000 tokens: 0.2 + 2 x 595,984,384 x 1e4 / (989e12 x 0.5) = 0.2 + 0.024105 s
    assert m.batch_s(10_000) == pytest.approx(0.2 + 2 * QWEN3_0_6B_ACTIVE * 1e4 / (H100_PEAK * 0.5))
    assert m.batch_s(10_000) == pytest.approx(0.224105, abs=1e-6)


def _loops(overrides: list[str]):
    """The same run with its teachers, and with the scoring stage taken out (same draws, same engines)."""
    with_teacher, _, _ = build(compose(overrides))
    without, _, _ = build(compose(overrides))
    without.scorer = None
    return with_teacher, without


def test_a_group_joins_the_batch_only_when_scored():
    scored, plain = _loops(OPD)
    scored.run(), plain.run()
    # step 1 (verl, colocated sync): the round of 8 groups generates identically in both runs (the
    # dedicated teacher does not touch the generator); replay the teacher's FIFO by hand on the
    # groups' generation finish times and token counts
    r = plain.rollouts.table.cols
    finish = {g: r["t_finish"][plain.rollouts.rows(g)].max() for g in plain.batches[1].kept}
    tokens = {g: sum(r[k][plain.rollouts.rows(g)].sum() for k in ("prompt_tokens", "response_tokens", "tool_tokens"))
              for g in finish}  # fmt: skip
    (m,) = scored.scorer.teachers[0:1]
    free_at, queue, last = 0.0, sorted(finish, key=finish.get), 0.0
    while queue:  # an idle engine takes every group that has finished by the time it is free
        start = max(free_at, finish[queue[0]])
        batch = [g for g in queue if finish[g] <= start]
        queue = [g for g in queue if finish[g] > start]
        free_at = last = start + m.model.batch_s(sum(tokens[g] for g in batch))
    assert scored.batches[1].filled_at == pytest.approx(last, rel=1e-12)
    assert scored.batches[1].filled_at > plain.batches[1].filled_at  # completion delayed by the scoring
    # the step's trainer wait grew by exactly that delay
    delay = scored.batches[1].filled_at - plain.batches[1].filled_at
    assert scored.trainer.rows[0].wait_s - plain.trainer.rows[0].wait_s == pytest.approx(delay, rel=1e-9)


def test_gen_score_s_is_the_steps_scoring_wall_time(tmp_path):
    paths = emulate(compose(OPD), tmp_path / "run")
    from bench.trace import read_steps

    steps = read_steps(paths.steps)
    manifest = json.loads(paths.manifest.read_text())
    (t,) = manifest["emulator"]["teachers"]
    assert t["groups"] == 15 * 8 and t["batches"] >= 15  # every trained group was scored
    # one teacher engine: the steps' scoring intervals never overlap, so their sum is its busy time
    assert steps["gen_score_s"].sum() == pytest.approx(t["busy_s"], rel=1e-9)
    # scored while the trainer waits: inside wait_s, so not a phase of its own (score_s stays null)
    assert (steps["gen_score_s"] > 0).all() and (steps["gen_score_s"] <= steps["wait_s"] + 1e-9).all()
    assert steps["score_s"].isna().all()
    assert manifest["resources"]["teacher"]["busy_s"] == pytest.approx(t["busy_s"])


# --- routing by domain ----------------------------------------------------------------------------
def test_route_takes_the_first_teacher_covering_the_domain():
    s = Scorer([teacher(domains=["math"]), teacher(domains=["reverse_text"]), teacher(domains=[])])
    assert (s.route("math"), s.route("reverse_text"), s.route("swe")) == (0, 1, 2)
    with pytest.raises(ValueError, match="no teacher scores domain 'code'"):
        Scorer([teacher(domains=["math"])]).route("code")


def test_groups_go_to_the_teacher_of_the_workloads_task():
    teachers = (
        "experiment.teachers=[{model:qwen3_8b,gpus:1,domains:[math]},"
        "{model:qwen3_0_6b,gpus:1,domains:[reverse_text]}]"
    )
    loop, _, _ = build(compose([*OPD, teachers]))
    loop.run()
    math, reverse = loop.scorer.summary()
    assert math["groups"] == 0 and math["busy_s"] == 0.0
    assert reverse["groups"] == 15 * 8 and reverse["model"] == "qwen3_0_6b"


# --- with_generator: scoring takes the generator's GPU time --------------------------------------------
def test_with_generator_batches_pause_the_generator_by_their_share_and_add_up():
    paused = []
    s = Scorer([teacher(engines=2, share=0.5)], pause=lambda t, until: paused.append((t, until)))
    # 5,000 tokens: 0.05 s round trip + 0.1 s of compute on engine 0, which holds half the generator's
    # GPUs: the pool loses 0.05 s of decoding (the round trip takes no GPU time)
    s.submit(0, 5000, "x", 1.0)
    s.submit(1, 5000, "x", 1.0)  # engine 1 at the same time: its 0.05 s comes after the first
    assert paused == [(1.0, pytest.approx(1.05)), (1.0, pytest.approx(1.10))]
    assert s.next_time() == pytest.approx(1.15)  # the batches themselves still take 0.15 s


def test_a_teacher_on_the_generator_slows_generation():
    shared, _, _ = build(compose(PRIME_LAYOUT))
    dedicated_layout = [*PRIME_LAYOUT[:-1], "experiment.teachers=[{model:qwen3_0_6b,gpus:1}]"]
    dedicated, _, _ = build(compose(dedicated_layout))
    (m,) = shared.scorer.teachers
    assert m.model.generator_share == 1.0  # one generator GPU, one teacher engine on it
    a, b = shared.run(), dedicated.run()
    # the same scoring work, but on the generator's GPU it stops decoding while it computes: every
    # rollout's generation (dispatch to finish) takes longer on average, the engine is busy longer
    assert a.teachers[0]["tokens"] > 0 and b.teachers[0]["tokens"] > 0
    latency = [np.nanmean(x.segments["t_finish"] - x.segments["t_dispatch"]) for x in (a, b)]
    assert latency[0] > 1.05 * latency[1]
    assert a.generator_busy_s > b.generator_busy_s


# --- no teachers: nothing changes -------------------------------------------------------------------
# sha256 of the trace columns of runs without teachers (steps rows without gen_score_s, every rollout
# segment and draw, wall time, events, generator busy time), each float to 9 significant digits (CPUs
# with and without AVX-512 differ in the last bit). Re-pinned with the code of bf49598 and of this
# round: identical, also with numpy's AVX-512 kernels disabled (NPY_DISABLE_CPU_FEATURES).
# A change to the cost model or the draws changes them on purpose: then re-pin with
# `.venv/bin/python -m tests.emulator.test_scoring`; a change to the scoring stage must never.
NO_TEACHER_RUNS = {
    "smoke_verl": ["experiment=smoke", "framework=verl", "emulator.steps=6"],
    "smoke_slime": ["experiment=smoke", "framework=slime", "emulator.steps=6"],
    "smoke_prime_rl": ["experiment=smoke", "framework=prime_rl", "emulator.steps=6"],
    "semianalysis_case1": ["experiment=semianalysis_case1", "framework=prime_rl", "emulator.steps=20"],
    # 3 engines: by step 60, two groups finish in one event and the first fills the batch, so the
    # second is cancelled before the Loop sees it finish (Loop._finished settles the cancel first)
    "semianalysis_case1_3_engines": [
        "experiment=semianalysis_case1",
        "framework=prime_rl",
        "experiment.trainer_gpus=232",
        "experiment.generator_gpus=24",
        "experiment.seed=2",
        "emulator.steps=60",
    ],
}
NO_TEACHER_SHA256 = {
    "semianalysis_case1": "29d8ef244ad871f3d23d97560c571a409f3c984805d9b3d9e987a34aab23d2dc",
    "semianalysis_case1_3_engines": "2d9ba79e54e7da29a373d93e73df302cc0e3be83abb3dd2a82a5e8a8bc8506c5",
    "smoke_prime_rl": "e47d5d317152a0eb3f98e47e360f867cc5d2c11b0c32e1154023375e1ac4b75b",
    "smoke_slime": "f98b92124570a79125e3b215e14dc75329f48a4d26a9e241bb210489fb0be924",
    "smoke_verl": "e28d223910cbaba5c55c0640fc1762d9d139047a4b109ec969105ca17e8f90d1",
}


def _digits(values) -> bytes:
    """Floats to 9 significant digits: numpy's SIMD kernels (AVX-512 or not) round the last bit
    differently on different CPUs (a 1e-16 relative difference in case 1's segment times); a change
    of the model moves far more than the 10th digit."""
    x = np.ascontiguousarray(values).ravel()
    if x.dtype.kind != "f":
        return x.tobytes()
    return ",".join(f"{v:.9g}" for v in x.tolist()).encode()


def trace_sha256(overrides: list[str]) -> str:
    loop, _, _ = build(compose(overrides))
    res = loop.run()
    h = hashlib.sha256()
    for row in step_rows(res):
        row.pop("gen_score_s", None)
        h.update(repr(sorted((k, f"{float(v):.9g}") for k, v in row.items())).encode())
    for d in (res.segments, res.draws):
        for k in sorted(d):
            h.update(k.encode())
            h.update(_digits(d[k]))
    h.update(_digits([res.wall_s, res.events, res.generator_busy_s]))
    return h.hexdigest()


@pytest.mark.parametrize("name", sorted(NO_TEACHER_RUNS))
def test_runs_without_teachers_are_bit_identical_to_before_the_scoring_stage(name):
    loop, _, _ = build(compose(NO_TEACHER_RUNS[name]))
    assert loop.scorer is None
    assert trace_sha256(NO_TEACHER_RUNS[name]) == NO_TEACHER_SHA256[name], (
        f"{name}: the trace of a run without teachers changed; if the cost model or the draws changed on "
        "purpose, re-pin with `.venv/bin/python -m tests.emulator.test_scoring`"
    )


def test_runs_without_teachers_have_no_gen_score_s():
    loop, _, _ = build(compose(NO_TEACHER_RUNS["smoke_verl"]))
    rows = step_rows(loop.run())
    assert all("gen_score_s" not in r for r in rows)  # written as null: no scoring stage


# --- the schema's checks: one line each ------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, line",
    [
        (
            ["workload.algorithm=opd", "experiment.teachers=[]"],
            "workload.algorithm=opd: experiment.teachers is empty; expected at least one teacher, e.g. "
            "experiment.teachers=[{model:qwen3_0_6b,gpus:1}]",
        ),
        (
            ["workload.algorithm=grpo"],
            "experiment.teachers: 1 teacher(s) but workload.algorithm=grpo; expected workload.algorithm=opd "
            "(GRPO-style algorithms score with a task reward, not a teacher) or experiment.teachers=[]",
        ),
        (
            ["experiment.teachers=[{model:qwen3_0_6b,gpus:0}]"],
            "experiment.teachers[0].gpus=0: expected >= 1 with placement=dedicated (or placement=with_generator)",
        ),
        (
            ["experiment.teachers=[{model:qwen3_0_6b,gpus:1,placement:with_generator}]"],
            "experiment.teachers[0].gpus=1: expected 0 with placement=with_generator (served on the generator's GPUs)",
        ),
        (
            ["experiment.teachers=[{model:qwen3_0_6b,gpus:3,tp:2}]"],
            "experiment.teachers[0].tp=2: expected a divisor of experiment.teachers[0].gpus=3 (whole teacher engines)",
        ),
        (
            ["experiment.teachers=[{model:qwen3_0_6b,gpus:1,domains:[math]}]"],
            "experiment.teachers: no teacher scores workload.task=reverse_text (domains ['math']); expected one "
            "with domains: [] (every domain) or including reverse_text",
        ),
        (
            ["experiment.teachers=[{model:qwen3_235b_a22b,gpus:1}]"],
            "experiment.teachers[0].tp=1: qwen3_235b_a22b weights 470 GB do not fit 1 x 80 GB (H100-SXM); "
            "expected a larger tp",
        ),
        (
            ["experiment.teachers=[{model:qwen3_0_6b,gpus:12}]"],
            "experiment.teachers: 12 dedicated GPUs: expected a multiple of cluster.gpus_per_node=8 (roles get whole nodes)",
        ),
    ],
)
def test_validate_refuses_bad_teachers_with_one_line(overrides, line):
    problems = validate_workload(compose([*OPD, *overrides]))  # the runners add their own lines
    assert line in problems
    assert sum("teachers" in p for p in problems) == 1


def test_an_unknown_teacher_model_names_the_key_and_the_choices():
    problems = validate_workload(compose([*OPD, "experiment.teachers=[{model:qwen9,gpus:1}]"]))
    (line,) = [p for p in problems if "teachers" in p]
    assert line.startswith("experiment.teachers[0].model=qwen9: no conf/model/qwen9.yaml; choose one of ")
    assert "qwen3_0_6b" in line and "\n" not in line


def test_the_opd_experiment_validates_for_verl():
    assert validate(compose(OPD)) == []


def test_emulate_refuses_an_unknown_teacher_model_with_exit_2(tmp_path, capsys):
    from bench.__main__ import main

    out = tmp_path / "never"
    assert main(["emulate", *OPD, "experiment.teachers=[{model:qwen9,gpus:1}]", "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert "experiment.teachers[0].model=qwen9" in err


# --- GPU accounting ----------------------------------------------------------------------------------------
def test_dedicated_teacher_gpus_count_in_the_job():
    r = Resolved.from_config(compose(OPD))
    # verl / Miles: actor + rollout colocated on GPU 0, the teacher on GPU 1: one node of 2 GPUs
    assert (r.trainer.gpus, r.generator.gpus, r.teacher.gpus, r.total_gpus, r.nodes) == (1, 1, 1, 2, 1)
    (t,) = r.teachers
    assert (t.placement, t.engines, t.engine_gpus, t.weights) == (
        "dedicated", 1, 1, "PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL",
    )  # fmt: skip
    # Prime-RL: trainer GPU + inference GPU, the teacher served on the inference GPU: still 2
    p = Resolved.from_config(compose(PRIME_LAYOUT))
    assert (p.teacher.gpus, p.total_gpus, p.nodes, p.teachers[0].engines) == (0, 2, 1, 1)
    # a teacher node beside smoke's trainer and generator nodes
    s = Resolved.from_config(
        compose(
            ["experiment=smoke", "workload.algorithm=opd", "experiment.teachers=[{model:qwen3_8b,gpus:8}]"]
        )
    )
    assert (s.total_gpus, s.nodes) == (24, 3)
    assert s.to_dict()["teacher"] == {"gpus": 8, "nodes": 1, "gpus_per_node": 8}


def test_the_resolved_gpu_count_of_metrics_includes_the_teacher(tmp_path):
    from bench import metrics

    paths = emulate(compose(OPD), tmp_path / "run")
    manifest = json.loads(paths.manifest.read_text())
    c = metrics.Context(manifest, metrics.read_steps(paths.steps), None, None)
    assert metrics._total_gpus(c) == 2


def test_gpu_hours_include_the_teacher_gpus(tmp_path):
    paths = emulate(compose(OPD), tmp_path / "run")
    manifest = json.loads(paths.manifest.read_text())
    metrics = json.loads(paths.metrics.read_text())
    assert metrics["gpu_hours"] == pytest.approx(manifest["wall_s"] * 2 / 3600.0)


def test_validate_summary_shows_each_teacher_and_the_job_total():
    from bench.validate import summary_lines

    cfg = compose(OPD)
    lines = summary_lines(cfg, Resolved.from_config(cfg))
    assert lines[-1] == (
        "  teacher qwen3_0_6b (PrimeIntellect/Qwen3-0.6B-Reverse-Text-RL), dedicated: 1 engines x 1 GPU on 1 own "
        "GPUs, scores every domain; job total 2 GPUs"
    )


if __name__ == "__main__":  # re-pin NO_TEACHER_SHA256 (print the current hashes)
    for name, overrides in sorted(NO_TEACHER_RUNS.items()):
        print(f'    "{name}": "{trace_sha256(overrides)}",')
