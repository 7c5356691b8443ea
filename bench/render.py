"""`python -m bench render <hydra overrides> framework=X --out DIR`: write a framework's native launch.

Composes conf/ with the overrides, asks the framework's runner (cfg.framework._target_) for its
Launch and writes DIR/launch/: command.json, job.sbatch and the native files (overrides.txt, ...).
Framework-neutral: nothing here knows a framework. `--native` also checks the rendered launch
against the framework installed on this machine (the runner's `validate_native`).
`--frameworks-doc` prints docs/frameworks.md instead: every framework's render of the smoke
experiment with one key changed at a time (runners/docs.py lays the page out).
"""

from __future__ import annotations

import copy
import importlib
import sys
from pathlib import Path

from omegaconf import OmegaConf

from bench.config import CONF_DIR, compose
from runners.base import NOT_INSTALLED, load_runner
from runners.docs import OPD_BASE, OPD_ROWS, PERTURBATIONS, FrameworkDoc, changes, opd_key, page, with_notes
from runners.shell import script_value_problems


def frameworks_doc(conf_dir: Path = CONF_DIR) -> str:
    """docs/frameworks.md for every conf/framework/*.yaml (see runners/docs.py)."""
    docs = []
    for path in sorted((conf_dir / "framework").glob("*.yaml")):
        cfg = compose(["experiment=smoke", f"framework={path.stem}"])
        runner = load_runner(cfg.framework)
        base = runner.render_launch(cfg)
        before = runner.native_settings(base)
        module = importlib.import_module(str(cfg.framework._target_).rsplit(".", 1)[0])
        doc = FrameworkDoc(
            str(cfg.framework.name),
            str(cfg.framework.version),
            base.notes,
            parser_formats=module.PARSER_FORMATS,
        )
        for override in (o for o, _ in PERTURBATIONS):
            key, value = override.split("=", 1)
            changed = copy.deepcopy(cfg)
            OmegaConf.update(changed, key, _typed(value))
            try:
                doc.changes[override] = changes(before, runner.native_settings(runner.render_launch(changed)))
            except ValueError as e:
                doc.changes[override] = str(e).split(": ", 1)[-1]
        for row in (r for r, _ in OPD_ROWS):  # two keys at once: composed as a user would type them
            try:
                launch = runner.render_launch(
                    compose(["experiment=smoke", f"framework={path.stem}", *OPD_BASE, *row])
                )
                doc.opd[opd_key(row)] = with_notes(
                    changes(before, runner.native_settings(launch)), base, launch
                )
            except ValueError as e:
                doc.opd[opd_key(row)] = str(e).split(": ", 1)[-1]
        docs.append(doc)
    return page(docs)


def _typed(text: str) -> object:
    """An override value as Hydra would read it (int, float, bool or string)."""
    return OmegaConf.create(f"v: {text}").v


def main(argv: list[str]) -> int:
    """Render; returns 0, or 2 with the problems on stderr when the runner rejects the config."""
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "render",
        "Write one framework's native launch for an experiment, without running it: the framework's "
        "argv per role, its native config files and the Slurm batch script.",
        "conf/ and the overrides (framework= picks the framework).",
        "OUT/launch/ (command.json, job.sbatch and the native files such as overrides.txt); never into "
        "an existing run directory or over files render did not write.",
        [
            "python -m bench render experiment=smoke framework=verl --out /tmp/verl-smoke",
            "python -m bench render --frameworks-doc > docs/frameworks.md",
        ],
    )
    ap.add_argument("--out", type=Path, help="run directory; the launch goes to OUT/launch/")
    ap.add_argument("--native", action="store_true", help="also validate against the installed framework")
    ap.add_argument("--frameworks-doc", action="store_true", help="print docs/frameworks.md and exit")
    add_overrides(ap)
    args = ap.parse_intermixed_args(argv)
    overrides = args.overrides
    if args.frameworks_doc:
        sys.stdout.write(frameworks_doc())
        return 0
    if args.out is None:
        print("render: --out DIR is required (the launch goes to DIR/launch/)", file=sys.stderr)
        return 2
    from bench.outdir import check_out, staged

    check_out(args.out, "render", replace_own=True)  # never into a run dir or over others' files
    cfg = compose(overrides)
    runner = load_runner(cfg.framework)
    problems = runner.validate(cfg) + script_value_problems(cfg)  # a #SBATCH value with a line break
    if problems:
        for p in problems:
            print(f"{cfg.framework.name}: {p}", file=sys.stderr)
        return 2
    launch = runner.render_launch(cfg)
    with staged(args.out, "render") as tmp:  # whole or not at all (a full disk leaves OUT as it was)
        written = launch.write(tmp / "launch")
    for path in written:
        print(args.out / path.relative_to(tmp))
    for note in launch.notes:
        print(f"note: {note}")
    if args.native:
        native_problems = runner.validate_native(cfg, launch)
        for p in native_problems:
            print(f"{cfg.framework.name} (native): {p}", file=sys.stderr)
        return 2 if any(not p.endswith(NOT_INSTALLED) for p in native_problems) else 0
    return 0
