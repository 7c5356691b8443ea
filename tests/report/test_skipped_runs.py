"""The report names every directory it skipped and why, one line each with the fix, and a manifest
states its schema version (issue 20, section 6). A real ingested run, copied into broken shapes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report.load import NO_MANIFEST, load_attempts
from bench.trace import MANIFEST_SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]


def _bench(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def results(opd_results, tmp_path_factory) -> Path:
    """results/opd/: the verl run ingested (`ok`), and copies of it broken one way each."""
    root = tmp_path_factory.mktemp("results") / "opd"
    ok = root / "ok"
    p = _bench("ingest", "--framework", "verl", "--logs", opd_results / "verl", "--out", ok)
    assert p.returncode == 0, p.stderr
    for name in ("no-manifest", "cut-parquet", "future", "bad-metrics"):
        shutil.copytree(ok, root / name)
    (root / "no-manifest" / "manifest.json").unlink()
    steps = root / "cut-parquet" / "trace" / "steps.parquet"
    steps.write_bytes(steps.read_bytes()[: steps.stat().st_size // 2])  # a copy cut short
    manifest = json.loads((root / "future" / "manifest.json").read_text())
    (root / "future" / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 99}))
    (root / "bad-metrics" / "metrics.json").write_text('{"energy_wh": 14.9')
    return root


def test_an_ingested_manifest_states_its_schema_version(results):
    assert (
        json.loads((results / "ok" / "manifest.json").read_text())["schema_version"]
        == MANIFEST_SCHEMA_VERSION
        == 1
    )


def test_the_report_reads_the_good_run_and_names_each_skipped_directory_and_why(results):
    runs, df, _ = load_attempts([results])
    assert [r.paths.root.name for r in runs] == ["ok"]
    skipped = df.attrs["skipped"]
    assert skipped[0] == f"{results / 'no-manifest'}: {NO_MANIFEST}"
    assert skipped[1].startswith(f"{results / 'bad-metrics' / 'metrics.json'}: not valid JSON (")
    assert skipped[1].endswith(f"; recompute it with `bench metrics {results / 'bad-metrics'}`")
    assert skipped[2].startswith(
        f"{results / 'cut-parquet' / 'trace' / 'steps.parquet'}: unreadable parquet ("
    )
    assert skipped[2].endswith(f"; recompute the run's files with `bench metrics {results / 'cut-parquet'}`")
    assert skipped[3] == (
        f"{results / 'future' / 'manifest.json'}: schema_version 99 is not one this suite reads (1); "
        "read it with the suite that wrote it, or ingest its logs again"
    )
    assert len(skipped) == 4


def test_a_manifest_of_an_unknown_schema_version_is_refused(results):
    p = _bench("metrics", results / "future")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.splitlines() == [
        f"error: {results / 'future' / 'manifest.json'}: schema_version 99 is not one this suite reads (1); "
        "read it with the suite that wrote it, or ingest its logs again"
    ]
