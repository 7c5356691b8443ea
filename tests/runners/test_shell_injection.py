"""Nothing the user types runs as shell code (docs/security.md, Quoting).

Every string-valued key of every conf/cluster YAML and the workload's string keys (dataset, model,
experiment name, framework image and version, ...) is rendered with a shell payload appended:
`$(...)`, backticks, `;`, a single and a double quote, a line break, and a suite reference next to
a substitution. Each rendered script (job.sbatch of verl, slime and prime-rl; submitit's
submit.sbatch) then runs through bash from start to end, with every command that would start
real work (srun, sbatch, ray, python, uv, enroot, apptainer, docker, exec, ...) a shell function
that does nothing. The payload would create PWNED: it never exists, and the script still runs to
its end (a quote that escaped would break it). The one deliberate exception, `cluster.setup`,
is the control that proves the harness runs what is written verbatim. A value with a line break
that would reach a #SBATCH line is refused before anything is written, naming the key.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from bench.config import CONF_DIR, compose
from bench.submit import _write_sbatch
from bench.validate import validate
from runners.base import load_runner
from runners.shell import script_value_problems, string_values

PAYLOADS = {
    "substitution": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "semicolon": "; touch PWNED",
    "single quote": "'; touch PWNED; '",
    "double quote": '"; touch PWNED; "',
    "line break": "\ntouch PWNED #",
    "suite reference": "${RUN_DIR}$(touch PWNED)",
}
FRAMEWORKS = ("verl", "slime", "prime_rl")
HEADER_REFUSAL = "contains a line break or control character, which a #SBATCH line cannot hold; remove it"
CLUSTERS = sorted(p.stem for p in (CONF_DIR / "cluster").glob("*.yaml"))
# Selectors, not text: each is checked against a fixed set (an enum, a runner's table, a mode).
SELECTORS = {
    "cluster.executor", "cluster.container.kind", "workload.task", "workload.algorithm",
    "experiment.placement", "experiment.trainer.sharding", "framework.mode", "framework._target_",
    "framework.name", "model.attention", "model.model_type",
}  # fmt: skip
# Keys that do not reach a script: which frameworks run (experiment.frameworks), emulator policies
# and weight-sync paths (framework.modes, framework.weight_sync), how a log is read.
NOT_RENDERED = (
    "experiment.frameworks",
    "framework.modes",
    "framework.weight_sync",
    "framework.handoff_logged_as",
    "framework.profile",  # the framework profile's fitted values and their provenance (bench/model/fwprofile.py)
)

# BASH_ENV for every run: the real commands are functions that do nothing. srun prints what
# `ray status` would for 64 active nodes and scontrol 64 host names, so the Ray bootstrap and the
# node-count check go on; a server step (prime-rl's inference, router, env server) blocks on a FIFO
# until the script stops it, as a server would; `touch` stays real (an escaped payload must run).
STUBS = """
srun() {
  case " $* " in *" inference "* | *" vllm-router "* | *" env-server "*) read -r _ <> "${STUB_FIFO}" ;; esac
  printf 'Active:\\n'; for ((i = 0; i < 64; i++)); do printf ' 1 node_%d\\n' "$i"; done; printf 'Pending:\\n'
}
scontrol() { for ((i = 0; i < 64; i++)); do printf 'n%d\\n' "$i"; done; }
for cmd in sbatch ray python python3 uv env enroot apptainer docker exec hostname ip sleep; do
  eval "${cmd}() { :; }"
done
"""


@functools.cache
def cluster_keys() -> list[str]:
    """Every string key any conf/cluster YAML composes to (the schema's defaults included)."""
    keys = {
        key
        for cluster in CLUSTERS
        for key, _ in string_values("cluster", compose(["experiment=smoke", f"cluster={cluster}"]).cluster)
    }
    return sorted(k for k in keys if k not in SELECTORS and not k.startswith("cluster.setup"))


@functools.cache
def cases(framework: str) -> list[tuple[str, str, object]]:
    """(container kind, key, base cfg): every cluster key on example_site (which sets them all),
    the container keys under pyxis and apptainer, then every string key of the workload, model,
    experiment and framework. Setup lines are empty: they are the verbatim exception (below)."""
    out = []
    for kind in ("pyxis", "apptainer"):
        cfg = compose(["experiment=smoke", "cluster=example_site", f"framework={framework}",
                       f"cluster.container.kind={kind}", "cluster.setup=[]"])  # fmt: skip
        if not cfg.framework.container:  # prime-rl publishes no image: the site names one
            OmegaConf.update(cfg, "cluster.container.image", "registry.example/prime-rl:0.8.0")
        keys = [k for k in cluster_keys() if kind == "pyxis" or k.startswith("cluster.container.")]
        if kind == "pyxis":
            keys += [
                key
                for group in ("workload", "experiment", "model", "framework")
                for key, _ in string_values(group, cfg[group])
                if key not in SELECTORS and not key.startswith(NOT_RENDERED)
            ]
        out += [(kind, key, cfg) for key in keys + (["results_dir"] if kind == "pyxis" else [])]
    return out


@contextlib.contextmanager
def with_value(cfg, key: str, payload: str):
    """cfg with `payload` appended to the value of `key`, for the duration of the block."""
    before = OmegaConf.select(cfg, key)
    OmegaConf.update(cfg, key, f"{before}{payload}".replace("${", "\\${"))  # literal, not an interpolation
    try:
        yield cfg
    finally:
        OmegaConf.update(cfg, key, before)


def run_bash(script: Path, cwd: Path) -> subprocess.CompletedProcess:
    stubs, fifo = cwd / "stubs.sh", cwd / "server.fifo"
    stubs.write_text(STUBS)
    if not fifo.exists():
        os.mkfifo(fifo)
    env = {
        "PATH": os.environ["PATH"],
        "BASH_ENV": str(stubs),
        "SLURM_SUBMIT_DIR": str(cwd / "run dir"),
        "SLURM_JOB_NODELIST": "n[0-63]",
        "PRIME_RL_DIR": str(cwd),
        "HF_TOKEN": "x",
        "RAY_READY_POLL_S": "0",
        "SLURM_JOB_ID": "1",
        "STUB_FIFO": str(fifo),
    }
    # The script in a session of its own, its output in files: under Slurm the end of a job kills every
    # process it started, so here the session is killed when the script ends. A server step the
    # script's own EXIT trap missed (a `kill` racing a just-forked step) can then neither outlive the
    # test nor hold an output pipe open (which would leave subprocess.run waiting for EOF forever).
    with open(cwd / "bash.out", "w+") as out, open(cwd / "bash.err", "w+") as err:
        proc = subprocess.Popen(
            ["bash", str(script)], cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, rc, out.read(), err.read())


def submit_sbatch(cfg, where: Path) -> Path:
    """launch/submit.sbatch as bench.submit writes it (submitit's template) for one job."""
    plan = SimpleNamespace(cfg=cfg, nodes=2, paths=SimpleNamespace(launch=where))
    with pytest.MonkeyPatch.context() as m:  # `python` by name: the harness's no-op function runs
        m.setattr(sys, "executable", "python")
        _write_sbatch([plan], Path(str(cfg.results_dir)) / str(cfg.experiment.name) / ".submitit")
    return where / "submit.sbatch"


def shellcheck(scripts: list[Path]) -> None:
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is required under CI (apt-get install -y shellcheck)")
        return
    # SC2016: a payload stays literal inside single quotes, as intended; SC2093: submit.sbatch's
    # setup line `exec`s the job, so submitit's own command line after it is never reached (bench/submit.py).
    res = subprocess.run(
        ["shellcheck", "--exclude=SC2016,SC2093", *map(str, scripts)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout[:4000]


@pytest.mark.parametrize("payload", PAYLOADS, ids=list(PAYLOADS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_payload_in_any_key_runs(tmp_path, framework, payload):
    runner_cases = cases(framework)
    assert {k for _, k, _ in runner_cases} >= {  # the issue's examples among them
        "cluster.partition", "cluster.account", "cluster.qos", "cluster.constraint", "cluster.gpu_type",
        "cluster.container.image", "cluster.container.mounts[0]", "cluster.data_root", "cluster.model_root",
        "workload.dataset", "model.name", "experiment.name", "framework.container", "framework.version",
    }  # fmt: skip
    runner = load_runner(runner_cases[0][2].framework)
    header_keys = {*cluster_keys(), "experiment.name", "framework.container", "results_dir"}
    scripts, refused = [], set()
    for n, (kind, key, cfg) in enumerate(runner_cases):
        if key.startswith("framework.") and "${" in PAYLOADS[payload]:
            continue  # Hydra's instantiate of the runner undoes the `\${` escape: an interpolation error, no script
        where = tmp_path / f"{n}-{kind}-{key}"
        with with_value(cfg, key, PAYLOADS[payload]):
            if problems := script_value_problems(cfg):  # a #SBATCH line would carry a line break
                assert problems == [f"{key}={cfg_value(cfg, key)!r}: {HEADER_REFUSAL}"]
                refused.add(key)
                continue
            fresh = load_runner(cfg.framework) if key.startswith("framework.") else runner  # its version
            try:
                launch = fresh.render_launch(cfg)
            except ValueError as e:  # a selector the runner checks (prime-rl's version table)
                assert f"{key}=" in str(e), f"{kind} {key}: refused without naming the key: {e}"
                continue
            launch.write(where / "run dir" / "launch")
            # submit.sbatch holds the cluster's values, the job name and the log folder, nothing else
            submit = [submit_sbatch(cfg, where / "run dir" / "launch")] if key in header_keys else []
        for script in (where / "run dir" / "launch" / "job.sbatch", *submit):
            res = run_bash(script, where)
            assert res.returncode == 0, (
                f"{kind} {key}: {script.name} did not run to its end: {res.stderr[-2000:]}"
            )
        scripts += [where / "run dir" / "launch" / "job.sbatch", *submit]
        assert not list(where.rglob("PWNED")), f"{kind} {key} + {payload}: the payload ran"
    # a line break is refused exactly where a #SBATCH line (job.sbatch or submit.sbatch) would carry it
    assert refused == (header_keys if "\n" in PAYLOADS[payload] else set())
    shellcheck(scripts)


def cfg_value(cfg, key: str) -> str:
    return str(OmegaConf.select(cfg, key))


def test_setup_lines_are_the_verbatim_exception_and_the_harness_runs_them(tmp_path):
    cfg = compose(
        ["experiment=smoke", "cluster=example_site", "framework=verl", "cluster.setup=['touch SETUP_RAN']"]
    )
    launch = load_runner(cfg.framework).render_launch(cfg)
    launch.write(tmp_path / "run dir" / "launch")
    submit = submit_sbatch(cfg, tmp_path / "run dir" / "launch")
    for script in (tmp_path / "run dir" / "launch" / "job.sbatch", submit):
        assert "\ntouch SETUP_RAN\n" in script.read_text()
        res = run_bash(script, tmp_path)
        assert res.returncode == 0, res.stderr
        assert (tmp_path / "SETUP_RAN").is_file()  # the harness executes what a script holds
        (tmp_path / "SETUP_RAN").unlink()


def test_the_issues_mount_is_quoted_so_only_run_dir_expands():
    cfg = compose(["experiment=smoke", "cluster=example_site", "framework=verl",
                   "cluster.container.mounts=['/a:/b$(touch pwned)']"])  # fmt: skip
    sbatch = load_runner(cfg.framework).render_launch(cfg).sbatch
    assert '"--container-mounts=/a:/b\\$(touch pwned),${RUN_DIR}:${RUN_DIR}"' in sbatch
    assert (
        "ON_NODE=(srun --overlap --nodes=1 --ntasks=1 --container-image=verlai/verl:vllm011.latest" in sbatch
    )


@pytest.mark.parametrize(
    "key",
    ["cluster.partition", "cluster.account", "cluster.qos", "cluster.constraint", "cluster.container.image",
     "experiment.name", "framework.container"],
)  # fmt: skip
def test_a_line_break_bound_for_a_sbatch_header_is_refused_naming_the_key(key):
    cfg = compose(["experiment=smoke", "cluster=example_site", "framework=verl"])
    with with_value(cfg, key, "\ntouch PWNED"):
        line = f"{key}={cfg_value(cfg, key)!r}: {HEADER_REFUSAL}"
        assert line.startswith(f"{key}='") and "\\ntouch PWNED'" in line
        assert script_value_problems(cfg) == [line]
        assert line in validate(cfg)  # bench validate and bench run: a pre-flight problem, nothing written


def test_render_and_run_refuse_a_line_break_in_a_mount_before_writing(tmp_path):
    """The issue's mount with a line break, through `python -m bench`: exit 2, one line naming the key."""
    mount = "cluster.container.mounts=['/a:/b\ntouch PWNED']"
    line = (
        "cluster.container.mounts[0]='/a:/b\\ntouch PWNED': contains a line break or control character, "
        "which a #SBATCH line cannot hold; remove it"
    )
    common = ["experiment=smoke", "cluster=example_site", "framework=verl", mount]
    render = subprocess.run(
        [*BENCH, "render", *common, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (render.returncode, render.stderr.splitlines()) == (2, [f"verl: {line}"])
    run = subprocess.run(
        [*BENCH, "run", *common, f"results_dir={tmp_path / 'res'}", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (run.returncode, run.stderr.splitlines()) == (
        2,
        ["pre-flight problems (nothing submitted):", f"  [verl] {line}"],
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written: no out/, no res/


BENCH = [str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"), "-m", "bench"]


def test_dry_run_prints_the_quoted_command_safe_to_paste(tmp_path):
    """The printed driver line, pasted into bash (after its label), gives the rendered argv word for word."""
    dataset = 'workload.dataset="BytedTsinghua-SIA/DAPO-Math-17k$(touch PWNED)\'\\"!"'  # Hydra-quoted
    res = subprocess.run(
        [
            *BENCH,
            "run",
            "experiment=smoke",
            "framework=verl",
            dataset,
            f"results_dir={tmp_path / 'res'}",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert res.returncode == 0, res.stderr
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith("  [driver @ node 0] ")]
    pasted = line.removeprefix("  [driver @ node 0] ")
    (run,) = (tmp_path / "res" / "smoke" / "dry-run").iterdir()
    processes = json.loads((run / "launch" / "command.json").read_text())["processes"]
    driver = next(p for p in processes if p["role"] == "driver")
    # pasted after RUN_DIR is set, in front of a function that prints its environment and arguments
    shown = subprocess.run(
        ["bash", "-c", f"RUN_DIR=/r; show() {{ printf '%s\\n' \"${{!VERL_*}}\" \"$VERL_FILE_LOGGER_PATH\" \"$@\"; }}; "
         f"{pasted.replace(' python3 ', ' show python3 ', 1)}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    argv = [a.replace("{run_dir}", "/r") for a in driver["argv"]]
    assert shown.stdout.splitlines() == ["VERL_FILE_LOGGER_PATH", "/r/logs/verl_metrics.jsonl", *argv]
    assert any(a.endswith("DAPO-Math-17k$(touch PWNED)'\"!/verl/train.parquet") for a in argv)
    assert not list(tmp_path.rglob("PWNED"))


def test_the_gpu_samplers_srun_line_keeps_the_run_directory_literal(tmp_path):
    """bench.telemetry's `srun ... bash -c` line: the run directory (results_dir, experiment name)
    is one literal word, only ${SLURMD_NODENAME} expands."""
    from bench.telemetry import sampler_argv

    logs = tmp_path / "res $(touch PWNED) `touch PWNED`; touch PWNED '\"" / "logs"
    logs.mkdir(parents=True)
    inner = sampler_argv(logs, in_slurm=True)[-1]
    stubs = tmp_path / "stubs.sh"
    stubs.write_text("nvidia-smi() { echo 0, 1, 2; }\n")
    env = {"PATH": os.environ["PATH"], "BASH_ENV": str(stubs), "SLURMD_NODENAME": "n0"}
    res = subprocess.run(["bash", "-c", inner], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (logs / "gpu-n0.csv").read_text() == "0, 1, 2\n"
    assert not list(tmp_path.rglob("PWNED"))
