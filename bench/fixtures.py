"""The real-log fixtures the tests read: where they are found, and `make fixtures` to fetch them.

    python -m bench.fixtures [--check]

Where they are found (this module is the one place; tests/conftest.py, `bench reproduce`'s default
--data-root and benchmarks/ all ask it):

- `RLBENCH_FIXTURES`: the fixtures folder (opd-benchmark/, h200-probe/); default
  `<checkout>/../shared/fixtures`.
- `RLBENCH_CORPUS`: public verl console logs (verl/<source>/...); default the `corpus` folder
  beside the fixtures folder (`<checkout>/../shared/corpus`).
- `RLBENCH_REFERENCE`: the project's research notes (reference/*.md, quoting real log lines from
  public GitHub issues); default the `reference` folder beside the fixtures folder. Not public as
  a repository, so `make fixtures` cannot fetch it: the few tests that read it skip without it.

`make fixtures` fetches every file of bench/fixtures.lock.json with git from its public repository
at the pinned commit (it needs the network), checks its sha256 against the manifest, and only then
writes it under the folders above. A file already there with the right hash is kept; one with
another hash is never overwritten (the command stops and names it). The h200-probe measurements
were made for this project and are in no public repository: the tests that read them skip.

Console logs (`text: "ansi-cr-stripped"` in the manifest) are hashed after removing ANSI escape
sequences and carriage returns, the form the fixture copies were made in; every other file is
hashed byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.cli import counted

REPO = Path(__file__).resolve().parents[1]
MANIFEST = Path(__file__).with_name("fixtures.lock.json")
# ESC [ params final-byte (colour codes, cursor moves) and ESC ] ... BEL (terminal titles)
ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")


class FixtureError(Exception):
    """A fetch or a check failed; str(e) is one line naming the file or repository and the fix."""


def fixtures_dir() -> Path:
    """The real-log fixtures folder: $RLBENCH_FIXTURES, else <checkout>/../shared/fixtures."""
    env = os.environ.get("RLBENCH_FIXTURES")
    return Path(env).expanduser() if env else REPO.parent / "shared" / "fixtures"


def corpus_dir() -> Path:
    """The public verl log corpus: $RLBENCH_CORPUS, else `corpus` beside the fixtures folder."""
    env = os.environ.get("RLBENCH_CORPUS")
    return Path(env).expanduser() if env else fixtures_dir().parent / "corpus"


def reference_dir() -> Path:
    """The research notes: $RLBENCH_REFERENCE, else `reference` beside the fixtures folder."""
    env = os.environ.get("RLBENCH_REFERENCE")
    return Path(env).expanduser() if env else fixtures_dir().parent / "reference"


def roots() -> dict[str, Path]:
    """Manifest root name -> the folder its files go to."""
    return {"fixtures": fixtures_dir(), "corpus": corpus_dir()}


def load_manifest(path: Path = MANIFEST) -> list[dict]:
    """The manifest's sources: {repo (git URL), commit, root, files: [{path, from, sha256, text?}]}."""
    return json.loads(path.read_text())["sources"]


def digest(data: bytes, text: str | None = None) -> str:
    """sha256 of a file's bytes, after the manifest's normalisation (`ansi-cr-stripped`) if any."""
    if text == "ansi-cr-stripped":
        data = ANSI.sub(b"", data).replace(b"\r", b"")
    elif text is not None:
        raise FixtureError(f"{MANIFEST.name}: unknown text normalisation {text!r} (known: ansi-cr-stripped)")
    return hashlib.sha256(data).hexdigest()


def check(sources: list[dict], dest: dict[str, Path]) -> list[str]:
    """One line per manifest file that is missing or whose hash differs; empty when all match."""
    problems = []
    for src in sources:
        for f in src["files"]:
            p = dest[src["root"]] / f["path"]
            if not p.is_file():
                problems.append(f"{p}: missing")
            elif (got := digest(p.read_bytes(), f.get("text"))) != f["sha256"]:
                problems.append(f"{p}: sha256 {got}, the manifest has {f['sha256']}")
    return problems


def _git(args: list[str], cwd: Path) -> bytes:
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True)
    if p.returncode != 0:
        last = (p.stderr.decode(errors="replace").strip().splitlines() or ["(no message)"])[-1]
        raise FixtureError(f"git {' '.join(args)} failed: {last}")
    return p.stdout


def fetch(sources: list[dict], dest: dict[str, Path], log=print) -> int:
    """Fetch every source at its commit, verify each file's sha256, then write the missing ones.

    Every file of a source is fetched and verified before any is written, and a file already at
    its destination is never overwritten: right hash, kept; another hash, FixtureError. Returns the
    number of files written."""
    written = 0
    for src in sources:
        root = dest[src["root"]]
        clash = [
            str(root / f["path"])
            for f in src["files"]
            if (root / f["path"]).exists()
            and digest((root / f["path"]).read_bytes(), f.get("text")) != f["sha256"]
        ]
        if clash:
            raise FixtureError(
                f"{clash[0]} exists with another sha256 than {MANIFEST.name} pins: move it away "
                f"(or point RLBENCH_FIXTURES/RLBENCH_CORPUS elsewhere) and run `make fixtures` again"
            )
        todo = [f for f in src["files"] if not (root / f["path"]).exists()]
        if not todo:
            log(f"{src['repo']}: {counted(len(src['files']), 'file')} already present and verified")
            continue
        log(f"{src['repo']} @ {src['commit'][:12]}: fetching {counted(len(todo), 'file')}")
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            _git(["init", "-q"], work)
            try:
                _git(["fetch", "-q", "--depth", "1", src["repo"], src["commit"]], work)
            except FixtureError as e:
                raise FixtureError(f"{e} (make fixtures needs the network to reach {src['repo']})") from None
            blobs = {}
            for f in todo:
                data = _git(["show", f"FETCH_HEAD:{f['from']}"], work)
                if (got := digest(data, f.get("text"))) != f["sha256"]:
                    raise FixtureError(
                        f"{src['repo']} @ {src['commit']}: {f['from']} has sha256 {got}, "
                        f"{MANIFEST.name} pins {f['sha256']}: nothing written"
                    )
                blobs[root / f["path"]] = data
        for path, data in blobs.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            part = path.with_name(path.name + ".part")
            part.write_bytes(data)
            part.replace(path)  # atomic: a reader never sees half a fixture
            written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.fixtures",
        description=(
            "Fetch the real-log fixtures the tests read from their public repositories at pinned "
            "commits (needs the network; git must be installed), verify each file's sha256 against "
            f"bench/{MANIFEST.name}, and write them to $RLBENCH_FIXTURES (default "
            "<checkout>/../shared/fixtures) and $RLBENCH_CORPUS (default: corpus beside it). "
            "Files already present with the right hash are kept; none is overwritten."
        ),
        epilog="example: make fixtures   (or: RLBENCH_FIXTURES=~/rl-fixtures python -m bench.fixtures)",
    )
    ap.add_argument("--check", action="store_true", help="only verify the files already present (no network)")
    args = ap.parse_args(argv)
    dest = roots()
    try:
        sources = load_manifest()
        if not args.check:
            print("make fixtures: fetching from github.com with git (this needs the network)")
            n = fetch(sources, dest)
            print(f"wrote {counted(n, 'file')}")
        problems = check(sources, dest)
    except FixtureError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    total = sum(len(s["files"]) for s in sources)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if problems:
        print("error: run `make fixtures` to fetch what is missing", file=sys.stderr)
        return 1
    print(f"{counted(total, 'file')} verified under {dest['fixtures']} and {dest['corpus']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
