"""Bad input through the real CLI (`python -m bench ...` in a subprocess): exit 2, the one line the
user sees (docs/bad-input.md lists them), no traceback, and nothing written.

Every command runs with its working directory in a fresh tmp dir and its outputs (`--out`,
`results_dir=`) under it, so "nothing written" is checked on everything the command could touch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config import group_options
from runners.shell import shell_join, shell_word

REPO = Path(__file__).resolve().parents[2]
PLUS = "('+' adds keys only under framework.native, the framework-native passthrough)"


def bench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root -> (size, mtime ns): what 'nothing written or touched' compares."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def refused(res: subprocess.CompletedProcess, *lines: str) -> None:
    """Exit 2, exactly these lines on stderr (each `error: <line>`), no traceback, nothing on stdout."""
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr.splitlines() == [f"error: {line}" for line in lines], res.stderr
    assert res.stdout == ""


def choose(group: str, name: str) -> str:
    return f"{group} {name!r} not found; choose one of {', '.join(group_options(group))}"


# -- unknown config-group options, in every command ------------------------------------------------


@pytest.mark.parametrize(
    "args, line",
    [
        (["render", "framework=verll", "--out", "out"], "framework 'verll' not found; choose one of prime_rl, slime, verl"),
        (["emulate", "experiment=smoke", "model=qwen3_9b", "--out", "out"], choose("model", "qwen3_9b")),
        (["emulate", "experiment=smoke", "model=", "--out", "out"], choose("model", "")),
        (["validate", "experiment=smok"], choose("experiment", "smok")),
        (["validate", "experiment=smoke", "framework=verll"], "framework 'verll' not found; choose one of prime_rl, slime, verl"),
        (["run", "experiment=smoke", "cluster=slurmm", "results_dir=res", "--dry-run"], choose("cluster", "slurmm")),
        (["run", "experiment=smoke", "hardware=h100", "results_dir=res"], choose("hardware", "h100")),
        (["flops", "model=qwen3_8"], choose("model", "qwen3_8")),
        (["cost", "hardware=h100"], choose("hardware", "h100")),
        (["ingest", "--framework", "verll", "--logs", "log.txt", "--out", "out"], "framework 'verll' not found; choose one of prime_rl, slime, verl"),
    ],
)  # fmt: skip
def test_unknown_group_option_names_what_exists(tmp_path: Path, args: list[str], line: str):
    (tmp_path / "log.txt").write_text("step:1 - loss:0.5\n")
    before = tree(tmp_path)
    refused(bench(tmp_path, *args), line)
    assert tree(tmp_path) == before


# -- misspelled keys: the nearest key; '+' does not let a typo through ----------------------------


@pytest.mark.parametrize(
    "args, line",
    [
        (["validate", "experiment=smoke", "experiment.trainer_gpu=8"],
         "experiment.trainer_gpu: no such key; did you mean experiment.trainer_gpus?"),
        (["validate", "experiment=smoke", "workload.trainer_gpus=8"],
         "workload.trainer_gpus: no such key; did you mean experiment.trainer_gpus?"),
        (["emulate", "experiment=smoke", "+experiment.trainer_gpu=8", "--out", "out"],
         f"experiment.trainer_gpu: no such key; did you mean experiment.trainer_gpus? {PLUS}"),
        (["run", "experiment=smoke", "++workload.gruop_size=8", "results_dir=res", "--dry-run"],
         f"workload.gruop_size: no such key; did you mean workload.group_size? {PLUS}"),
        (["render", "framework=verl", "emulator.logprob_passes_by_framework.verl=2", "--out", "out"],
         "emulator.logprob_passes_by_framework.verl: no such entry yet; add it with "
         "+emulator.logprob_passes_by_framework.verl=VALUE (one '+' per entry)"),
        (["render", "framework=verl", "emulator.logprob_passes_by_framework={verl: 2}", "--out", "out"],
         "emulator.logprob_passes_by_framework.verl: no such entry yet; add it with "
         "+emulator.logprob_passes_by_framework.verl=VALUE (one '+' per entry)"),
        (["validate", "experiment=smoke", "experiment.placement=colo"],
         "experiment.placement: Invalid value 'colo', expected one of [colocated, disaggregated]"),
        (["validate", "experiment=smoke", "mode=natve"], None),  # a value, not a key: validate names it
    ],
)  # fmt: skip
def test_misspelled_key_suggests_the_nearest(tmp_path: Path, args: list[str], line: str | None):
    res = bench(tmp_path, *args)
    if line is None:
        assert res.returncode == 2 and res.stderr.splitlines() == ["mode=natve: expected emulate or native"]
    else:
        refused(res, line)
    assert tree(tmp_path) == {}


def test_plus_is_accepted_under_framework_native(tmp_path: Path):
    # verl's passthrough: extra verl Hydra overrides, appended verbatim (conf/framework/verl.yaml)
    res = bench(tmp_path, "render", "experiment=smoke", "framework=verl",
                '+framework.native.overrides=["trainer.balance_batch=False"]', "--out", "out")  # fmt: skip
    assert res.returncode == 0, res.stderr
    overrides = (tmp_path / "out" / "launch" / "overrides.txt").read_text().splitlines()
    assert overrides[-1] == "trainer.balance_batch=False"


def test_plus_adds_an_entry_to_a_dict_field():
    from bench.config import compose

    cfg = compose(["experiment=smoke", "+emulator.logprob_passes_by_framework.verl=2"])
    assert dict(cfg.emulator.logprob_passes_by_framework) == {"prime_rl": 0, "verl": 2}


# -- bench emulate runs validate's pre-flight checks, and never overwrites a run -------------------

GROUP_1 = (
    "workload.group_size=1: expected >= 2 (GRPO with one rollout per prompt has zero advantage on every "
    "sample; prime-rl's default group_size is exactly this trap)"
)


@pytest.mark.parametrize(
    "overrides, lines",
    [
        (["experiment.generator_gpus=-8"], ["experiment.generator_gpus=-8: expected >= 1"]),
        (["workload.group_size=0"], [GROUP_1.replace("group_size=1", "group_size=0")]),
        (["workload.prompts_per_step=3", "workload.group_size=5"], [
            "workload.prompts_per_step=3: 15 samples per mini-batch (3 x group 5 / 1) is not divisible by the "
            "trainer's data-parallel size 8 (= 8 GPUs / tp x pp x cp 1)",
            "prompts_per_step x group_size = 15 samples is not divisible by experiment.trainer_gpus=8 "
            "(verl's FSDP data split)",
        ]),
        (["experiment.trainer.tp=0", "workload.mini_batches_per_step=0"],
         ["experiment.trainer.tp=0: expected >= 1", "workload.mini_batches_per_step=0: expected >= 1"]),
    ],
)  # fmt: skip
def test_emulate_runs_the_validate_checks_first(tmp_path: Path, overrides: list[str], lines: list[str]):
    args = ["experiment=smoke", "framework=verl", *overrides]
    refused(bench(tmp_path, "emulate", *args, "--out", "out"), *lines)
    assert tree(tmp_path) == {}
    # the same lines as `bench validate` (which tags a runner's own lines with the framework)
    res = bench(tmp_path, "validate", *args)
    assert res.returncode == 2
    assert [ln.removeprefix("[verl] ") for ln in res.stderr.splitlines()] == lines


def test_emulate_refuses_an_existing_run_directory(tmp_path: Path):
    assert bench(tmp_path, "emulate", "experiment=smoke", "framework=verl", "--out", "run").returncode == 0
    assert (tmp_path / "run" / "manifest.json").is_file()
    before = tree(tmp_path)
    res = bench(tmp_path, "emulate", "experiment=smoke", "framework=slime", "--out", "run")
    refused(
        res, "--out run: already exists (a run directory); runs are never overwritten, choose a new --out"
    )
    assert tree(tmp_path) == before


# -- numeric arguments out of range ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args, lines",
    [
        (["flops", "seq_len=-5"], ["seq_len=-5: expected a whole number of tokens >= 1"]),
        (["flops", "seq_len=0"], ["seq_len=0: expected a whole number of tokens >= 1"]),
        (["flops", "seq_len=4k"], ["seq_len='4k': expected a whole number of tokens >= 1"]),
        (["flops", "model=qwen3_8b", "seq_len=50000"], [
            "seq_len=50000: expected <= model.max_context=40960 (Qwen/Qwen3-8B); for a longer (rope-scaled) "
            "context, raise model.max_context too"]),
        (["flops", "model.layers=-36"], ["model.layers=-36: expected >= 1 (Qwen/Qwen3-8B)"]),
        (["cost", "hardware=h200", "hardware.tco.gpus_per_server=0", "hardware.tco.pue=0.9"], [
            "hardware.tco.gpus_per_server=0: expected >= 1 (H200)", "hardware.tco.pue=0.9: expected >= 1 (H200)"]),
        (["cost", "hardware=h200", "hardware.tco.networking_capex_frac=1.0"],
         ["hardware.tco.networking_capex_frac=1.0: expected in [0, 1) (H200)"]),
    ],
)  # fmt: skip
def test_numeric_argument_out_of_range(tmp_path: Path, args: list[str], lines: list[str]):
    refused(bench(tmp_path, *args), *lines)
    assert tree(tmp_path) == {}


# -- mode=native without Slurm ---------------------------------------------------------------------

NATIVE_LOCAL = (
    "mode=native: cluster=local has no Slurm (cluster.executor=local in conf/cluster/local.yaml); expected "
    "a Slurm cluster (cluster=testbed after make testbed-up, or a site's conf/cluster/<site>.yaml), or "
    "mode=emulate on this machine"
)


def test_native_mode_on_a_cluster_without_slurm_is_refused_before_submission(tmp_path: Path):
    res = bench(tmp_path, "validate", "experiment=smoke", "mode=native")
    assert (res.returncode, res.stderr.splitlines(), res.stdout) == (2, [NATIVE_LOCAL], "")
    res = bench(tmp_path, "run", "experiment=smoke", "framework=verl", "mode=native", "results_dir=res")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.splitlines() == ["pre-flight problems (nothing submitted):", f"  [verl] {NATIVE_LOCAL}"]
    assert tree(tmp_path) == {}


# -- what dispatch and status show -----------------------------------------------------------------


def test_dry_run_prints_the_frameworks_own_command_not_the_wrapper(tmp_path: Path):
    res = bench(
        tmp_path, "run", "experiment=smoke", "framework=verl", f"results_dir={tmp_path / 'res'}", "--dry-run"
    )
    assert res.returncode == 0, res.stderr
    (run,) = (tmp_path / "res" / "smoke" / "dry-run").iterdir()
    command = json.loads((run / "launch" / "command.json").read_text())
    driver = next(p for p in command["processes"] if p["role"] == "driver")
    out = res.stdout.splitlines()
    assert (
        out[0]
        == f"# verl: {run} (mode=emulate: the launch below is emulated by the job; mode=native runs it)"
    )
    assert out[1] == f"  job.sbatch: {run / 'launch' / 'job.sbatch'} (2 nodes x 8 GPUs)"
    env = " ".join(f"{k}={shell_word(v)}" for k, v in driver["env"].items())  # quoted as in job.sbatch
    assert f"  [driver @ node 0] {env} {shell_join(driver['argv'])}" in out
    assert driver["argv"][:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert "submitit" not in "\n".join(out[:-1])
    assert (
        out[-1] == "dry run: 1 job(s) written, nothing submitted (submitit's wrapper: launch/submit.sbatch)"
    )


def test_status_shows_an_emulated_runs_emulated_duration(tmp_path: Path):
    run = tmp_path / "results" / "smoke" / "verl-by-hand"
    assert bench(tmp_path, "emulate", "experiment=smoke", "framework=verl", "--out", str(run)).returncode == 0
    wall = json.loads((run / "manifest.json").read_text())["wall_s"]
    assert wall > 600  # 20 emulated steps of Qwen3-8B GRPO: tens of minutes, where the job takes ~1 s
    res = bench(tmp_path, "status", str(tmp_path / "results" / "smoke"))
    assert res.returncode == 0, res.stderr
    s = round(wall)
    shown = f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
    assert f"{shown} emulated" in res.stdout


def test_status_of_an_experiment_without_runs(tmp_path: Path):
    refused(bench(tmp_path, "status", str(tmp_path / "results" / "nope")),
            f"{tmp_path / 'results' / 'nope'}: no run directories with a manifest.json; {tmp_path / 'results'} holds no runs")  # fmt: skip
    assert tree(tmp_path) == {}


# -- reproduce: a figure that cannot be computed fails the run -------------------------------------


def test_reproduce_refuses_a_missing_data_root(tmp_path: Path):
    res = bench(tmp_path, "reproduce", "published=opd_frameworks", "--data-root", "missing", "--out", "rep")
    refused(res, "--data-root missing: no such directory; opd_frameworks read the opd-benchmark logs there "
                 "(a checkout of SemiAnalysisAI/opd-benchmark)")  # fmt: skip
    assert tree(tmp_path) == {}


def test_reproduce_exits_2_when_figures_cannot_be_computed(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    res = bench(tmp_path, "reproduce", "published=opd_frameworks", "--data-root", "empty", "--out", "rep")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith("error: 21 figure(s) could not be computed (notes in the table): opd_frameworks/")
    assert line.endswith(" and 17 more")
    assert "21 error" in (tmp_path / "rep" / "reproduce.md").read_text()  # the gaps stay visible


# -- the README links only inside the repository ---------------------------------------------------


def test_readme_links_only_to_files_in_the_repository():
    import re

    text = (REPO / "README.md").read_text()
    links = [t for t in re.findall(r"\]\(([^)#\s]+)", text) if not t.startswith(("http://", "https://"))]
    assert "docs/architecture.md" in links and "docs/bad-input.md" in links
    for target in links:
        path = (REPO / target).resolve()
        assert path.is_relative_to(REPO) and path.exists(), target


# -- numbers must be numbers; experiment.name and experiment.frameworks; sweep size -----------------

FINITE = "expected a finite number"
NAME_RULE = (
    "expected one path segment of at most 100 letters, digits, '.', '_' or '-', starting with a letter or "
    "digit (it names results/<experiment>/), e.g. experiment.name=smoke_lr_sweep"
)


@pytest.mark.parametrize(
    "args, line",
    [
        (["validate", "experiment=smoke", "workload.lr=nan"], f"workload.lr=nan: {FINITE}"),
        (["render", "framework=verl", "workload.lr=nan", "--out", "out"], f"workload.lr=nan: {FINITE}"),
        (["emulate", "experiment=smoke", "framework=verl", "hardware.peak_bf16_flops=inf", "--out", "out"],
         f"hardware.peak_bf16_flops=inf: {FINITE}"),
        (["run", "experiment=smoke", "experiment.generator.gpu_memory_utilization=nan", "results_dir=res",
          "--dry-run"], f"experiment.generator.gpu_memory_utilization=nan: {FINITE}"),
        (["cost", "hardware=h200", "hardware.tco.pue=nan"], f"hardware.tco.pue=nan: {FINITE}"),
        (["flops", "model.weight_bytes=-inf"], f"model.weight_bytes=-inf: {FINITE}"),
        (["ingest", "--framework", "verl", "--logs", "log.txt", "--out", "out", "hardware=h200",
          "hardware.hbm_tbps=inf"], f"hardware.hbm_tbps=inf: {FINITE}"),
        (["validate", "experiment=smoke", "calibration=cal.yaml"],
         f"calibration=cal.yaml: values.emulator.trainer_mfu=nan: {FINITE}"),
        (["validate", "experiment=smoke", "experiment.frameworks=verl"],
         "experiment.frameworks=verl: expected a list; write experiment.frameworks=[verl]"),
        (["validate", "experiment=smoke", "experiment.frameworks=[]"],
         "experiment.frameworks=[]: expected at least one framework, e.g. experiment.frameworks=[verl] "
         "(choose from prime_rl, slime, verl)"),
        (["validate", "experiment=smoke", "experiment.frameworks=[verl,slime,verl]"],
         "experiment.frameworks=[verl,slime,verl]: verl listed twice; list each framework once: "
         "experiment.frameworks=[verl,slime]"),
        (["run", "experiment=smoke", "framework=verl", "experiment.name=../../x", "results_dir=res", "--dry-run"],
         f"experiment.name='../../x': {NAME_RULE}"),
        (["run", "experiment=smoke", "framework=verl", "experiment.name=", "results_dir=res", "--dry-run"],
         f"experiment.name='': {NAME_RULE}"),
        (["emulate", "experiment=smoke", "framework=verl", "experiment.name=-x", "--out", "out"],
         f"experiment.name='-x': {NAME_RULE}"),
        (["run", "experiment=smoke", "framework=verl", "experiment.seed=range(1,100000)", "results_dir=res",
          "--multirun", "--dry-run"],
         "sweep over ['experiment.seed'] is 99999 points, more than --max-points 256; narrow it, or confirm "
         "with --max-points 99999"),
        (["emulate", "experiment=smoke", "framework=verl", "experiment.seed=range(0,3)",
          "workload.group_size=2,4", "--max-points", "5", "--out", "out"],
         "sweep over ['experiment.seed', 'workload.group_size'] is 6 points, more than --max-points 5; "
         "narrow it, or confirm with --max-points 6"),
        (["emulate", "experiment=smoke", "framework=verl", "experiment.seed=range(0,inf)", "--out", "out"],
         "experiment.seed=range(0,inf): a range without an end; expected finite start, stop and step"),
        (["run", "experiment=smoke", "framework=verl", "experiment.seed=range(5,1)", "results_dir=res",
          "--multirun", "--dry-run"],
         "experiment.seed=range(5,1): no values to sweep; expected a range with start before stop (or a "
         "negative step)"),
    ],
)  # fmt: skip
def test_numbers_names_and_lists_are_refused_by_key(tmp_path: Path, args: list[str], line: str):
    (tmp_path / "log.txt").write_text("step:1 - loss:0.5\n")
    (tmp_path / "cal.yaml").write_text("values:\n  emulator.trainer_mfu: {value: .nan}\n")
    before = tree(tmp_path)
    refused(bench(tmp_path, *args), line)
    assert tree(tmp_path) == before


def test_cost_output_is_json_without_nan(tmp_path: Path):
    res = bench(tmp_path, "cost", "hardware=h200")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"cost printed {c}"))
    usd = doc["usd_per_gpu_hour"]
    assert 1.0 < usd["total"] < 3.0  # $258k server, 5 years at 10 %, 8.5 kW: about $1.6/GPU-hour
    # finite inputs whose sum overflows a float: refused by name, never printed as Infinity
    huge = ["hardware.tco.opex_other_usd_per_gpu_hour=1.7e308", "hardware.tco.power_usd_per_kwh=1e308"]
    refused(
        bench(tmp_path, "cost", "hardware=h200", *huge),
        "hardware.tco (H200): usd_per_gpu_hour.total=inf: expected a finite number (the inputs overflow a "
        "float); lower the largest",
    )


def test_a_sweep_states_its_size_before_it_starts(tmp_path: Path):
    res = bench(tmp_path, "run", "experiment=smoke", "framework=verl", "experiment.seed=0,1",
                f"results_dir={tmp_path / 'res'}", "--multirun", "--dry-run")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == "sweep: 2 points over experiment.seed"
    assert len(list((tmp_path / "res" / "smoke" / "dry-run").iterdir())) == 2


def test_max_points_confirms_a_sweep_beyond_the_cap():
    from bench.sweep import MAX_POINTS, SweepError, expand

    big = ["experiment=smoke", f"experiment.seed=range(0,{MAX_POINTS + 1})"]
    with pytest.raises(SweepError, match=f"is {MAX_POINTS + 1} points, more than --max-points {MAX_POINTS}"):
        expand(big, True)
    points = expand(big, True, max_points=MAX_POINTS + 1)
    assert [p["experiment.seed"] for p, _ in points] == [str(i) for i in range(MAX_POINTS + 1)]
    # a range is counted, not listed: a billion points are refused at once
    with pytest.raises(SweepError, match="is 1000000000 points"):
        expand(["experiment.seed=range(0,1000000000)"], True)


@pytest.mark.parametrize(
    "args, line",
    [
        (["run", "experiment=smoke", "--wait", "--timeout", "nan"],
         "python -m bench run: error: argument --timeout: nan: expected a finite number > 0"),
        (["testbed", "--timeout", "nan", "up"],
         "python -m bench testbed: error: argument --timeout: nan: expected a finite number > 0"),
        (["testbed", "up", "--timeout=-inf"],
         "python -m bench testbed: error: argument --timeout: -inf: expected a finite number > 0"),
        (["testbed", "--timeout", "0", "status"],
         "python -m bench testbed: error: argument --timeout: 0: expected > 0"),
        (["emulate", "experiment=smoke", "--max-points", "0", "--out", "out"],
         "python -m bench emulate: error: argument --max-points: 0: expected >= 1"),
    ],
)  # fmt: skip
def test_numeric_flags_are_finite_and_in_range(tmp_path: Path, args: list[str], line: str):
    res = bench(tmp_path, *args)
    assert (res.returncode, res.stderr.splitlines()[-1], res.stdout) == (2, line, "")
    assert tree(tmp_path) == {}
