"""Cost: TCO inputs -> $/GPU-hour -> $ per million tokens, and the Tinker-equivalent price.

Formulas and their sources are in docs/metrics.md ("Cost"). SemiAnalysis's own TCO inputs are
paywalled, so every input is a documented, overridable field of conf/hardware/*.yaml `tco`.
"""

from __future__ import annotations

import argparse
import json
from functools import cache
from typing import Any

from omegaconf import OmegaConf

from bench.config import CONF_DIR

HOURS_PER_YEAR = 8760.0


def capital_recovery_factor(rate: float, years: float) -> float:
    """Annual payment per $1 of capex over `years` at annual `rate` (annuity; straight line at 0)."""
    if years <= 0:
        raise ValueError(f"tco.depreciation_years={years}: expected > 0")
    if rate == 0:
        return 1.0 / years
    return rate / (1.0 - (1.0 + rate) ** -years)


def gpu_hour_usd(hardware: Any) -> dict[str, float]:
    """$/GPU-hour from `hardware.tco`, split into capital and operating parts (USD per GPU-hour).

    capital = capex per GPU (server share grossed up by networking) x capital recovery factor / 8760
    operating = IT kW per GPU x (PUE x power price + colocation $/kW-month x 12 / 8760) + other opex
    """
    t = hardware.tco
    if not 0 <= t.networking_capex_frac < 1:
        raise ValueError(f"tco.networking_capex_frac={t.networking_capex_frac}: expected in [0, 1)")
    capex_per_gpu = t.server_capex_usd / t.gpus_per_server / (1.0 - t.networking_capex_frac)
    capital = (
        capex_per_gpu * capital_recovery_factor(t.cost_of_capital, t.depreciation_years) / HOURS_PER_YEAR
    )
    kw_per_gpu = t.server_power_kw / t.gpus_per_server
    power = kw_per_gpu * t.pue * t.power_usd_per_kwh
    colo = kw_per_gpu * t.colo_usd_per_kw_month * 12.0 / HOURS_PER_YEAR
    operating = power + colo + t.opex_other_usd_per_gpu_hour
    total = capital + operating
    return {
        "total": total,
        "capital": capital,
        "operating": operating,
        "power": power,
        "colocation": colo,
        "capital_frac": capital / total,
        "capex_per_gpu_usd": capex_per_gpu,
    }


def usd_per_mtok(gpu_hours: float, usd_per_gpu_hour: float, tokens: float) -> float | None:
    """$ per million tokens: gpu_hours x $/GPU-hour / (tokens / 1e6); None when tokens is 0."""
    if not tokens:
        return None
    return gpu_hours * usd_per_gpu_hour / (tokens / 1e6)


@cache
def tinker_prices() -> dict[str, dict[str, float]]:
    """Tinker's published $/M-token prices per model (conf/prices/tinker.yaml)."""
    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "prices" / "tinker.yaml").models)


def tinker_price_per_mtok(
    model_name: str, prompt_tokens: float, response_tokens: float, trained_tokens: float
) -> dict[str, float] | None:
    """Tinker-equivalent price of a token mix, in $ per million trained tokens.

    Rollouts pay prefill on `prompt_tokens` (pass the re-prefilled context for multi-turn) and
    sample on `response_tokens`; training pays train on `trained_tokens`. None if Tinker does not
    list the model. Returns the total $ and $ per M trained tokens.
    """
    p = tinker_prices().get(model_name)
    if p is None or not trained_tokens:
        return None
    usd = (prompt_tokens * p["prefill"] + response_tokens * p["sample"] + trained_tokens * p["train"]) / 1e6
    return {"usd": usd, "per_mtok_usd": usd / (trained_tokens / 1e6)}


# hardware.tco inputs -> (lowest, lowest allowed?, highest or None): outside, $/GPU-hour is meaningless
TCO_RANGES = {
    "server_capex_usd": (0, False, None),
    "gpus_per_server": (1, True, None),
    "networking_capex_frac": (0, True, 1),
    "depreciation_years": (0, False, None),
    "cost_of_capital": (0, True, None),
    "power_usd_per_kwh": (0, True, None),
    "pue": (1, True, None),
    "colo_usd_per_kw_month": (0, True, None),
    "server_power_kw": (0, False, None),
    "opex_other_usd_per_gpu_hour": (0, True, None),
}


def tco_problems(hardware: Any) -> list[str]:
    """hardware.tco inputs out of range, one line each (key=value: expected ...)."""
    out = []
    for key, (lo, lo_ok, hi) in TCO_RANGES.items():
        v = hardware.tco[key]
        if (v < lo if lo_ok else v <= lo) or (hi is not None and v >= hi):
            want = f"in [{lo}, {hi})" if hi is not None else f"{'>=' if lo_ok else '>'} {lo}"
            out.append(f"hardware.tco.{key}={v}: expected {want} ({hardware.name})")
    return out


def main(argv: list[str]) -> int:
    """`python -m bench cost hardware=h200 [hardware.tco.server_capex_usd=...]`: $/GPU-hour as JSON."""
    from bench.config import compose
    from bench.errors import UsageError

    ap = argparse.ArgumentParser(prog="python -m bench cost")
    ap.add_argument("overrides", nargs="*")
    cfg = compose(ap.parse_args(argv).overrides)
    if problems := tco_problems(cfg.hardware):
        raise UsageError("\n".join(problems))
    print(
        json.dumps({"hardware": cfg.hardware.name, "usd_per_gpu_hour": gpu_hour_usd(cfg.hardware)}, indent=2)
    )
    return 0
