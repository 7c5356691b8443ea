"""The `phases` reproduce kind (bench/reproduce/phases.py): published per-phase step tables, calibrated
on their synchronous row, predicting the asynchronous rows.

The published numbers are checked against the source tables as read (quoted below, with where and at
which commit); the fit is checked to recover known inputs and to reproduce its synchronous row; the
statuses follow docs/reproduce.md's rule (fit targets calibrated, the synchronous row's other figures
derived, every other row pass / fail); bad YAML names the file and the key.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bench.model import costmodel
from bench.reproduce import phases, table
from bench.reproduce.spec import PUBLISHED_DIR, Context, SpecError, load_case, load_cases
from bench.resolve import Resolved

# verl docs/advance/one_step_off.md at e55d143181568d5232e4c2c6ba0d3a2ea1f7ebcd, "Experimental Results":
ONE_STEP_OFF = """
| colocate sync          | VLLM+FSDP2    | 749  | 321 | -             | 247                | 88           | 286          |
| one-step-overlap async | VLLM+FSDP2    | 520  | -   | 45            | 458                | 108          | 337          |
| colocate sync          | VLLM+Megatron | 699  | 207 | -             | 162                | 119          | 344          |
| one-step-overlap async | VLLM+Megatron | 566  | -   | 59            | 501                | 120          | 347          |
"""
# verl docs/advance/fully_async.md at 2147009822388b70cda46ab4a27c5400d3d113ed, "Asynchronous Training
# on 7B Model" (mode, resource allocation, step, gen, old_log_prob, update_actor):
FULLY_ASYNC = """
| colocate sync      | 32    | 790.10 | 357.41 | 107.71 | 313.81 |
| fully_async_policy | 16:16 | 294.77 | 21.26  | \\      | 269.80 |
| colocate sync      | 64    | 365.28 | 150.72 | 70.26  | 133.41 |
| fully_async_policy | 32:32 | 189.26 | 28.46  | \\      | 156.98 |
| colocate sync      | 128   | 356.30 | 177.85 | 53.92  | 113.81 |
| fully_async_policy | 64:64 | 150.63 | 33.14  | \\      | 113.16 |
"""
# NeMo-RL docs/about/performance-summary.md at tag v0.6.0 (5fb5889), "H100 BF16 Benchmarks"
# (policy, #-GPUs, Tokens / sec / GPU, Total Step time(s)):
NEMO = """
| On policy  | 32  | 1102 | 192  |
| 1-step Off | 32  | 1414 | 152  |
| 8-step Off | 192 | 1025 | 34.5 |
"""


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.strip().splitlines()]


def _published(name: str) -> dict[str, float]:
    return {f.id: f.published for f in load_case(PUBLISHED_DIR / f"{name}.yaml").figures}


def test_one_step_off_numbers_are_the_doc_table():
    got = _published("verl_one_step_off_phases")
    for row in _rows(ONE_STEP_OFF):
        engine = "fsdp2" if "FSDP2" in row[1] else "megatron"
        step, gen_seq, old_lp, update = (float(row[i]) for i in (2, 5, 6, 7))
        mode = "sync" if row[0] == "colocate sync" else "async"
        assert got[f"{engine}_{mode}_step"] == step
        assert got[f"{engine}_{mode}_generate_sequences"] == gen_seq
        assert got[f"{engine}_{mode}_old_log_prob"] == old_lp
        assert got[f"{engine}_{mode}_update_actor"] == update
        if mode == "async":
            assert got[f"{engine}_async_wait_prev_gen"] == float(row[4])


def test_fully_async_numbers_are_the_doc_table():
    got = _published("verl_fully_async_phases")
    rows = _rows(FULLY_ASYNC)
    assert len(got) == 21  # 3 x (4 sync + 3 async): old_log_prob is "\" on the async rows
    for sync, asy in zip(rows[::2], rows[1::2], strict=True):
        n, h = int(sync[1]), int(sync[1]) // 2
        assert asy[1] == f"{h}:{h}"
        assert [got[f"sync{n}_{k}"] for k in ("step", "gen", "old_log_prob", "update_actor")] == [
            float(x) for x in sync[2:6]
        ]
        assert [got[f"async{h}_{h}_{k}"] for k in ("step", "gen", "update_actor")] == [
            float(asy[i]) for i in (2, 3, 5)
        ]


def test_nemo_numbers_are_the_performance_summary():
    got = _published("nemo_rl_async_phases")
    ids = {"On policy": "on_policy", "1-step Off": "one_off", "8-step Off": "eight_off"}
    for policy, _gpus, tokens, step in _rows(NEMO):
        assert got[f"{ids[policy]}_step"] == float(step)
        assert got[f"{ids[policy]}_tokens_per_s_per_gpu"] == float(tokens)
    # the GPU counts of the table are the emulated splits (16 + 16, 128 + 64)
    case = load_case(PUBLISHED_DIR / "nemo_rl_async_phases.yaml")
    by_id = {f.id: f for f in case.figures}
    for fid, gpus in (("on_policy_step", 32), ("one_off_step", 32), ("eight_off_step", 192)):
        cfg = phases.configs(case, by_id[fid])[0]
        assert Resolved.from_config(cfg).total_gpus == gpus


def _case_inputs_match(case, composed: dict) -> int:
    checked = 0
    for fig in case.figures:
        cal, row, *_ = phases._spec(case, fig)
        key = (*cal["overrides"], *row)
        if key not in composed:  # composing is slow: once per distinct row
            composed[key] = phases.configs(case, fig)[0]
        for name in fig.depends_on:
            inp = case.inputs[name]
            if inp.key:
                got = OmegaConf.select(composed[key], inp.key)
                assert got == pytest.approx(inp.value), (case.name, fig.id, name)
                checked += 1
    return checked


def test_chosen_and_published_inputs_are_the_values_the_rows_run_on():
    cases = [c for c in load_cases() if c.name.endswith("_phases")]
    assert {c.name for c in cases} == {
        "verl_one_step_off_phases",
        "verl_fully_async_phases",
        "nemo_rl_async_phases",
    }
    composed: dict = {}
    assert sum(_case_inputs_match(c, composed) for c in cases) > 100


def test_fit_recovers_known_inputs():
    """Phases emulated with known inputs, given back as 'published': the fit finds the inputs."""
    base = ["experiment=verl_one_step_off_phases_h20", "framework=verl"]
    known = {
        "emulator.trainer_mfu": 0.41,
        "emulator.logprob_passes": 2,
        "emulator.decode_bw_eff": 0.23,
        "emulator.weight_sync_fixed_s": 57.0,
    }
    cfg = phases._compose(base + [f"{k}={v}" for k, v in known.items()])
    measured = phases.phase_means(phases.steps_table(cfg), cfg, 1)
    target = {p: measured[p] for p in ("compute_s", "logprob_s", "gen_s", "step_s")}
    fit = phases.fit_sync(base, target, 1)
    assert fit.values["emulator.logprob_passes"] == 2
    assert fit.values["emulator.trainer_mfu"] == pytest.approx(0.41, rel=1e-3)
    assert fit.values["emulator.decode_bw_eff"] == pytest.approx(0.23, rel=5e-3)
    # the step is fitted to 0.1% (TOLERANCE), so its fixed part to 0.1% of the step
    assert fit.values["emulator.weight_sync_fixed_s"] == pytest.approx(
        57.0, abs=phases.TOLERANCE * target["step_s"]
    )
    assert not fit.notes


def test_fit_reproduces_the_published_sync_row_within_one_percent():
    """verl one-step-off, FSDP2 colocate sync: generate_sequences 247, update_actor 286, step 749 within
    1%; old_log_prob 88 s is one whole forward pass at the fitted rate: 286 / 3 = 95.3 s."""
    case = load_case(PUBLISHED_DIR / "verl_one_step_off_phases.yaml")
    fig = next(f for f in case.figures if f.id == "fsdp2_sync_step")
    fit = phases.sync_fit(case, fig, Context(Path("."), Path(".")))
    for phase, published in (("gen_s", 247), ("compute_s", 286), ("step_s", 749)):
        assert fit.emulated[phase] == pytest.approx(published, rel=0.01)
    assert fit.values["emulator.logprob_passes"] == 1
    assert fit.notes == []  # no input at a bound, converged
    # a pass is a third of the update's compute: less optimizer_s (1 s) and the offloaded state's
    # host transfer (offload=True in verl's colocate scripts: 7.6 GB per GPU in and out at 64 GB/s)
    cfg = phases.configs(case, fig)[0]
    offload = costmodel.offload_s(cfg, Resolved.from_config(cfg))
    assert offload == pytest.approx(2 * 7.6152832e9 / 64e9)
    assert fit.emulated["logprob_s"] == pytest.approx((286 - 1.0 - offload) / 3, rel=0.01)
    # the async row carries the efficiencies, not the colocated hand-off
    row = phases.row_overrides(case, next(f for f in case.figures if f.id == "fsdp2_async_step"), fit)
    assert any(o.startswith("emulator.trainer_mfu=") for o in row)
    synced = [o for o in row if o.startswith("emulator.weight_sync_fixed_s=")]
    assert synced == ["emulator.weight_sync_fixed_s=0.3"]


def test_fit_gives_the_compute_efficiency_of_an_offloading_row():
    """With experiment.trainer.offload_* the update carries the state's host transfer as time: the
    fit recovers the known trainer_mfu of the compute alone (Megatron: 36 GB per GPU, 1.13 s)."""
    base = [
        "experiment=verl_one_step_off_phases_h20", "framework=verl", "experiment.trainer.sharding=megatron",
        "experiment.trainer.offload_params=true", "experiment.trainer.offload_optimizer=true",
    ]  # fmt: skip
    cfg = phases._compose([*base, "emulator.trainer_mfu=0.2"])
    assert costmodel.offload_s(cfg, Resolved.from_config(cfg)) > 1.0
    measured = phases.phase_means(phases.steps_table(cfg), cfg, 1)
    fit = phases.fit_sync(base, {"compute_s": measured["compute_s"]}, 1)
    assert fit.values["emulator.trainer_mfu"] == pytest.approx(0.2, rel=1e-4)


def test_step_fitted_by_decode_when_no_generation_is_published():
    """NeMo-RL's on-policy row publishes only its step (192 s): decode_bw_eff alone is fitted to it."""
    fit = phases.fit_sync(
        ["experiment=nemo_rl_qwen3_30b_a3b_h100", "framework=verl"],
        {"step_s": 192.0},
        1,
        "emulator.decode_bw_eff",
    )
    assert set(fit.values) == {"emulator.decode_bw_eff"}
    assert fit.emulated["step_s"] == pytest.approx(192.0, rel=0.01)
    assert 0 < fit.values["emulator.decode_bw_eff"] < 1


def test_statuses_follow_the_rule(tmp_path: Path):
    """Fit targets are calibrated, the sync row's other figure derived, every other row pass / fail."""
    case = load_case(PUBLISHED_DIR / "nemo_rl_async_phases.yaml")
    ctx = Context(tmp_path, tmp_path)
    rows = {f.id: table.evaluate_figure(case, f, ctx) for f in case.figures}
    assert rows["on_policy_step"].status == "calibrated"
    assert rows["on_policy_tokens_per_s_per_gpu"].status == "derived"
    for fid in (
        "one_off_step",
        "one_off_tokens_per_s_per_gpu",
        "eight_off_step",
        "eight_off_tokens_per_s_per_gpu",
    ):
        r = rows[fid]
        assert r.status == ("pass" if abs(r.error_pct) <= 20 else "fail"), (fid, r.error_pct)
        assert "assumptions: trainer_mfu = 0.35" in r.note and "calibrated on the synchronous row" in r.note
    # every emulated row is a run directory under the work dir
    assert len(list((tmp_path / "phases").glob("*/trace/steps.parquet"))) == 3


HEAD = "title: t\nsource_url: https://x\nours: emulated\ntolerance_pct: 20\n"
CAL = "calibrate_on: {overrides: [experiment=smoke], fit: {compute_s: a}}"


@pytest.mark.parametrize(
    ("figures", "message"),
    [
        (
            "  - {id: a, figure: f, published: 1, calibrated: x, compute: {source: phases, phase: compute_s}}\n",
            r"bad\.yaml: figure 'a': compute: key 'calibrate_on' must be",
        ),
        (
            f"  - {{id: a, figure: f, published: 1, calibrated: x, compute: {{source: phases, phase: gen, {CAL}}}}}\n",
            r"bad\.yaml: figure 'a': compute: phase='gen'; expected one of",
        ),
        (
            f"  - {{id: a, figure: f, published: 1, compute: {{source: phases, phase: compute_s, {CAL}}}}}\n",
            r"bad\.yaml: figure 'a': compute\.calibrate_on\.fit\.compute_s: figure 'a' is a fit target: give it `calibrated:`",
        ),
        (
            "  - {id: a, figure: f, published: 1, calibrated: x, compute: {source: phases, phase: compute_s, "
            "calibrate_on: {overrides: [], fit: {update: a}}}}\n",
            r"bad\.yaml: figure 'a': compute\.calibrate_on\.fit: phase 'update' cannot be fitted",
        ),
        (
            f"  - {{id: a, figure: f, published: 1, calibrated: x, compute: {{source: phases, phase: compute_s, skip: -1, {CAL}}}}}\n",
            r"bad\.yaml: figure 'a': compute: key 'skip' is -1",
        ),
        (
            "  - {id: a, figure: f, published: 1, calibrated: x, compute: {source: phases, phase: step_s, "
            "calibrate_on: {overrides: [experiment=smoke], fit: {step_s: a}, step_by: emulator.trainer_mfu}}}\n",
            r"bad\.yaml: figure 'a': compute\.calibrate_on: step_by='emulator\.trainer_mfu'; expected one of",
        ),
    ],
)
def test_schema_errors_name_file_and_key(tmp_path: Path, figures: str, message: str):
    path = tmp_path / "bad.yaml"
    path.write_text(HEAD + "figures:\n" + figures)
    case = load_case(path)
    row = table.evaluate_figure(case, case.figures[0], Context(tmp_path, tmp_path))
    assert row.status == "error"
    assert re.search(message, row.note), row.note
    with pytest.raises(SpecError, match=message):
        phases.compute(case, case.figures[0], Context(tmp_path, tmp_path))


def test_an_input_at_its_bound_stops_the_fit_with_a_note():
    """A step shorter than its emulated phases leaves no fixed sync: held at 0 and said, not iterated
    30 times (verl fully_async's 64-GPU sync row: 2 log-prob passes make its phases 372 > 365.28 s)."""
    base = ["experiment=verl_one_step_off_phases_h20", "framework=verl"]
    fit = phases.fit_sync(base, {"compute_s": 286.0, "step_s": 300.0}, 1)
    assert fit.values["emulator.weight_sync_fixed_s"] == 0.0
    assert fit.emulated["compute_s"] == pytest.approx(286.0, rel=phases.TOLERANCE)
    assert fit.notes == ["the step is shorter than its emulated phases: weight_sync_fixed_s held at 0"]
