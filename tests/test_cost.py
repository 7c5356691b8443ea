"""Cost arithmetic, pinned to hand-computed numbers."""

import pytest

from bench.config import compose
from bench.cost import capital_recovery_factor, gpu_hour_usd, tinker_price_per_mtok, usd_per_mtok


def test_capital_recovery_factor():
    # 0.1 / (1 - 1.1^-5)
    assert capital_recovery_factor(0.10, 5) == pytest.approx(0.26379748079474524)
    assert capital_recovery_factor(0.0, 4) == 0.25


def test_h200_gpu_hour_split():
    # capex/GPU = 258,000 / 8 / 0.85 = 37,941.18; x CRF 0.263797 / 8760 = 1.142556 $/h
    # power 8.5/8 kW x 1.3 PUE x 0.08 = 0.1105; colo 1.0625 kW x 150 x 12 / 8760 = 0.218322
    c = gpu_hour_usd(compose(["hardware=h200"]).hardware)
    assert c["capital"] == pytest.approx(1.1425555675034293)
    assert c["power"] == pytest.approx(0.1105)
    assert c["colocation"] == pytest.approx(0.2183219178082192)
    assert c["total"] == pytest.approx(1.4713774853116486)
    assert c["capital_frac"] == pytest.approx(1.1425555675034293 / 1.4713774853116486)


def test_tco_inputs_are_overridable():
    cheap = gpu_hour_usd(compose(["hardware=h200", "hardware.tco.server_capex_usd=129000"]).hardware)
    assert cheap["capital"] == pytest.approx(1.1425555675034293 / 2)


def test_usd_per_mtok():
    # 100 GPU-hours at $2 over 50M tokens = $4 per M
    assert usd_per_mtok(100, 2.0, 50e6) == 4.0
    assert usd_per_mtok(100, 2.0, 0) is None


def test_tinker_qwen3_235b_mix_of_70pct_completion_is_3_43():
    # published.md 1.3: 2.04 + 1.70 c + 0.68 (1 - c), c = 0.70 -> 3.434 $/M trained tokens
    p = tinker_price_per_mtok("Qwen/Qwen3-235B-A22B-Instruct-2507", 0.3e6, 0.7e6, 1e6)
    assert p["per_mtok_usd"] == pytest.approx(3.434)
    assert tinker_price_per_mtok("zai-org/GLM-5", 1, 1, 1) is None  # not on Tinker's list


def test_tinker_prices_refuse_a_price_that_is_not_a_finite_number(tmp_path):
    from bench.cost import TINKER_PRICES, tinker_prices
    from bench.errors import UsageError

    assert tinker_prices()["Qwen/Qwen3-8B"] == {"prefill": 0.13, "sample": 0.40, "train": 0.40}
    bad = tmp_path / "tinker.yaml"
    real = "Qwen/Qwen3-8B: {prefill: 0.13, sample: 0.40, train: 0.40}"
    assert real in TINKER_PRICES.read_text()
    bad.write_text(
        TINKER_PRICES.read_text().replace(real, "Qwen/Qwen3-8B: {prefill: -0.13, sample: .inf, train: .nan}")
    )
    with pytest.raises(UsageError) as e:
        tinker_prices(bad)
    assert str(e.value).splitlines() == [
        f"{bad}: models.Qwen/Qwen3-8B.prefill=-0.13: expected >= 0 USD per 1M tokens",
        f"{bad}: models.Qwen/Qwen3-8B.sample=inf: expected >= 0 USD per 1M tokens",
        f"{bad}: models.Qwen/Qwen3-8B.train=nan: expected >= 0 USD per 1M tokens",
    ]
