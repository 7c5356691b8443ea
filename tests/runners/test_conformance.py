"""Runner conformance: every runner named by a conf/framework/*.yaml passes the same checks.

A fourth framework is picked up here by its YAML alone; it then fails until it has goldens, a real
log in REAL_LOGS, and a render its framework's own schema reads back unchanged
(docs/adding-a-framework.md). Checks, per runner:

- the runner implements the required methods (auto_mode, build, parse, schema_problems);
- every render it is asked for (each golden experiment) round-trips through the framework's own
  schema: `schema_problems` is [] (verl: composed by the pinned wheel's Hydra YAML and read back;
  slime: flags against the flag schema derived from slime/Megatron/SGLang; prime-rl: rl.toml keys
  and types against the schema derived from its pydantic classes);
- the render is byte-identical to tests/runners/golden/<framework>/<experiment>/;
- the shared workload keys each change a native setting (what docs/frameworks.md shows);
- a real log from the real-log fixtures ($RLBENCH_FIXTURES) parses into rows the trace contract accepts;
- runners/ imports nothing from bench/ but the trace contract (bench.trace).
"""

from __future__ import annotations

import ast
import copy
import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from verl_wheel import verl_config_root

from bench.config import CONF_DIR, compose
from bench.trace import read_steps, write_steps
from runners.base import Runner, load_runner
from tests.conftest import repo_neutral

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
FRAMEWORKS = sorted(p.stem for p in (CONF_DIR / "framework").glob("*.yaml"))

# framework -> (a real run's output folder in the opd-benchmark results (the `opd_results` fixture),
# trainer steps it logged). The opd-benchmark ran the same 15-step job on each framework (slime
# through its fork Miles).
REAL_LOGS: dict[str, tuple[str, int]] = {
    "verl": ("verl", 15),
    "slime": ("miles", 15),
    "prime_rl": ("prime", 15),
}


def _cfg(framework: str, *overrides: str):
    return compose([*overrides, f"framework={framework}"])


def _runner(framework: str) -> Runner:
    return load_runner(_cfg(framework).framework)


def _goldens(framework: str) -> list[str]:
    return (
        sorted(p.name for p in (GOLDEN / framework).iterdir() if p.is_dir())
        if (GOLDEN / framework).is_dir()
        else []
    )


def _schema_root(framework: str) -> Path | None:
    """Where the framework's own schema lives when runners/schemas/ does not ship it."""
    if framework == "verl":  # verl's Hydra YAML ships in its wheel (downloaded once into .cache/)
        return verl_config_root(str(_cfg("verl").framework.version))
    return None


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_runner_implements_the_required_methods(framework):
    runner = _runner(framework)
    assert isinstance(runner, Runner) and runner.name == framework
    for method in ("auto_mode", "build", "parse", "schema_problems"):
        assert getattr(type(runner), method) is not getattr(Runner, method), f"{framework} lacks {method}"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_golden_render_round_trips_through_the_frameworks_schema(framework):
    assert _goldens(framework), f"no goldens under tests/runners/golden/{framework}/"
    for experiment in _goldens(framework):
        cfg = _cfg(framework, f"experiment={experiment}")
        runner = load_runner(cfg.framework)
        launch = runner.render_launch(cfg)
        assert runner.schema_problems(launch, _schema_root(framework)) == [], experiment


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_schema_check_can_fail(framework):
    """The round trip is a real check: an unknown native key is reported."""
    cfg = _cfg(framework, "experiment=smoke")
    runner = load_runner(cfg.framework)
    launch = runner.render_launch(cfg)
    name, text = next(iter(launch.files.items()))
    bad = {
        "overrides.txt": "no_such_key.anywhere=1\n",
        "flags.txt": "--no-such-flag 1\n",
        "rl.toml": "no_such_key = 1\n",
    }
    launch.files[name] = text + bad[name]
    if framework == "slime":  # the driver argv carries the same flags as flags.txt
        launch.processes[-1].argv += ["--no-such-flag", "1"]
    if framework == "verl":
        next(p for p in launch.processes if p.role == "driver").argv.append("no_such_key.anywhere=1")
    assert runner.schema_problems(launch, _schema_root(framework)) != []


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_render_matches_the_goldens_byte_for_byte(framework, tmp_path):
    for experiment in _goldens(framework):
        cfg = _cfg(framework, f"experiment={experiment}")
        load_runner(cfg.framework).render_launch(cfg).write(tmp_path / experiment)
        want = sorted(p.name for p in (GOLDEN / framework / experiment).iterdir())
        assert sorted(p.name for p in (tmp_path / experiment).iterdir()) == want
        for name in want:
            assert (
                repo_neutral((tmp_path / experiment / name).read_text())
                == (GOLDEN / framework / experiment / name).read_text()
            ), f"{framework}/{experiment}/{name} differs from the golden"


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(
    "key, value",
    [
        ("workload.prompts_per_step", 128),
        ("workload.group_size", 8),
        ("workload.steps", 40),
        ("workload.max_response_len", 4096),
        ("workload.staleness_budget", 2),
        ("experiment.generator.tp", 2),
    ],
)
def test_each_shared_workload_key_changes_a_native_setting(framework, key, value):
    cfg = _cfg(framework, "experiment=smoke")
    runner = load_runner(cfg.framework)
    before = runner.native_settings(runner.render_launch(cfg))
    changed = copy.deepcopy(cfg)
    OmegaConf.update(changed, key, value)
    after = runner.native_settings(runner.render_launch(changed))
    assert before != after  # the values differ by unit per framework: docs/frameworks.md shows them


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_real_log_parses_into_trace_rows(framework, opd_results, tmp_path):
    assert framework in REAL_LOGS, f"add a real {framework} log from the real-log fixtures to REAL_LOGS"
    folder, steps = REAL_LOGS[framework]
    result = _runner(framework).parse_logs(opd_results / folder)
    assert len(result.steps) == steps and result.files
    write_steps(tmp_path / "steps.parquet", result.steps)  # the trace contract's own check
    df = read_steps(tmp_path / "steps.parquet")
    assert list(df["step"]) == sorted(df["step"]) and len(set(df["step"])) == steps
    step_s = [float(x) for x in df["step_s"] if x is not None and not math.isnan(float(x))]
    assert step_s and all(s > 0 for s in step_s)
    json.dumps(result.run_info, default=str)  # run_info goes into manifest.json


def test_runners_import_nothing_from_bench_but_the_trace_contract():
    offenders = []
    for path in sorted((REPO / "runners").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(REPO)}: {n}"
                for n in names
                if n.split(".")[0] == "bench" and n != "bench.trace"
            ]
    assert offenders == []
