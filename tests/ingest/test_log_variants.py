"""Real logs as users bring them: the corpus's and the opd-benchmark's logs, transformed at test time
the way copies, terminals and crashes change them. A variant that carries the same information
(CRLF line ends, colour codes, Ray's actor prefix on every line, a UTF-8 byte-order mark, UTF-16 from
a Windows redirect, gzip, a very long line, the log inside a folder) ingests to the same numbers as
the original: steps and their timings, model, GPUs, configured steps, how the run ended. A cut or
killed log ends early with the steps it has; a restarted run's repeated steps are one attempt more,
not more steps; a folder holding several runs is refused in one line, exit 2, nothing written."""

from __future__ import annotations

import gzip
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from bench.ingest import main as ingest
from bench.trace import RunPaths, read_manifest

H = "eric-haibin-lin-verl-data/deepseek-llm-7b-chat-megatron-bsz256_4-prompt512-resp512-0.695.log"
C = "diqiuzhuanzhuan-verldata/qwen2-7b_math_megatron.log"
OPD = {"verl": "verl", "slime": "miles", "prime_rl": "prime"}  # framework -> its opd results folder


def _lines(b: bytes) -> list[bytes]:
    return b.splitlines(keepends=True)


def crlf(b: bytes) -> bytes:
    return b.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def colour(b: bytes) -> bytes:
    """Every line in bold green (a terminal's `script` capture, loguru's colours)."""
    return b"".join(
        b"\x1b[1m\x1b[32m" + ln.rstrip(b"\n") + b"\x1b[0m" + (b"\n" if ln.endswith(b"\n") else b"")
        for ln in _lines(b)
    )


def ray_prefix(b: bytes) -> bytes:
    """Ray's coloured actor prefix on every line that has none (the lines of a Ray actor)."""
    prefix = b"\x1b[36m(Worker pid=4567, ip=10.0.0.12)\x1b[0m "
    return b"".join(ln if ln.startswith((b"(", b"\x1b")) else prefix + ln for ln in _lines(b))


def bom(b: bytes) -> bytes:
    return b"\xef\xbb\xbf" + b


def utf16(b: bytes) -> bytes:
    """PowerShell's `>`: UTF-16 with its byte-order mark."""
    return b.decode("utf-8", errors="replace").encode("utf-16")


def long_line(b: bytes) -> bytes:
    """A 9 MiB line without a space in the middle of the log (a dumped token list or blob)."""
    ls = _lines(b)
    return b"".join([*ls[: len(ls) // 2], b"x" * (9 << 20) + b"\n", *ls[len(ls) // 2 :]])


def all_three(b: bytes) -> bytes:
    return crlf(colour(ray_prefix(b)))


def _numbers(run: Path) -> dict:
    """What an ingested run says: status and how it ended, every step's numbers, the inferred
    values (without their sources' wording), the attempts and the GPU samples."""
    m = read_manifest(RunPaths(run))
    failure = m["failure"] or {}
    steps = pd.read_parquet(run / "trace" / "steps.parquet").drop(columns="attempt")
    gpu = run / "trace" / "gpu.parquet"
    inferred = {
        k: (v.get("value") if "value" in v else {r: e.get("value") for r, e in v.items()})
        for k, v in m["inferred"].items()
        if isinstance(v, dict)
    }
    return {
        "status": m["status"],
        "ended": (failure.get("kind"), failure.get("phase")),
        "steps": steps.round(6).to_dict("list"),
        "inferred": inferred,
        "wall_s": m.get("wall_s"),
        "attempts": m["attempts"]["count"],
        "gpu_samples": len(pd.read_parquet(gpu)) if gpu.exists() else 0,
    }


def _same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN (a step's missing value stays missing)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _run(fw: str, logs: Path, out: Path, capsys) -> tuple[int, list[str]]:
    rc = ingest(["--framework", fw, "--logs", str(logs), "--out", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, [ln for ln in err.splitlines() if ln.startswith("error: ")]


def _variant(src: Path, into: Path, change: Callable[[bytes], bytes], suffix: str = "") -> Path:
    """`src` (a log, or a run folder whose console logs are changed) rewritten by `change` under
    `into`; the other files of a folder are copied as they are."""
    into.mkdir(parents=True)
    if src.is_file():
        out = into / (src.name + suffix)
        out.write_bytes(change(src.read_bytes()))
        return out
    for p in src.iterdir():
        if p.suffix == ".log":
            (into / (p.name + suffix)).write_bytes(change(p.read_bytes()))
        else:
            shutil.copy(p, into / p.name)
    return into


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """Each source's ingest as it is, once: (framework, logs) -> its numbers."""
    cache: dict[tuple[str, Path], dict] = {}

    def get(fw: str, logs: Path) -> dict:
        if (fw, logs) not in cache:
            out = tmp_path_factory.mktemp("orig") / "run"
            assert ingest(["--framework", fw, "--logs", str(logs), "--out", str(out)]) == 0
            cache[fw, logs] = _numbers(out)
        return cache[fw, logs]

    return get


SAME_INFORMATION = {
    "crlf": (crlf, ""),
    "colour": (colour, ""),
    "ray_prefix": (ray_prefix, ""),
    "bom": (bom, ""),
    "utf16": (utf16, ""),
    "gzip": (gzip.compress, ".gz"),
    "long_line": (long_line, ""),
    "crlf_colour_ray_prefix": (all_three, ""),
}


@pytest.mark.parametrize("variant", list(SAME_INFORMATION))
def test_a_corpus_log_changed_in_form_ingests_to_the_same_numbers(
    tmp_path, verl_corpus, originals, capsys, variant
):
    """H (verl on Megatron, 104 steps of 105, its model downloaded from the hub on line 22)."""
    change, suffix = SAME_INFORMATION[variant]
    logs = _variant(verl_corpus / H, tmp_path / "in", change, suffix)
    rc, errors = _run("verl", logs, tmp_path / "run", capsys)
    assert (rc, errors) == (0, [])
    got, want = _numbers(tmp_path / "run"), originals("verl", verl_corpus / H)
    assert want["inferred"]["model"] == "deepseek-ai/deepseek-llm-7b-chat"
    assert _same(got, want)


@pytest.mark.parametrize("framework", list(OPD))
@pytest.mark.parametrize("variant", ["crlf", "crlf_colour_ray_prefix", "bom", "gzip"])
def test_an_opd_run_changed_in_form_ingests_to_the_same_numbers(
    tmp_path, opd_results, originals, capsys, framework, variant
):
    """The opd-benchmark's run folders (console logs beside GPU CSVs, a wall-time file and, for
    prime-rl, metric JSONL files), each console log changed."""
    change, suffix = SAME_INFORMATION[variant]
    src = opd_results / OPD[framework]
    logs = _variant(src, tmp_path / "in", change, suffix)
    rc, errors = _run(framework, logs, tmp_path / "run", capsys)
    assert (rc, errors) == (0, [])
    assert _same(_numbers(tmp_path / "run"), originals(framework, src))


@pytest.mark.parametrize("framework", list(OPD))
def test_an_opd_run_saved_on_windows_ingests_to_the_same_numbers(
    tmp_path, opd_results, originals, capsys, framework
):
    """Every file of the run folder (its nvidia-smi CSV and wall-time file too) with CRLF line
    ends and a UTF-8 byte-order mark, as Windows editors and Excel save them: the same steps and
    the same GPU samples."""
    src, logs = opd_results / OPD[framework], tmp_path / "in"
    logs.mkdir()
    for p in src.iterdir():
        (logs / p.name).write_bytes(bom(crlf(p.read_bytes())))
    assert _run(framework, logs, tmp_path / "run", capsys) == (0, [])
    got, want = _numbers(tmp_path / "run"), originals(framework, src)
    assert want["gpu_samples"] > 0
    assert _same(got, want)


@pytest.mark.parametrize("framework", list(OPD))
def test_a_folder_holding_one_runs_folder_ingests_as_that_folder(
    tmp_path, opd_results, originals, capsys, framework
):
    """--logs one level above the run's folder (its wall-time file included): the same clock."""
    src = opd_results / OPD[framework]
    shutil.copytree(src, tmp_path / "in" / "run")
    assert _run(framework, tmp_path / "in", tmp_path / "run", capsys) == (0, [])
    assert _same(_numbers(tmp_path / "run"), originals(framework, src))


def test_a_log_cut_before_its_first_step_is_a_failed_run(tmp_path, opd_results, capsys):
    """The opd verl run's log cut mid-line at a third, before its first step record: ingested as
    failed (truncated, at launch or the first step) with no steps, not refused as not verl's."""
    logs = _variant(opd_results / "verl", tmp_path / "in", lambda b: b[: b.find(b"\n", len(b) // 3) - 3])
    assert _run("verl", logs, tmp_path / "run", capsys) == (0, [])
    m = read_manifest(RunPaths(tmp_path / "run"))
    assert m["status"] == "failed"
    assert (m["failure"]["kind"], m["failure"]["phase"]) == ("truncated", "launch or first step")
    assert m["failure"]["message"] == "log cut off mid-line after step 0 of 15"
    assert not (tmp_path / "run" / "trace" / "steps.parquet").exists()


def _cut(b: bytes, at_line_end: bool) -> bytes:
    """The log up to its first step record after 60% of its bytes: cut 3 bytes before that
    record's end (the process killed mid-write), or just before the record (between two writes)."""
    record = re.compile(rb"step:\d+ - ").search(b, int(len(b) * 0.6)).start()
    return b[: b.rfind(b"\n", 0, record) + 1] if at_line_end else b[: b.find(b"\n", record) - 3]


@pytest.mark.parametrize("how", ["mid_line", "at_line_end", "zero_filled_tail"])
def test_a_killed_log_ends_early_with_the_steps_it_has(tmp_path, verl_corpus, originals, capsys, how):
    """C configured 105 steps and completed them; cut at 60% it is partial (truncated), never
    completed or running, and every step it kept is the original's step, with its numbers."""

    def change(b: bytes) -> bytes:
        cut = _cut(b, how == "at_line_end")
        return cut + b"\0" * 4096 if how == "zero_filled_tail" else cut

    logs = _variant(verl_corpus / C, tmp_path / "in", change)
    rc, errors = _run("verl", logs, tmp_path / "run", capsys)
    assert (rc, errors) == (0, [])
    got, want = _numbers(tmp_path / "run"), originals("verl", verl_corpus / C)
    assert want["status"] == "completed" and len(want["steps"]["step"]) == 105
    n = len(got["steps"]["step"])
    assert 0 < n < 105
    assert (got["status"], got["ended"][0]) == ("partial", "truncated")
    assert got["steps"]["step"] == want["steps"]["step"][:n]
    whole = n if how == "at_line_end" else n - 1  # a record cut short keeps all but its last value
    assert _same(got["steps"]["step_s"][:whole], want["steps"]["step_s"][:whole])
    assert _same(got["inferred"], want["inferred"])


def test_a_restarted_runs_repeated_steps_are_a_second_attempt(tmp_path, verl_corpus, originals, capsys):
    """C's lines from its 40th step record to its 60th logged again, as a run restarted from a
    checkpoint logs them: the same steps with the same numbers (each step's last attempt), and
    two attempts."""

    def change(b: bytes) -> bytes:
        ls = _lines(b)
        records = [i for i, ln in enumerate(ls) if re.search(rb"\bstep:\d+ - ", ln)]
        return b"".join([*ls[: records[60]], *ls[records[40] :]])

    logs = _variant(verl_corpus / C, tmp_path / "in", change)
    assert _run("verl", logs, tmp_path / "run", capsys) == (0, [])
    got, want = _numbers(tmp_path / "run"), originals("verl", verl_corpus / C)
    assert got["attempts"] == 2
    assert _same({**got, "attempts": 1}, want)


def test_a_folder_of_one_log_ingests_as_the_log(tmp_path, verl_corpus, originals, capsys):
    (tmp_path / "in").mkdir()
    shutil.copy(verl_corpus / H, tmp_path / "in")
    assert _run("verl", tmp_path / "in", tmp_path / "run", capsys) == (0, [])
    assert _same(_numbers(tmp_path / "run"), originals("verl", verl_corpus / H))


def test_a_folder_of_two_runs_logs_is_refused_naming_both(tmp_path, verl_corpus, capsys):
    """C and H side by side: each logs from the first step, so their records would merge step by
    step into one run; refused in one line, exit 2, nothing written."""
    logs = tmp_path / "in"
    logs.mkdir()
    for log in (C, H):
        shutil.copy(verl_corpus / log, logs)
    rc, errors = _run("verl", logs, tmp_path / "run", capsys)
    assert (rc, errors) == (
        2,
        [
            f"error: --logs {logs}: holds 2 runs (or copies of one), not one "
            f"({Path(H).name}: steps 0-105; {Path(C).name}: steps 0-105: each logged from the first step); "
            "pass one run's log as --logs"
        ],
    )
    assert not (tmp_path / "run").exists()


def test_an_empty_log_is_refused_in_one_line(tmp_path, capsys):
    log = tmp_path / "run.log"
    log.write_bytes(b"")
    rc, errors = _run("verl", log, tmp_path / "run", capsys)
    assert (rc, errors) == (2, [f"error: --logs {log}: empty (no file with any content); nothing to ingest"])
    assert not (tmp_path / "run").exists()


def test_an_existing_out_is_never_overwritten(tmp_path, verl_corpus, capsys):
    out = tmp_path / "run"
    assert _run("verl", verl_corpus / H, out, capsys) == (0, [])
    before = (out / "manifest.json").read_bytes()
    rc, errors = _run("verl", _variant(verl_corpus / H, tmp_path / "in", crlf), out, capsys)
    assert rc == 2 and len(errors) == 1 and str(out) in errors[0]
    assert (out / "manifest.json").read_bytes() == before
