"""Seaborn figures of the comparison: one figure per kind, every run in it.

Each `fig_*` function returns a matplotlib Figure or raises `Omitted(reason)` when its data is
absent, so the report states why a figure is missing instead of drawing an empty one. Titles
say whether the numbers are measured, emulated or both.
"""

from __future__ import annotations

import base64
import io
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from bench.model.hwprofile_conf import source_label  # noqa: E402
from bench.report.load import MATCH_TOLERANCE, Run  # noqa: E402
from bench.report.pool import fork_map  # noqa: E402
from bench.report.series import Series  # noqa: E402
from bench.trace import STEP_PHASES  # noqa: E402

DPI = 90
LEGEND_MAX = 12  # more runs than this: no legend (colours follow the sweep value instead)


class Omitted(Exception):
    """The figure's data is absent; the message is the reason shown in the report."""


@dataclass
class Figure:
    """One rendered (or omitted) figure of the report."""

    name: str
    title: str
    caption: str = ""
    png_b64: str = ""  # embedded in index.html
    files: list[str] = field(default_factory=list)  # PNG and SVG beside it
    omitted: str = ""  # reason, when not drawn
    more: bool = False  # under "More figures": the headline shows at most eight


@dataclass
class Ctx:
    """What every figure function receives."""

    runs: list[Run]
    series: list[Series]
    summary: pd.DataFrame
    colors: dict[str, tuple[float, float, float]]
    caption: str = ""  # a figure function may set the caption of its own figure

    def pairs(self) -> list[tuple[Run, Series]]:
        return list(zip(self.runs, self.series, strict=True))

    def mode_tag(self) -> str:
        """The modes of the runs drawn: measured, emulated (with whose hardware physics:
        hwprofile_conf.source_label), or both."""
        modes = set()
        for r in self.runs:
            emu = r.manifest.get("emulator") if isinstance(r.manifest.get("emulator"), dict) else {}
            hardware = source_label(emu.get("hardware_source"))
            emulated = f"emulated: {hardware}" if hardware else "emulated"
            modes.add("measured" if r.manifest["mode"] == "native" else emulated)
        return " + ".join(sorted(modes, reverse=True))


def _colors(runs: list[Run]) -> dict[str, tuple[float, float, float]]:
    labels = [r.label for r in runs]
    pal = sns.color_palette("tab10" if len(labels) <= 10 else "viridis", len(labels))
    return dict(zip(labels, pal, strict=True))


def _legend(ax: plt.Axes, ctx: Ctx) -> None:
    if len(ctx.runs) <= LEGEND_MAX and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", framealpha=0.8)  # "best" costs a search per draw
    elif ax.get_legend():
        ax.get_legend().remove()


def _line(
    ax: plt.Axes, d: pd.DataFrame, x: str, y: str, color, label: str, ls: str = "-", lw: float = 1.2
) -> None:
    """One run's series: plain ax.plot (seaborn's lineplot would re-aggregate what is already binned)."""
    d = d[[x, y]].dropna()
    ax.plot(d[x].to_numpy(), d[y].to_numpy(), color=color, ls=ls, lw=lw, label=label)


def _draw_runs(
    ax: plt.Axes, ctx: Ctx, items: list[tuple[Run, pd.DataFrame]], ls: str = "-", legend: bool = True
) -> int:
    """Draw one line per (run, two-column frame x, y); returns how many were drawn.

    Past LEGEND_MAX runs (a sweep) the lines go into one LineCollection: one artist instead of
    a hundred keeps drawing cheap, and there is no legend to feed anyway.
    """
    items = [(r, d.dropna()) for r, d in items]
    items = [(r, d) for r, d in items if len(d)]
    if len(items) <= LEGEND_MAX:
        for run, d in items:
            x, y = d.columns
            _line(ax, d, x, y, ctx.colors[run.label], run.label if legend else "_nolegend_", ls)
        return len(items)
    segs = [d.to_numpy(dtype=float) for _, d in items]
    colors = [ctx.colors[r.label] for r, _ in items]
    ax.add_collection(LineCollection(segs, colors=colors, linestyles=ls, lw=0.8))
    ax.autoscale_view()
    return len(items)


def _lines(ax: plt.Axes, ctx: Ctx, x: str, y: str, ls: str = "-") -> int:
    """One line per run with data in columns x and y of its step series."""
    return _draw_runs(ax, ctx, [(r, s.steps[[x, y]]) for r, s in ctx.pairs() if s.steps is not None], ls)


def _bars_height(n: int, per_bar: float, extra: float) -> float:
    """Figure height (inches) for n horizontal bars, capped so a 100-run sweep stays one screen."""
    return min(extra + per_bar * n, 11.0)


def _bars_font(n: int) -> float:
    """Tick-label size for n bars: shrinks once the height cap squeezes the bars."""
    return max(4.0, min(8.0, 260.0 / max(n, 1)))


def _note(ax: plt.Axes, text: str) -> None:
    """A panel with nothing to draw says why, in its middle."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _int_steps(*axes: plt.Axes) -> None:
    """Trainer steps are whole numbers: no 2.5 ticks."""
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def fig_queue_health(ctx: Ctx) -> plt.Figure:
    has_depth = any(
        s.production is not None and s.production["queue_depth"].notna().any() for s in ctx.series
    )
    fig, axes = plt.subplots(1, 2 if has_depth else 1, figsize=(12 if has_depth else 7, 3.8), squeeze=False)
    ax = axes[0, 0]
    # The table's words: production (solid, legend) = trained samples / step wall time;
    # consumption (dashed) = trained samples / trainer compute time; the generators' finished
    # rollouts (dotted) include those discarded or filtered later.
    n = _lines(ax, ctx, "t_end_s", "production_per_s")
    n += _draw_runs(
        ax,
        ctx,
        [(r, s.steps[["t_end_s", "consumption_per_s"]]) for r, s in ctx.pairs() if s.steps is not None],
        "--",
        legend=False,
    )
    finished = [
        (r, s.production[["t_s", "finished_per_s"]]) for r, s in ctx.pairs() if s.production is not None
    ]
    _draw_runs(ax, ctx, finished, ":", legend=False)
    if n == 0:
        plt.close(fig)
        raise Omitted("no run has step times and sample counts (steps.parquet t_end_s, step_s, samples)")
    ax.set(
        xlabel="wall time (s)",
        ylabel="samples / s",
        title="production (solid) · consumption (dashed) · finished rollouts (dotted)",
    )
    ax.title.set_fontsize(8)
    _legend(ax, ctx)
    if has_depth:
        ax2 = axes[0, 1]
        depth = [
            (r, s.production[["t_s", "queue_depth"]]) for r, s in ctx.pairs() if s.production is not None
        ]
        _draw_runs(ax2, ctx, depth)
        for r, s in ctx.pairs():
            if s.production is not None and s.batch_samples and len(ctx.runs) <= LEGEND_MAX:
                ax2.axhline(s.batch_samples, color=ctx.colors[r.label], ls=":", lw=0.9)
        ax2.set(
            xlabel="wall time (s)",
            ylabel="rollouts finished, not yet trained",
            title="queue depth (dotted: batch size)",
        )
        _legend(ax2, ctx)
    ctx.caption = (
        "Production: trained samples ÷ step wall time; consumption: trained samples ÷ trainer compute time "
        "(log-prob + forward/backward/optimizer) — the table's two columns, per step. Finished rollouts: "
        "rollouts.parquet completions of any fate, so they exceed production by the discarded and filtered share. "
        + (
            "Queue depth counts trained rollouts that finished and wait for the step that takes them; a step "
            "starts once a whole batch (dotted line) is in, so a depth below the batch size means the batch is "
            "still filling and the trainer idles. It falls to 0 when generation ends."
            if has_depth
            else "Queue depth omitted: no run has rollouts.parquet with finish times."
        )
    )
    return fig


def fig_step_breakdown(ctx: Ctx) -> plt.Figure:
    rows = [(r.label, s.breakdown) for r, s in ctx.pairs() if s.breakdown]
    if not rows:
        raise Omitted("no run has phases in metrics.json (steps.parquet step_s and its phase columns)")
    # One bar per run, one segment per phase in STEP_PHASES order: metrics.json `phases`, the same
    # numbers as the run's table, so each bar ends at its mean steady step (unattributed drawn too).
    cols = [c for c in STEP_PHASES if any(c in b for _, b in rows)]
    # wait_s is "generation" in colocated runs and "waiting for rollouts" in disaggregated ones
    names = {c: " / ".join(dict.fromkeys(b[c]["name"] for _, b in rows if c in b)) for c in cols}
    df = pd.DataFrame(
        [{c: b[c]["s_per_step"] if c in b else np.nan for c in cols} for _, b in rows],
        index=[lbl for lbl, _ in rows],
    )
    fig, ax = plt.subplots(figsize=(8, _bars_height(len(df), 0.32, 1.5)))
    ax.tick_params(axis="y", labelsize=_bars_font(len(df)))
    left = np.zeros(len(df))
    for c, color in zip(cols, sns.color_palette("tab20", len(cols)), strict=True):
        width = df[c].fillna(0).clip(lower=0).to_numpy()  # overlapping timers: negative unattributed
        ax.barh(df.index, width, left=left, color=color, label=names[c])
        left += width
    ax.invert_yaxis()
    ax.set(xlabel="seconds per trainer step (steady-state mean)")
    ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    negative = [lbl for lbl, b in rows if (b.get("unattributed_s") or {}).get("s_per_step", 0) < 0]
    ctx.caption = (
        "Mean seconds per step over each run's steady-state window (metrics.json phases, the table's "
        "numbers): the phases sum to the step; 'unattributed' is step time no framework timer covers. "
        "A phase a run does not time is absent from its bar, not 0."
        + (
            f" Timers overlap (negative unattributed, not drawn) in: {', '.join(negative)}."
            if negative
            else ""
        )
    )
    return fig


def fig_idle(ctx: Ctx) -> plt.Figure:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    n1 = _lines(a1, ctx, "step", "trainer_idle")
    n2 = _lines(a2, ctx, "step", "generator_idle")
    if n1 + n2 == 0:
        plt.close(fig)
        raise Omitted("no run has wait_s or gen_s with step_s in steps.parquet")
    a1.set(
        xlabel="trainer step",
        ylabel="fraction of step",
        title="trainer idle (wait_s ÷ step_s)",
        ylim=(0, 1.02),
    )
    a2.set(xlabel="trainer step", title="generator idle (1 − gen_s ÷ step_s; disaggregated runs only)")
    if n2 == 0:
        _note(a2, "no disaggregated run reports gen_s")
    _int_steps(a1, a2)
    _legend(a1, ctx)
    _legend(a2, ctx)
    ctx.caption = (
        ""
        if n2
        else "Generator idle not drawn: no disaggregated run reports gen_s (colocated runs share one GPU pool)."
    )
    return fig


def fig_staleness(ctx: Ctx) -> plt.Figure:
    by_fw: dict[str, pd.Series] = {}
    sources = set()
    for run, s in ctx.pairs():
        if s.staleness is not None and len(s.staleness):
            fw = run.manifest["framework"]
            by_fw[fw] = by_fw[fw].add(s.staleness, fill_value=0) if fw in by_fw else s.staleness.astype(float)
            sources.add(s.staleness_source)
    if not by_fw:
        raise Omitted(
            "no rollouts.parquet with step_consumed/policy_version_start and no staleness_mean per step"
        )
    long = pd.concat(
        [
            pd.DataFrame({"versions behind": c.index, "share": c.to_numpy() / c.sum(), "framework": fw})
            for fw, c in by_fw.items()
        ]
    )
    fig, ax = plt.subplots(figsize=(7, 3.6))
    sns.barplot(data=long, x="versions behind", y="share", hue="framework", ax=ax)
    ax.set(ylabel="share of trained rollouts", title="staleness per framework")
    ctx.caption = "Source: " + "; ".join(sorted(sources)) + ". All runs of a framework pooled."
    return fig


def fig_waste(ctx: Ctx) -> plt.Figure:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    n1 = _lines(a1, ctx, "step", "discarded_samples")
    n1 += _draw_runs(
        a1,
        ctx,
        [(r, s.steps[["step", "filtered_samples"]]) for r, s in ctx.pairs() if s.steps is not None],
        "--",
        legend=False,
    )
    pct = [
        (r, s.steps[["step", "zero_advantage"]].assign(zero_advantage=s.steps["zero_advantage"] * 100))
        for r, s in ctx.pairs()
        if s.steps is not None
    ]
    n2 = _draw_runs(a2, ctx, pct)
    if n1 + n2 == 0:
        plt.close(fig)
        raise Omitted(
            "no run reports discarded_samples, filtered_samples or solve_all/none_frac in steps.parquet"
        )
    a1.set(
        xlabel="trainer step",
        ylabel="rollouts per step",
        title="discarded (solid) · filtered zero-advantage (dashed)",
    )
    a2.set(xlabel="trainer step", ylabel="% of groups", title="zero-advantage groups (all pass or all fail)")
    if n2 == 0:
        _note(a2, "no run reports solve_all_frac / solve_none_frac")
    if n1 == 0:
        _note(a1, "no run reports discarded or filtered rollouts")
    _int_steps(a1, a2)
    _legend(a1, ctx)
    _legend(a2, ctx)
    ctx.caption = (
        "Discarded: rollouts dropped by oversampling or staleness; filtered: zero-advantage groups dropped "
        "before training (0 when the run does not filter). Right: share of groups with zero advantage "
        "(solve_all_frac + solve_none_frac) — trained or filtered, they carry no gradient; its window mean "
        "is the table's zero-advantage column."
    )
    return fig


def fig_response_length(ctx: Ctx) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    if _lines(ax, ctx, "step", "response_len") == 0:
        plt.close(fig)
        raise Omitted("no run reports response_tokens and samples in steps.parquet")
    ax.set(
        xlabel="trainer step", ylabel="tokens per trained sample", title="response length (the moving target)"
    )
    _int_steps(ax)
    _legend(ax, ctx)
    return fig


def fig_cost(ctx: Ctx) -> plt.Figure:
    prices = {"cost_per_mtok_usd": "own hardware (TCO)", "tinker_equiv_per_mtok_usd": "Tinker equivalent"}
    df = ctx.summary[list(prices)].set_axis([r.label for r in ctx.runs])
    df = df.dropna(how="all")
    if df.empty:
        raise Omitted("no run has cost_per_mtok_usd or tinker_equiv_per_mtok_usd in metrics.json")
    n = len(df)
    fig, ax = plt.subplots(figsize=(8, _bars_height(n, 0.4, 1.5)))
    y = np.arange(n)
    # Grouped bars drawn directly: seaborn's barplot re-aggregates and costs seconds at 100 runs.
    for k, (col, name) in enumerate(prices.items()):
        ax.barh(y + (k - 0.5) * 0.4, df[col].to_numpy(), height=0.4, label=name, color=sns.color_palette()[k])
    ax.set_yticks(y, df.index)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=_bars_font(n))
    ax.set(xlabel="$ / M trained tokens")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    return fig


def _band(
    ax: plt.Axes, pts: pd.DataFrame, col: str, scale: float, color, ls: str = "-", label: str = ""
) -> None:
    """Mean line over the swept value with the seed band (min-max over seeds) shaded."""
    x = pts["sweep_value"].to_numpy()
    ax.plot(x, pts[col].to_numpy() * scale, color=color, ls=ls, marker="o", ms=3, label=label)
    if (pts["n_runs"] > 1).any():
        ax.fill_between(x, pts[f"{col}_min"] * scale, pts[f"{col}_max"] * scale, color=color, alpha=0.2, lw=0)


def fig_sweep(ctx: Ctx) -> plt.Figure:
    from bench.report.sweep import crossing, points, recommend, sweep_key

    df = ctx.summary.dropna(subset=["sweep_value"])
    df = df[df.groupby("framework")["sweep_value"].transform("nunique") >= 2]
    if df.empty:
        raise Omitted("not a sweep: no framework has runs at two or more values of a numeric swept key")
    key = sweep_key(ctx.summary)
    panels = [
        ("trainer_idle_frac", "trainer idle (%)", 100),
        ("staleness_mean", "staleness mean (versions)", 1),
        ("cost_per_mtok_usd", "$ / M trained tokens", 1),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8))
    pal = sns.color_palette("tab10")
    notes = []
    for k, (fw, g) in enumerate(df.groupby("framework")):
        pts, color = points(g), pal[k % 10]
        _band(axes[0], pts, "production_samples_per_s", 1, color, "-", f"{fw} production")
        _band(axes[0], pts, "consumption_samples_per_s", 1, color, "--", f"{fw} consumption")
        x = crossing(pts)
        if x is not None:
            axes[0].axvline(x, color=color, ls=":", lw=1)
            notes.append(f"{fw}: production reaches consumption at {key}≈{x:.3g}")
        rec = recommend(pts, key)
        for ax, (col, _, scale) in zip(axes[1:], panels, strict=True):
            if pts[col].notna().any():
                _band(ax, pts.dropna(subset=[col]), col, scale, color, label=fw)
            if rec is not None:
                row = pts[pts["sweep_value"] == rec.sweep_value]
                if len(row) and row[col].notna().all():
                    ax.scatter(
                        rec.sweep_value, row[col].iloc[0] * scale, s=150, marker="*", color="black", zorder=5
                    )
    axes[0].set(xlabel=key, ylabel="samples / s", title="production (solid) vs consumption (dashed)")
    axes[0].legend(fontsize=6, loc="best")
    for ax, (col, name, _) in zip(axes[1:], panels, strict=True):
        ax.set(xlabel=key, ylabel=name, title=name)
        if not ax.lines:
            _note(ax, f"{col}: not reported")
    ctx.caption = (
        f"Swept key: {key}. Dotted vertical line: where production reaches consumption "
        f"(ratio ≥ {math.exp(-MATCH_TOLERANCE):.2f}, interpolated). ★: recommended point (lowest $ / M trained "
        "tokens; the findings give the reason). Shaded: seed band (min–max of runs at one value). "
        + (
            "; ".join(notes) + "."
            if notes
            else "No framework's production reaches its consumption in this sweep."
        )
    )
    return fig


def fig_gpu(ctx: Ctx) -> plt.Figure:
    runs = [(r, s) for r, s in ctx.pairs() if s.gpu is not None]
    if not runs:
        raise Omitted("no run has GPU telemetry (trace/gpu.parquet is written by native runs only)")
    energy = ctx.summary["energy_wh"].notna().any()
    fig, axes = plt.subplots(1, 2 if energy else 1, figsize=(11 if energy else 7, 3.6), squeeze=False)
    _draw_runs(axes[0, 0], ctx, [(r, s.gpu[["t_s", "util_pct"]]) for r, s in runs])
    axes[0, 0].set(
        xlabel="wall time (s)", ylabel="GPU utilisation (%), mean over devices", title="GPU utilisation"
    )
    _legend(axes[0, 0], ctx)
    if energy:
        d = pd.DataFrame({"run": [r.label for r in ctx.runs], "Wh": ctx.summary["energy_wh"]}).dropna()
        sns.barplot(
            data=d, y="run", x="Wh", hue="run", palette=ctx.colors, legend=False, ax=axes[0, 1], orient="h"
        )
        axes[0, 1].set(ylabel="", title="energy (Wh)")
    return fig


FIGURES: list[tuple[str, str, Callable[[Ctx], plt.Figure]]] = [
    ("queue_health", "Queue health over time", fig_queue_health),
    ("step_breakdown", "Where a trainer step goes", fig_step_breakdown),
    ("idle", "Trainer and generator idle over steps", fig_idle),
    ("staleness", "Staleness histogram", fig_staleness),
    ("waste", "Discarded and filtered rollouts per step", fig_waste),
    ("response_length", "Response length over steps", fig_response_length),
    ("cost", "Cost per million tokens", fig_cost),
    ("sweep", "Sweep: production vs consumption, idle, staleness, cost", fig_sweep),
    ("gpu", "GPU utilisation and energy", fig_gpu),
]


MORE = {"response_length"}  # drawn, but folded under "More figures"
PER_RUN_COLOURS = {"queue_health", "idle", "waste", "response_length", "gpu"}  # one line per run


def _draw(job: tuple[Ctx, Path, int]) -> Figure:
    """Draw FIGURES[i] into PNG + SVG files under fig_dir (in a forked worker or in-process)."""
    ctx, fig_dir, i = job
    name, title, fn = FIGURES[i]
    ctx.caption = ""
    tagged = f"{title} ({ctx.mode_tag()})"
    try:
        fig = fn(ctx)
    except Omitted as e:
        return Figure(name, tagged, omitted=str(e), more=name in MORE)
    except Exception as e:  # one unexpected trace shape must not cost the whole report
        plt.close("all")
        print(f"report: figure {name!r} failed: {type(e).__name__}: {e}", file=sys.stderr)
        return Figure(
            name, tagged, omitted=f"could not be drawn ({type(e).__name__}: {e})", more=name in MORE
        )
    if name in PER_RUN_COLOURS and len(ctx.runs) > LEGEND_MAX:
        ctx.caption += (
            f" {len(ctx.runs)} runs, so no legend: line colours run from dark (first row of the summary "
            "table) to light (last row)."
        )
    fig.suptitle(tagged, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    (fig_dir / f"{name}.png").write_bytes(buf.getvalue())
    fig.savefig(fig_dir / f"{name}.svg", format="svg")
    plt.close(fig)
    png = base64.b64encode(buf.getvalue()).decode("ascii")
    files = [f"figures/{name}.png", f"figures/{name}.svg"]
    return Figure(name, tagged, ctx.caption, png, files, more=name in MORE)


def render_all(runs: list[Run], series: list[Series], summary: pd.DataFrame, out_dir: Path) -> list[Figure]:
    """Draw every figure kind into out_dir/figures/<name>.{png,svg}; omitted ones carry a reason.

    Figures are independent and drawing them is the report's main cost, so they are spread over
    forked workers (bench.report.pool: only the finished figure is pickled back).
    """
    sns.set_theme(style="whitegrid", context="paper")
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(runs, series, summary, _colors(runs))
    return fork_map(_draw, [(ctx, fig_dir, i) for i in range(len(FIGURES))])
