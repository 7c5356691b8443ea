"""Cost: TCO inputs -> $/GPU-hour -> $ per million tokens, and the Tinker-equivalent price.

Formulas and their sources are in docs/metrics.md ("Cost"). SemiAnalysis's own TCO inputs are
paywalled, so every input is a documented, overridable field of conf/hardware/*.yaml `tco`.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from bench.config import CONF_DIR, expected_range, non_finite

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


TINKER_PRICES = CONF_DIR / "prices" / "tinker.yaml"


@cache
def tinker_prices(path: Path = TINKER_PRICES) -> dict[str, dict[str, float]]:
    """Tinker's published $/M-token prices per model (conf/prices/tinker.yaml); UsageError naming
    the file and the entry for a price that is not a finite number >= 0 (NaN included)."""
    from bench.errors import UsageError

    prices = OmegaConf.to_container(OmegaConf.load(path).models)
    bad = [
        f"models.{model}.{kind}={usd}: {want} USD per 1M tokens"
        for model, p in prices.items()
        for kind, usd in p.items()
        if (want := expected_range(usd, 0, True))
    ]
    if bad:
        shown = path.relative_to(CONF_DIR.parent) if path.is_relative_to(CONF_DIR.parent) else path
        raise UsageError("\n".join(f"{shown}: {b}" for b in bad))
    return prices


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


# hardware.tco inputs -> (lowest, lowest allowed?, highest or None, highest allowed?): outside,
# $/GPU-hour is meaningless (bench.config.expected_range: NaN and inf are outside too)
TCO_RANGES = {
    "server_capex_usd": (0, False, None, True),
    "gpus_per_server": (1, True, None, True),
    "networking_capex_frac": (0, True, 1, False),  # 1: networking would be all of the capex
    "depreciation_years": (0, False, None, True),
    "cost_of_capital": (0, True, None, True),
    "power_usd_per_kwh": (0, True, None, True),
    "pue": (1, True, None, True),
    "colo_usd_per_kw_month": (0, True, None, True),
    "server_power_kw": (0, False, None, True),
    "opex_other_usd_per_gpu_hour": (0, True, None, True),
}


def tco_problems(hardware: Any) -> list[str]:
    """hardware.tco inputs out of range, one line each (key=value: expected ...)."""
    out = []
    for key, (lo, lo_ok, hi, hi_ok) in TCO_RANGES.items():
        v = hardware.tco[key]
        if want := expected_range(v, lo, lo_ok, hi, hi_ok):
            out.append(f"hardware.tco.{key}={v}: {want} ({hardware.name})")
    return out


def main(argv: list[str]) -> int:
    """`python -m bench cost hardware=h200 [hardware.tco.server_capex_usd=...]`: $/GPU-hour as JSON."""
    from bench.cli import add_overrides, command_parser
    from bench.config import compose
    from bench.errors import UsageError

    ap = command_parser(
        "cost",
        "Print the $/GPU-hour of a GPU from its TCO inputs (capital and operating costs; docs/metrics.md).",
        "conf/hardware/<name>.yaml's tco block (hardware= picks it) and the overrides.",
        "nothing to disk; one JSON object on stdout.",
        ["python -m bench cost hardware=h200 hardware.tco.power_usd_per_kwh=0.12"],
    )
    add_overrides(ap)
    cfg = compose(ap.parse_args(argv).overrides)
    if problems := tco_problems(cfg.hardware):
        raise UsageError("\n".join(problems))
    usd = gpu_hour_usd(cfg.hardware)
    if overflow := non_finite(usd, "usd_per_gpu_hour"):  # finite inputs whose product overflows
        raise UsageError(
            f"hardware.tco ({cfg.hardware.name}): {overflow[0]} (the inputs overflow a float); lower the largest"
        )
    # allow_nan=False: JSON has no NaN or Infinity, and a reader must never be handed one
    print(json.dumps({"hardware": cfg.hardware.name, "usd_per_gpu_hour": usd}, indent=2, allow_nan=False))
    return 0
