"""The plan's page and table (bench plan): the printed table, the figure (production and
consumption against the generator GPUs with the crossing marked, trainer idle, staleness, useful
$/M, each with its seed band) and plan.html / plan.md / plan.json, all labelled emulated.

Functions take a bench.plan.Plan (its points, recommended and current rows, setup, crossing), or its
recommended and current rows (sentence: the plan's answer in one line); this module does not import
bench.plan, which imports it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.cli import counted
from bench.plan_splits import fmt_g, fmt_pct

USEFUL = "useful_cost_per_mtok_usd"  # $ per M useful trained tokens (bench.plan_splits.useful_cost)
KNOBS = ("staleness_budget", "oversampling")  # swept beside the split: async bound, in-flight cap


def knob(bound: Any, inflight: Any) -> str:
    """The label of one (async bound, in-flight cap) curve."""
    return f"bound {int(bound)}, in-flight x{float(inflight):g}"


TABLE = (  # (column, header, format) of the printed table and the page's
    ("placement", "placement", "{}"),
    ("trainer_gpus", "trainer", "{:.0f}"),
    ("generator_gpus", "generator", "{:.0f}"),
    ("staleness_budget", "bound", "{:.0f}"),
    ("oversampling", "in-flight", "x{:g}"),
    ("trajectories_per_s", "traj/s", "{:.3g}"),
    ("production_samples_per_s", "production/s", "{:.3g}"),
    ("consumption_samples_per_s", "consumption/s", "{:.3g}"),
    ("trainer_idle_frac", "trainer idle", "{:.0%}"),
    ("staleness_max_max", "staleness max", "{:.0f}"),
    ("zero_advantage_frac", "zero-adv", "{:.0%}"),
    ("cost_per_mtok_usd", "$/M trained", "{:.3g}"),
    (USEFUL, "$/M useful", "{:.3g}"),
)


def measured_row(m: dict[str, Any]) -> list[str]:
    """The measured run's cells (RUN_DIR plans): the baseline the emulated points are read against;
    '-' where the run's trace does not log what a figure needs."""
    cells = []
    for col, _, fmt in TABLE:
        v = m.get("staleness_max" if col == "staleness_max_max" else col)
        cells.append("-" if v is None or v != v else fmt.format(v))
    return ["measured", *cells]


def table_rows(p: Any) -> list[list[str]]:
    """The table's cells: the measured run first (a RUN_DIR plan), then one row per emulated point;
    seed bands as [min, max] beside the mean."""
    out = [] if p.setup.measured is None else [measured_row(p.setup.measured)]
    for _, r in p.points.sort_values([*KNOBS, "generator_gpus"]).iterrows():
        cells = []
        for col, _, fmt in TABLE:
            v = r[col]
            cell = "-" if v != v else fmt.format(v)
            if (
                f"{col}_min" in r
                and col not in ("trainer_gpus", "generator_gpus", *KNOBS)
                and r[f"{col}_min"] == r[f"{col}_min"]
            ):
                lo, hi = fmt.format(r[f"{col}_min"]), fmt.format(r[f"{col}_max"])
                cell += f" [{lo}, {hi}]" if lo != hi else ""
            cells.append(cell)
        mark = "★" if p.recommended is not None and r.name == p.recommended.name else ""
        mark += "·" if p.current is not None and r.name == p.current.name else ""
        mark += "" if r["staleness_ok"] else "✗"
        out.append([mark, *cells])
    return out


def print_table(p: Any) -> None:
    head = ["", *(h for _, h, _ in TABLE)]
    rows = table_rows(p)
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    print("  ".join(h.rjust(n) for h, n in zip(head, w, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(n) for c, n in zip(row, w, strict=True)))
    print(
        f"(emulated; mean [min, max] over {counted(len(p.setup.seeds), 'seed')}; ★ recommended, · current, ✗ staleness over {p.setup.max_staleness})"
    )
    for n in p.setup.notes:
        print(f"note: {n}")


def sentence(rec: Any, cur: Any, max_staleness: int, n_seeds: int) -> str:
    """The recommendation in one sentence (emulated, mean of the seeds)."""
    if rec is None:
        return (
            f"no split keeps staleness within {max_staleness} with a known $/M: no recommendation (emulated)"
        )
    where = (
        f"trainer and generator colocated on {int(rec.trainer_gpus)} GPUs"
        if rec.placement == "colocated"
        else f"{int(rec.trainer_gpus)} trainer : {int(rec.generator_gpus)} generator GPUs"
    )
    tail = f" (emulated, mean of {n_seeds} seed{'s' * (n_seeds != 1)})"
    if cur is None:
        return (
            f"run {where}: trajectories/s {fmt_g(rec.trajectories_per_s)}, trainer idle "
            f"{fmt_pct(rec.trainer_idle_frac)}, useful $/M {fmt_g(rec[USEFUL])}" + tail
        )
    dt = int(rec.trainer_gpus) - int(cur.trainer_gpus)
    head = (
        f"split the {int(cur.trainer_gpus)} colocated GPUs into {where}"
        if cur.placement == "colocated" and rec.placement != "colocated"
        else f"colocate: {where}"
        if rec.placement == "colocated" and cur.placement != "colocated"
        else f"move {-dt} trainer GPU{'s' * (-dt != 1)} to rollout"
        if dt < 0
        else f"move {dt} rollout GPU{'s' * (dt != 1)} to the trainer"
        if dt > 0
        else f"keep {where}"
    )
    if int(rec.staleness_budget) != int(cur.staleness_budget):
        head += f", async bound {int(cur.staleness_budget)} -> {int(rec.staleness_budget)}"
    if float(rec.oversampling) != float(cur.oversampling):
        head += f", in-flight cap x{float(cur.oversampling):g} -> x{float(rec.oversampling):g}"
    change = (rec[USEFUL] / cur[USEFUL] - 1) if cur[USEFUL] else math.nan
    return (
        f"{head}: trajectories/s {fmt_g(cur.trajectories_per_s)} -> {fmt_g(rec.trajectories_per_s)}, "
        f"trainer idle {fmt_pct(cur.trainer_idle_frac)} -> {fmt_pct(rec.trainer_idle_frac)}, "
        f"useful $/M {change:+.0%}" + tail
    )


# ---- the page ----------------------------------------------------------------------------------


def preload() -> None:
    """Import what figure() draws with (matplotlib, seaborn, bench.report.figures: ~0.5 s), e.g. while
    bench.plan's workers emulate."""
    import bench.report.figures  # noqa: F401


def figure(p: Any, path: Path) -> str:
    """Production and consumption, trainer idle, staleness and useful $/M against the generator
    GPUs, each with its seed band (bench.report.figures' band drawing); PNG to `path`, returned
    base64 for the HTML."""
    import base64

    import matplotlib.pyplot as plt
    import seaborn as sns

    from bench.report.figures import DPI, _band

    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8))
    pal = sns.color_palette("tab10")
    panels = [
        ("trainer_idle_frac", "trainer idle (%)", 100),
        ("staleness_max", "staleness max (versions)", 1),
        (USEFUL, "$ / M useful trained tokens", 1),
    ]
    split = p.points[p.points.placement == "disaggregated"]  # the curves: a colocated point is no split
    for k, (key, pts) in enumerate(split.groupby(list(KNOBS))):
        pts, color, tag = pts.sort_values("sweep_value"), pal[k % 10], knob(*key)
        _band(axes[0], pts, "production_samples_per_s", 1, color, "-", f"production ({tag})")
        _band(axes[0], pts, "consumption_samples_per_s", 1, color, "--", f"consumption ({tag})")
        x = p.crossing.get(tag)
        if x is not None:
            axes[0].axvline(x, color=color, ls=":", lw=1)
        for ax, (col, _, scale) in zip(axes[1:], panels, strict=True):
            if pts[col].notna().any():
                _band(ax, pts.dropna(subset=[col]), col, scale, color, label=tag)
    for ax, (col, _, scale) in zip(axes, [("production_samples_per_s", "", 1), *panels], strict=True):
        for row, marker in ((p.recommended, "*"), (p.current, "o")):
            if row is not None and row[col] == row[col]:
                ax.scatter(row.generator_gpus, row[col] * scale, s=150 if marker == "*" else 60,
                           marker=marker, facecolors="black" if marker == "*" else "none",
                           edgecolors="black", zorder=5)  # fmt: skip
    axes[0].set(
        xlabel="generator GPUs", ylabel="samples / s", title="production (solid) vs consumption (dashed)"
    )
    if not split.empty:  # a colocated-only plan draws no curve to name
        axes[0].legend(fontsize=6, loc="best")
    for ax, (_, name, _) in zip(axes[1:], panels, strict=True):
        ax.set(xlabel="generator GPUs", ylabel=name, title=name)
    fig.suptitle(f"Plan: {p.setup.total} GPUs split between generator and trainer (emulated)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=DPI)
    plt.close(fig)
    return base64.b64encode(path.read_bytes()).decode("ascii")


def write_page(p: Any, doc: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """out/plan.html, out/plan.md, out/plan.json, out/plan.png (and calibration.yaml for a RUN_DIR plan)."""
    from bench.report.render import environment
    from bench.trace import write_json

    out.mkdir(parents=True, exist_ok=True)
    if p.setup.calibration is not None:
        (out / "calibration.yaml").write_text(p.setup.calibration)
    png = figure(p, out / "plan.png")
    context = {
        "p": p,
        "setup": p.setup,
        "head": ["", *(h for _, h, _ in TABLE)],
        "rows": table_rows(p),
        "png_b64": png,
        "crossing": {k: ("not reached" if v is None else f"{v:.4g}") for k, v in p.crossing.items()},
        "objective": doc["objective"],
    }
    env = environment()
    html, md = out / "plan.html", out / "plan.md"
    html.write_text(env.get_template("plan.html.j2").render(**context))
    md.write_text(env.get_template("plan.md.j2").render(**context))
    write_json(out / "plan.json", doc)
    return html, md
