"""`bench profile fit RUN_DIR... framework=F [--out FILE]`: framework F's profile pooled over measured
runs of F (bench.model.fwprofile.fit_runs), written as the `profile:` block of conf/framework/<F>.yaml.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from bench.errors import UsageError
from bench.model.fwprofile import fit_runs


def to_yaml(profile: dict[str, Any]) -> str:
    head = (
        f"# Framework profile of {profile['framework']} fitted by `bench profile fit` (bench/profile_fit.py):\n"
        "# paste `profile:` into conf/framework/<F>.yaml. Each value: median over the runs it was fitted on,\n"
        "# residual the spread between them (or the one run's fit residual); not_fitted: why no run supports it.\n"
    )
    body = {k: v for k, v in profile.items() if k != "framework"}
    return head + yaml.safe_dump({"profile": body}, sort_keys=False, width=120)


def main(argv: list[str]) -> int:
    """`python -m bench profile fit RUN_DIR... framework=F [--out FILE] [key=value ...]`."""
    from bench.cli import add_overrides, command_parser
    from bench.config import group_options

    ap = command_parser(
        "profile",
        "Fit framework F's profile (trainer efficiency and fixed cost, log-prob passes, decode floor or "
        "bandwidth share, weight-sync fixed cost, colocated hand-off) on measured runs of F: each run "
        "calibrated as bench calibrate does against its own hardware, the values pooled (median, the "
        "spread between runs as residual, the runs named).",
        "each RUN_DIR (manifest.json, trace/: runs from bench ingest, run or emulate), conf/ and the overrides.",
        "the profile YAML to --out (new) or, without --out, to stdout; nothing else.",
        [
            "python -m bench profile fit results/opd/verl framework=verl hardware=h100_sxm --out verl-profile.yaml"
        ],
    )
    ap.add_argument("action", choices=["fit"], help="fit: pool the runs' fits into a profile")
    ap.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="measured runs of framework F")
    ap.add_argument("--out", type=Path, help="profile YAML to write (new); default: stdout")
    add_overrides(ap, "framework=F (required) and what the runs' manifests lack, e.g. hardware=h100_sxm")
    args = ap.parse_intermixed_args(argv)
    # argparse puts every positional in run_dirs; key=value ones are overrides
    given = [str(p) for p in args.run_dirs if "=" in str(p)] + list(args.overrides)
    run_dirs = [p for p in args.run_dirs if "=" not in str(p)]
    fw = [g.split("=", 1)[1] for g in given if g.startswith("framework=")]
    options = group_options("framework")
    if len(fw) != 1 or fw[0] not in options:
        raise UsageError(f"framework=F: give exactly one of {', '.join(options)} (the runs' framework)")
    if not run_dirs:
        raise UsageError("no RUN_DIR: give the measured runs of the framework to fit")
    if args.out is not None:
        from bench.outdir import check_out

        check_out(args.out, "profile", is_file=True)
    profile = fit_runs(run_dirs, fw[0], [g for g in given if not g.startswith("framework=")])
    if not profile["values"]:
        raise UsageError(
            f"no framework input could be fitted on {len(run_dirs)} run(s): "
            + "; ".join(
                f"{k} ({'; '.join(sorted(set(v.values())))})" for k, v in profile["not_fitted"].items()
            )
        )
    text = to_yaml(profile)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    from bench.trace import atomic_path

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out) as tmp:
        tmp.write_text(text)
    for k, v in profile["values"].items():
        print(f"fitted {k} = {v['value']} on {len(v['fitted_on'])} run(s) (residual {v['residual']:.3g})")
    print(f"{args.out}: {len(profile['values'])} fitted, {len(profile['not_fitted'])} not fitted")
    return 0
