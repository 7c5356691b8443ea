"""Pre-flight checks: each inconsistent value is named with its key; sound experiments pass."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from bench.config import compose, expected_range, value_problems
from bench.errors import UsageError
from bench.resolve import Resolved
from bench.validate import main, validate_workload

CASES = ["smoke", "semianalysis_case1", "semianalysis_case2", "semianalysis_case3", "semianalysis_case4"]


@pytest.mark.parametrize("exp", CASES)
def test_published_setups_are_sound(exp):
    assert validate_workload(compose([f"experiment={exp}"])) == []


@pytest.mark.parametrize(
    "override, key",
    [
        ("workload.group_size=1", "workload.group_size=1"),
        ("workload.max_response_len=40000", "workload.max_response_len=40000"),  # 1024 + 40000 > 40960
        ("experiment.trainer.tp=3", "experiment.trainer.tp=3"),
        ("experiment.generator_gpus=1000", "exceeds cluster local"),
        ("experiment.generator.ep=2", "experiment.generator.ep=2"),  # dense model
        ("workload.prompts_per_step=3", "workload.prompts_per_step=3"),  # 48 samples over DP 8... 48 % 8 == 0
        ("workload.mini_batches_per_step=5", "workload.mini_batches_per_step=5"),
        ("experiment.trainer_gpus=12", "experiment.trainer_gpus=12"),  # not whole nodes
        ("experiment.placement=colocated", "experiment.generator_gpus=8"),  # ok: equal counts -> see below
    ],
)
def test_inconsistent_values_are_named(override, key):
    problems = validate_workload(compose(["experiment=smoke", override]))
    if override in ("workload.prompts_per_step=3", "experiment.placement=colocated"):
        assert problems == []  # 3 x 16 = 48 samples divide over DP 8; colocated 8 = 8 is sound
    else:
        assert any(key in p for p in problems), problems


def test_trainer_memory_without_offload_does_not_fit():
    problems = validate_workload(
        compose(["experiment=semianalysis_case4", "experiment.trainer.offload_optimizer=false"])
    )
    assert any("158 GB per GPU" in p and "hbm_gb=141" in p for p in problems), problems


def test_kv_cache_must_hold_one_sequence():
    problems = validate_workload(
        compose(
            ["experiment=smoke", "hardware.hbm_gb=19.5", "experiment.generator.gpu_memory_utilization=0.9"]
        )
    )
    assert any("needs more KV cache" in p for p in problems), problems


def test_concurrency_ceiling_smoke():
    s = Resolved.from_config(compose(["experiment=smoke"]))
    # Qwen3-8B KV: 36 layers x 2 x 128 x 8 heads x 2 B = 147,456 B/token
    assert s.kv_bytes_per_token == 147_456
    # 80 GB x 0.85 - 16.38 GB weights = 51.62 GB -> 350,066 tokens; mean seq 256 + 0.35 x 8192 = 3,123.2
    assert s.kv_tokens_per_engine == pytest.approx((80e9 * 0.85 - 8_190_427_136 * 2) / 147_456)
    assert s.concurrency_ceiling == pytest.approx(s.kv_tokens_per_engine / 3123.2)


def test_cli_exit_codes(capsys):
    assert main(["experiment=smoke", "workload.group_size=1"]) == 2
    assert "workload.group_size=1" in capsys.readouterr().err
    assert main(["experiment=smoke", "workload.gruop_size=3"]) == 2  # misspelled key: Hydra's own error
    assert "gruop_size" in capsys.readouterr().err


@pytest.mark.parametrize("exp", CASES)
def test_cli_accepts_every_published_setup(exp, capsys):
    assert main([f"experiment={exp}"]) == 0
    assert "OK: no problems found" in capsys.readouterr().out


def test_framework_modes_are_checked(capsys):
    # prime-rl has no colocated mode at v0.8.0; the other two frameworks accept it
    assert main(["experiment=smoke", "experiment.placement=colocated"]) == 2
    err = capsys.readouterr().err
    assert "[prime_rl] experiment.placement=colocated" in err and "[verl]" not in err
    assert main(["experiment=smoke", "framework=verl", "framework.mode=bogus"]) == 2
    assert "framework.mode=bogus" in capsys.readouterr().err


def test_native_check_renders_the_launch_and_a_framework_not_installed_is_not_a_problem(capsys):
    # none of the three frameworks is installed here: each says so, and validate still passes
    assert main(["experiment=smoke", "framework=verl", "--native"]) == 0
    assert "  verl native: verl not installed here (not checked)" in capsys.readouterr().out


# SemiAnalysis case 1 at 48 trainer : 208 generator GPUs: 512 samples over 48 data-parallel ranks
DP48 = ["experiment=semianalysis_case1", "experiment.trainer_gpus=48", "experiment.generator_gpus=208"]
DP48_LINE = (
    "workload.prompts_per_step=32: 512 samples per mini-batch (32 x group 16 / 1) is not divisible by the "
    "trainer's data-parallel size 48 (= 48 GPUs / tp x pp x cp 1)"
)


def test_batch_over_data_parallel_ranks_is_each_frameworks_own_rule():
    """verl and slime (Megatron) split a mini-batch evenly over the DP ranks and refuse 512 samples
    on 48; prime-rl pads its micro-batch count to the DP size instead and accepts the split."""
    from bench.config import for_framework
    from bench.validate import validate

    assert validate_workload(compose(DP48)) == []  # framework-neutral: nothing to say
    assert validate(for_framework(DP48, "prime_rl")) == []
    assert validate(for_framework(DP48, "slime")) == [DP48_LINE]
    assert validate(for_framework(DP48, "verl"))[0] == DP48_LINE


def test_cli_names_the_framework_that_refuses_the_split(capsys):
    assert main([*DP48, "framework=verl,slime,prime_rl"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert f"[slime] {DP48_LINE}" in err and f"[verl] {DP48_LINE}" in err
    assert not any(line.startswith("[prime_rl]") for line in err)


# -- numbers must be numbers: every float of the schema is finite and in its range ----------------


def _schema_keys(kinds: tuple[type, ...]) -> list[str]:
    """Every dotted key of BenchConf whose type is one of `kinds` (optional ones included)."""
    from dataclasses import is_dataclass
    from typing import get_args, get_type_hints

    from bench.config import BenchConf

    def walk(cls: type, prefix: str) -> list[str]:
        out = []
        for name, t in get_type_hints(cls).items():
            if is_dataclass(t):
                out += walk(t, f"{prefix}{name}.")
            elif t in kinds or any(a in kinds for a in get_args(t)):
                out.append(f"{prefix}{name}")
        return out

    return walk(BenchConf, "")


FLOAT_KEYS = _schema_keys((float,))
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])


def test_the_schema_walk_finds_the_float_keys_of_the_issue():
    assert {"workload.lr", "workload.kl_coef", "hardware.peak_bf16_flops", "hardware.hbm_tbps",
            "hardware.tco.pue", "experiment.generator.gpu_memory_utilization", "model.rope_theta",
            "emulator.filesystem_gbps"} <= set(FLOAT_KEYS)  # fmt: skip
    assert len(FLOAT_KEYS) >= 45


@pytest.fixture(scope="module")
def smoke():
    return compose(["experiment=smoke"])


@pytest.mark.parametrize("key", FLOAT_KEYS)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=NON_FINITE)
def test_every_float_key_refuses_nan_and_inf_by_name(smoke, key: str, value: float):
    """compose()'s schema-wide check names the key; the range checks refuse it on their own too
    (NaN compares false with every bound: a range written as `v < lo` would let it through)."""
    cfg = smoke.copy()
    OmegaConf.update(cfg, key, value)
    assert value_problems(cfg) == [f"{key}={value}: expected a finite number"]
    assert [p for p in validate_workload(cfg) if p.startswith(f"{key}={value}: expected ")], key


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_compose_refuses_a_non_finite_override(value):
    with pytest.raises(UsageError) as e:
        compose(["experiment=smoke", f"workload.lr={value}"])
    assert str(e.value) == f"workload.lr={float(value)}: expected a finite number"


@pytest.mark.parametrize(
    "override, line",
    [
        ("workload.lr=0", "workload.lr=0.0: expected > 0"),
        ("workload.kl_coef=-0.1", "workload.kl_coef=-0.1: expected >= 0"),
        ("hardware.peak_bf16_flops=0", "hardware.peak_bf16_flops=0.0: expected > 0"),
        ("hardware.host_gbps=-1", "hardware.host_gbps=-1.0: expected >= 0"),
        ("emulator.filesystem_gbps=0", "emulator.filesystem_gbps=0.0: expected > 0"),
        ("model.partial_rotary_factor=1.5", "model.partial_rotary_factor=1.5: expected in (0, 1]"),
        ("hardware.tco.pue=0.9", "hardware.tco.pue=0.9: expected >= 1 (H100-SXM)"),
    ],
)
def test_keys_that_had_no_range_have_one(override, line):
    assert validate_workload(compose(["experiment=smoke", override])) == [line]


@pytest.mark.parametrize(
    "value, lo, lo_ok, hi, hi_ok, want",
    [
        (0.5, 0, False, 1, True, None),
        (1, 0, False, 1, True, None),
        (1, 0, True, 1, False, "expected in [0, 1)"),
        (0, 0, False, None, True, "expected > 0"),
        (math.nan, 0, True, None, True, "expected >= 0"),
        (math.inf, 0, True, None, True, "expected >= 0"),
        (-math.inf, 0, False, 1, True, "expected in (0, 1]"),
        ("0.5", 0, False, 1, True, "expected in (0, 1]"),  # text is not a number
    ],
)
def test_expected_range_is_written_as_inside_tests(value, lo, lo_ok, hi, hi_ok, want):
    assert expected_range(value, lo, lo_ok, hi, hi_ok) == want


def test_every_float_range_key_exists_in_the_schema():
    from bench.validate import RANGES

    known = set(_schema_keys((float, int)))
    assert [k for k, *_ in RANGES if k not in known] == []
