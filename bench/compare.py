"""`python -m bench compare RUN_A RUN_B [--json] [--out DIR]`: what changed between two runs, and is
it beyond noise?

Run directories of any origin (launched, ingested, emulated, predicted) are read through the run
directory contract only: manifest.json, metrics.json and trace/steps.parquet. Each phase and
headline figure is a statistic of the steady steps of each run (the window of metrics.json), and
its noise is the runs' own: the steady steps of A and of B are resampled with replacement
(bootstrap, BOOTSTRAP_RESAMPLES times, a fixed seed so the page is reproducible) and the change is
beyond noise when the central NOISE_LEVEL interval of B - A excludes zero. Where A or B is a folder
holding several seeds of one configuration, the seed bands decide instead (each side's min..max over
its seeds; beyond noise when they do not overlap). No constant tolerance enters. With fewer than MIN_STEADY_STEPS steady steps in either run the noise is unknown and the
change is not judged (beyond_noise null, with the reason).

`bench compare --baseline RUN_OR_DIR NEW...` compares each new run with the baseline (a run, or the
newest completed run of the same framework and model under a results folder) and exits 1 when a
headline figure regressed beyond noise, so a nightly job can gate on it.

Runs of different models or workloads are refused, naming what differs, unless `--force`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.errors import UsageError
from bench.trace import STEP_PHASES, RunPaths, TraceError, read_manifest, read_steps, step_phases

BOOTSTRAP_RESAMPLES = 2000
NOISE_LEVEL = 0.95  # central interval of the bootstrap distribution of B - A
MIN_STEADY_STEPS = 3
# what must match for two runs to be one comparison (dotted paths into the manifest's config)
WORKLOAD_KEYS = (
    "workload.group_size",
    "workload.prompts_per_step",
    "workload.max_prompt_len",
    "workload.max_response_len",
)


# what the seeds of one configuration share beyond model and workload (dotted paths into the manifest)
SEED_SET_KEYS = (
    "config.experiment.trainer_gpus",
    "config.experiment.generator_gpus",
    "config.experiment.placement",
)


@dataclass
class Run:
    """One run directory, read once: its manifest, metrics.json and steady steps."""

    root: Path
    manifest: dict[str, Any]
    metrics: dict[str, Any]
    steady: pd.DataFrame  # steps inside the metrics window
    phases: pd.DataFrame  # the same steps split into the phases of a step (bench.trace.step_phases)
    seeds: list[Run] = field(default_factory=list)  # a seed set: every run of it (this one first)

    @property
    def label(self) -> str:
        return f"{self.manifest.get('framework', '?')}/{self.manifest.get('run_id', self.root.name)}"

    @property
    def gpus(self) -> float | None:
        n = (self.manifest.get("resolved") or {}).get("total_gpus")
        if n is None:
            n = _inferred_gpus(self.manifest)
        return float(n) if n else None


def _inferred_gpus(manifest: dict[str, Any]) -> int | None:
    """Sum of the GPUs per role the ingest inferred (each {value, source}); None when any is unknown."""
    gpus = (manifest.get("inferred") or {}).get("gpus") or {}
    values = [g.get("value") for g in gpus.values() if isinstance(g, dict)]
    return sum(values) if values and all(isinstance(v, int) for v in values) else None


def load(path: Path) -> Run:
    """A run directory, or a folder of runs of one configuration that differ only in their seed (a seed
    set: compared through the spread of its seeds, the seed band)."""
    path = Path(path)
    if not (path / "manifest.json").exists() and path.is_dir():
        members = sorted(p.parent for p in path.glob("*/manifest.json") if p.parent.name != "dry-run")
        if members:
            return _seed_set(path, [_load_one(m) for m in members])
    return _load_one(path)


def _seed_set(path: Path, runs: list[Run]) -> Run:
    first = runs[0]
    for other in runs[1:]:
        differs = not_comparable(first, other)
        for key in ("framework", *SEED_SET_KEYS):
            x, y = _get(first.manifest, key), _get(other.manifest, key)
            if x != y:
                differs.append(f"{key.removeprefix('config.')}: {x} vs {y}")
        if differs:
            raise UsageError(
                f"{path}: not one configuration's seeds ({first.root.name} and {other.root.name} differ: "
                f"{'; '.join(differs)}); give one run directory, or a folder holding only seeds of one run"
            )
    first.seeds = runs
    first.root = path
    return first


def _load_one(path: Path) -> Run:
    paths = RunPaths(Path(path))
    try:
        manifest = read_manifest(paths)
        steps = read_steps(paths.steps)
    except (TraceError, OSError, ValueError) as e:
        raise UsageError(
            f"{path}: not a readable run directory ({e}); expected a run directory with "
            "manifest.json and trace/steps.parquet"
        ) from None
    metrics_path = paths.root / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    window = metrics.get("window") or {}
    first, last = window.get("first_step"), window.get("last_step")
    if first is None or last is None:
        from bench.metrics import steady_window

        w = steady_window(steps)
        first, last = w.first, w.last
    steady = steps[(steps["step"] >= first) & (steps["step"] <= last)].reset_index(drop=True)
    return Run(Path(path), manifest, metrics, steady, step_phases(steady))


# --------------------------------------------------------------------------------------------------
# Statistics of steady steps. Each is evaluated on rows of step indices at once: one row is the run
# itself (all its steady steps), BOOTSTRAP_RESAMPLES rows are its resamples.


@dataclass(frozen=True)
class Stat:
    """`mean` of a column; `ratio` of two columns' sums (per GPU held when per_gpu); or `metric`, a
    metrics.json figure proportional to the trained-token rate to the given power (MFU: 1, $/M: -1),
    resampled through that rate."""

    kind: str
    col: str
    den: str = ""
    per_gpu: bool = False
    power: int = 1
    of_phases: bool = False  # col is a phase of bench.trace.step_phases, not a trace column

    def values(self, run: Run, idx: np.ndarray) -> np.ndarray | None:
        """The statistic on each row of idx (shape resamples x steps); None when the run lacks it."""
        f = run.phases if self.of_phases else run.steady
        if self.kind == "metric":
            value = run.metrics.get(self.col)
            rate = Stat("ratio", "response_tokens", "step_s")
            full, now = rate.values(run, np.arange(len(f))[None]), rate.values(run, idx)
            if value is None or full is None or now is None or not full[0]:
                return None
            return float(value) * (now / full[0]) ** self.power
        if self.col not in f or f[self.col].isna().all() or (self.den and self.den not in f):
            return None
        x = f[self.col].to_numpy(dtype=float)
        if self.kind == "mean":
            return np.nanmean(x[idx], axis=1)
        den = f[self.den].to_numpy(dtype=float)[idx].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.nansum(x[idx], axis=1) / den
        if self.per_gpu:
            out = out / run.gpus if run.gpus else out * np.nan
        return out


# name -> (statistic, unit, which direction is better, what it means)
FIGURES = {
    "step_s": (Stat("mean", "step_s"), "s", "lower", "mean steady step wall time"),
    "trajectories_per_s": (
        Stat("ratio", "samples", "step_s"),
        "1/s",
        "higher",
        "samples trained / steady step time",
    ),
    "tokens_per_s_per_gpu": (
        Stat("ratio", "response_tokens", "step_s", per_gpu=True),
        "tok/s/GPU",
        "higher",
        "response tokens trained / steady step time / GPUs held",
    ),
    "trainer_idle_frac": (
        Stat("ratio", "wait_s", "step_s"),
        "",
        "lower",
        "trainer waiting / steady step time",
    ),
    "mfu": (Stat("metric", "mfu"), "", "higher", "metrics.json mfu, resampled through the token rate"),
    "sync_s": (Stat("mean", "sync_s"), "s", "lower", "mean weight sync per steady step"),
    "staleness_mean": (
        Stat("mean", "staleness_mean"),
        "versions",
        "lower",
        "mean policy lag of trained samples",
    ),
    "oversampling_waste": (
        Stat("ratio", "discarded_samples", "dispatched_samples"),
        "",
        "lower",
        "samples discarded / dispatched",
    ),
    "cost_per_mtok_usd": (
        Stat("metric", "cost_per_mtok_usd", power=-1),
        "$/M",
        "lower",
        "metrics.json $/M trained tokens, resampled through the token rate",
    ),
}


def phase_columns(a: Run, b: Run) -> list[str]:
    """The phases of a step (docs/metrics.md "Phases") either run records, in the report's order."""
    runs = [*(a.seeds or [a]), *(b.seeds or [b])]
    return [c for c in STEP_PHASES if any(c in r.phases.columns for r in runs)]


def _seed_bands(name: str, stat: Stat, a: Run, b: Run) -> dict[str, Any]:
    """A seed set on either side: each side's value is the mean over its seeds, and the change is beyond
    noise when the two seed bands (min..max over seeds) do not overlap."""

    def band(run: Run) -> list[float]:
        values = [stat.values(r, np.arange(len(r.steady))[None]) for r in (run.seeds or [run])]
        return [float(v[0]) for v in values if v is not None and np.isfinite(v[0])]

    ba, bb = band(a), band(b)
    row: dict[str, Any] = {"a": None, "b": None, "delta": None, "delta_frac": None, "beyond_noise": None}
    if not ba or not bb:
        row["noise"] = {"reason": f"{name} not recorded by " + ("A" if not ba else "B")}
        return row
    va, vb = float(np.mean(ba)), float(np.mean(bb))
    row.update(a=va, b=vb, delta=vb - va, delta_frac=(vb - va) / va if abs(va) > 1e-9 else None)
    row["beyond_noise"] = bool(max(ba) < min(bb) or max(bb) < min(ba))
    row["noise"] = {
        "method": f"seed bands (A {len(ba)} seed(s), B {len(bb)} seed(s)): beyond noise when they do not overlap",
        "a_band": [min(ba), max(ba)],
        "b_band": [min(bb), max(bb)],
    }
    return row


def _compare(name: str, stat: Stat, a: Run, b: Run, rng: np.random.Generator) -> dict[str, Any]:
    if len(a.seeds) > 1 or len(b.seeds) > 1:
        return _seed_bands(name, stat, a, b)
    na, nb = len(a.steady), len(b.steady)
    full_a, full_b = stat.values(a, np.arange(na)[None]), stat.values(b, np.arange(nb)[None])
    va = float(full_a[0]) if full_a is not None and np.isfinite(full_a[0]) else None
    vb = float(full_b[0]) if full_b is not None and np.isfinite(full_b[0]) else None
    row: dict[str, Any] = {"a": va, "b": vb, "delta": None, "delta_frac": None, "beyond_noise": None}
    if va is None or vb is None:
        lacking = "both runs" if va is None and vb is None else ("A" if va is None else "B")
        row["noise"] = {"reason": f"{name} not recorded by {lacking}"}
        return row
    row["delta"] = vb - va
    row["delta_frac"] = (vb - va) / va if abs(va) > 1e-9 else None
    if min(na, nb) < MIN_STEADY_STEPS:
        row["noise"] = {"reason": f"{min(na, nb)} steady step(s) (need {MIN_STEADY_STEPS}): noise unknown"}
        return row
    deltas = stat.values(b, rng.integers(0, nb, size=(BOOTSTRAP_RESAMPLES, nb))) - stat.values(
        a, rng.integers(0, na, size=(BOOTSTRAP_RESAMPLES, na))
    )
    tail = (1 - NOISE_LEVEL) / 2
    lo, hi = np.nanquantile(deltas, [tail, 1 - tail])
    row["beyond_noise"] = bool(lo > 0 or hi < 0)
    row["noise"] = {
        "method": f"bootstrap of steady steps ({BOOTSTRAP_RESAMPLES} resamples, A {na} steps, B {nb} steps)",
        "interval": [float(lo), float(hi)],
        "level": NOISE_LEVEL,
    }
    return row


# --------------------------------------------------------------------------------------------------
# Identity and versions


def _get(d: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d.get("value") if isinstance(d, dict) and "value" in d else d


def model_name(run: Run) -> str | None:
    """The model the run trained: the name it logged (ingest), else its composed config's."""
    inferred = (run.manifest.get("inferred") or {}).get("model") or {}
    return (
        inferred.get("name") or inferred.get("value") or _get(run.manifest.get("config") or {}, "model.name")
    )


def workload_of(run: Run) -> dict[str, Any]:
    """The workload shape: the composed config's, else what ingest inferred (same leaf names)."""
    config, inferred = run.manifest.get("config") or {}, run.manifest.get("inferred") or {}
    out = {}
    for key in WORKLOAD_KEYS:
        value = _get(config, key)
        out[key] = value if value is not None else _get(inferred, key.split(".")[-1])
    return out


def not_comparable(a: Run, b: Run) -> list[str]:
    """What differs between the two runs' model and workload (a value one run lacks is not a difference)."""
    out = []
    ma, mb = model_name(a), model_name(b)
    if ma and mb and ma != mb:
        out.append(f"model: {ma} vs {mb}")
    wa, wb = workload_of(a), workload_of(b)
    out += [
        f"{k}: {wa[k]} vs {wb[k]}" for k in WORKLOAD_KEYS if None not in (wa[k], wb[k]) and wa[k] != wb[k]
    ]
    return out


# what each run records of its software and hardware (dotted paths into the manifest, first found wins);
# launched and emulated runs carry the composed config, ingested ones what the logs gave
VERSION_KEYS = {
    "framework": ("framework",),
    "framework version": ("framework_version", "config.framework.version"),
    "framework commit": ("config.framework.commit", "run_info.framework_commit"),
    "container": ("config.framework.container",),
    "inference engine": ("run_info.engine", "inferred.engine"),
    "training backend": ("inferred.trainer_backend", "config.experiment.trainer.sharding"),
    "torch": ("run_info.torch", "inferred.versions.torch"),
    "CUDA": ("run_info.cuda", "inferred.versions.cuda"),
    "driver": ("run_info.driver", "inferred.versions.driver"),
    "GPU": ("inferred.hardware", "config.hardware.name"),
    "mode": ("mode",),
}


def versions(a: Run, b: Run) -> list[dict[str, Any]]:
    """Versions side by side, as far as each run records them (None: not recorded)."""

    def first(run: Run, keys: tuple[str, ...]) -> Any:
        for key in keys:
            if (v := _get(run.manifest, key)) is not None:
                return v
        return None

    rows = []
    for name, keys in VERSION_KEYS.items():
        va, vb = first(a, keys), first(b, keys)
        rows.append({"name": name, "a": va, "b": vb, "differs": None not in (va, vb) and va != vb})
    return rows


# --------------------------------------------------------------------------------------------------


def compare(a: Run, b: Run, force: bool = False) -> dict[str, Any]:
    """The comparison as one JSON-able dict (the `--json` output)."""
    differs = not_comparable(a, b)
    if differs and not force:
        raise UsageError(
            f"{a.root} and {b.root} are not comparable ({'; '.join(differs)}); pass --force to compare anyway"
        )
    rng = np.random.default_rng(0)
    phases = [
        {"phase": c, **_compare(c, Stat("mean", c, of_phases=True), a, b, rng)} for c in phase_columns(a, b)
    ]
    figures = []
    for name, (stat, unit, better, meaning) in FIGURES.items():
        row = {
            "figure": name,
            "unit": unit,
            "better": better,
            "meaning": meaning,
            **_compare(name, stat, a, b, rng),
        }
        worse = row["delta"] is not None and (row["delta"] > 0 if better == "lower" else row["delta"] < 0)
        row["regressed"] = bool(row["beyond_noise"] and worse)
        figures.append(row)
    return {
        "a": str(a.root),
        "b": str(b.root),
        "phases": phases,
        "figures": figures,
        "versions": versions(a, b),
        "not_comparable": differs,
    }


def baseline_for(where: Path, new: Run) -> Run:
    """`where` itself when it is a run directory, else the newest completed run under it of the same
    framework, model and workload as `new` (not `new` itself)."""
    if (where / "manifest.json").exists():
        return load(where)
    found = []
    for manifest in where.rglob("manifest.json"):
        root = manifest.parent
        if root.resolve() == new.root.resolve() or "dry-run" in root.parts:
            continue
        try:
            m = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        if m.get("status") == "completed" and m.get("framework") == new.manifest.get("framework"):
            run = load(root)
            if not not_comparable(run, new):  # same model and workload: a baseline for it
                found.append((manifest.stat().st_mtime, run))
    if not found:
        raise UsageError(
            f"--baseline {where}: no completed {new.manifest.get('framework')} run of "
            f"{model_name(new)} with this workload there; give a run directory or a results folder holding one"
        )
    return max(found, key=lambda t: t[0])[1]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def markdown(result: dict[str, Any]) -> str:
    """The comparison as a Markdown page (also what the terminal shows)."""

    def table(rows: list[dict[str, Any]], key: str) -> list[str]:
        out = [f"| {key} | A | B | change | beyond noise |", "|---|---|---|---|---|"]
        for r in rows:
            frac = f" ({r['delta_frac']:+.1%})" if r.get("delta_frac") is not None else ""
            verdict = {True: "**yes**", False: "no", None: "unknown"}[r["beyond_noise"]]
            out.append(
                f"| {r[key]} | {_fmt(r['a'])} | {_fmt(r['b'])} | {_fmt(r['delta'])}{frac} | {verdict} |"
            )
        return out

    lines = [f"# Compare: A = {result['a']}, B = {result['b']}", ""]
    if result["not_comparable"]:
        lines += ["**Not one workload** (compared with --force): " + "; ".join(result["not_comparable"]), ""]
    lines += [
        "Noise: the runs' own steady steps, bootstrapped "
        f"({BOOTSTRAP_RESAMPLES} resamples, {NOISE_LEVEL:.0%} interval of B - A); no constant tolerance.",
        "",
    ]
    lines += ["## Headline figures", "", *table(result["figures"], "figure"), ""]
    lines += ["## Phases of a steady step (mean seconds)", "", *table(result["phases"], "phase"), ""]
    lines += ["## Versions", "", "| | A | B |", "|---|---|---|"]
    lines += [
        f"| {v['name']}{' (differs)' if v['differs'] else ''} | {_fmt(v['a'])} | {_fmt(v['b'])} |"
        for v in result["versions"]
    ]
    return "\n".join(lines) + "\n"


def write_page(result: dict[str, Any], a: Run, b: Run, out: Path) -> None:
    """index.md + index.html with the two runs' steady step-time distributions side by side (SVG)."""
    import html
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.boxplot([a.steady["step_s"].dropna(), b.steady["step_s"].dropna()], vert=False)
    ax.set_yticks([1, 2], [f"A {a.label}", f"B {b.label}"])
    ax.set_xlabel("steady step time (s)")
    fig.tight_layout()
    svg = io.StringIO()
    fig.savefig(svg, format="svg")
    plt.close(fig)
    md = markdown(result)
    out.mkdir(parents=True, exist_ok=False)
    (out / "step_time.svg").write_text(svg.getvalue())
    (out / "index.md").write_text(md + "\n![steady step time](step_time.svg)\n")
    (out / "index.html").write_text(
        "<!doctype html><meta charset=utf-8><title>bench compare</title>"
        f"<pre>{html.escape(md)}</pre><img src=step_time.svg alt='steady step time, A and B'>"
    )


def main(argv: list[str]) -> int:
    from bench.cli import command_parser

    ap = command_parser(
        "compare",
        "Compare two run directories of any origin (launched, ingested, emulated, predicted): each "
        "phase of a steady step and each headline figure, A, B, the change, and whether it is beyond "
        "the runs' own noise (bootstrap of steady steps; seed bands where a RUN is a folder of one "
        "configuration's seeds). With --baseline, compares each NEW run "
        "with a baseline and exits 1 when a headline figure regressed beyond noise.",
        "each run's manifest.json, metrics.json and trace/steps.parquet.",
        "nothing unless --out (a new directory: index.html, index.md, step_time.svg); the comparison "
        "goes to stdout.",
        ["python -m bench compare results/smoke/verl-1 results/smoke/verl-2 --json"],
    )
    ap.add_argument("runs", nargs="+", metavar="RUN", help="RUN_A RUN_B, or the NEW runs with --baseline")
    ap.add_argument(
        "--baseline", type=Path, help="a run directory, or a results folder to take the newest match from"
    )
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    ap.add_argument(
        "--out", type=Path, help="write index.html, index.md and step_time.svg into this new directory"
    )
    ap.add_argument("--force", action="store_true", help="compare runs of different models or workloads")
    args = ap.parse_args(argv)
    if args.baseline is None and len(args.runs) != 2:
        raise UsageError(f"compare takes two runs (got {len(args.runs)}); or --baseline RUN_OR_DIR NEW...")
    if args.out is not None:  # never inside a run directory, under a file or on a read-only disk
        from bench.outdir import check_out

        check_out(args.out, "compare")
    if args.out is not None and args.out.exists():
        raise UsageError(f"--out {args.out}: already exists; choose a new directory")
    pairs = (
        [(load(Path(args.runs[0])), load(Path(args.runs[1])))]
        if args.baseline is None
        else [(baseline_for(args.baseline, new), new) for new in map(load, map(Path, args.runs))]
    )
    results = [(compare(a, b, args.force), a, b) for a, b in pairs]
    if args.json:
        body = [r for r, _, _ in results]
        print(json.dumps(body[0] if args.baseline is None else body, indent=1, default=str))
    else:
        for r, _, _ in results:
            print(markdown(r))
    if args.out is not None and len(results) == 1:
        write_page(*results[0], args.out)
    regressed = [f"{b.label}: {f['figure']}" for r, _, b in results for f in r["figures"] if f["regressed"]]
    if args.baseline is not None and regressed:
        print("regressed beyond noise: " + ", ".join(regressed), file=sys.stderr)
        return 1
    return 0
