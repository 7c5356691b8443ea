"""`bench plan RUN_DIR` answers for the run's own GPUs, with the measured run as the baseline row,
a colocated run planned as it ran and split, the run's zero-advantage shape, and advice (plan's
and the report's) that names only splits `bench validate` accepts.

Real inputs: corpus log A (verl GRPO, DeepSeek-7B, 8 GPUs colocated, `hybrid` 8 at line 39; the
emulator's inputs given here as the calibration fitted on the opd-benchmark's verl run), the opd-benchmark's prime-rl run (which logs solve_all / solve_none)
and experiment=smoke emulated generator-bound."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from bench import plan
from bench.__main__ import main as bench_main
from bench.config import compose
from bench.plan_splits import set_point, solve_fractions, valid_splits, zero_advantage_setup
from bench.report.diagnose import diagnose, run_resources
from bench.validate import validate
from tests.calibrate.test_calibrate import parsed_run
from tests.calibrate.test_predict import SETUP

LOG_A = "yushengsu-thu-verl_training_log/grpo_run_deepseek7b_llm.log"
# what log A's manifest lacks (no architecture, no GPU model in the log), and a short emulation
A_GIVEN = ["model=qwen2_5_7b", "hardware=h100_sxm", "emulator.steps=6"]


@pytest.fixture(scope="module")
def run_a(verl_corpus, tmp_path_factory) -> tuple[Path, Path]:
    """(log A ingested, the calibration fitted on the opd-benchmark's verl run)."""
    root = tmp_path_factory.mktemp("plan-a")
    run = root / "a"
    assert (
        bench_main(["ingest", "--framework", "verl", "--logs", str(verl_corpus / LOG_A), "--out", str(run)])
        == 0
    )
    cal = root / "verl.yaml"
    verl = parsed_run(root / "opd", "verl", "verl")
    assert bench_main(["calibrate", str(verl), "--out", str(cal), *SETUP]) == 0
    return run, cal


def test_a_colocated_run_is_planned_on_its_own_gpus_colocated_and_split(run_a, tmp_path, capsys):
    run, cal = run_a
    args = [str(run), *A_GIVEN, f"calibration={cal}", "seeds=1", "--json", "--out", str(tmp_path / "p")]
    assert bench_main(["plan", *args]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total_gpus"] == 8  # the run's 8 GPUs, not trainer 8 + generator 8
    layouts = sorted((p["placement"], p["trainer_gpus"], p["generator_gpus"]) for p in d["points"])
    # engines of 2 GPUs (rollout TP 2, line 28): 6:2 is no split, verl's 1024 x 5 samples do not
    # divide over 6 trainer ranks
    assert layouts == [("colocated", 8, 8), ("disaggregated", 2, 6), ("disaggregated", 4, 4)]
    # the colocated point is the run as it ran: the current one
    assert (d["current"]["placement"], d["current"]["trainer_gpus"]) == ("colocated", 8)
    # every split proposed is one bench validate accepts for the plan's own configuration
    s = plan.setup(run, [*A_GIVEN, f"calibration={cal}"], tmp_path / "probe")
    for t, g in [(2, 6), (4, 4), (6, 2)]:
        problems = validate(set_point(copy.deepcopy(s.cfg), t, g))
        assert (problems == []) == ((t, g) != (6, 2)), problems
    # the measured baseline: bench.metrics on the run's own trace, as metrics.json has it
    metrics = json.loads((run / "metrics.json").read_text())
    m = d["measured"]
    assert (m["placement"], m["trainer_gpus"], m["gpus"], m["measured"]) == ("colocated", 8, 8, True)
    assert m["trainer_idle_frac"] == pytest.approx(metrics["trainer_idle_frac"])
    # 1,024 prompts x 5 samples a step (total_num_tokens over the logged means), 1,119 steps back to
    # back over the sum of timing_s/step, 86,416.363 s (corpus/README.md)
    assert m["trajectories_per_s"] == pytest.approx(5120 * 1119 / 86416.363, rel=1e-6)
    assert d["notes"][0].startswith("zero-advantage share: default workload.solve_rate_alpha=1")
    page = (tmp_path / "p" / "plan.md").read_text()
    assert "| measured | colocated | 8 |" in page.replace("  ", " ")


def test_zero_advantage_share_comes_from_the_run_that_logs_it(tmp_path, capsys):
    """prime-rl's opd-benchmark run logs solve_all 0 and solve_none 0 on every step (distillation:
    no group passes or fails as a whole): the plan emulates that, not the Beta(1, 1) default's
    2 / (16 + 1) = 12% of groups."""
    run = parsed_run(tmp_path / "run", "prime", "prime_rl")
    setup = [s for s in SETUP if not s.startswith("experiment.placement=")]
    args = [str(run), *setup, "experiment.placement=disaggregated", "seeds=2", "--json"]
    assert bench_main(["plan", *args, "--out", str(tmp_path / "p")]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["notes"][0].startswith("zero-advantage share from the run: solve_all 0.0%, solve_none 0.0% ->")
    assert d["measured"]["zero_advantage_frac"] == 0.0
    assert [p["zero_advantage_frac"] for p in d["points"]] == [pytest.approx(0.0, abs=0.01)]


def test_the_fitted_solve_rate_reproduces_the_logged_fractions():
    import pandas as pd

    # 30% of groups all pass, 10% all fail, groups of 5
    steps = pd.DataFrame(
        {"step": [1, 2, 3], "solve_all_frac": [0.5, 0.3, 0.3], "solve_none_frac": [0.0, 0.1, 0.1]}
    )
    overrides, note = zero_advantage_setup(steps, 5)
    alpha, beta = (float(o.split("=")[1]) for o in overrides)
    p_all, p_none = solve_fractions(alpha, beta, 5)
    assert (float(p_all), float(p_none)) == (pytest.approx(0.3, abs=0.01), pytest.approx(0.1, abs=0.01))
    assert note.startswith("zero-advantage share from the run: solve_all 30.0%, solve_none 10.0%")


def _proposed(action: str) -> tuple[int, int] | None:
    hit = re.search(r"nearest split bench validate accepts: (\d+) trainer : (\d+) generator", action)
    return (int(hit[1]), int(hit[2])) if hit else None


@pytest.mark.parametrize(
    ("gpus_per_node", "says"),
    [
        # two nodes of 8: the only split is 8:8, so the advice says no split moves GPUs to generation
        (8, "but no trainer:generator split of the 16 GPUs that bench validate accepts does that "
            "(it accepts 8:8 (roles take whole nodes of 8 GPUs))"),
        # nodes of 2: 4:12 and 2:14 are accepted too; production needs ~72 generator GPUs: the nearest
        (2, "the nearest split bench validate accepts: 2 trainer : 14 generator GPUs (roles take whole nodes of 2 GPUs)"),
    ],
)  # fmt: skip
def test_the_reports_advice_names_only_splits_validate_accepts(tmp_path, gpus_per_node, says):
    """experiment=smoke (16 GPUs, 8:8) emulated generator-bound (decode at 10% of HBM bandwidth)."""
    run = tmp_path / "run"
    over = ["experiment=smoke", "framework=verl", "emulator.steps=6", "emulator.decode_bw_eff=0.1",
            f"cluster.gpus_per_node={gpus_per_node}"]  # fmt: skip
    assert bench_main(["emulate", *over, "--out", str(run)]) == 0
    manifest = json.loads((run / "manifest.json").read_text())
    v = diagnose(json.loads((run / "metrics.json").read_text()), run_resources(manifest))
    assert v.label == "generator-bound" and says in v.action
    split = _proposed(v.action)
    cfg = compose(over[:2] + over[4:])
    assert split is None or split in valid_splits(cfg, 16)
