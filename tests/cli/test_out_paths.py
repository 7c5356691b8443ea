"""Every output path is safe (bench/outdir.py), through the real CLI in a subprocess.

An `--out` under a file, inside a run directory, over files the command did not write, or on a
read-only or full filesystem: one `error:` line naming the path and the OS reason, exit 2, no
traceback, and nothing written or changed. The read-only and full filesystems are real tmpfs
mounts (skipped, saying why, where this machine may not mount one).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RENDER = ["render", "experiment=smoke", "framework=verl"]
EMULATE = ["emulate", "experiment=smoke", "framework=verl", "workload.steps=3"]


def bench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root -> (size, mtime ns): what 'nothing written or touched' compares."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def refused(res: subprocess.CompletedProcess, line: str) -> None:
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr.splitlines() == [f"error: {line}"], res.stderr


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A real emulated run directory (bench emulate)."""
    root = tmp_path_factory.mktemp("results") / "smoke" / "verl-1"
    res = bench(root.parents[1], *EMULATE, "--out", str(root))
    assert res.returncode == 0, res.stderr
    return root


@pytest.fixture
def tmpfs(tmp_path: Path):
    """A real 16 MiB tmpfs mounted at tmp_path/mnt (unmounted after the test)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip()}): needs root or CAP_SYS_ADMIN")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path, leave: int = 0) -> None:
    """Fill the filesystem at mnt until at most `leave` bytes are free (ENOSPC from then on)."""
    with open(mnt / "filler", "wb") as f:
        try:
            while os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize > leave:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC


@pytest.mark.parametrize(
    "args",
    [
        [*RENDER, "--out", "notes.txt/out"],
        [*EMULATE, "--out", "notes.txt/out"],
        ["ingest", "--framework", "verl", "--logs", "notes.txt", "--out", "notes.txt/out"],
        ["report", ".", "--out", "notes.txt/sub/out"],
        ["reproduce", "published=sa_cost_ratios", "--out", "notes.txt/out"],
    ],
    ids=["render", "emulate", "ingest", "report", "reproduce"],
)
def test_an_out_under_a_file_is_one_line_with_the_os_reason(tmp_path: Path, args):
    (tmp_path / "notes.txt").write_text("a file, not a folder\n")
    out = args[-1]
    refused(
        bench(tmp_path, *args),
        f"--out {out}: {tmp_path / 'notes.txt'} is a file (Not a directory); choose a --out whose parent "
        "folders are directories",
    )
    assert tree(tmp_path).keys() == {"notes.txt"}


def test_render_never_rewrites_a_run_directorys_launch(run: Path, tmp_path: Path):
    before = tree(run)
    refused(
        bench(tmp_path, *RENDER, "--out", str(run)),
        f"--out {run}: already exists (a run directory); a render replaces only its own earlier "
        "render, choose a new --out",
    )
    refused(
        bench(tmp_path, *RENDER, "--out", str(run / "launch")),
        f"--out {run / 'launch'}: inside the run directory {run}; a run directory is written only by its run, "
        "choose a --out outside it",
    )
    assert tree(run) == before


@pytest.mark.parametrize(
    "args",
    [
        [*EMULATE, "--out", "{run}/again"],
        ["report", "{run}", "--out", "{run}/report"],
        ["calibrate", "{run}", "--out", "{run}/trace/calibration.yaml"],
        ["reproduce", "published=sa_cost_ratios", "--out", "{run}/reproduce"],
        ["compare", "{run}", "{run}", "--out", "{run}/compare"],
        ["probe", "--quick", "--out", "{run}/probe"],
    ],
    ids=["emulate", "report", "calibrate", "reproduce", "compare", "probe"],
)
def test_nothing_is_written_inside_a_run_directory(run: Path, tmp_path: Path, args):
    before = tree(run)
    args = [a.format(run=run) for a in args]
    inside = Path(args[-1])
    refused(
        bench(tmp_path, *args),
        f"--out {inside}: inside the run directory {run}; a run directory is written only by its run, "
        "choose a --out outside it",
    )
    assert tree(run) == before


def test_render_refuses_a_folder_holding_files_it_did_not_write(tmp_path: Path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "index.html").write_text("someone else's page")
    before = tree(tmp_path)
    refused(
        bench(tmp_path, *RENDER, "--out", "out"),
        "--out out: already exists (not empty, holds files bench render did not write); a render replaces "
        "only its own earlier render, choose a new --out",
    )
    assert tree(tmp_path) == before


def test_an_out_on_a_read_only_filesystem_is_one_line_with_the_os_reason(tmpfs: Path, tmp_path: Path):
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    out = tmpfs / "launch-here"
    refused(
        bench(tmp_path, *RENDER, "--out", str(out)),
        f"--out {out}: {tmpfs} is not writable (Read-only file system); choose a --out on a writable filesystem",
    )
    assert list(tmpfs.iterdir()) == []


def test_a_full_disk_while_rendering_is_one_line_not_a_traceback(tmpfs: Path, tmp_path: Path):
    fill(tmpfs)
    out = tmpfs / "launch-here"
    refused(
        bench(tmp_path, *RENDER, "--out", str(out)),
        f"--out {out}: cannot write (No space left on device); nothing was changed there, choose another --out",
    )


def test_render_replaces_its_own_earlier_render_whole(tmp_path: Path):
    assert bench(tmp_path, *RENDER, "--out", "out").returncode == 0
    assert (tmp_path / "out" / "launch" / "overrides.txt").is_file()  # verl's native overrides
    slime = ["render", "experiment=smoke", "framework=slime"]
    assert bench(tmp_path, *slime, "--out", "fresh").returncode == 0
    res = bench(tmp_path, *slime, "--out", "out")
    assert res.returncode == 0, res.stderr
    assert sorted(tree(tmp_path / "out")) == sorted(tree(tmp_path / "fresh"))  # nothing of verl's left
    assert res.stdout.splitlines()[0] == "out/launch/command.json"


def _csv_frameworks(report: Path) -> list[str]:
    import csv

    with open(report / "summary.csv") as f:
        return sorted(row["framework"] for row in csv.DictReader(f))


def test_a_report_replaces_its_own_earlier_report_and_nothing_else(run: Path, tmp_path: Path):
    assert bench(tmp_path, "report", str(run), "--out", "rep").returncode == 0
    assert _csv_frameworks(tmp_path / "rep") == ["verl"]
    res = bench(tmp_path, "report", str(run), "--out", "rep")  # its own earlier report: replaced
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"report: {Path('rep') / 'index.html'} (")
    assert [p.name for p in tmp_path.iterdir()] == ["rep"]  # no temporary or old copy left beside it
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "index.html").write_text("my own page")
    before = tree(tmp_path)
    refused(
        bench(tmp_path, "report", str(run), "--out", "mine"),
        "--out mine: already exists (not empty, holds files bench report did not write); a report replaces "
        "only its own earlier report, choose a new --out",
    )
    assert tree(tmp_path) == before


def test_a_reproduce_replaces_its_own_earlier_output_and_nothing_else(tmp_path: Path):
    reproduce = ["reproduce", "published=sa_cost_ratios", "--out"]
    assert bench(tmp_path, *reproduce, "rep").returncode == 0
    (tmp_path / "rep" / "stale.txt").write_text("left by the earlier reproduce")
    res = bench(tmp_path, *reproduce, "rep")  # its own earlier output: replaced whole
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1].endswith(f"written to {Path('rep') / 'index.html'} and reproduce.md")
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == [
        ".bench-output.json", "index.html", "reproduce.csv", "reproduce.md",
    ]  # fmt: skip
    assert [p.name for p in tmp_path.iterdir()] == ["rep"]  # no temporary or old copy left beside it
    old = tmp_path / "reports" / "reproduce"  # written before the marker existed: its own names only
    old.mkdir(parents=True)
    (old / "reproduce.md").write_text("an earlier table")
    (old / "index.html").write_text("an earlier page")
    assert bench(tmp_path, *reproduce, str(old)).returncode == 0  # replaced, as `make reproduce` did
    assert (old / ".bench-output.json").is_file()
    mixed = tmp_path / "mixed"  # the same names beside a file of someone else's
    mixed.mkdir()
    (mixed / "reproduce.md").write_text("an earlier table")
    (mixed / "notes.txt").write_text("mine")
    old = mixed
    before = tree(tmp_path)
    refused(
        bench(tmp_path, *reproduce, str(old)),
        f"--out {old}: already exists (not empty, holds files bench reproduce did not write); a reproduce "
        "replaces only its own earlier output, choose a new --out",
    )
    assert tree(tmp_path) == before


def test_a_full_disk_leaves_the_earlier_report_whole(run: Path, tmpfs: Path, tmp_path: Path):
    out = tmpfs / "report"
    assert bench(tmp_path, "report", str(run), "--out", str(out)).returncode == 0
    fill(tmpfs)
    before = tree(tmpfs)
    refused(
        bench(tmp_path, "report", str(run), "--out", str(out)),
        f"--out {out}: cannot write (No space left on device); nothing was changed there, choose another --out",
    )
    assert tree(tmpfs) == before  # the earlier report as it was, no truncated index.html, no temporary


def test_a_full_disk_never_leaves_a_run_directory_without_its_manifest(tmpfs: Path, tmp_path: Path):
    fill(tmpfs)
    out = tmpfs / "run"
    res = bench(tmp_path, *EMULATE, "--out", str(out))
    refused(
        res,
        f"--out {out}: cannot write (No space left on device); nothing was changed there, choose another --out",
    )
    assert not out.exists()  # its first manifest could not be written: the empty folders went too


def test_a_full_results_dir_ends_the_runs_bench_run_allocated(tmpfs: Path, tmp_path: Path):
    fill(tmpfs)
    res = bench(tmp_path, "run", "experiment=smoke", "framework=verl", f"results_dir={tmpfs}")
    assert "Traceback" not in res.stderr and res.returncode == 2, res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"error: {tmpfs}/smoke/verl-") and line.endswith(
        "/manifest.json: cannot write (No space left on device); its run directory was removed, "
        "free space or write elsewhere"
    )
    assert not list((tmpfs / "smoke").glob("*/")), "a run directory without its manifest"


@pytest.mark.parametrize("existing", [False, True], ids=["new-out", "empty-out"])
def test_a_full_disk_mid_ingest_leaves_no_run_directory(
    opd_results: Path, tmpfs: Path, tmp_path: Path, existing
):
    """The real verl logs parse, the run's folders are made (a tmpfs directory costs no block), and
    the first trace file meets ENOSPC: what ingest made is removed (an empty --out it was given
    stays, empty), so no folder is ever left without its manifest."""
    out = tmpfs / "verl"
    if existing:
        out.mkdir()
    fill(tmpfs)
    res = bench(
        tmp_path, "ingest", "--framework", "verl", "--logs", str(opd_results / "verl"), "--out", str(out)
    )
    refused(
        res,
        f"{out / 'trace' / 'steps.parquet'}: cannot write (No space left on device); its run directory "
        "was removed, free space or write elsewhere",
    )
    assert sorted(p.name for p in tmpfs.iterdir()) == (["filler", "verl"] if existing else ["filler"])
    assert not existing or list(out.iterdir()) == []


def test_a_full_disk_in_any_other_writer_is_one_line_naming_the_file(run: Path, tmpfs: Path, tmp_path: Path):
    copy = tmpfs / "run"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    (copy / "metrics.json").unlink()
    fill(tmpfs)
    refused(
        bench(tmp_path, "metrics", str(copy)),
        f"{copy / 'metrics.json'}: cannot write (No space left on device); free space or write elsewhere",
    )
    assert not (copy / "metrics.json").exists() and not list(copy.glob(".metrics.json.*"))
