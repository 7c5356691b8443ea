"""bench/fixtures.py (`make fixtures`): the real-log fixtures fetched with git at a pinned commit and
verified against bench/fixtures.lock.json before anything is written. The repositories here are
local git repositories built from the real fixture files (the test machine has no network); the
fetch, the hash check and the writes are the real ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import fixtures
from tests.conftest import REPO

MANIFEST = fixtures.load_manifest()
OPD_SOURCE = next(s for s in MANIFEST if s["repo"].endswith("SemiAnalysisAI/opd-benchmark"))
# two files of the real campaign: one hashed byte for byte, one console log hashed without ANSI and CR
WALL = next(f for f in OPD_SOURCE["files"] if f["path"].endswith("verl/wall_time.env"))
RAY = next(f for f in OPD_SOURCE["files"] if f["path"].endswith("miles/ray.log"))


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.fixtures", *args], cwd=REPO, capture_output=True, text=True, env=env
    )


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _upstream(tmp: Path, opd_results: Path, ray_bytes: bytes | None = None) -> dict:
    """A git repository laid out like SemiAnalysisAI/opd-benchmark holding the two files, its
    console log coloured and CRLF-terminated as the original is; the source entry that pins it."""
    repo = tmp / "upstream"
    for f, data in [
        (WALL, (opd_results / "verl" / "wall_time.env").read_bytes()),
        (
            RAY,
            ray_bytes
            if ray_bytes is not None
            else _coloured((opd_results / "miles" / "ray.log").read_bytes()),
        ),
    ]:
        (repo / f["from"]).parent.mkdir(parents=True, exist_ok=True)
        (repo / f["from"]).write_bytes(data)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fixtures")
    return {
        **OPD_SOURCE,
        "repo": repo.as_uri(),
        "commit": _git(repo, "rev-parse", "HEAD"),
        "files": [WALL, RAY],
    }


def _coloured(log: bytes) -> bytes:
    """The console log as Ray writes it: the level in colour, CRLF line ends."""
    return log.replace(b"\tINFO ", b"\t\x1b[36mINFO\x1b[0m ").replace(b"\n", b"\r\n")


def test_the_real_fixtures_match_the_manifest(opd_results, verl_corpus):
    """`--check` hashes every file the manifest pins, without the network."""
    env = {"PATH": "/usr/bin:/bin", "RLBENCH_FIXTURES": str(opd_results.parents[2])}
    env["RLBENCH_CORPUS"] = str(verl_corpus.parent)
    p = _cli("--check", env=env)
    assert (p.returncode, p.stderr) == (0, "")
    n = sum(len(s["files"]) for s in MANIFEST)
    assert p.stdout == f"{n} files verified under {opd_results.parents[2]} and {verl_corpus.parent}\n"


def test_every_file_the_tests_read_is_pinned(opd_results, verl_corpus):
    """Every opd-benchmark and corpus file is in the manifest, so a test never reads a file that
    `make fixtures` would not fetch (the README.md files above them, written for the copies, excepted)."""
    pinned = {(s["root"], f["path"]) for s in MANIFEST for f in s["files"]}
    fx, corpus = opd_results.parents[2], verl_corpus.parent
    on_disk = {
        ("fixtures", p.relative_to(fx).as_posix()) for p in opd_results.parent.rglob("*") if p.is_file()
    }
    on_disk |= {("corpus", p.relative_to(corpus).as_posix()) for p in verl_corpus.rglob("*") if p.is_file()}
    assert len(on_disk) == 31 and on_disk == pinned


def test_fetch_verifies_then_writes_and_a_second_fetch_keeps_them(tmp_path, opd_results):
    src = _upstream(tmp_path, opd_results)
    dest = {"fixtures": tmp_path / "fixtures", "corpus": tmp_path / "corpus"}
    lines: list[str] = []
    assert fixtures.fetch([src], dest, log=lines.append) == 2
    assert lines == [f"{src['repo']} @ {src['commit'][:12]}: fetching 2 files"]
    assert fixtures.check([src], dest) == []
    ray = dest["fixtures"] / RAY["path"]
    assert b"\x1b[36m" in ray.read_bytes()  # written as the repository holds it; only the hash normalises
    assert fixtures.fetch([src], dest, log=lines.append) == 0
    assert lines[-1] == f"{src['repo']}: 2 files already present and verified"


def test_a_file_that_differs_from_its_pin_writes_nothing(tmp_path, opd_results):
    src = _upstream(tmp_path, opd_results, ray_bytes=b"not the campaign's ray.log\n")
    dest = {"fixtures": tmp_path / "fixtures", "corpus": tmp_path / "corpus"}
    with pytest.raises(fixtures.FixtureError) as e:
        fixtures.fetch([src], dest)
    assert str(e.value).startswith(f"{src['repo']} @ {src['commit']}: {RAY['from']} has sha256 ")
    assert str(e.value).endswith(f"fixtures.lock.json pins {RAY['sha256']}: nothing written")
    assert not dest["fixtures"].exists()


def test_a_different_file_already_there_is_never_overwritten(tmp_path, opd_results):
    src = _upstream(tmp_path, opd_results)
    dest = {"fixtures": tmp_path / "fixtures", "corpus": tmp_path / "corpus"}
    mine = dest["fixtures"] / WALL["path"]
    mine.parent.mkdir(parents=True)
    mine.write_text("start_epoch=1\n")
    with pytest.raises(fixtures.FixtureError) as e:
        fixtures.fetch([src], dest)
    assert str(e.value) == (
        f"{mine} exists with another sha256 than fixtures.lock.json pins: move it away (or point "
        "RLBENCH_FIXTURES/RLBENCH_CORPUS elsewhere) and run `make fixtures` again"
    )
    assert mine.read_text() == "start_epoch=1\n"


def test_an_unreachable_repository_says_the_network_is_needed(tmp_path):
    gone = (tmp_path / "no-such-repo").as_uri()
    src = {**OPD_SOURCE, "repo": gone}
    with pytest.raises(fixtures.FixtureError) as e:
        fixtures.fetch([src], {"fixtures": tmp_path / "f", "corpus": tmp_path / "c"}, log=lambda _: None)
    assert str(e.value).startswith(f"git fetch -q --depth 1 {gone} {OPD_SOURCE['commit']} failed: ")
    assert str(e.value).endswith(f"(make fixtures needs the network to reach {gone})")


def test_check_names_each_missing_file_and_the_fix(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "RLBENCH_FIXTURES": str(tmp_path / "fx"),
        "RLBENCH_CORPUS": str(tmp_path / "c"),
    }
    p = _cli("--check", env=env)
    err = p.stderr.splitlines()
    assert p.returncode == 1 and p.stdout == ""
    assert err[0] == f"error: {tmp_path / 'fx' / OPD_SOURCE['files'][0]['path']}: missing"
    assert len(err) == sum(len(s["files"]) for s in MANIFEST) + 1
    assert err[-1] == "error: run `make fixtures` to fetch what is missing"


def test_the_corpus_defaults_beside_the_fixtures_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("RLBENCH_FIXTURES", str(tmp_path / "fx"))
    monkeypatch.delenv("RLBENCH_CORPUS", raising=False)
    monkeypatch.delenv("RLBENCH_REFERENCE", raising=False)
    assert (fixtures.corpus_dir(), fixtures.reference_dir()) == (tmp_path / "corpus", tmp_path / "reference")
    monkeypatch.delenv("RLBENCH_FIXTURES")
    assert fixtures.fixtures_dir() == REPO.parent / "shared" / "fixtures"
