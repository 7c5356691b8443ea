"""Metrics from a trace: hand-computed values, null-with-reason, and property tests of identities."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.config import compose
from bench.metrics import compute, identity_check, steady_window, write_metrics
from bench.trace import RunPaths, write_manifest, write_steps
from bench.validate import to_container


def make_run(tmp_path, steps, config=True, name="run"):
    paths = RunPaths(tmp_path / name).make()
    manifest = {
        "experiment": "smoke",
        "run_id": name,
        "framework": "verl",
        "framework_version": "0.9.1",
        "mode": "emulated",
        "status": "completed",
    }
    if config:
        manifest["config"] = to_container(compose(["experiment=smoke"]))
    write_manifest(paths, manifest)
    write_steps(paths.steps, steps)
    return paths.root


def case1_like_steps(n=10):
    # 100-s steps: 30 s waiting, 65 s compute, 5 s weight sync; 512 samples of 256 + 1024 tokens
    return [
        {
            "step": i,
            "t_start_s": 100.0 * i,
            "t_end_s": 100.0 * (i + 1),
            "step_s": 100.0,
            "wait_s": 30.0,
            "compute_s": 65.0,
            "sync_s": 5.0,
            "samples": 512,
            "prompts": 32,
            "prompt_tokens": 256 * 512,
            "response_tokens": 1024 * 512,
            "generated_tokens": 2048 * 512,
            "dispatched_samples": 1280,
            "discarded_samples": 768,
            "filtered_samples": 0,
            "staleness_mean": 2.0,
            "staleness_max": 4.0,
            "solve_all_frac": 0.25,
            "solve_none_frac": 0.25,
            "native_mfu": 0.05,
        }
        for i in range(n)
    ]


def test_window_skips_warmup():
    import pandas as pd

    w = steady_window(pd.DataFrame({"step": range(15)}))
    assert (w.first, w.last) == (2, 14)  # ceil(1.5) = 2 warm-up steps
    assert steady_window(pd.DataFrame({"step": [0, 1]})).first == 0


def test_hand_computed_metrics(tmp_path):
    m = compute(make_run(tmp_path, case1_like_steps()))
    assert m["wall_s"] == 1000.0
    assert m["steady_step_s"] == 100.0
    assert m["trainer_idle_frac"] == pytest.approx(0.30)
    assert m["consumption_samples_per_s"] == pytest.approx(512 / 65)
    assert m["production_samples_per_s"] == pytest.approx(5.12)
    assert m["trajectories_per_s"] == pytest.approx(5.12)
    assert m["oversampling_waste"] == pytest.approx(0.6)
    assert m["token_waste"] == pytest.approx(0.5)
    assert m["zero_advantage_frac"] == pytest.approx(0.5)
    assert (m["staleness_mean"], m["staleness_max"]) == (2.0, 4.0)
    assert m["trained_tokens"] == 10 * 1280 * 512
    # suite FLOPs/token of Qwen3-8B at 1280 tokens: 45,408,583,680 + 3 x 16384 x 640.5 x 36 = 46,541,897,728
    assert m["mfu"] == pytest.approx(1280 * 512 * 46_541_897_728 / (65 * 8 * 989e12))
    assert m["mfu_wall"] == pytest.approx(1280 * 512 * 46_541_897_728 / (100 * 8 * 989e12))
    assert m["mfu_native"] == pytest.approx(0.05)
    # 16 H100 for 1000 s = 4.444 GPU-hours
    assert m["gpu_hours"] == pytest.approx(16 * 1000 / 3600)
    assert m["cost_per_mtok_usd"] == pytest.approx(m["gpu_hours"] * m["usd_per_gpu_hour"] / 6.5536)
    # Tinker Qwen3-8B: (1.31072M prefill x 0.13 + 10.48576M sampled x 0.40 + 6.5536M trained x 0.40) / 6.5536
    assert m["tinker_equiv_per_mtok_usd"] == pytest.approx(
        (1.31072 * 0.13 + 10.48576 * 0.40 + 6.5536 * 0.40) / 6.5536
    )
    # goodput: half the groups carry signal, staleness max 4 > budget 1 and no rollouts: unknown
    assert m["goodput_tokens_per_s"] is None
    assert "staleness" in m["missing"]["goodput_tokens_per_s"]
    assert m["checks"] == []  # 7.877 x 0.7 = 5.51 vs 5.12: 7.7% apart, inside 10%


def test_missing_inputs_are_null_with_reason(tmp_path):
    steps = [{"step": i, "step_s": 10.0, "samples": 8, "response_tokens": 100} for i in range(5)]
    m = compute(make_run(tmp_path, steps, config=False))
    assert m["staleness_max"] is None
    assert m["missing"]["staleness_max"] == "the framework did not report staleness"
    assert m["mfu"] is None and "no resolved model config" in m["missing"]["mfu"]
    assert m["trainer_idle_frac"] is None and "wait_s" in m["missing"]["trainer_idle_frac"]
    assert m["energy_wh"] is None and "telemetry" in m["missing"]["energy_wh"]
    assert m["wall_s"] == 50.0


def test_identity_violation_is_flagged():
    msg = identity_check(
        {"consumption_samples_per_s": 2.75, "trainer_idle_frac": 0.74, "production_samples_per_s": 0.55}
    )
    assert msg and "idle identity violated" in msg
    # SemiAnalysis case 1: 2.75 x 0.70 = 1.925 vs 1.95 delivered: consistent
    assert (
        identity_check(
            {"consumption_samples_per_s": 2.75, "trainer_idle_frac": 0.30, "production_samples_per_s": 1.95}
        )
        is None
    )


def test_write_metrics_and_cli(tmp_path, capsys):
    from bench.metrics import main

    run = make_run(tmp_path, case1_like_steps())
    write_metrics(run)
    assert json.loads((run / "metrics.json").read_text())["trainer_idle_frac"] == pytest.approx(0.3)
    assert main([str(run)]) == 0
    assert '"trainer_idle_frac": 0.3' in capsys.readouterr().out


step_strategy = st.fixed_dictionaries(
    {
        "wait_s": st.floats(0, 1e4),
        "compute_s": st.floats(1e-3, 1e4),
        "sync_s": st.floats(0, 1e3),
        "samples": st.integers(1, 10_000),
        "dispatched_extra": st.integers(0, 10_000),
        "gen_extra": st.integers(0, 10**7),
        "response_tokens": st.integers(1, 10**7),
    }
)


@settings(max_examples=40, deadline=None)
@given(st.lists(step_strategy, min_size=1, max_size=12))
def test_metric_identities_hold(tmp_path_factory, rows):
    steps = []
    for i, r in enumerate(rows):
        step_s = r["wait_s"] + r["compute_s"] + r["sync_s"]
        steps.append(
            {
                "step": i,
                "step_s": step_s,
                "wait_s": r["wait_s"],
                "compute_s": r["compute_s"],
                "sync_s": r["sync_s"],
                "samples": r["samples"],
                "dispatched_samples": r["samples"] + r["dispatched_extra"],
                "discarded_samples": r["dispatched_extra"],
                "response_tokens": r["response_tokens"],
                "generated_tokens": r["response_tokens"] + r["gen_extra"],
            }
        )
    m = compute(make_run(tmp_path_factory.mktemp("p"), steps, config=False))
    assert 0.0 <= m["trainer_idle_frac"] <= 1.0
    assert 0.0 <= m["oversampling_waste"] <= 1.0
    assert 0.0 <= m["token_waste"] <= 1.0
    for k in ("production_samples_per_s", "consumption_samples_per_s", "trajectories_per_s"):
        assert m[k] >= 0.0 and math.isfinite(m[k])
    # consumption x (1 - idle) x (busy + sync) / busy == production, exactly, when step = wait + busy + sync
    busy = sum(s["compute_s"] for s in steps[m["window"]["first_step"] :])
    sync = sum(s["sync_s"] for s in steps[m["window"]["first_step"] :])
    implied = m["consumption_samples_per_s"] * (1 - m["trainer_idle_frac"]) * busy / (busy + sync)
    assert implied == pytest.approx(m["production_samples_per_s"], rel=1e-9)


def test_rollout_latency_percentiles_and_stragglers(tmp_path):
    """Per step, rollouts of 1..100 s (dispatch to finish): p50 50.5 s, p95 95.05 s, p99 99.01 s
    (numpy's linear interpolation), straggler ratio 100 / 50.5; step 0 is warm-up, outside the window."""
    from bench.trace import write_rollouts

    run = make_run(tmp_path, case1_like_steps(4))
    rollouts = [
        {
            "rollout_id": 1000 * step + k,
            "group_id": k // 10,
            "step_consumed": step,
            "t_dispatch_s": 100.0 * step,
            "t_finish_s": 100.0 * step + (k + 1) * (2 if step == 3 else 1),  # step 3: twice as slow
            "status": "used",
        }
        for step in range(4)
        for k in range(100)
    ]
    write_rollouts(RunPaths(run).rollouts, rollouts)
    lat = compute(run)["latency"]
    assert lat["steps"] == 3  # steps 1-3: ceil(10% of 4) = 1 warm-up step skipped
    assert lat["p50_s"] == pytest.approx((50.5 + 50.5 + 101.0) / 3)
    assert lat["p95_s"] == pytest.approx((95.05 + 95.05 + 190.1) / 3)
    assert lat["p99_s"] == pytest.approx((99.01 + 99.01 + 198.02) / 3)
    assert lat["straggler_ratio_max"] == pytest.approx(100 / 50.5)


def test_latency_without_a_rollout_trace_says_so(tmp_path):
    assert compute(make_run(tmp_path, case1_like_steps(4)))["latency"] == {
        "missing": "no per-rollout trace (trace/rollouts.parquet)"
    }


def test_gpu_roles_split_only_when_every_role_holding_gpus_names_its_devices():
    """Miles: the external teacher's GPU is known from telemetry, the colocated student's is not: no
    split that would leave GPU 0 out. Prime-RL: rollout and trainer named, the teacher shares GPU 0."""
    import pandas as pd

    from bench.metrics import _gpu_roles

    gpu = pd.DataFrame({"t_s": [0.0, 1.0] * 2, "gpu": [0, 0, 1, 1], "util_pct": [10.0, 20.0, 0.0, 0.0],
                        "mem_used_mib": [100.0] * 4, "power_w": [100.0] * 4})  # fmt: skip

    def fact(v):
        return {"value": v, "source": "test"}

    miles = {"inferred": {"gpus": {"hybrid": fact(1), "teacher": fact(1)}, "gpu_ids": {"teacher": fact([1])}}}
    assert _gpu_roles(miles, gpu) == {"missing": "the run does not name each role's devices"}
    prime = {
        "inferred": {
            "gpus": {"rollout": fact(1), "trainer": fact(1), "teacher": fact(0)},
            "gpu_ids": {"rollout": fact([0]), "trainer": fact([1]), "teacher": fact([0])},
        }
    }
    roles = _gpu_roles(prime, gpu)
    assert roles["rollout"]["gpus"] == roles["teacher"]["gpus"] == [0] and roles["trainer"]["gpus"] == [1]
