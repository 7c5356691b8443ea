"""`python -m bench <command> --help` for every command of bench/__main__.py, through the real CLI:
each says what it does, what it reads and what it writes in full sentences, shows `[key=value ...]`
where the command composes a config, ends with an example, and shows no internal docstring. One
layout for all (bench/cli.py), so one command's conventions are every command's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.__main__ import COMMANDS
from tests.conftest import REPO

# commands whose positional key=value arguments are config overrides (composed with conf/)
COMPOSING = {"run", "validate", "prepare", "inspect", "render", "ingest", "flops", "cost", "emulate"}
COMPOSING |= {"calibrate", "predict", "plan", "probe", "nightly", "profile"}
NOT_COMPOSING = {"status", "metrics", "report", "reproduce", "testbed", "compare", "sol"}


def bench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def sections(text: str) -> dict[str, str]:
    """usage / does / reads / writes / examples of a --help page, whitespace flattened."""
    usage, rest = text.split("\n\n", 1)
    description = rest.split("\n\npositional arguments:")[0].split("\n\noptions:")[0]
    flat = " ".join(description.split())
    does, _, reads_writes = flat.partition(" Reads: ")
    reads, _, writes = reads_writes.partition(" Writes: ")
    examples = text.rstrip().rsplit("\n\nexample", 1)[-1]
    return {
        "usage": " ".join(usage.split()),
        "does": does,
        "reads": reads,
        "writes": writes,
        "examples": examples,
    }


def test_every_command_is_classified():
    """A new command says here whether it composes a config (and so takes key=value overrides)."""
    assert COMPOSING | NOT_COMPOSING == set(COMMANDS), "add the new command to COMPOSING or NOT_COMPOSING"


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_help_says_what_it_does_reads_and_writes(cmd):
    p = bench(cmd, "--help")
    assert (p.returncode, p.stderr) == (0, "")
    s = sections(p.stdout)
    assert s["usage"].startswith(f"usage: python -m bench {cmd} [-h]")
    for part in ("does", "reads", "writes"):
        text = s[part]
        assert text and text.endswith("."), f"{cmd} --help: {part} is not a full sentence: {text!r}"
        assert text.count("(") == text.count(")") and text.count("`") % 2 == 0, (
            f"{cmd}: cut mid-sentence: {text!r}"
        )
    assert s["does"][0].isupper(), s["does"]
    assert '"""' not in p.stdout and "`python -m bench" not in p.stdout  # no module docstring shown as help
    lines = s["examples"].splitlines()
    assert lines[0] in (":", "s:") and lines[1:], f"{cmd} --help: no example at the end"
    assert all(ln.startswith(f"  python -m bench {cmd}") for ln in lines[1:]), lines


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_usage_shows_the_overrides_where_taken(cmd):
    usage = sections(bench(cmd, "--help").stdout)["usage"]
    assert ("[key=value ...]" in usage) == (cmd in COMPOSING), usage


@pytest.mark.parametrize("cmd", ["calibrate", "predict", "plan"])
def test_a_run_directory_is_positional_everywhere(cmd):
    p = bench(cmd, "--help")
    assert "RUN_DIR" in sections(p.stdout)["usage"] and "--from" not in p.stdout


def test_plan_takes_one_run_directory(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    p = bench("plan", str(a), str(b), "gpus=4")
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == f"error: plan takes one RUN_DIR; got {a}, {b} (overrides are key=value)\n"


def test_plan_run_directory_and_experiment_are_one_or_the_other(tmp_path):
    p = bench("plan", str(tmp_path), "experiment=smoke")
    assert (p.returncode, p.stderr) == (2, "error: give one of experiment=X and RUN_DIR, not both\n")
