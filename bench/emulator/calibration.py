"""SemiAnalysis case studies, emulated vs published: which figures calibrated which input
(conf/emulator/semianalysis.yaml), and the error of every other figure. Everything is emulated.

`semianalysis()` returns one dict per figure and prints a table; docs/emulator.md quotes it.
Source of every published figure: https://newsletter.semianalysis.com/p/rl-systems-mind-the-gap-matching
"""

from __future__ import annotations

import json
import tempfile
from typing import Any

from bench.config import compose
from bench.emulator.run import emulate
from bench.trace import read_steps

# (experiment, extra overrides, metric, published, role)
FIGURES: tuple[tuple[str, tuple[str, ...], str, float, str], ...] = (
    ("semianalysis_case1", (), "consumption_samples_per_s", 2.75, "calibrated: emulator.trainer_mfu"),
    (
        "semianalysis_case1",
        (),
        "oversampling_waste",
        0.60,
        "calibrated: experiment.oversampling ('up to' 60%)",
    ),
    ("semianalysis_case1", (), "production_samples_per_s", 1.95, "calibrated: emulator.decode_bw_eff"),
    ("semianalysis_case1", (), "trainer_idle_frac", 0.30, "predicted"),
    ("semianalysis_case1", (), "mfu", 0.105, "predicted (suite FLOPs; the article's convention is unknown)"),
    (
        "semianalysis_case1",
        ("emulator.surplus=carry",),
        "oversampling_waste",
        0.60,
        "what-if: pinned prime-rl's rule (carry in-flight rollouts to the next step)",
    ),
    ("semianalysis_case2", (), "trainer_idle_frac", 0.74, "predicted"),
    ("semianalysis_case2", (), "consumption_over_production", 5.0, "predicted (74% idle implies 3.8x)"),
    ("semianalysis_case2", (), "solve_all_frac", 0.55, "load-shape input (workload Beta(3, 0.35))"),
    (
        "semianalysis_case4",
        (),
        "trainer_idle_frac",
        0.60,
        "predicted (environment latency per turn unpublished: 6 s default)",
    ),
    *(
        (
            "semianalysis_case4",
            (f"workload.env_latency_mean_s={s}",),
            "trainer_idle_frac",
            0.60,
            f"what-if: {s} s per environment turn",
        )
        for s in (30, 60, 90)
    ),
    (
        "semianalysis_case4",
        ("experiment.oversampling=1",),
        "trainer_idle_frac",
        0.60,
        "what-if: 8 groups in flight (the batch) instead of slime's 64",
    ),
)


def _run(experiment: str, extra: tuple[str, ...]) -> dict[str, Any]:
    cfg = compose([f"experiment={experiment}", *extra])
    cfg = compose([f"experiment={experiment}", f"framework={cfg.experiment.frameworks[0]}", *extra])
    with tempfile.TemporaryDirectory() as tmp:
        paths = emulate(cfg, tmp)
        m = json.loads(paths.metrics.read_text())
        steps = read_steps(paths.steps)
    m["consumption_over_production"] = m["consumption_samples_per_s"] / m["production_samples_per_s"]
    m["solve_all_frac"] = float(steps["solve_all_frac"].mean())
    return m


def semianalysis(show: bool = True) -> list[dict[str, Any]]:
    """Emulate cases 1, 2 and 4 as published; return emulated vs published with the error (%)."""
    cache: dict[tuple, dict] = {}
    rows = []
    for exp, extra, metric, published, role in FIGURES:
        if (exp, extra) not in cache:
            cache[(exp, extra)] = _run(exp, extra)
        got = float(cache[(exp, extra)][metric])
        rows.append(
            {
                "experiment": exp,
                "overrides": list(extra),
                "metric": metric,
                "published": published,
                "emulated": round(got, 4),
                "error_pct": round(100 * (got - published) / published, 1),
                "role": role,
                "mode": "emulated",
            }
        )
    if show:
        for r in rows:
            print(
                f"{r['experiment']:<19} {r['metric']:<28} published {r['published']:<6} emulated "
                f"{r['emulated']:<8.4g} error {r['error_pct']:>6.1f}%  {r['role']}"
            )
    return rows


if __name__ == "__main__":
    semianalysis()
