"""`compute.source: phases`: calibrate the emulator on a published synchronous row's per-phase step
times, then predict the asynchronous rows' phase times (conf/published/*_phases.yaml).

A per-phase step table (verl's one-step-off and fully_async recipes, NeMo-RL's performance summary)
gives, for a synchronous row and asynchronous rows of the same job, the mean seconds of each phase of
a trainer step. The synchronous row's phases are fitted by running the emulator itself, so a fitted
value means in the emulator exactly what it meant in the fit (costmodel's own functions, the Loop's
own queue):

  compute_s -> emulator.trainer_mfu          compute_s - optimizer_s - offload_s = FLOPs / (peak x GPUs
                                             x mfu): the trained tokens do not depend on it, so one
                                             rescale is exact; offload_s (costmodel.offload_s: the state
                                             experiment.trainer.offload_* keep on the host, loaded for
                                             the update and put back) is bytes over the host link, so
                                             the efficiency is the compute's alone
  logprob_s -> emulator.logprob_passes       whole forward passes of FLOPs / 3 at the fitted rate, rounded
                                             (the emulator counts whole passes: the residual is shown)
  gen_s     -> emulator.decode_bw_eff        generation seconds of the step's batch against the share of
                                             the HBM roofline (ratio iterations until within 0.1%)
  step_s    -> emulator.weight_sync_fixed_s  the step beyond generation, log-probs and update: the
                                             colocated hand-off (reload, resharding) plus whatever the
                                             table does not break out (reward, advantages, logging)

Each row is then emulated under its own policy and GPU split (its `overrides` on top of the
synchronous setup) with trainer_mfu, logprob_passes and decode_bw_eff carried over. The fitted
weight_sync_fixed_s is not carried: it is the colocated hand-off, and a disaggregated row syncs over
its own path (its overrides give that row's value). A phase is the mean over the steps after the
first `skip` (default 1: the first step holds no overlap). Emulations are direct (no `bench validate`:
a published split such as 12 trainer GPUs on 8-GPU nodes fails a native launch rule, not physics).

Units: seconds (phases), tokens/s/GPU (`tokens_per_s_per_gpu`: prompt + response tokens of a step
over its step time and every GPU of the job, NeMo-RL's "Tokens / sec / GPU").
"""

from __future__ import annotations

import hashlib
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.model import costmodel
from bench.reproduce.spec import Case, Context, Figure, NotReproducible, Outcome, SpecError, import_dep
from bench.resolve import Resolved

# phases a figure may take: steps.parquet columns (s), and tokens_per_s_per_gpu computed from three
PHASES = ("gen_s", "wait_s", "logprob_s", "compute_s", "sync_s", "step_s", "tokens_per_s_per_gpu")
# synchronous-row phase -> the emulator input fitted to it (in fitting order)
FITTED = {
    "compute_s": "emulator.trainer_mfu",
    "logprob_s": "emulator.logprob_passes",
    "gen_s": "emulator.decode_bw_eff",
    "step_s": "emulator.weight_sync_fixed_s",
}
# inputs the step may be fitted by
STEP_INPUTS = (FITTED["step_s"], FITTED["gen_s"])
CARRIED = ("emulator.trainer_mfu", "emulator.logprob_passes", "emulator.decode_bw_eff")
TOLERANCE = 1e-3  # relative: a continuous fit stops within 0.1% of the published phase
MAX_ITER = 30


@dataclass
class SyncFit:
    """The inputs fitted on a synchronous row, and how close its emulation comes to each phase."""

    values: dict[str, float]  # emulator key -> fitted value
    emulated: dict[str, float]  # phase -> emulated mean with the fitted values (s)
    published: dict[str, float]  # phase -> published (s)
    notes: list[str] = field(default_factory=list)
    step_input: str = "emulator.weight_sync_fixed_s"  # the input the step was fitted by

    def overrides(self, keys: tuple[str, ...] | None = None) -> list[str]:
        """Hydra overrides for the fitted values (only `keys` when given)."""
        return [f"{k}={_fmt(v)}" for k, v in self.values.items() if keys is None or k in keys]

    def describe(self) -> str:
        """Each fitted input with the phase it was fitted to, emulated vs published (for notes)."""
        parts = []
        for phase in FITTED:
            if phase in self.published:
                key = self.step_input if phase == "step_s" else FITTED[phase]
                e, p = self.emulated[phase], self.published[phase]
                parts.append(f"{key} = {_fmt(self.values[key])} ({phase} {e:.4g} s vs {p:g} s)")
        return "; ".join(parts)


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) >= 1 else f"{v:.6g}"


# ---- emulation -----------------------------------------------------------------------------------


def steps_table(cfg: Any) -> pd.DataFrame:
    """The emulated trace steps of cfg, in memory (steps.parquet's columns, with step_s)."""
    run = import_dep("bench.emulator.run", "the emulator")
    from bench.emulator.trace_out import step_rows

    loop, _, _ = run.build(cfg)
    return pd.DataFrame(step_rows(loop.run()))


def phase_means(steps: pd.DataFrame, cfg: Any, skip: int) -> dict[str, float]:
    """Mean of every phase over the steps after the first `skip` (s; tokens/s/GPU)."""
    steady = steps.iloc[skip:] if len(steps) > skip else steps
    if steady.empty:
        raise NotReproducible("the emulated run has no steps")
    out = {p: float(steady[p].mean()) for p in PHASES if p in steady}
    # over the window (total tokens / total time), not a mean of per-step ratios: an async run's
    # steps alternate long and short as batches fill in waves, and short steps would dominate
    tokens = float((steady.prompt_tokens + steady.response_tokens).sum())
    out["tokens_per_s_per_gpu"] = tokens / float(steady.step_s.sum()) / Resolved.from_config(cfg).total_gpus
    return out


def _compose(overrides: list[str]) -> Any:
    from bench.config import compose

    return compose(overrides)


# ---- the fit on the synchronous row ------------------------------------------------------------


def _published_phases(case: Case, fit: Any, where: str) -> dict[str, float]:
    """calibrate_on.fit: {phase: figure id} -> {phase: the figure's published value}."""
    if not isinstance(fit, dict) or not fit:
        raise SpecError(f"{where}.fit: expected {{phase: figure id}} with phases from {sorted(FITTED)}")
    figures = {f.id: f for f in case.figures}
    out = {}
    for phase, fid in fit.items():
        if phase not in FITTED:
            raise SpecError(
                f"{where}.fit: phase {phase!r} cannot be fitted; expected one of {sorted(FITTED)}"
            )
        fig = figures.get(fid)
        if fig is None or fig.published is None:
            raise SpecError(f"{where}.fit.{phase}: {fid!r} is not a figure of this case with `published`")
        if not fig.calibrated:
            raise SpecError(
                f"{where}.fit.{phase}: figure {fid!r} is a fit target: give it `calibrated:` "
                "(which input is fitted to it), so its row is not shown as a prediction"
            )
        out[phase] = float(fig.published)
    if "logprob_s" in out and "compute_s" not in out:
        raise SpecError(f"{where}.fit: logprob_s needs compute_s (a pass is a third of the fitted update)")
    return out


def fit_sync(
    overrides: list[str], published: dict[str, float], skip: int, step_input: str = FITTED["step_s"]
) -> SyncFit:
    """Fit FITTED's inputs for the phases in `published` on the emulated synchronous setup; the
    step is fitted by `step_input` (weight_sync_fixed_s, or decode_bw_eff when the row publishes
    no generation time: then generation is what the step does not explain)."""
    if step_input not in STEP_INPUTS or (step_input == FITTED["gen_s"] and "gen_s" in published):
        raise SpecError(
            f"step_by={step_input!r}: expected one of {STEP_INPUTS} (decode_bw_eff only without gen_s)"
        )
    cfg = _compose(overrides)
    em = cfg.emulator
    if "logprob_s" in published and cfg.framework.name in em.logprob_passes_by_framework:
        raise SpecError(
            f"emulator.logprob_passes_by_framework.{cfg.framework.name} overrides the logprob_passes the "
            "fit would set: fit old_log_prob under a framework without one"
        )
    # the update's fixed part: the optimizer step and the offloaded state's host transfer
    offload = costmodel.offload_s(cfg, Resolved.from_config(cfg))
    opt = float(em.optimizer_s) + offload
    if "compute_s" in published and published["compute_s"] <= opt:
        raise NotReproducible(
            f"update time {published['compute_s']} s is not above emulator.optimizer_s = "
            f"{float(em.optimizer_s)} s + the offloaded state's transfer {offload:.3g} s"
        )
    values = {
        k: float(v)
        for k, v in {
            "emulator.trainer_mfu": em.trainer_mfu,
            "emulator.logprob_passes": em.logprob_passes,
            "emulator.decode_bw_eff": em.decode_bw_eff,
            "emulator.weight_sync_fixed_s": em.weight_sync_fixed_s,
        }.items()
        if k in {FITTED[p] for p in published if p != "step_s"} or ("step_s" in published and k == step_input)
    }
    notes: list[str] = []
    for i in range(MAX_ITER):
        cfg = _compose(overrides + [f"{k}={_fmt(v)}" for k, v in values.items()])
        got = phase_means(steps_table(cfg), cfg, skip)
        # the pass count is set from the published figures on the first update, then stays
        if i > 0 and _converged(got, published, values):
            break
        _update(values, got, published, opt, step_input)
    else:
        notes.append(f"the fit did not converge in {MAX_ITER} emulations")
    return SyncFit(values, got, published, _bound_notes(values, got, published) + notes, step_input)


def _bound_notes(values: dict[str, float], got: dict[str, float], published: dict[str, float]) -> list[str]:
    """What the final fit could not reach because an input sits at its bound."""
    notes = []
    if values.get(FITTED["gen_s"]) == 1.0 and got["gen_s"] > published.get("gen_s", 0.0):
        notes.append("generation is slower than the full-bandwidth roofline: decode_bw_eff held at 1")
    if values.get(FITTED["step_s"]) == 0.0 and got["step_s"] > published.get("step_s", math.inf):
        notes.append("the step is shorter than its emulated phases: weight_sync_fixed_s held at 0")
    return notes


def _converged(got: dict[str, float], published: dict[str, float], values: dict[str, float]) -> bool:
    """Every continuous phase within TOLERANCE (log-probs are whole passes: not a criterion). A
    phase whose input sits at its bound (no fixed sync left, decode at the full roofline) and is
    still too slow cannot come closer: it is left as it is (the fit's notes say so)."""
    at_bound = {
        "step_s": values.get(FITTED["step_s"]) == 0.0 or values.get(FITTED["gen_s"]) == 1.0,
        "gen_s": values.get(FITTED["gen_s"]) == 1.0,
    }
    return all(
        abs(got[p] / v - 1) <= TOLERANCE or (at_bound.get(p, False) and got[p] > v)
        for p, v in published.items()
        if p != "logprob_s"
    )


def _update(
    values: dict[str, float],
    got: dict[str, float],
    published: dict[str, float],
    opt: float,
    step_input: str,
) -> None:
    """One fitting step on every input whose phase is off (see the module docstring)."""
    if "compute_s" in published:
        values["emulator.trainer_mfu"] *= (got["compute_s"] - opt) / (published["compute_s"] - opt)
    if "logprob_s" in published:
        one_pass = (published["compute_s"] - opt) / 3.0  # at the fitted rate
        values["emulator.logprob_passes"] = float(max(int(round(published["logprob_s"] / one_pass)), 0))
    target = published.get("gen_s")
    if "step_s" in published and step_input == FITTED["gen_s"]:  # generation is the rest of the step
        target = published["step_s"] - (got["step_s"] - got["gen_s"])
        if target <= 0:
            raise NotReproducible(f"the step ({published['step_s']} s) leaves no time for generation")
    if target is not None and got["gen_s"] > 0:
        eff = values["emulator.decode_bw_eff"] * got["gen_s"] / target
        values["emulator.decode_bw_eff"] = min(eff, 1.0)
    if "step_s" in published and step_input == FITTED["step_s"]:
        fixed = values["emulator.weight_sync_fixed_s"] + published["step_s"] - got["step_s"]
        values["emulator.weight_sync_fixed_s"] = max(fixed, 0.0)


# ---- the rows ----------------------------------------------------------------------------------


def _row_means(overrides: list[str], ctx: Context, skip: int) -> tuple[dict[str, float], Path]:
    """Phase means of one emulated row, written as a run directory under ctx.work_dir/phases (so
    the number traces back to its trace/steps.parquet); once per session."""
    key = ("phases-row", tuple(overrides), skip)
    if key not in ctx.cache:
        run = import_dep("bench.emulator.run", "the emulator")
        cfg = _compose(overrides)
        digest = hashlib.sha1("\0".join(overrides).encode()).hexdigest()[:10]
        run_dir = ctx.work_dir / "phases" / f"{cfg.experiment.name}-{digest}"
        if run_dir.exists():  # a previous session's: emulations are deterministic, redo it
            shutil.rmtree(run_dir)
        paths = run.emulate(cfg, run_dir)
        steps = pd.read_parquet(Path(paths.steps))
        if "step_s" not in steps:
            steps["step_s"] = steps.t_end_s - steps.t_start_s
        ctx.cache[key] = (phase_means(steps, cfg, skip), run_dir)
    return ctx.cache[key]


def _spec(case: Case, fig: Figure) -> tuple[dict[str, Any], list[str], str, int, str]:
    """(calibrate_on, row overrides, phase, skip, where) of a figure, checked."""
    where = f"{case.path}: figure {fig.id!r}: compute"
    c = fig.compute
    cal = c.get("calibrate_on")
    if not isinstance(cal, dict) or not isinstance(cal.get("overrides"), list):
        raise SpecError(
            f"{where}: key 'calibrate_on' must be {{overrides: [...], fit: {{phase: figure id}}}}"
        )
    row = c.get("overrides", [])
    if not isinstance(row, list):
        raise SpecError(f"{where}: key 'overrides' must be a list of Hydra overrides (the row's setup)")
    phase = c.get("phase")
    if phase not in PHASES:
        raise SpecError(f"{where}: phase={phase!r}; expected one of {PHASES}")
    skip = c.get("skip", 1)
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise SpecError(f"{where}: key 'skip' is {skip!r}; expected a whole number of steps")
    return cal, [str(o) for o in row], phase, skip, where


def sync_fit(case: Case, fig: Figure, ctx: Context) -> SyncFit:
    """The fit of the figure's synchronous row (once per session)."""
    cal, _, _, _, where = _spec(case, fig)
    published = _published_phases(case, cal.get("fit"), f"{where}.calibrate_on")
    skip = cal.get("skip", 1)  # the synchronous row's own window, whatever the figure's row skips
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise SpecError(f"{where}.calibrate_on: key 'skip' is {skip!r}; expected a whole number of steps")
    key = ("phases-fit", tuple(cal["overrides"]), tuple(sorted(published.items())), skip, cal.get("step_by"))
    step_by = str(cal.get("step_by", FITTED["step_s"]))
    if step_by not in STEP_INPUTS:
        raise SpecError(f"{where}.calibrate_on: step_by={step_by!r}; expected one of {STEP_INPUTS}")
    if key not in ctx.cache:
        ctx.cache[key] = fit_sync([str(o) for o in cal["overrides"]], published, skip, step_by)
    return ctx.cache[key]


def row_overrides(case: Case, fig: Figure, fit: SyncFit) -> list[str]:
    """The overrides a figure's row is emulated with: the synchronous setup, the fitted inputs (all
    of them for the synchronous row itself, CARRIED for another row), then the row's own."""
    cal, row, _, _, _ = _spec(case, fig)
    return [*map(str, cal["overrides"]), *fit.overrides(None if not row else CARRIED), *row]


def configs(case: Case, fig: Figure) -> list[Any]:
    """The composed config a figure's row runs on before any fitted value (for key checks)."""
    cal, row, _, _, _ = _spec(case, fig)
    return [_compose([*map(str, cal["overrides"]), *row])]


def compute(case: Case, fig: Figure, ctx: Context) -> Outcome:
    """The figure's phase of its emulated row: derived for the synchronous row's own figures that
    were not fitted, a prediction for every other row (the table sets calibrated from the YAML)."""
    cal, row, phase, skip, _ = _spec(case, fig)
    fit = sync_fit(case, fig, ctx)
    overrides = row_overrides(case, fig, fit)
    means, run_dir = _row_means(overrides, ctx, skip)
    own, targets = not row, set((cal.get("fit") or {}).values())
    carried = fit.overrides(None if own else CARRIED)
    used = f"emulated {phase} (mean of steps {skip + 1}-): {run_dir.name}; " + " ".join(carried)
    derived = ""
    if own and fig.id not in targets:
        derived = f"the synchronous row's own figure, from the inputs fitted on it: {fit.describe()}"
    checks = [f"sync fit: {n}" for n in fit.notes]
    if not own:
        checks.append(f"calibrated on the synchronous row: {fit.describe()}")
    return Outcome(means[phase], used=used, checks=checks, derived_from=derived)
