"""`bench plan`: the split it recommends on cases whose answer is known, its JSON, its page, and the
refusals. Every plan here is emulated with few steps (emulator.steps=6 on smoke, 30 on SemiAnalysis
case 1) so the tests stay fast; the figures quoted in comments are those runs' emulated means."""

from __future__ import annotations

import json
from multiprocessing import active_children
from pathlib import Path

import pytest

from bench import plan
from bench.__main__ import main as bench_main
from bench.config import compose
from bench.plan_splits import choose

# smoke (Qwen3-8B GRPO, 16 H100) on nodes of 2 GPUs, so that 16 GPUs split several ways: validate
# admits trainer 8, 4 or 2 GPUs (1024 samples per step over the trainer's data-parallel ranks)
SMOKE = ["experiment=smoke", "framework=verl", "emulator.steps=6", "cluster.gpus_per_node=2", "seeds=2"]
# decode at 10% of HBM bandwidth: at 8:8 the trainer waits ~89% of its step for rollouts
GENERATOR_BOUND = [*SMOKE, "emulator.decode_bw_eff=0.1"]
# 1K-token responses on 2 trainer GPUs: the trainer is the bottleneck, generators wait
TRAINER_BOUND = [
    *SMOKE,
    "workload.max_response_len=1024",
    "experiment.trainer_gpus=2",
    "experiment.generator_gpus=14",
]


def _plan_json(args: list[str], out: Path, capsys) -> dict:
    assert bench_main(["plan", *args, "--json", "--out", str(out)]) == 0
    return json.loads(capsys.readouterr().out)


def _point(d: dict, trainer: int) -> dict:
    return next(p for p in d["points"] if p["trainer_gpus"] == trainer)


def test_generator_bound_case_recommends_more_generator_gpus(tmp_path, capsys):
    d = _plan_json(GENERATOR_BOUND, tmp_path / "p", capsys)
    assert d["current"] == {"placement": "disaggregated", "trainer_gpus": 8, "generator_gpus": 8, "teacher_gpus": 0,
                            "staleness_budget": 1, "oversampling": 1.0}  # fmt: skip
    rec = d["recommended"]
    assert rec["generator_gpus"] > 8 and rec["trainer_gpus"] + rec["generator_gpus"] == 16
    cur, best = _point(d, 8), _point(d, rec["trainer_gpus"])
    assert cur["trainer_idle_frac"] > 0.8  # generator-bound: the trainer mostly waits
    assert best["trainer_idle_frac"] < cur["trainer_idle_frac"]
    assert best["production_samples_per_s"] > cur["production_samples_per_s"]
    assert best["useful_cost_per_mtok_usd"] < cur["useful_cost_per_mtok_usd"]
    moved = 8 - rec["trainer_gpus"]
    assert d["sentence"].startswith(f"move {moved} trainer GPUs to rollout: trajectories/s ")
    assert "emulated" in d["sentence"]


def test_trainer_bound_case_recommends_fewer_generator_gpus(tmp_path, capsys):
    d = _plan_json(TRAINER_BOUND, tmp_path / "p", capsys)
    assert (d["current"]["trainer_gpus"], d["current"]["generator_gpus"]) == (2, 14)
    rec = d["recommended"]
    assert rec["generator_gpus"] < 14
    cur, best = _point(d, 2), _point(d, rec["trainer_gpus"])
    # at 2:14 production meets consumption (the trainer is the bottleneck) and costs the most
    assert cur["met"] and cur["trainer_idle_frac"] < 0.05
    assert best["useful_cost_per_mtok_usd"] < cur["useful_cost_per_mtok_usd"]
    assert d["sentence"].startswith(f"move {rec['trainer_gpus'] - 2} rollout GPUs to the trainer")


def test_json_shape_and_the_page(tmp_path, capsys):
    out = tmp_path / "p"
    d = _plan_json([*GENERATOR_BOUND, "bounds=1,2"], out, capsys)
    assert set(d) >= {"recommended", "current", "points", "sentence", "crossing_generator_gpus"}
    assert set(d["recommended"]) == {"placement", "trainer_gpus", "generator_gpus", "teacher_gpus",
                                     "staleness_budget", "oversampling"}  # fmt: skip
    # 3 splits x 2 async bounds, each the mean of 2 seeds with its band
    assert len(d["points"]) == 6 and {p["n_runs"] for p in d["points"]} == {2}
    assert sorted({(p["trainer_gpus"], p["generator_gpus"]) for p in d["points"]}) == [
        (2, 14),
        (4, 12),
        (8, 8),
    ]
    p = d["points"][0]
    assert p["emulated"] is True and p["teacher_gpus"] == 0
    assert p["trainer_idle_frac_min"] <= p["trainer_idle_frac"] <= p["trainer_idle_frac_max"]
    assert d["mode"] == "emulated" and d["seeds"] == [0, 1]
    assert json.loads((out / "plan.json").read_text()) == d
    html, md = (out / "plan.html").read_text(), (out / "plan.md").read_text()
    assert "emulated" in html and d["sentence"].split(":")[0] in html
    assert "(emulated)" in md and "★" in md and (out / "plan.png").stat().st_size > 10_000


def test_semianalysis_case1_moves_trainer_gpus_to_rollout_at_a_flat_cost(tmp_path, capsys):
    """Case 1 (64 trainer : 192 generator H200, published idle 30%), emulator.steps=30, 2 seeds.
    prime-rl pads its micro-batches to the trainer's data-parallel size, so validate admits every
    whole-node split of 256 GPUs (trainer 8, 16, ..., 248; 16 of them emulated), not only the
    trainer sizes that divide 512 samples. Moving trainer GPUs to rollout cuts the trainer's idle
    (28% at 64:192, 17% at 56:200) but not the cost: production is held by the in-flight cap (768
    rollouts), not by the engine count, so it stays at ~1.97 samples/s and useful $/M is flat."""
    d = _plan_json(["experiment=semianalysis_case1", "emulator.steps=30", "seeds=2"], tmp_path / "p", capsys)
    trainers = sorted(p["trainer_gpus"] for p in d["points"])
    assert len(trainers) == 16 and {24, 40, 56, 64, 88} <= set(trainers)  # not powers of two only
    assert all(t % 8 == 0 for t in trainers) and d["current"]["trainer_gpus"] == 64
    cur, larger = _point(d, 64), _point(d, 56)
    assert not cur["met"]  # generator-bound: production below consumption
    assert cur["trainer_idle_frac"] == pytest.approx(0.30, abs=0.05)  # emulated 28%
    assert cur["consumption_samples_per_s"] == pytest.approx(2.75, rel=0.05)
    assert larger["trainer_idle_frac"] < cur["trainer_idle_frac"] - 0.05  # emulated 17%
    # the extra engine adds no production: in-flight rollouts, not engines, set it
    assert larger["production_samples_per_s"] == pytest.approx(cur["production_samples_per_s"], rel=0.02)
    assert larger["useful_cost_per_mtok_usd"] == pytest.approx(cur["useful_cost_per_mtok_usd"], rel=0.02)
    # a larger generator share: as cheap as the seeds can tell (bands overlap), with less idle
    rec = d["recommended"]
    assert (rec["trainer_gpus"], rec["generator_gpus"]) == (56, 200)
    assert d["sentence"].startswith("move 8 trainer GPUs to rollout: ")


def test_choose_spaces_the_splits_and_keeps_the_current_one():
    valid = [(256 - g, g) for g in range(8, 256, 8)]  # 31 whole-node splits
    picked = choose(valid, (64, 192), 16)
    assert len(picked) == 16 and (64, 192) in picked
    assert picked[0] == (248, 8) and picked[-1] == (8, 248)
    assert choose(valid[:5], None, 16) == valid[:5]


def test_parallel_and_serial_emulations_are_the_same_numbers():
    cfg = compose(["experiment=smoke", "framework=verl", "emulator.steps=3"])
    items = [(8, 8, 1, 1.0, 0), (8, 8, 1, 1.0, 1)]
    workers = []  # `meanwhile` runs once in this process, while the forked workers emulate
    serial = plan.emulate_all(cfg, items, jobs=1)
    parallel = plan.emulate_all(cfg, items, jobs=2, meanwhile=lambda: workers.append(len(active_children())))
    assert workers == [2]
    assert serial.equals(parallel)
    assert serial.loc[0, "production_samples_per_s"] != serial.loc[1, "production_samples_per_s"]  # seeds


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["experiment=semianalysis_case1", "gpus=3"],
            "gpus=3: no trainer:generator split passes bench validate (engines of 8 GPUs; one engine leaves no trainer GPU)",
        ),
        (["experiment=nope"], "experiment 'nope' not found; choose one of"),
        (["gpus=16"], "name what to plan: experiment=X"),
        (["experiment=smoke", "seeds=x"], "seeds=x: expected integers"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(args, message, tmp_path, capsys):
    out = tmp_path / "p"
    assert bench_main(["plan", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}")
    assert not out.exists()


def test_an_existing_out_is_never_overwritten(tmp_path, capsys):
    out = tmp_path / "p"
    out.mkdir()
    (out / "plan.html").write_text("earlier")
    assert bench_main(["plan", "experiment=smoke", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and (out / "plan.html").read_text() == "earlier"


def test_from_a_measured_run_plans_on_its_setup_with_its_calibration(tmp_path, capsys):
    """verl's opd-benchmark run (2 x H100, Qwen3-0.6B), planned disaggregated over 4 GPUs: validate
    admits 2:2 and 1:3; the calibration fitted on the run is written beside the page."""
    from tests.calibrate.test_calibrate import parsed_run
    from tests.calibrate.test_predict import SETUP

    run = parsed_run(tmp_path / "run", "verl", "verl")
    args = [str(run), *SETUP, "experiment.placement=disaggregated", "gpus=4", "seeds=2"]
    d = _plan_json(args, tmp_path / "p", capsys)
    assert sorted((p["trainer_gpus"], p["generator_gpus"]) for p in d["points"]) == [(1, 3), (2, 2)]
    assert d["current"] is None  # the run held 2 GPUs, not 4: nothing to compare against
    assert d["recommended"]["trainer_gpus"] + d["recommended"]["generator_gpus"] == 4
    assert d["source"].startswith(f"{run} (verl run, calibration fitted now")
    assert d["sentence"].startswith("run ")
    cal = (tmp_path / "p" / "calibration.yaml").read_text()
    assert "fitted_on" in cal


def test_useful_cost_pays_for_trained_zero_advantage_groups_only():
    import pandas as pd

    trained_all = pd.DataFrame({"filtered_samples": [0, 0]})
    filtering = pd.DataFrame({"filtered_samples": [0, 32]})
    # $4 per M trained tokens, 20% of groups without advantage: $5 per M useful ones when trained
    assert plan.useful_cost(4.0, 0.2, trained_all) == pytest.approx(5.0)
    assert plan.useful_cost(4.0, 0.2, filtering) == 4.0  # dropped before training: never paid for
    assert plan.useful_cost(None, 0.2, trained_all) is None
    assert plan.useful_cost(4.0, None, trained_all) is None


def test_from_a_prime_rl_run_plans_splits_within_one_node(tmp_path, capsys):
    """prime-rl's opd-benchmark run (1 trainer + 1 inference GPU on one node): its single_node
    deployment makes every split of 4 GPUs legal (no whole-node rule within one node, no batch
    divisibility: prime-rl pads its micro-batches to the DP size)."""
    from tests.calibrate.test_calibrate import parsed_run
    from tests.calibrate.test_predict import SETUP

    run = parsed_run(tmp_path / "run", "prime", "prime_rl")
    setup = [s for s in SETUP if not s.startswith("experiment.placement=")]
    args = [str(run), *setup, "experiment.placement=disaggregated", "gpus=4", "seeds=2"]
    d = _plan_json(args, tmp_path / "p", capsys)
    assert sorted((p["trainer_gpus"], p["generator_gpus"]) for p in d["points"]) == [(1, 3), (2, 2), (3, 1)]
    assert d["source"].startswith(f"{run} (prime_rl run, calibration fitted now")
    assert d["recommended"]["trainer_gpus"] + d["recommended"]["generator_gpus"] == 4


def test_a_cost_tie_within_the_seed_bands_goes_to_the_lower_trainer_idle():
    import pandas as pd

    u = plan.USEFUL
    pts = pd.DataFrame(
        {
            "generator_gpus": [192, 200, 216],
            "staleness_ok": [True, True, True],
            u: [6.69, 6.70, 6.60],
            f"{u}_min": [6.51, 6.48, 6.58],
            f"{u}_max": [6.81, 6.83, 6.62],
            "trainer_idle_frac": [0.28, 0.17, 0.40],
        }
    )
    # 216 is cheapest; 200's band reaches down into it, 192's too: among those, the least idle
    assert plan.recommend(pts).generator_gpus == 200
    pts.loc[1, f"{u}_min"] = 6.63  # 200's band no longer reaches 216's: the cheapest wins
    pts.loc[0, f"{u}_min"] = 6.63
    assert plan.recommend(pts).generator_gpus == 216


def test_a_plan_point_has_the_figures_of_the_full_emulated_run_directory(tmp_path):
    """A plan point keeps no rollout rows and reuses its config, layout, shared draws and chunk
    shapes; its figures are those of `bench emulate` on the same point (trace written, metrics.json
    computed from the files), exactly, split after split and seed after seed."""
    from bench.emulator.run import emulate

    base = ["experiment=smoke", "framework=verl", "emulator.steps=6", "cluster.gpus_per_node=2"]
    items = [(8, 8, 1, 1.0, 0), (4, 12, 1, 1.0, 0), (8, 8, 1, 1.0, 1), (8, 8, 2, 1.5, 1)]
    rows = plan.emulate_all(compose(base), items, jobs=1)
    for (t, g, bound, inflight, seed), row in zip(items, rows.to_dict("records"), strict=True):
        point = [f"experiment.trainer_gpus={t}", f"experiment.generator_gpus={g}",
                 f"workload.staleness_budget={bound}", f"experiment.oversampling={inflight}",
                 f"experiment.seed={seed}"]  # fmt: skip
        run = emulate(compose([*base, *point]), tmp_path / f"{t}-{g}-{bound}-{inflight}-{seed}")
        full = json.loads(run.metrics.read_text())
        assert {k: row[k] for k in plan.KEPT} == {k: full[k] for k in plan.KEPT}, point
        assert row["zero_advantage_frac"] is not None and row["trajectories_per_s"] > 0
