"""`bench predict RUN_DIR framework=F [key=value ...] --out DIR`: emulate a measured run's workload,
hardware and GPU split under framework F's policy, with RUN_DIR's calibration.

The run's configuration comes from its manifest (`config` / `inferred`, written by `bench ingest`);
key=value gives what the logs lack (e.g. `hardware=h100_sxm`) or changes it (a what-if: another GPU
split). The calibration is `calibration=FILE` when given, else fitted now on RUN_DIR by `bench
calibrate` (written to DIR/calibration.yaml); a key the user sets wins over a fitted one. DIR is an
emulated run directory (through bench.emulator.run.emulate) whose manifest records
`predicted_from`: the run, its framework, the calibration, and the figures below. `framework=` the
run's own framework is a replay: its error against the run itself is the model's floor.
`held_out=RUN` takes F's profile without the values it fitted on RUN (as the profile's `fitted_on`
names it; they keep their documented defaults): a prediction of RUN from another framework's run
whose target costs were not fitted on RUN itself.

A prediction holds the run's trainer + generator GPUs unless a what-if gives others (held_splits):
where F cannot run them as the run did (prime-rl cannot colocate), each split of them F accepts is
emulated and listed best first (`predicted_from.splits`), or the prediction is refused naming why.
`predicted_from.gpus` (every GPU emulated) x the emulated wall time is its `gpu_hours`.

Figures (steady = every step after the first, which holds start-up the emulator does not model):
  trajectories_per_s    trained samples of steps 2..N / (end of step N - end of step 1)  (1/s)
  steady_step_s         mean trainer step time  (s)
  trainer_wait_share    mean of wait_s / step_s  (fraction)
  gen_s_per_step        mean generation time attributed to a step  (s)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd

from bench import run_setup
from bench.cli import counted
from bench.errors import UsageError
from bench.model.calibration import calibrate, to_yaml
from bench.model.inputs import chosen_inputs, prediction_inputs
from bench.plan_splits import (
    SPLIT_KEYS,
    disaggregated,
    held_gpus,
    no_split_why,
    placement_problem,
    splits_text,
    valid_splits,
)

# What a prediction needs beyond what calibration needs: the batch the trainer consumes.
NEEDS = {
    **run_setup.NEEDS,
    "workload.group_size": "workload.group_size=N",
    "workload.prompts_per_step": "workload.prompts_per_step=N",
    "workload.max_prompt_len": "workload.max_prompt_len=N",
}
FIGURES = ("trajectories_per_s", "steady_step_s", "trainer_wait_share", "gen_s_per_step")


def teacher_need(manifest: dict) -> dict[str, str]:
    """{"experiment.teachers": how to give it} for an on-policy-distillation run whose manifest has
    no teacher config (its logs do not name the teacher's conf/model entry), the logged placement,
    GPUs and engine size filled in; {} otherwise. Emulating opd without a teacher is refused by
    bench.validate, so the run's own teacher is asked for here, once, naming what is known."""
    inferred = manifest.get("inferred") or {}
    if (inferred.get("algorithm") or {}).get("value") != "opd":
        return {}
    if ((manifest.get("config") or {}).get("experiment") or {}).get("teachers"):
        return {}
    t = inferred.get("teacher") or {}
    parts = ["model:<conf/model name>"] + [
        f"{k}:{(t.get(k) or {}).get('value')}"
        for k in ("placement", "gpus", "tp")
        if (t.get(k) or {}).get("value") is not None
    ]
    why = (t.get("model") or {}).get("reason") or "the teacher's model is not in the logs"
    return {"experiment.teachers": f"experiment.teachers=[{{{','.join(parts)}}}] ({why})"}


def figures(steps: pd.DataFrame) -> dict[str, float | None]:
    """The compared figures of one trace (units in the module docstring); None where a column is
    not logged."""
    steady = steps.sort_values("step").iloc[1:]

    def have(*cols: str) -> bool:
        return all(c in steady and steady[c].notna().all() for c in cols) and len(steady) > 0

    out: dict[str, float | None] = dict.fromkeys(FIGURES)
    if have("samples", "t_end_s"):
        span = float(steady.t_end_s.iloc[-1] - steps.sort_values("step").t_end_s.iloc[0])
        out["trajectories_per_s"] = float(steady.samples.sum()) / span if span > 0 else None
    if have("step_s"):
        out["steady_step_s"] = float(steady.step_s.mean())
    if have("wait_s", "step_s"):
        out["trainer_wait_share"] = float((steady.wait_s / steady.step_s).mean())
    if have("gen_s"):
        out["gen_s_per_step"] = float(steady.gen_s.mean())
    return out


def errors(predicted: dict[str, Any], measured: dict[str, Any]) -> dict[str, float | None]:
    """Signed relative error of each predicted figure against the measured one (fraction)."""
    return {
        k: (predicted[k] - measured[k]) / abs(measured[k])
        if predicted.get(k) is not None and measured.get(k) not in (None, 0)
        else None
        for k in FIGURES
    }


def _split(given: list[str]) -> tuple[str, list[str]]:
    """(framework F, the other key=value) of the command line; UsageError on anything else."""
    from bench.config import group_options

    bad = [g for g in given if "=" not in g]
    if bad:
        raise UsageError(f"unexpected argument {bad[0]!r}; expected framework=F and key=value")
    fw = [g.split("=", 1)[1] for g in given if g.startswith("framework=")]
    if len(fw) != 1:
        raise UsageError(f"framework=F: give exactly one (one of {', '.join(group_options('framework'))})")
    if fw[0] not in group_options("framework"):
        raise UsageError(
            f"framework {fw[0]!r} not found; choose one of {', '.join(group_options('framework'))}"
        )
    return fw[0], [g for g in given if not g.startswith("framework=")]


def plan(run_dir: Path, given: list[str], out: Path) -> tuple[Any, dict[str, Any], str | None]:
    """Check everything before anything is written: (prediction config, predicted_from, calibration
    YAML text to write into `out` or None when calibration=FILE was given)."""
    from bench.validate import validate_workload

    framework, rest = _split(given)
    from bench.outdir import check_out

    check_out(out, "predict")
    manifest, steps, _ = run_setup.read_run(run_dir)
    run_fw = str(manifest.get("framework"))
    cal_file = next((g.split("=", 1)[1] for g in rest if g.startswith("calibration=")), None)
    # held_out=RUN: the target framework's profile without what it fitted on RUN (as its fitted_on
    # names it): a held-out check of the profile, e.g. predicting the very run it was fitted on
    held_out = next((g.split("=", 1)[1] for g in rest if g.startswith("held_out=")), "")
    rest = [g for g in rest if not g.startswith(("calibration=", "held_out="))]
    if held_out and framework == run_fw:
        raise UsageError(
            f"held_out={held_out}: a replay takes its framework's costs from the run itself, not a profile"
        )
    _, known = run_setup.compose_setup(manifest, rest)
    lacking = run_setup.missing(known, {**NEEDS, **teacher_need(manifest)})
    if lacking:
        raise UsageError(
            f"{run_dir}: the run's configuration does not say "
            f"{', '.join(k.split('=')[0] for k in lacking)} (manifest inferred/config); pass {' '.join(lacking)}"
        )
    text = None
    # the run as it ran: only keys its manifest lacks are setup (they describe it), the rest what-ifs
    run_known = run_setup.known_setup(manifest)
    setup = [g for g in rest if g.split("=", 1)[0] not in run_known]
    if cal_file is None:
        fits, falls, header = calibrate(run_dir, setup)
        if not fits:  # a prediction on defaults alone would look fitted: refused, naming why
            raise UsageError(
                f"{run_dir}: no input of the prediction could be fitted on the run ("
                + "; ".join(f"{f.key}: {f.reason}" for f in falls)
                + "); pass calibration=FILE (`bench calibrate` of a run that logs them)"
            )
        text = to_yaml(fits, falls, header)
        cal_file = str(out / "calibration.yaml")
    replay = framework == run_fw
    extra = [f"emulator.steps={len(steps)}", "experiment.name=predicted"]
    mode = ((manifest.get("inferred") or {}).get("mode") or {}).get("value")
    if replay and mode:  # the run's own mode (verl sync, slime colocate_sync, prime-rl async)
        extra.append(f"framework.mode={mode}")
    # the run's workload shape; the framework's costs from the target's profile (the run's own on a replay)
    cfg, inputs_from = prediction_inputs(manifest, framework, rest, extra, text, cal_file, held_out)
    # framework-neutral checks: a runner's native-launch rules (prime-rl's whole-node multi-node
    # layout) bind a launch, not an emulation; the opd-benchmark ran prime-rl on 1 + 1 GPUs
    problems = validate_workload(cfg)
    if problems:
        raise UsageError("\n".join(problems))
    predicted_from = {
        "run": str(Path(run_dir).resolve()),
        "run_framework": run_fw,
        "framework": framework,
        "replay": replay,
        "calibration": str(Path(cal_file).resolve()),
        "given": rest,
        "inputs_from": inputs_from,
        "chosen": chosen_inputs(cfg, inputs_from),
        "measured": figures(steps),
        # the GPUs the run held (trainer and generator), and whether a what-if changes them
        "run_gpus": held_gpus(run_setup.compose_setup(manifest, setup)[0]),
        "gpus_given": any(
            g.split("=", 1)[0].lstrip("+") in SPLIT_KEYS[:2] and g.split("=", 1)[0] in run_known for g in rest
        ),
    }
    return cfg, predicted_from, text


def held_splits(cfg: Any, predicted_from: dict[str, Any]) -> list[tuple[int, int]] | None:
    """The GPUs a prediction holds: None to predict cfg as composed (it holds the run's GPUs, or a
    what-if gave other trainer/generator GPUs), else the (trainer, generator) splits of the run's
    GPUs that bench validate accepts for the target framework, generator ascending: cfg's placement
    is one the framework cannot run, or a what-if placement would hold other GPUs than the run's.
    UsageError naming the problem when there is no such split, or when a what-if asks for a
    placement the framework cannot run (never trainer and generator overlapping on one device)."""
    n, fw = int(predicted_from["run_gpus"]), predicted_from["framework"]
    problem = placement_problem(cfg)
    if predicted_from["gpus_given"]:
        if problem:
            raise UsageError(f"{problem} (framework={fw}); pass experiment.placement=disaggregated")
        return None
    if problem is None and held_gpus(cfg) == n:
        return None
    splits = valid_splits(disaggregated(cfg), n)
    if not splits:
        why = problem or f"experiment.placement=disaggregated holds {held_gpus(cfg)} GPUs, the run {n}"
        split_why, fix = no_split_why(disaggregated(cfg), n)
        raise UsageError(
            f"framework={fw} on the run's {counted(n, 'GPU')}: {why}; no trainer:generator split of them passes "
            f"bench validate ({split_why}); "
            + (fix or "pass experiment.trainer_gpus=T experiment.generator_gpus=G to predict on other GPUs")
        )
    return splits


def split_figures(cfg: Any, splits: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Each split of cfg emulated (in memory): its figures, best first (most trajectories/s; a split
    whose rate is unknown last)."""
    from bench.emulator.run import build
    from bench.emulator.trace_out import step_rows
    from bench.plan_splits import set_point

    out = []
    for t, g in splits:
        loop, _, _ = build(set_point(disaggregated(cfg), t, g))
        out.append({"trainer_gpus": t, "generator_gpus": g, **figures(pd.DataFrame(step_rows(loop.run())))})
    return sorted(out, key=lambda d: -(d["trajectories_per_s"] or -1.0))


def predict(run_dir: Path, given: list[str], out: Path) -> dict[str, Any]:
    """Emulate the prediction into `out`; returns predicted_from with the predicted figures (and,
    for a replay, each figure's error against the run). A prediction holds the run's GPUs
    (held_splits): where the target framework cannot run them as the run did, each split of them it
    can run is emulated, listed best first under `splits`, and the best is the run directory."""
    import json

    from bench.emulator.run import emulate
    from bench.plan_splits import set_point
    from bench.resolve import Resolved
    from bench.trace import RunPaths, atomic_path, read_manifest, write_manifest

    cfg, predicted_from, text = plan(run_dir, given, out)
    splits = held_splits(cfg, predicted_from)
    if splits is not None:
        ranked, why = split_figures(cfg, splits), placement_problem(cfg)
        best = ranked[0]
        # the best split again, into the run directory (the ranking ran in memory, writing nothing)
        cfg = set_point(disaggregated(cfg), best["trainer_gpus"], best["generator_gpus"])
        predicted_from["chosen"] = chosen_inputs(cfg, predicted_from["inputs_from"])  # of the split
        predicted_from["splits"] = ranked
        predicted_from["held"] = (
            f"{predicted_from['framework']} on the run's {counted(predicted_from['run_gpus'], 'GPU')}"
            f"{': ' + why if why else ''}; predicted on the trainer:generator splits of them it can run, "
            f"best first: {splits_text([(d['trainer_gpus'], d['generator_gpus']) for d in ranked])}"
        )
    paths = emulate(cfg, out)
    if text is not None:
        with atomic_path(paths.root / "calibration.yaml") as tmp:
            tmp.write_text(text)
    predicted = figures(pd.read_parquet(paths.steps))
    predicted_from["predicted"] = predicted
    # what the prediction bills: the GPUs emulated x the time emulated (metrics.json gpu_hours)
    predicted_from["gpus"] = Resolved.from_config(cfg).total_gpus
    predicted_from["gpu_hours"] = json.loads(paths.metrics.read_text()).get("gpu_hours")
    if predicted_from["replay"]:  # the model's floor: the run predicted from its own calibration
        predicted_from["replay_error"] = errors(predicted, predicted_from["measured"])
    manifest = read_manifest(RunPaths(paths.root))
    write_manifest(RunPaths(paths.root), {**manifest, "predicted_from": predicted_from})
    return predicted_from


def main(argv: list[str]) -> int:
    """`python -m bench predict RUN_DIR framework=F [key=value ...] --out DIR`."""
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "predict",
        "Emulate a measured run's workload, hardware and GPU split under framework F's policy, with the "
        "run's calibration; framework= the run's own framework is a replay, whose error is the model's floor.",
        "RUN_DIR (manifest.json config and inferred blocks, trace/), calibration=FILE when given (else "
        "it is fitted now, as bench calibrate does), conf/ and the overrides.",
        "the emulated run directory --out (new) with predicted_from in its manifest.json, and "
        "--out/calibration.yaml when the calibration was fitted now; the predicted figures go to stdout "
        "(--json: predicted_from).",
        [
            "python -m bench predict results/opd/verl framework=prime_rl hardware=h100_sxm --out /tmp/verl-as-prime"
        ],
    )
    ap.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a measured run directory (bench ingest)")
    ap.add_argument("--out", type=Path, required=True, help="emulated run directory to write (new)")
    ap.add_argument("--json", action="store_true", help="print predicted_from (the manifest's) as JSON")
    add_overrides(
        ap,
        "framework=F (required), held_out=RUN (F's profile without what it fitted on RUN) and what-ifs "
        "such as another GPU split",
    )
    args = ap.parse_intermixed_args(argv)
    given = args.overrides
    p = predict(args.run_dir, given, args.out)
    if args.json:
        import json

        print(json.dumps(p, indent=1))
        return 0
    kind = "replay" if p["replay"] else f"{p['run_framework']} -> {p['framework']}"
    print(f"[emulated] prediction ({kind}) on {p['gpus']} GPUs -> {args.out}")
    if "held" in p:
        print(f"  {p['held']}")
        for d in p["splits"]:
            print(
                f"    {d['trainer_gpus']}:{d['generator_gpus']}: trajectories_per_s {_fmt(d['trajectories_per_s'])}"
            )
    for k in FIGURES:
        pred, meas = p["predicted"][k], p["measured"][k]
        line = f"  {k}: predicted {_fmt(pred)}"
        if p["replay"]:
            err = p["replay_error"][k]
            line += f", measured {_fmt(meas)}" + (f", replay error {err:+.1%}" if err is not None else "")
        print(line)
    for c in p["chosen"]:
        print(f"  chosen, not fitted or logged: {c}", file=sys.stderr)
    if p["replay"]:
        print("  (a replay: its error is the model's floor on this run)", file=sys.stderr)
    return 0


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"
