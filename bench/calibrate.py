"""`bench calibrate RUN_DIR [--out FILE] [key=value ...]`: fit the emulator's inputs to one measured run.

Reads RUN_DIR's trace (trace/steps.parquet, trace/rollouts.parquet when present) and the run's
configuration (manifest `config` / `inferred`, written by `bench ingest`; key=value fills what the
logs lack, e.g. `hardware=h100_sxm`). Writes a calibration YAML (default RUN_DIR.calibration.yaml,
beside the run: a run directory is written only by its run) that `calibration=FILE` applies to any emulate / run / predict command (bench.config.compose).
Every fitted value carries `fitted_on` (which columns of which run) and its residual; a value the
run cannot support falls back to its documented default (docs/emulator.md), listed under
`defaults:` with the reason.

The fits are bench.model.calibration's (the inverse of the cost model on one run; steady steps =
every step after the first, which holds start-up and compilation):
  workload.response_len_mean_frac, response_len_drift, response_len_sigma, prompt_len_mean
      per-step mean response length (response_tokens / samples, or rollouts.parquet) against the
      emulator's capped lognormal whose mean drifts linearly over the steps
  emulator.trainer_mfu, optimizer_s
      compute_s - offload_s = FLOPs(step tokens) / (peak x trainer GPUs x mfu) + optimizer_s (least
      squares; offload_s, the offloaded trainer state over the host link, is the cost model's own)
  emulator.logprob_passes
      logprob_s / one forward pass (FLOPs / 3 at the fitted rate), rounded: the emulator counts passes
  emulator.decode_bw_eff
      gen_s against the decode roofline (bench/model/costmodel.py EngineModel at full bandwidth)
      summed over the step's decode positions, the batch shrinking as sequences finish
  emulator.weight_sync_fixed_s
      sync_s minus the shard transfer at weight_sync_eff (costmodel.weight_sync_s)
  workload.env_latency_mean_s
      env_s / turns of trained rollouts (rollouts.parquet), where logged
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.errors import UsageError
from bench.model.calibration import calibrate, to_yaml


def main(argv: list[str]) -> int:
    """`python -m bench calibrate RUN_DIR [--out FILE] [key=value ...]`: fit, write the YAML."""
    from bench.cli import add_overrides, command_parser
    from bench.trace import atomic_path

    ap = command_parser(
        "calibrate",
        "Fit the emulator's inputs (response-length shape, trainer MFU, log-prob passes, decode bandwidth, "
        "weight-sync time, environment latency) to a measured run; an input the run cannot support keeps "
        "its documented default, with the reason.",
        "RUN_DIR (manifest.json, trace/, metrics.json: a run from bench ingest, run or emulate), conf/ "
        "and the overrides.",
        "the calibration YAML --out (new; default RUN_DIR.calibration.yaml, beside the run directory, never "
        "inside it), applied with "
        "calibration=FILE on bench emulate, run and predict.",
        ["python -m bench calibrate results/opd/verl hardware=h100_sxm --out /tmp/verl-calibration.yaml"],
    )
    ap.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a measured (or emulated) run directory")
    ap.add_argument("--out", type=Path, help="calibration YAML to write (default RUN_DIR.calibration.yaml)")
    add_overrides(ap, "what the run's manifest lacks, e.g. hardware=h100_sxm")
    args = ap.parse_intermixed_args(argv)
    given = args.overrides
    # a run directory is written only by its run: the default sits beside it
    out = args.out or args.run_dir.parent / f"{args.run_dir.name}.calibration.yaml"
    if args.out is not None:
        from bench.outdir import check_out

        check_out(out, "calibrate", is_file=True)
    elif out.exists():  # the default, beside the run directory
        raise UsageError(
            f"--out {out}: already exists; a calibration is never overwritten, choose a new --out"
        )
    bad = [g for g in given if "=" not in g]
    if bad:
        raise UsageError(f"unexpected argument {bad[0]!r}; expected key=value (e.g. hardware=h100_sxm)")
    fits, falls, header = calibrate(args.run_dir, given)
    if not fits:
        raise UsageError(
            f"{args.run_dir}: no input could be fitted: " + "; ".join(f"{f.key}: {f.reason}" for f in falls)
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp:
            tmp.write_text(to_yaml(fits, falls, header))
    except OSError as e:  # a full or read-only disk: one line naming --out
        from bench.outdir import os_refusal

        raise os_refusal(out, e) from None
    for f in fits:
        print(f"fitted {f.key} = {f.value} (residual {f.residual:.3g} {f.residual_unit})")
    for f in falls:
        print(f"default {f.key} = {f.default}: {f.reason}", file=sys.stderr)
    for k, v in header["unexplained"].items():
        if k != "parts" and abs(v) > 0.05:
            print(f"unexplained {k} = {v} s a step: no emulator input represents it", file=sys.stderr)
    print(f"{out}: {len(fits)} fitted, {len(falls)} default(s)")
    return 0
