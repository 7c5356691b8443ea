"""Ingest knows what one run is (issue 20, section 6): a --logs folder holding several runs is
refused with the runs found, another run's GPU telemetry is left out and named, a requeued run's
attempts are recorded, compressed logs are read. Real opd-benchmark logs, through the real CLI."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.trace import RunPaths, read_manifest

REPO = Path(__file__).resolve().parents[2]
PREEMPTION = (
    b"slurmstepd: error: *** JOB 123 ON node01 CANCELLED AT 2026-08-07T13:28:30 DUE TO PREEMPTION ***\n"
)


def _cli(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", "ingest", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _errors(p: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in p.stderr
    return [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.fixture(scope="module")
def verl_alone(opd_results, tmp_path_factory) -> Path:
    """The verl run ingested from its own folder: what every other shape must reproduce."""
    out = tmp_path_factory.mktemp("alone") / "verl"
    p = _cli("--framework", "verl", "--logs", opd_results / "verl", "--out", out)
    assert p.returncode == 0, p.stderr
    return out


def test_three_frameworks_side_by_side_are_refused_with_the_runs_found(tmp_path, opd_results):
    logs = tmp_path / "results"
    for name in ("prime", "verl", "miles"):
        shutil.copytree(opd_results / name, logs / name)
    p = _cli("--framework", "verl", "--logs", logs, "--out", tmp_path / "run")
    assert p.returncode == 2
    assert _errors(p) == [
        f"error: --logs {logs}: holds 3 runs, not one ("
        "prime/wall_time.env: prime-rl full15, 2026-08-07 13:21:34-13:26:10 UTC; "
        "verl/wall_time.env: verl full15, 2026-08-07 13:26:26-13:30:15 UTC; "
        "miles/wall_time.env: miles full15-scored, 2026-08-07 13:42:31-13:48:06 UTC); "
        f"pass one run's folder as --logs (this verl run's: --logs {logs / 'verl'})"
    ]
    assert not (tmp_path / "run").exists()


def test_logs_of_two_frameworks_without_wall_time_files_are_refused(tmp_path, opd_results):
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    (logs / "b").mkdir()
    shutil.copy(opd_results / "verl" / "run.log", logs / "a" / "run.log")
    shutil.copy(opd_results / "prime" / "trainer.log", logs / "b" / "trainer.log")
    shutil.copy(opd_results / "prime" / "orchestrator.log", logs / "b" / "orchestrator.log")
    p = _cli("--framework", "prime_rl", "--logs", logs, "--out", tmp_path / "run")
    assert p.returncode == 2
    assert _errors(p) == [
        f"error: --logs {logs}: holds 2 runs, not one (prime-rl: b/orchestrator.log, b/trainer.log; "
        f"verl: a/run.log); pass one run's folder as --logs (this prime_rl run's: --logs {logs / 'b'})"
    ]
    assert not (tmp_path / "run").exists()


def test_two_wall_time_files_of_different_runs_in_one_folder_are_refused(tmp_path, opd_results):
    logs = tmp_path / "logs"
    shutil.copytree(opd_results / "verl", logs)
    shutil.copy(opd_results / "miles" / "wall_time.env", logs / "wall_time-earlier.env")
    p = _cli("--framework", "verl", "--logs", logs, "--out", tmp_path / "run")
    assert p.returncode == 2
    assert _errors(p) == [
        f"error: --logs {logs}: holds 2 runs, not one (wall_time.env: verl full15, 2026-08-07 13:26:26-13:30:15 UTC; "
        "wall_time-earlier.env: miles full15-scored, 2026-08-07 13:42:31-13:48:06 UTC); pass one run's folder as --logs"
    ]
    assert not (tmp_path / "run").exists()


def test_other_runs_gpu_csvs_are_left_out_and_named_energy_is_the_runs_own(tmp_path, opd_results, verl_alone):
    logs = tmp_path / "logs"
    shutil.copytree(opd_results / "verl", logs)
    shutil.copy(opd_results / "miles" / "gpu.csv", logs / "gpu-miles.csv")
    shutil.copy(opd_results / "prime" / "gpu.csv", logs / "gpu-prime.csv")
    out = tmp_path / "run"
    p = _cli("--framework", "verl", "--logs", logs, "--out", out)
    assert p.returncode == 0, p.stderr
    left = [
        "gpu-miles.csv: left out, another run's GPU samples (2026-08-07 13:42:31-13:48:07 UTC, outside "
        "this run's window (wall_time.env) 2026-08-07 13:26:26-13:30:15 UTC)",
        "gpu-prime.csv: left out, another run's GPU samples (2026-08-07 13:21:34-13:26:10 UTC, outside "
        "this run's window (wall_time.env) 2026-08-07 13:26:26-13:30:15 UTC)",
    ]
    m = read_manifest(RunPaths(out))
    assert m["left_out_files"] == left
    assert all(f"warning: {line}" in p.stderr.splitlines() for line in left)
    assert [Path(f).name for f in m["parsed_files"]] == ["run.log", "gpu.csv"]
    # every run's samples summed gave 94.6 Wh; the verl run's own are 14.9 Wh, as from its own folder
    assert _metrics(out)["energy_wh"] == pytest.approx(14.8988, abs=1e-4)
    assert _metrics(out)["energy_wh"] == _metrics(verl_alone)["energy_wh"]
    assert pd.read_parquet(out / "trace" / "gpu.parquet").equals(
        pd.read_parquet(verl_alone / "trace" / "gpu.parquet")
    )


def test_gpu_csvs_of_separate_periods_without_a_window_are_refused(tmp_path, opd_results):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("run.log", "config.yaml", "gpu.csv"):  # no wall_time.env; verl's console has no clock
        shutil.copy(opd_results / "verl" / name, logs / name)
    shutil.copy(opd_results / "miles" / "gpu.csv", logs / "gpu-miles.csv")
    p = _cli("--framework", "verl", "--logs", logs, "--out", tmp_path / "run")
    assert p.returncode == 2
    assert _errors(p) == [
        f"error: --logs {logs}: GPU telemetry of 2 separate periods (gpu.csv: 2026-08-07 13:26:26-13:30:15 UTC; "
        "gpu-miles.csv: 2026-08-07 13:42:31-13:48:07 UTC) and no wall-time file or timestamped step to tell "
        "which is this run's; keep only this run's CSVs in --logs"
    ]
    assert not (tmp_path / "run").exists()


def _requeued(lines: list[bytes], first_end: int, restart_after: int, slower: float = 1.0) -> list[bytes]:
    """A log requeued after step `first_end`: its lines through that step, the scheduler's
    preemption line, then the lines after step `restart_after` again (the restart resumed from
    its checkpoint). The first attempt's repeated steps are made `slower` x (the preempted node
    was), so the trace shows which attempt's values it kept."""
    end = next(i for i, ln in enumerate(lines) if f") step:{first_end} - ".encode() in ln)
    resume = next(i for i, ln in enumerate(lines) if f") step:{restart_after} - ".encode() in ln)
    first = []
    for ln in lines[: end + 1]:
        m = next(
            (s for s in range(restart_after + 1, first_end + 1) if f") step:{s} - ".encode() in ln), None
        )
        if m is not None:
            head, _, rest = ln.partition(b"timing_s/step:")
            value, sep, tail = rest.partition(b" ")
            ln = head + b"timing_s/step:" + repr(float(value) * slower).encode() + sep + tail
        first.append(ln)
    return [*first, PREEMPTION, *lines[resume + 1 :]]


def test_a_requeued_run_records_its_attempts_repeated_steps_and_the_gpu_time_lost(
    tmp_path, opd_results, verl_alone
):
    logs = tmp_path / "logs"
    shutil.copytree(opd_results / "verl", logs)
    lines = (opd_results / "verl" / "run.log").read_bytes().splitlines(keepends=True)
    (logs / "run.log").write_bytes(b"".join(_requeued(lines, first_end=8, restart_after=5, slower=2.0)))
    out = tmp_path / "run"
    p = _cli("--framework", "verl", "--logs", logs, "--out", out)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"{out}: completed, 15 steps from 1 file(s), 0 skipped line(s), 2 attempts;")
    m = read_manifest(RunPaths(out))
    line = next(
        i for i, ln in enumerate((logs / "run.log").read_bytes().splitlines(), 1) if b"PREEMPTION" in ln
    )
    alone = pd.read_parquet(verl_alone / "trace" / "steps.parquet").set_index("step")["step_s"]
    first_run_of_6_to_8 = 2.0 * alone.loc[[6, 7, 8]].sum()  # 2 x (5.0058 + 4.9641 + 4.9863) s
    assert m["attempts"] == {
        "count": 2,
        "source": "run.log",
        "attempts": [
            {"attempt": 1, "first_step": 1, "last_step": 8, "steps": 8, "t_start_s": None, "t_end_s": None,
             "ended": "preempted", "line": f"run.log:{line}"},
            {"attempt": 2, "first_step": 6, "last_step": 15, "steps": 10, "t_start_s": None, "t_end_s": None,
             "ended": "end of log", "line": None},
        ],
        "repeated_steps": [6, 7, 8],
        "trace_keeps": "the last value logged for each step and key: a repeated step holds its last attempt's values",
        "lost_step_s": round(first_run_of_6_to_8, 3),
        "times_reason": "the step lines carry no timestamp (or the trace has no time base)",
        # 2 GPUs: the hybrid trainer/rollout GPU and the teacher's (config.yaml)
        "gpu_hours_lost": round(first_run_of_6_to_8 * 2 / 3600, 6),
        "gpu_hours_lost_counts": f"the discarded runs of the repeated steps ({first_run_of_6_to_8:g} s) x 2 GPUs; "
        "the restart's start-up and work after an attempt's last logged step are not in the step records",
    }  # fmt: skip
    assert m["attempts"]["gpu_hours_lost"] == pytest.approx(0.016618, abs=1e-6)
    steps = pd.read_parquet(out / "trace" / "steps.parquet").set_index("step")
    assert steps["attempt"].tolist() == [1] * 5 + [2] * 10
    assert steps["step_s"].equals(alone)  # steps 6-8 keep the second attempt's (the original) times
    assert (
        f"warning: 2 attempts in run.log: preempted after step 8 (run.log:{line}); step(s) [6, 7, 8] repeated, "
        "the trace keeps their last attempt; 0.016618 GPU-hours lost"
    ) in p.stderr.splitlines()


def test_a_restart_without_an_end_line_is_found_by_the_step_going_back(tmp_path, opd_results):
    """slime (Miles) logs a timestamp on every record: the attempts get their windows."""
    from runners import attempts, slime_logs

    lines = (opd_results / "miles" / "run.log").read_bytes().splitlines(keepends=True)
    train = [i for i, ln in enumerate(lines) if b"'perf/step_time'" in ln]  # train perf 0..14
    log = tmp_path / "run.log"
    log.write_bytes(b"".join(lines[: train[7] + 1] + lines[train[4] + 1 :]))  # 0..7, restart, 5..14
    found, src = attempts.scan(tmp_path, [log], slime_logs.STEP_STREAMS)
    t0 = 1786110151.0  # the harness's start_epoch (miles/wall_time.env)
    s = attempts.summary(found, src, t0, gpus=2, gpus_reason=None)
    assert [(a["first_step"], a["last_step"], a["ended"]) for a in s["attempts"]] == [
        (0, 7, "restarted"),
        (5, 14, "end of log"),
    ]
    restart = [i for i, ln in enumerate(log.read_bytes().splitlines(), 1) if b"'perf/step_time'" in ln][8]
    assert s["attempts"][0]["line"] == f"run.log:{restart}"  # the restart's first step record
    assert s["repeated_steps"] == [5, 6, 7]
    a, b = s["attempts"]
    assert a["t_start_s"] < a["t_end_s"] and b["t_start_s"] < b["t_end_s"]
    assert b["t_end_s"] == pytest.approx(322.014, abs=1e-3)  # 13:47:13, step 14's record
    assert "times_reason" not in s


def test_a_gzipped_log_is_read_and_a_zstd_one_is_read_or_named_as_skipped(tmp_path, opd_results, verl_alone):
    logs = tmp_path / "logs"
    shutil.copytree(opd_results / "verl", logs)
    with open(logs / "run.log", "rb") as src, gzip.open(logs / "run.log.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    (logs / "run.log").unlink()
    zstd = importlib.util.find_spec("zstandard")
    text = (opd_results / "verl" / "overrides.yaml").read_bytes()
    # without the module, any bytes with zstd's magic number stand for the file: it is never opened
    frame = __import__("zstandard").ZstdCompressor().compress(text) if zstd else b"(\xb5/\xfd" + text
    (logs / "extra.log.zst").write_bytes(frame)
    out = tmp_path / "run"
    p = _cli("--framework", "verl", "--logs", logs, "--out", out)
    assert p.returncode == 0, p.stderr
    m = read_manifest(RunPaths(out))
    assert m["parsed_files"] == [str(logs / "run.log.gz"), str(logs / "gpu.csv")]
    assert m["source_logs"] == str(logs.resolve())
    assert "bench-ingest-" not in json.dumps(m)  # no path of the temporary copy survives
    assert pd.read_parquet(out / "trace" / "steps.parquet").equals(
        pd.read_parquet(verl_alone / "trace" / "steps.parquet")
    )
    skipped = (
        f"{logs / 'extra.log.zst'}: compressed (zstd) and skipped: the zstandard module is not installed here "
        f"(pip install zstandard, or decompress it first: zstd -d {logs / 'extra.log.zst'})"
    )
    if zstd is None:
        assert skipped in m["skipped_files"] and skipped in m["warnings"]
        assert f"warning: {skipped}" in p.stderr.splitlines()
        alone = _cli("--framework", "verl", "--logs", logs / "extra.log.zst", "--out", tmp_path / "run2")
        assert alone.returncode == 2 and _errors(alone) == [f"error: --logs {skipped}"]
        assert not (tmp_path / "run2").exists()
    else:
        assert str(logs / "extra.log.zst") not in json.dumps(m["skipped_files"])
