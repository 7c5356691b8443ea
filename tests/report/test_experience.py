"""Software experience over run directories built from the real opd-benchmark logs with failures
appended as each framework prints them (the builders of tests/ingest/test_run_end.py): per
framework, what failed (kind, message line, file:line), how often, at which phase, steps kept."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from bench.ingest import main as ingest
from bench.report import build

SLOW = pytest.mark.slow  # the `attempts` fixture ingests seven log sets


def _run_end():
    path = Path(__file__).resolve().parents[1] / "ingest" / "test_run_end.py"
    spec = importlib.util.spec_from_file_location("run_end_builders", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RE = _run_end()


def _verl_with(tmp: Path, opd_results: Path, name: str, text: str) -> Path:
    d = tmp / name
    d.mkdir()
    return RE._verl_logs(d, opd_results, text)


def _verl_before_step_1(opd_results: Path) -> str:
    text = (opd_results / "verl" / "run.log").read_text()
    return text[: text.rindex("\n", 0, text.index("step:1 - ")) + 1]


def _miles_actor_death(tmp: Path, opd_results: Path) -> Path:
    """Miles' run.log cut after the 6th train-step record, then Ray's actor death."""
    lines = (opd_results / "miles" / "run.log").read_text().splitlines(keepends=True)
    train = [i for i, ln in enumerate(lines) if "perf/actor_train_time" in ln]
    logs = tmp / "miles-died"
    logs.mkdir()
    (logs / "run.log").write_text("".join(lines[: train[5] + 1]) + RE.RAY_ACTOR_DIED)
    shutil.copy(opd_results / "miles" / "teacher.log", logs / "teacher.log")
    return logs


@pytest.fixture(scope="module")
def attempts(tmp_path_factory, opd_results) -> tuple[Path, dict[str, str]]:
    """verl: the real run and three failed attempts; slime: the real run and a Ray actor death;
    prime_rl: the real run. Returns the report directory and the texts the failures were built from."""
    tmp = tmp_path_factory.mktemp("attempts")
    after5 = RE._verl_until(opd_results, 5) + RE.VALUE_ERROR
    after3 = RE._verl_until(opd_results, 3) + RE.VALUE_ERROR
    before1 = _verl_before_step_1(opd_results) + RE.VALUE_ERROR
    logs = {
        "verl/real": ("verl", opd_results / "verl"),
        "verl/after5": ("verl", _verl_with(tmp, opd_results, "a5", after5)),
        "verl/after3": ("verl", _verl_with(tmp, opd_results, "a3", after3)),
        "verl/before1": ("verl", _verl_with(tmp, opd_results, "b1", before1)),
        "slime/real": ("slime", opd_results / "miles"),
        "slime/died": ("slime", _miles_actor_death(tmp, opd_results)),
        "prime_rl/real": ("prime_rl", opd_results / "prime"),
    }
    for name, (fw, d) in logs.items():
        out = tmp / "results" / name.replace("/", "-")
        assert ingest(["--framework", fw, "--logs", str(d), "--out", str(out)]) == 0, name
    build([tmp / "results"], tmp / "report")
    lines = {k: v.count("\n") for k, v in {"after5": after5, "after3": after3, "before1": before1}.items()}
    return tmp / "report", lines


def _section(report: Path) -> str:
    md = (report / "summary.md").read_text()
    return md.split("## Software experience", 1)[1].split("\n## ", 1)[0]


def _framework(section: str, fw: str) -> str:
    return section.split(f"- **{fw}**", 1)[1].split("\n- **", 1)[0]


@SLOW
def test_verl_failures_grouped_by_kind_and_phase_most_frequent_first(attempts):
    report, lines = attempts
    verl = _framework(_section(report), "verl")
    assert verl.startswith(" [measured]: 4 attempt(s) (1 completed, 1 failed, 2 partial).")
    assert "3 of 4 failed or ended partial; 1 completed run logged an error" in verl
    assert "(phases: launch or first step, steady state, teardown)" in verl
    groups = [ln.strip() for ln in verl.splitlines() if ln.startswith("  - ")]
    assert groups == [
        "- ValueError (steady state): 2 of 4 attempts; steps kept: 3, 5",
        "- ValueError (launch or first step): 1 of 4 attempts",
        "- RuntimeError (teardown): 1 of 4 attempts; steps kept: 15",
    ]
    msg = "“ValueError: global_token_num in meta_info have different values”"
    # the exception's own line: the last line of what was appended
    assert f"{msg} (run.log:{lines['after3']}, run verl-after3, partial)" in verl
    assert f"{msg} (run.log:{lines['after5']}, run verl-after5, partial)" in verl
    assert f"{msg} (run.log:{lines['before1']}, run verl-before1, failed)" in verl
    assert "(run.log:1087, run verl-real, completed)" in verl


@SLOW
def test_slime_actor_death_and_a_clean_prime_rl(attempts):
    report, _ = attempts
    section = _section(report)
    slime = _framework(section, "slime")
    assert (
        "2 attempt(s) (1 completed, 1 partial). 1 of 2 failed or ended partial (phases: steady state)"
        in slime
    )
    assert "ray.exceptions.ActorDiedError (steady state): 1 of 2 attempts; steps kept: 6" in slime
    assert "“ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.”" in slime
    assert "**prime_rl** [measured]: 1 attempt(s) (1 completed). None failed or logged an error." in section


@SLOW
def test_html_and_findings_carry_the_failure_line_and_place(attempts):
    """Superseded attempts still count in the section; the ones the tables keep carry their failure
    (message, file:line, phase) into the findings, not 'no reason recorded'."""
    report, lines = attempts
    html = (report / "index.html").read_text()
    exp = html.split('<h2 id="software-experience">', 1)[1].split("<h2", 1)[0]
    assert exp.count("<code>ValueError: global_token_num in meta_info have different values</code>") == 3
    assert "<code>RuntimeError: DataLoader worker (pid 44800) is killed by signal: Killed.</code>" in exp
    findings = html.split('<h2 id="findings">', 1)[1].split("<h2", 1)[0]
    not_ran = html.split('<h2 id="not-ran">', 1)[1].split("<h2", 1)[0]
    assert "no reason recorded" not in findings + not_ran
    md = (report / "summary.md").read_text()
    assert (
        "- Run verl-after5 (verl) is partial: ValueError: global_token_num in meta_info have different "
        f"values (run.log:{lines['after5']}, steady state)" in md
    )
    assert (
        "- verl `verl-before1` [M]: failed: ValueError: global_token_num in meta_info have different "
        f"values (run.log:{lines['before1']}, launch or first step)" in md
    )


def test_a_launched_run_without_a_log_failure_gives_its_launcher_reason(three_report, evil):
    """Synthetic runs: verl-failed (the suite's own launch, `reason` only, 3 steps traced) is a
    failed attempt beside verl-0; its phase is said to be unrecorded, and a hostile reason stays text."""
    md = (three_report / "summary.md").read_text()
    verl = _framework(md.split("## Software experience", 1)[1].split("\n## ", 1)[0], "verl")
    assert verl.startswith(
        " [emulated]: 2 attempt(s) (1 completed, 1 failed). 1 of 2 failed or ended partial"
    )
    assert "- reason (not recorded): 1 of 2 attempts; steps kept: 3" in verl
    html = (three_report / "index.html").read_text()
    exp = html.split('<h2 id="software-experience">', 1)[1].split("<h2", 1)[0]
    assert "OOM at step 3 &lt;script&gt;" in exp and evil not in exp
