"""The config tree: every experiment composes; typos and wrong types fail at composition."""

from pathlib import Path

import pytest

from bench.config import CONF_DIR, compose
from bench.errors import UsageError

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_experiment_composes(exp):
    cfg = compose([f"experiment={exp}"])
    assert cfg.experiment.name == exp
    assert cfg.model.layers > 0 and cfg.hardware.peak_bf16_flops > 0


def test_misspelled_key_fails_at_composition_naming_the_nearest_key():
    with pytest.raises(UsageError) as e:
        compose(["workload.gruop_size=16"])
    assert str(e.value) == "workload.gruop_size: no such key; did you mean workload.group_size?"


def test_plus_adds_keys_only_under_framework_native():
    with pytest.raises(
        UsageError, match=r"^experiment.trainer_gpu: no such key; did you mean experiment.trainer_gpus\?"
    ):
        compose(["+experiment.trainer_gpu=8"])
    with pytest.raises(UsageError, match="only under framework.native"):
        compose(["++workload.gruop_size=8"])
    cfg = compose(["framework=verl", "+framework.native.data_dir=/shared/data"])
    assert cfg.framework.native.data_dir == "/shared/data"


def test_unknown_group_option_lists_what_exists():
    with pytest.raises(UsageError) as e:
        compose(["framework=verll"])
    assert str(e.value) == "framework 'verll' not found; choose one of prime_rl, slime, verl"


def test_wrong_type_fails_at_composition():
    with pytest.raises(UsageError, match="^workload.group_size: Value 'sixteen' of type 'str' could not be"):
        compose(["workload.group_size=sixteen"])
    with pytest.raises(
        UsageError,
        match=r"^experiment.placement: Invalid value 'sideways', expected one of \[colocated, disaggregated\]",
    ):
        compose(["experiment.placement=sideways"])


def test_smoke_is_the_published_shape():
    cfg = compose(["experiment=smoke"])
    assert (cfg.model.name, cfg.hardware.name) == ("Qwen/Qwen3-8B", "H100-SXM")
    assert (cfg.workload.group_size, cfg.workload.prompts_per_step, cfg.workload.max_response_len) == (
        16,
        64,
        8192,
    )
    assert (cfg.experiment.trainer_gpus, cfg.experiment.generator_gpus) == (8, 8)
    assert list(cfg.experiment.frameworks) == ["verl", "slime", "prime_rl"]


@pytest.mark.parametrize("group", ["model", "hardware", "workload", "framework", "prices"])
def test_every_fact_file_names_its_source(group):
    files = list((CONF_DIR / group).glob("*.yaml"))
    assert files
    for f in files:
        assert "https://" in Path(f).read_text(), f"{f}: facts need their source URL in a comment"
