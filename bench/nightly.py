"""`python -m bench nightly cluster=<site> [experiment=X] [--period 1d] [--submit] [--out DIR]`: a
schedule that runs an experiment on every framework, compares each new run with its framework's
last good run, writes a page and fails when a run failed or regressed (docs/nightly.md).

It renders into a new directory `--out` (default nightly/<experiment>-<cluster>):

- `nightly.sh`, one night: (1) `python -m bench run <overrides> --wait`; (2) `python -m bench
  nightly gate`, which compares each new run with its framework's last good run, as
  `bench compare --baseline` does, and updates `good.json`; (3) `python -m bench report` of the
  experiment's results. The page of the night is `pages/<UTC time>/` (`latest` points at it);
  the script exits 1 when a run did not complete, regressed or could not be compared, else 0.
- On a Slurm cluster, the schedule, both ways: `nightly.scrontab` (a scrontab entry) and
  `nightly.sbatch` (a job that first resubmits itself with
  `--begin=now+<period>` and `--dependency=singleton`, so one failing night does not end the
  series and two nights never overlap). `--submit` installs the scrontab entry when `scrontab`
  exists and slurm.conf has `ScronParameters=enable`, else submits nightly.sbatch to run now, and
  prints how to remove it.

"Last good" run of a framework: the newest completed run of the series that did not regress
(good.json). A regressed run never becomes the baseline, so a regression stays red every night
until it is fixed (or its entry is deleted from good.json). A framework with no entry is compared
with the newest completed run of the same framework and model under the results folder (compare's
`baseline_for`); with none there, the night's run starts the series.

Every value written into the scripts is quoted: `literal` (shlex.quote) in commands, runners/shell.py's
header_value in #SBATCH and #SCRON lines, runners/shell.py's comment in comments.
"""

from __future__ import annotations

import getpass
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import UsageError

# `--period`: a count and a unit (minutes, hours, days, weeks); minutes per unit
PERIOD = re.compile(r"([1-9][0-9]*)([mhdw])")
UNIT_MINUTES = {"m": 1, "h": 60, "d": 24 * 60, "w": 7 * 24 * 60}
STATE = "good.json"


def period_minutes(text: str) -> tuple[int, str]:
    """`--period` as (minutes, the cron schedule that repeats it). Only periods cron repeats evenly
    are accepted (Nm with N dividing 60, Nh with N dividing 24, 1d, 1w), so the scrontab entry and
    the self-resubmitting job keep the same rhythm; UsageError otherwise."""
    m = PERIOD.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"--period {text}: expected a count and a unit m, h, d or w (30m, 6h, 1d, 1w)")
    minutes = int(m.group(1)) * UNIT_MINUTES[m.group(2)]
    hours = minutes // 60
    if minutes < 60 and 60 % minutes == 0:
        return minutes, f"*/{minutes} * * * *"
    if minutes % 60 == 0 and hours < 24 and 24 % hours == 0:
        return minutes, f"0 */{hours} * * *"
    if minutes == UNIT_MINUTES["d"]:
        return minutes, "0 0 * * *"
    if minutes == UNIT_MINUTES["w"]:
        return minutes, "0 0 * * 0"
    raise UsageError(
        f"--period {text}: cron cannot repeat it evenly; use Nm with N dividing 60, Nh with N dividing 24, "
        "1d or 1w"
    )


@dataclass(frozen=True)
class Schedule:
    """What the scripts are rendered from; every path absolute."""

    overrides: list[str]
    experiment: str
    cluster: Any  # the composed ClusterConf
    results: Path  # results_dir/<experiment>: where bench run puts the nights' runs
    out: Path
    workdir: Path  # the directory the command was run in: relative overrides mean the same there
    python: str
    period: str
    minutes: int
    cron: str

    @property
    def job_name(self) -> str:
        return f"bench-nightly-{self.experiment}-{self.cluster.name}"

    @property
    def slurm(self) -> bool:
        return self.cluster.executor == "slurm"

    def env_lines(self) -> list[str]:
        """The testbed's own slurm.conf (cluster.slurm_conf), for bench and sbatch inside the scripts."""
        from bench.rundir import REPO

        conf = self.cluster.get("slurm_conf")
        return [f"export SLURM_CONF={literal(REPO / conf)}"] if conf else []


def literal(value: Any) -> str:
    """One bash word holding `value` byte for byte. Not runners.shell.shell_word: these scripts set
    none of the suite's variables, and an override such as `...=${RUN_DIR}/ckpt` must reach
    `bench run` unexpanded (bench run renders it into job.sbatch, where RUN_DIR is set)."""
    return shlex.quote(str(value))


def render_night(s: Schedule) -> str:
    """nightly.sh: one night (see the module docstring)."""
    from runners.shell import comment

    py, results = literal(s.python), literal(s.results)
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            "# shellcheck disable=SC2016  # every value is quoted literally on purpose: a $ in it is text",
            comment(
                f"One night of the {s.experiment} series on {s.cluster.name}, rendered by `python -m bench nightly`"
            ),
            "# (docs/nightly.md): run every framework, compare each new run with its framework's last good",
            "# run (good.json), write the page pages/<UTC time>/. Exit 1 when a run did not complete,",
            "# regressed or could not be compared; 0 otherwise.",
            "set -uo pipefail  # not -e: each step runs whatever the one before it found, the page says all",
            f"cd {literal(s.workdir)} || exit 1",
            *s.env_lines(),
            f"nightly={literal(s.out)}",
            'page="$nightly/pages/$(date -u +%Y%m%dT%H%M%SZ)"',
            'mkdir -p "$nightly/pages" && mkdir "$page" || exit 1',
            "# (1) every framework of the experiment, waited for; bench run prints each run directory on its own line",
            f'{shlex.join([s.python, "-m", "bench", "run", *s.overrides, "--wait"])} >"$page/run.txt" 2>&1',
            "ran=$?",
            "runs=()",
            'while IFS= read -r line; do [ -f "$line/manifest.json" ] && runs+=("$line"); done <"$page/run.txt"',
            "# (2) each new run against its framework's last good run (bench compare --baseline); good.json updated",
            f'{py} -m bench nightly gate --state "$nightly/{STATE}" --results {results} --page "$page" '
            '--run-exit "$ran" "${runs[@]}"',
            "gated=$?",
            "# (3) the report of the newest run of each framework, beside the compare pages",
            f'{py} -m bench report {results} --out "$page/report" >"$page/report.txt" 2>&1',
            "reported=$?",
            'ln -sfn "$page" "$nightly/latest"',
            '[ "$ran" -eq 0 ] && [ "$gated" -eq 0 ] && [ "$reported" -eq 0 ]',
            "",
        ]
    )


def _headers(s: Schedule, prefix: str) -> list[str]:
    """The driver job's request: one task on the cluster's partition (it runs `bench run --wait`,
    no GPU), for at most one period, its output beside the scripts."""
    from runners.shell import header_value

    c = s.cluster
    values = [
        ("job-name", "experiment.name", s.job_name),
        ("partition", "cluster.partition", c.get("partition")),
        ("account", "cluster.account", c.get("account")),
        ("qos", "cluster.qos", c.get("qos")),
        ("ntasks", "", 1),
        ("time", "--period", s.minutes),
        ("output", "--out", s.out / "slurm-%j.out"),
    ]
    try:
        return [f"{prefix} --{opt}={header_value(key, v)}" for opt, key, v in values if v not in (None, "")]
    except ValueError as e:
        raise UsageError(str(e)) from None


def render_sbatch(s: Schedule) -> str:
    """nightly.sbatch: the job that resubmits itself first thing, then runs the night."""
    me = literal(s.out / "nightly.sbatch")
    return "\n".join(
        [
            "#!/bin/bash",
            f"# The self-resubmitting schedule of nightly.sh, every {s.period} (python -m bench nightly; docs/nightly.md)",
            *_headers(s, "#SBATCH"),
            f"#SBATCH --begin=now+{s.minutes * 60}",
            "#SBATCH --dependency=singleton",
            *s.env_lines(),
            "# First the next night, so a failing night does not end the series: the header's --begin puts it one",
            "# period from now, and --dependency=singleton holds it until this job has ended (no overlap).",
            f'sbatch {me} || echo "nightly: could not submit the next night; the series ends here" >&2',
            f"exec bash {literal(s.out / 'nightly.sh')}",
            "",
        ]
    )


def scrontab_block(s: Schedule) -> str:
    """The scrontab entry (between markers, so an install replaces only its own entry)."""
    from runners.shell import comment

    return "\n".join(
        [
            comment(f"bench nightly {s.job_name} begin (python -m bench nightly; docs/nightly.md)"),
            *_headers(s, "#SCRON"),
            f"{s.cron} bash {literal(s.out / 'nightly.sh')}",
            comment(f"bench nightly {s.job_name} end"),
            "",
        ]
    )


def render(s: Schedule) -> list[Path]:
    """Write the scripts into s.out (already accepted by check_out); return their paths."""
    texts = {"nightly.sh": render_night(s)}
    if s.slurm:
        texts |= {"nightly.sbatch": render_sbatch(s), "nightly.scrontab": scrontab_block(s)}
    s.out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        path = s.out / name
        path.write_text(text)
        if name != "nightly.scrontab":
            path.chmod(0o755)
        written.append(path)
    return written


# --------------------------------------------------------------------------------------------------
# Installing the schedule


def scrontab_refusal(env: dict[str, str]) -> str | None:
    """Why this cluster takes no scrontab entry (scrontab absent, or see scron_refusal), or None
    when it does."""
    if shutil.which("scrontab") is None:
        return "scrontab is not installed"
    out = subprocess.run(
        ["scontrol", "show", "config"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if out.returncode != 0:
        return f"scontrol show config failed: {(out.stderr or out.stdout).strip()[:200]}"
    return scron_refusal(out.stdout)


def scron_refusal(config: str) -> str | None:
    """Why a cluster whose `scontrol show config` reads `config` refuses scrontab entries (slurmctld
    accepts them only with `enable` among its ScronParameters), or None when it accepts them."""
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ScronParameters":
            if "enable" in [v.strip() for v in value.split(",")]:
                return None
            return f"ScronParameters={value.strip()} in slurm.conf (scrontab needs enable)"
    return "no ScronParameters in slurm.conf (scrontab needs ScronParameters=enable)"


def install(s: Schedule) -> int:
    """Install the rendered schedule (scrontab entry, else nightly.sbatch now); print how to remove it."""
    from bench.monitor import slurm_env

    env = slurm_env(s.cluster)
    why_not = scrontab_refusal(env)
    if why_not is None:
        current = subprocess.run(["scrontab", "-l"], env=env, capture_output=True, text=True, check=False)
        if current.returncode != 0 and "no crontab" not in current.stderr:  # never replace a table unread
            print(
                f"nightly: scrontab -l failed: {current.stderr.strip()}; nothing installed", file=sys.stderr
            )
            return 1
        kept = _without_block(current.stdout if current.returncode == 0 else "", s.job_name)
        done = subprocess.run(
            ["scrontab", "-"], input=kept + scrontab_block(s), env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            print(f"nightly: scrontab refused the entry: {done.stderr.strip()}", file=sys.stderr)
            return 1
        print(f"nightly: installed the scrontab entry {s.job_name} ({s.cron})")
        print(
            "nightly: to remove it: scrontab -r"
            if not kept.strip()
            else f"nightly: to remove it: scrontab -e, delete the lines from '# bench nightly {s.job_name} begin' to its end"
        )
        return 0
    done = subprocess.run(
        ["sbatch", "--parsable", "--begin=now", str(s.out / "nightly.sbatch")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        print(f"nightly: sbatch refused nightly.sbatch: {done.stderr.strip()}", file=sys.stderr)
        return 1
    job = done.stdout.strip().split(";")[0]
    print(f"nightly: no scrontab ({why_not}): submitted nightly.sbatch as Slurm job {job}, running now and")
    print(f"nightly: resubmitting itself every {s.period}")
    user = literal(getpass.getuser())
    print(f"nightly: to remove it: scancel --user={user} --name={literal(s.job_name)}")
    return 0


def _without_block(crontab: str, job_name: str) -> str:
    """`crontab` less an earlier entry of this job (its begin ... end lines)."""
    out, inside = [], False
    for line in crontab.splitlines(keepends=True):
        if line.startswith(f"# bench nightly {job_name} begin"):
            inside = True
        if not inside:
            out.append(line)
        if inside and line.startswith(f"# bench nightly {job_name} end"):
            inside = False
    text = "".join(out)
    return text if not text or text.endswith("\n") else text + "\n"


# --------------------------------------------------------------------------------------------------
# One night's verdicts: `python -m bench nightly gate`


@dataclass
class Verdict:
    """One new run's outcome: `good` (recorded as its framework's last good run), `first` (no
    baseline: it starts the series), `regressed`, `failed` (not completed) or `not compared`."""

    framework: str
    run: Path
    verdict: str
    detail: str
    baseline: Path | None = None
    page: str | None = None

    @property
    def ok(self) -> bool:
        return self.verdict in ("good", "first")


def read_state(state: Path) -> dict[str, Any]:
    """good.json: framework -> {run, recorded_at, baseline, page}; {} before the first night."""
    if not state.exists():
        return {}
    try:
        good = json.loads(state.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(
            f"{state}: not readable JSON ({e}); repair it, or delete it to start the series again"
        ) from None
    if not isinstance(good, dict):
        raise UsageError(f"{state}: expected an object framework -> last good run; delete it to start again")
    return good


def judge(run: Path, good: dict[str, Any], results: Path, page: Path) -> Verdict:
    """Compare one new run with its framework's last good run; record it in `good` when it is good."""
    from bench import compare
    from bench.rundir import now_iso
    from bench.trace import RunPaths, read_manifest

    run = run.resolve()
    manifest = read_manifest(RunPaths(run))
    fw = str(manifest.get("framework"))
    if manifest.get("status") != "completed":
        why = manifest.get("reason") or "no reason recorded"
        return Verdict(fw, run, "failed", f"status {manifest.get('status')}: {why}")
    try:
        new = compare.load(run)
    except UsageError as e:  # completed, yet its trace does not read
        return Verdict(fw, run, "not compared", str(e))
    recorded = (good.get(fw) or {}).get("run")  # gone (deleted): the newest completed run under results
    where = Path(recorded) if recorded and (Path(recorded) / "manifest.json").is_file() else results
    try:
        base = compare.baseline_for(where, new)
    except UsageError as e:
        if where != results:  # the recorded good run is there but does not read: say so, keep it
            return Verdict(fw, run, "not compared", str(e))
        # no completed run of this framework and model before it
        good[fw] = {"run": str(run), "recorded_at": now_iso(), "baseline": None, "page": str(page)}
        return Verdict(
            fw, run, "first", f"no earlier completed {fw} run under {results}: this run starts the series"
        )
    try:
        result = compare.compare(base, new)
    except UsageError as e:  # another model or workload than its baseline
        return Verdict(fw, run, "not compared", str(e), base.root)
    out = page / f"compare-{fw}"
    compare.write_page(result, base, new, out)
    regressed = [f["figure"] for f in result["figures"] if f["regressed"]]
    link = f"{out.name}/index.html"
    if regressed:
        return Verdict(fw, run, "regressed", "beyond noise: " + ", ".join(regressed), base.root, link)
    good[fw] = {"run": str(run), "recorded_at": now_iso(), "baseline": str(base.root), "page": str(page)}
    return Verdict(fw, run, "good", "no figure regressed beyond noise", base.root, link)


def gate(runs: list[Path], state: Path, results: Path, page: Path, run_exit: int | None = None) -> int:
    """Judge each run, update good.json, write page/index.md and index.html; 0 when every run is good
    (or first of its series) and bench run exited 0, else 1."""
    from bench.trace import write_json

    good = read_state(state)
    verdicts = [judge(Path(r), good, results.resolve(), page) for r in runs]
    write_json(state, good)
    md = page_markdown(verdicts, page, run_exit)
    (page / "index.md").write_text(md)
    (page / "index.html").write_text(page_html(verdicts, page, run_exit))
    print(md, end="")
    return 0 if verdicts and run_exit in (0, None) and all(v.ok for v in verdicts) else 1


def _run_line(verdicts: list[Verdict], run_exit: int | None) -> str:
    from bench.cli import counted

    started = counted(len(verdicts), "run") if verdicts else "no run (see run.txt)"
    exited = "" if run_exit is None else f" (exit {run_exit})"
    return f"bench run{exited}: {started}; bench report: report/index.html"


def page_markdown(verdicts: list[Verdict], page: Path, run_exit: int | None) -> str:
    lines = [f"# Nightly {page.name}", "", _run_line(verdicts, run_exit), ""]
    lines += ["| framework | run | verdict | baseline | detail | compare |", "|---|---|---|---|---|---|"]
    for v in verdicts:
        base = v.baseline.name if v.baseline else "-"
        detail = v.detail.replace("|", "\\|")
        lines.append(f"| {v.framework} | {v.run.name} | {v.verdict} | {base} | {detail} | {v.page or '-'} |")
    return "\n".join(lines) + "\n"


def page_html(verdicts: list[Verdict], page: Path, run_exit: int | None) -> str:
    def cell(text: Any) -> str:
        return f"<td>{html.escape(str(text))}</td>"

    rows = "".join(
        "<tr>"
        + cell(v.framework)
        + cell(v.run.name)
        + cell(v.verdict)
        + cell(v.baseline.name if v.baseline else "-")
        + cell(v.detail)
        + (f"<td><a href='{html.escape(v.page)}'>compare</a></td>" if v.page else "<td>-</td>")
        + "</tr>"
        for v in verdicts
    )
    return (
        f"<!doctype html><meta charset=utf-8><title>nightly {html.escape(page.name)}</title>"
        f"<h1>Nightly {html.escape(page.name)}</h1><p>{html.escape(_run_line(verdicts, run_exit))} "
        "(<a href='report/index.html'>report</a>, <a href='run.txt'>run.txt</a>)</p>"
        "<table><tr><th>framework<th>run<th>verdict<th>baseline<th>detail<th>compare</tr>"
        f"{rows}</table>\n"
    )


def gate_main(argv: list[str]) -> int:
    from bench.cli import command_parser

    ap = command_parser(
        "nightly gate",
        "One night's verdicts (the step nightly.sh runs after bench run): each RUN compared with its "
        "framework's last good run, as bench compare --baseline does; good runs recorded in --state.",
        "each RUN's manifest.json, metrics.json and trace/steps.parquet; --state; the runs under --results.",
        "--state (good.json), and into --page: index.md, index.html and compare-<framework>/ per compared run.",
        [
            "python -m bench nightly gate --state nightly/smoke/good.json --results results/smoke --page P RUN..."
        ],
    )
    ap.add_argument("runs", nargs="*", type=Path, metavar="RUN", help="the night's run directories")
    ap.add_argument("--state", type=Path, required=True, help="good.json: each framework's last good run")
    ap.add_argument("--results", type=Path, required=True, help="results/<experiment>, for a first baseline")
    ap.add_argument("--page", type=Path, required=True, help="the night's page directory (exists)")
    ap.add_argument("--run-exit", type=int, help="bench run's exit status, shown on the page")
    args = ap.parse_args(argv)
    if not args.page.is_dir():
        raise UsageError(f"--page {args.page}: not a directory; nightly.sh creates it before the gate")
    return gate(args.runs, args.state, args.results, args.page, args.run_exit)


# --------------------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    if argv[:1] == ["gate"]:
        return gate_main(argv[1:])
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "nightly",
        "Render (and with --submit install) a Slurm schedule that runs an experiment on every framework "
        "each period, compares each new run with its framework's last good run (bench compare "
        "--baseline), writes the page and fails when a run failed or regressed.",
        "conf/ and the overrides (checked as bench run checks them); with --submit, the site's Slurm "
        "(scrontab, scontrol show config, sbatch).",
        "the new directory --out: nightly.sh, and on a Slurm cluster nightly.sbatch and nightly.scrontab; "
        "each night adds good.json, pages/<UTC time>/ and latest there. --submit installs the schedule.",
        [
            "python -m bench nightly cluster=testbed experiment=smoke --period 1h --submit",
            "python -m bench nightly cluster=example_site experiment=semianalysis_case1 --out nightly/case1",
        ],
    )
    add_overrides(ap)
    ap.add_argument("--period", default="1d", help="how often: Nm (N divides 60), Nh (N divides 24), 1d, 1w")
    ap.add_argument("--submit", action="store_true", help="install the schedule (scrontab, else sbatch)")
    ap.add_argument(
        "--out", type=Path, help="new directory for the scripts (default nightly/<experiment>-<cluster>)"
    )
    args = ap.parse_intermixed_args(argv)
    minutes, cron = period_minutes(args.period)
    schedule = _schedule(args.overrides, args.out, args.period, minutes, cron)
    if args.submit and not schedule.slurm:
        raise UsageError(
            f"--submit: cluster={schedule.cluster.name} has no Slurm (cluster.executor=local); "
            "choose a Slurm cluster, or run nightly.sh from cron without --submit"
        )
    if args.submit and shutil.which("sbatch") is None:
        raise UsageError("--submit: sbatch is not installed here; run this on the cluster's login node")
    for path in render(schedule):
        print(path)
    return install(schedule) if args.submit else 0


def _schedule(overrides: list[str], out: Path | None, period: str, minutes: int, cron: str) -> Schedule:
    """Check the overrides as bench run would (pre-flight problems refused here, not at night) and
    the --out; nothing is written."""
    from bench.launch import DispatchError, plan
    from bench.outdir import check_out

    try:
        plans = plan(overrides, multirun=False, dry_run=True)
    except DispatchError as e:  # a sweep: a night runs one point per framework
        raise UsageError(str(e)) from None
    problems = list(dict.fromkeys(m for p in plans for m in p.problems))
    if problems:
        raise UsageError("pre-flight problems (nothing written):\n" + "\n".join(problems))
    cfg = plans[0].cfg
    out = out if out is not None else Path("nightly") / f"{cfg.experiment.name}-{cfg.cluster.name}"
    check_out(out, "nightly")
    return Schedule(
        overrides=list(overrides),
        experiment=cfg.experiment.name,
        cluster=cfg.cluster,
        results=Path(os.path.abspath(cfg.results_dir)) / cfg.experiment.name,
        out=Path(os.path.abspath(out)),
        workdir=Path.cwd(),
        python=sys.executable,
        period=period,
        minutes=minutes,
        cron=cron,
    )
