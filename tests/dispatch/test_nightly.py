"""`bench nightly`: the rendered scripts (bash -n, shellcheck, the documented commands, values quoted),
two real nights run by bash (the first starts the series, the second compares with it), a regression
that never becomes the baseline, the refusals, and on the Slurm testbed the self-resubmitting job."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import nightly

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def bench(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "bench", *args], cwd=cwd, capture_output=True, text=True)


def hostile_results(tmp: Path) -> str:
    """A results_dir that bash would act on if a script left it unquoted (quote, space, $(...))."""
    return f"{tmp}/it's $(touch pwned) here"


def verdicts(page: Path) -> dict[str, tuple[str, str]]:
    """framework -> (verdict, baseline run name) from a night's index.md."""
    rows = [
        line.split(" | ") for line in (page / "index.md").read_text().splitlines() if line.startswith("| ")
    ]
    return {r[0][2:]: (r[2], r[3]) for r in rows[1:]}  # rows[0]: the header


def good_runs(state: Path) -> dict[str, str]:
    return {fw: Path(e["run"]).name for fw, e in json.loads(state.read_text()).items()}


# --------------------------------------------------------------------------------------------------
# Rendering (no Slurm needed)


def test_render_writes_the_documented_commands_with_every_value_quoted(tmp_path):
    results = hostile_results(tmp_path)
    overrides = ["cluster=testbed", "experiment=smoke", "mode=emulate", f'results_dir="{results}"']
    r = bench("nightly", *overrides, "--period", "6h", "--out", str(tmp_path / "n"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "n"
    assert r.stdout.split() == [str(out / f) for f in ("nightly.sh", "nightly.sbatch", "nightly.scrontab")]
    sh, sbatch, scron = ((out / f).read_text() for f in ("nightly.sh", "nightly.sbatch", "nightly.scrontab"))
    for script in ("nightly.sh", "nightly.sbatch"):
        assert subprocess.run(["bash", "-n", str(out / script)]).returncode == 0
        if shutil.which("shellcheck") or os.environ.get("CI") == "true":  # CI installs it
            check = subprocess.run(["shellcheck", str(out / script)], capture_output=True, text=True)
            assert check.returncode == 0, check.stdout
    # (1) bench run with the overrides byte for byte, (2) the gate, (3) the report of the experiment
    assert f'{shlex.join([PY, "-m", "bench", "run", *overrides, "--wait"])} >"$page/run.txt" 2>&1\n' in sh
    quoted = shlex.quote(f"{results}/smoke")
    assert (
        f'{PY} -m bench nightly gate --state "$nightly/good.json" --results {quoted} --page "$page" '
        '--run-exit "$ran" "${runs[@]}"\n'
    ) in sh
    assert f'{PY} -m bench report {quoted} --out "$page/report"' in sh
    assert f"cd {tmp_path}" in sh and f"export SLURM_CONF={REPO}/.testbed/etc/slurm.conf" in sh
    # the self-resubmitting job: next night first (one period on, after this one), then the night
    assert sbatch.splitlines()[2:9] == [
        "#SBATCH --job-name=bench-nightly-smoke-testbed",
        "#SBATCH --partition=testbed",
        "#SBATCH --ntasks=1",
        "#SBATCH --time=360",
        f"#SBATCH --output={out}/slurm-%j.out",
        "#SBATCH --begin=now+21600",
        "#SBATCH --dependency=singleton",
    ]
    assert sbatch.index(f"\nsbatch {out}/nightly.sbatch ||") < sbatch.index(f"\nexec bash {out}/nightly.sh\n")
    assert f"\n0 */6 * * * bash {out}/nightly.sh\n" in scron and "#SCRON --time=360" in scron


@pytest.mark.parametrize(
    ("period", "minutes", "cron"),
    [
        ("30m", 30, "*/30 * * * *"),
        ("60m", 60, "0 */1 * * *"),
        ("6h", 360, "0 */6 * * *"),
        ("24h", 1440, "0 0 * * *"),
        ("1d", 1440, "0 0 * * *"),
        ("1w", 10080, "0 0 * * 0"),
    ],
)
def test_a_period_is_one_cron_can_repeat(period, minutes, cron):
    assert nightly.period_minutes(period) == (minutes, cron)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["cluster=testbed", "--period", "90m"],
            "error: --period 90m: cron cannot repeat it evenly; use Nm with N dividing 60, Nh with N "
            "dividing 24, 1d or 1w",
        ),
        (
            ["cluster=testbed", "--period", "1day"],
            "error: --period 1day: expected a count and a unit m, h, d or w (30m, 6h, 1d, 1w)",
        ),
        (
            ["cluster=local", "--submit"],
            "error: --submit: cluster=local has no Slurm (cluster.executor=local); choose a Slurm cluster, or run "
            "nightly.sh from cron without --submit",
        ),
        (
            ["cluster=testbed", "--out", "{taken}"],
            "error: --out {taken}: already exists (not empty, holds files bench nightly did not write); "
            "outputs are never overwritten, choose a new --out",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(tmp_path, args, line):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine\n")
    args = [a.replace("{taken}", str(taken)) for a in args]
    r = bench("nightly", *args, cwd=tmp_path)
    assert (r.returncode, r.stderr.strip()) == (2, line.replace("{taken}", str(taken)))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt", "taken"]


def test_an_install_replaces_only_its_own_scrontab_entry(tmp_path):
    """scrontab - replaces the whole table: the install keeps every other line and swaps its own entry."""
    r = bench("nightly", "cluster=testbed", "--period", "1h", "--out", str(tmp_path / "n"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    entry = (tmp_path / "n" / "nightly.scrontab").read_text()
    other = "#SCRON --partition=cpu\n30 2 * * * /home/me/backup.sh\n"
    table = other + entry.replace("0 */1 * * *", "0 */6 * * *") + "@daily /home/me/clean.sh\n"
    assert nightly._without_block(table, "bench-nightly-smoke-testbed") + entry == (
        other + "@daily /home/me/clean.sh\n" + entry
    )


@pytest.mark.slurm
def test_the_testbed_takes_no_scrontab_entry(testbed):
    """Its slurm.conf leaves ScronParameters unset; the same `scontrol show config` with enable takes one."""
    config = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, env=testbed.env(), check=True
    ).stdout
    assert nightly.scron_refusal(config) == "ScronParameters=(null) in slurm.conf (scrontab needs enable)"
    enabled = config.replace(
        "ScronParameters         = (null)", "ScronParameters         = enable,explicit_scancel"
    )
    assert nightly.scron_refusal(enabled) is None


# --------------------------------------------------------------------------------------------------
# Nights run by bash on cluster=local (bench run in-process), the gate on its own


@pytest.fixture(scope="module")
def two_nights(tmp_path_factory) -> dict:
    """nightly.sh rendered for cluster=local, run twice by bash; results_dir is hostile_results."""
    tmp = tmp_path_factory.mktemp("nightly")
    results = hostile_results(tmp)
    r = bench("nightly", "cluster=local", "experiment=smoke", f'results_dir="{results}"', cwd=tmp)
    assert r.returncode == 0, r.stderr
    out = tmp / "nightly" / "smoke-local"
    assert r.stdout.split() == [str(out / "nightly.sh")]  # no Slurm: no schedule to render
    nights = []
    for _ in range(2):
        done = subprocess.run(["bash", str(out / "nightly.sh")], capture_output=True, text=True)
        nights.append((done.returncode, (out / "latest").resolve(), good_runs(out / "good.json")))
    return {"tmp": tmp, "out": out, "results": Path(results) / "smoke", "nights": nights}


def test_the_first_night_starts_the_series_and_the_second_compares_with_it(two_nights):
    (rc1, page1, good1), (rc2, page2, good2) = two_nights["nights"]
    assert (rc1, rc2) == (0, 0) and page1 != page2
    assert not (two_nights["tmp"] / "pwned").exists()  # the hostile results_dir was never run
    assert {fw: v for fw, (v, _) in verdicts(page1).items()} == {
        "verl": "first",
        "slime": "first",
        "prime_rl": "first",
    }
    # the second night: each framework against its first-night run, which it then replaces in good.json
    assert verdicts(page2) == {fw: ("good", run) for fw, run in good1.items()}
    assert set(good2) == set(good1) and not set(good2.values()) & set(good1.values())
    for fw in good2:
        assert (page2 / f"compare-{fw}" / "index.html").is_file()
        assert (two_nights["results"] / good2[fw] / "manifest.json").is_file()
    assert (page2 / "report" / "index.html").is_file()
    assert len(list((page2 / "run.txt").read_text().splitlines())) > 3  # bench run's own output kept


def test_a_regressed_run_fails_the_night_and_never_becomes_the_baseline(two_nights, tmp_path):
    """verl with a trainer at a third of its MFU: slower steps, beyond noise; good.json keeps the last
    good verl run, so the next night is still compared with it."""
    state, results = two_nights["out"] / "good.json", two_nights["results"]
    before = state.read_text()
    slow = results / "verl-slow"
    r = bench(
        "emulate", "experiment=smoke", "framework=verl", "emulator.trainer_mfu=0.12", "--out", str(slow)
    )
    assert r.returncode == 0, r.stderr
    page = tmp_path / "page"
    page.mkdir()
    args = ["--state", str(state), "--results", str(results), "--page", str(page), str(slow)]
    r = bench("nightly", "gate", *args)
    verdict, baseline = verdicts(page)["verl"]
    assert (r.returncode, verdict, baseline) == (
        1,
        "regressed",
        json.loads(before)["verl"]["run"].split("/")[-1],
    )
    assert "beyond noise: step_s" in (page / "index.md").read_text()
    assert (page / "compare-verl" / "index.html").is_file()
    assert state.read_text() == before  # still the last good run, byte for byte


def test_a_night_whose_bench_run_started_nothing_fails_and_says_so(tmp_path):
    """bench run refused at night (a site change since the render): no run, exit 1, good.json untouched."""
    page, state = tmp_path / "page", tmp_path / "good.json"
    page.mkdir()
    state.write_text('{"verl": {"run": "/gone/verl-1"}}\n')
    args = ["--state", str(state), "--results", str(tmp_path), "--page", str(page), "--run-exit", "2"]
    r = bench("nightly", "gate", *args)
    assert r.returncode == 1
    assert (
        "bench run (exit 2): no run (see run.txt); bench report: report/index.html"
        in (page / "index.md").read_text()
    )
    assert json.loads(state.read_text()) == {"verl": {"run": "/gone/verl-1"}}


# --------------------------------------------------------------------------------------------------
# The Slurm testbed: the job runs a night, queues its successor, and the successor compares with it


def _job(testbed, job_id: str) -> dict[str, str]:
    text = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, env=testbed.env()
    ).stdout
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def _queued(testbed, name: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "--name", name, "-o", "%i"], capture_output=True, text=True, env=testbed.env()
    ).stdout
    return out.split()


def _until(ready, what: str, timeout_s: float = 300):
    """Poll Slurm until `ready()` returns something; a bound on a hang, not a race: each state waited
    for lasts (a successor is held by its --begin one hour on) until the test moves it on."""
    deadline = time.monotonic() + timeout_s
    while not (value := ready()):
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.5)
    return value


@pytest.fixture
def series(testbed):
    """Job ids of the nightly series: every one still queued is cancelled at teardown."""
    ids: list[str] = []
    yield ids
    subprocess.run(["scancel", *ids], env=testbed.env(), check=False)


@pytest.mark.slurm
def test_on_slurm_each_night_queues_the_next_and_is_compared_with_the_last(testbed, tmp_path, series):
    out, results = tmp_path / "n", tmp_path / "results"
    # a name of this session's own: singleton holds jobs of one name, so a concurrent session's series
    # (another checkout running this test) must not hold ours
    experiment = f"smoke-{os.getpid()}"
    args = ["cluster=testbed", "experiment=smoke", f"experiment.name={experiment}", "mode=emulate"]
    args.append(f"results_dir={results}")
    r = bench("nightly", *args, "--period", "1h", "--submit", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    first = r.stdout.split("as Slurm job ")[1].split(",")[0]
    series.append(first)
    name = f"bench-nightly-{experiment}-testbed"
    assert "to remove it: scancel --user=" in r.stdout and f"--name={name}" in r.stdout

    def ended_and_next(job: str):
        if _job(testbed, job).get("JobState") in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return None
        return [j for j in _queued(testbed, name) if j != job]

    [second] = _until(lambda: ended_and_next(first), f"saw job {first} end with a successor queued")
    series.append(second)
    assert _job(testbed, first)["JobState"] == "COMPLETED"
    job = _job(testbed, second)
    # held by singleton until the first ended, then by its --begin, one period after it was submitted
    assert job["JobState"] == "PENDING" and job["Reason"] in ("Dependency", "BeginTime")
    eligible, submitted = (
        time.mktime(time.strptime(job[k], "%Y-%m-%dT%H:%M:%S")) for k in ("EligibleTime", "SubmitTime")
    )
    assert eligible - submitted == 3600
    page1 = (out / "latest").resolve()
    assert set(v for v, _ in verdicts(page1).values()) == {"first"} and len(verdicts(page1)) == 3
    good1 = good_runs(out / "good.json")

    # the next night, now instead of in an hour: it compares with the first and queues a third
    subprocess.run(["scontrol", "update", f"JobId={second}", "StartTime=now"], env=testbed.env(), check=True)
    [third] = _until(lambda: ended_and_next(second), f"saw job {second} end with a successor queued")
    series.append(third)
    assert _job(testbed, second)["JobState"] == "COMPLETED"
    page2 = (out / "latest").resolve()
    assert verdicts(page2) == {fw: ("good", run) for fw, run in good1.items()}
    assert (out / f"slurm-{second}.out").read_text().startswith(f"Submitted batch job {third}\n")

    subprocess.run(["scancel", third], env=testbed.env(), check=True)
    _until(lambda: third not in _queued(testbed, name), f"saw job {third} cancelled", 60)
