"""Secrets never reach a file the suite writes, and ordinary keys keep their values
(docs/security.md, "Redaction"): bench.redact is the one function every writer goes through.

The end-to-end tests plant one secret in each place a user types one (experiment.notes,
cluster.setup, framework.native.overrides, +framework.native.wandb_api_key), run the real command,
then read every file it wrote (and what it printed) for any of them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bench import launch, rundir
from bench.__main__ import main as bench
from bench.config import compose
from bench.redact import REDACTED, name_strength, redact, redact_text
from bench.validate import to_container

NOTES = "hf_NotesPlanted0123456789abcdefghXY"
SETUP = "hf_SetupPlanted0123456789abcdefghXY"
NATIVE = "hf_NativePlanted0123456789abcdefgXY"
WANDB = "0123456789abcdef0123456789abcdef01234567"  # a W&B key: 40 hex, found only by the name it has
PLANTED = [
    f"experiment.notes=ablation run {NOTES}",
    f'cluster.setup=["export HF_TOKEN={SETUP}"]',
    f'+framework.native.overrides=["trainer.project_name=p","+trainer.hf_token={NATIVE}"]',
    f"+framework.native.wandb_api_key={WANDB}",
]
SMOKE = ["experiment=smoke", "framework=verl"]


def leaks(*roots: Path, printed: str = "") -> list[str]:
    """Every file under `roots` (recursively) that holds a planted secret, and 'printed' when the
    command's output does."""
    hits = [
        str(p) for root in roots for p in sorted(root.rglob("*")) if p.is_file() and _holds(p.read_bytes())
    ]
    return hits + (["printed"] if _holds(printed.encode()) else [])


def _holds(data: bytes) -> bool:
    return any(s.encode() in data for s in (NOTES, SETUP, NATIVE, WANDB))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"export HF_TOKEN={SETUP}", "export HF_TOKEN=<redacted>"),
        (f"ablation run {NOTES}", "ablation run <redacted>"),
        (f"+framework.native.wandb_api_key={WANDB}", "+framework.native.wandb_api_key=<redacted>"),
        (
            f'+framework.native.overrides=["trainer.project_name=p","+trainer.hf_token={NATIVE}"]',
            '+framework.native.overrides=["trainer.project_name=p","+trainer.hf_token=<redacted>"]',
        ),
        (f"wandb login {WANDB}", "wandb login <redacted>"),
        (f"WANDB_API_KEY={WANDB} python train.py", "WANDB_API_KEY=<redacted> python train.py"),
        ('api_key = "two words"', 'api_key = "<redacted>"'),
        ('{"client_secret": "s3cr3t", "lr": 1e-6}', '{"client_secret": "<redacted>", "lr": 1e-6}'),
        (
            "--wandb-api-key abc123 --input-key prompt --label-key label",
            "--wandb-api-key <redacted> --input-key prompt --label-key label",
        ),  # fmt: skip
        ("curl -H 'Authorization: Bearer eyAbCdEf0123456789'", "curl -H 'Authorization: Bearer <redacted>'"),
        (
            "git clone https://user:pa55word@github.com/x/y",
            "git clone https://user:<redacted>@github.com/x/y",
        ),
        (
            "OPENAI_BASE=x sk-proj-AbCdEf0123456789AbCdEf ghp_AbCdEf0123456789AbCdEf0123456789abcd",
            "OPENAI_BASE=x <redacted> <redacted>",
        ),  # fmt: skip
        (
            "key id AKIAIOSFODNN7EXAMPLE; slack xoxb-1234567890-abcdefghij",
            "key id <redacted>; slack <redacted>",
        ),
        # a reference to the environment is the form the suite recommends, not a secret
        (
            'export HF_TOKEN="${HF_TOKEN:?set it}"; [[ -n "${WANDB_API_KEY:-}" ]]',
            'export HF_TOKEN="${HF_TOKEN:?set it}"; [[ -n "${WANDB_API_KEY:-}" ]]',
        ),  # fmt: skip
        ("+framework.native.hf_token=${oc.env:HF_TOKEN}", "+framework.native.hf_token=${oc.env:HF_TOKEN}"),
        # ordinary text: a git commit is 40 hex too, SGLang counts tokens, verl names data columns
        (f"framework.commit={WANDB}", f"framework.commit={WANDB}"),
        (
            "Decode batch, #running-req: 94, #token: 3877, token usage: 0.01",
            "Decode batch, #running-req: 94, #token: 3877, token usage: 0.01",
        ),  # fmt: skip
        (
            "data.prompt_key=prompt data.max_response_length=8192 pad_token: <|endoftext|>",
            "data.prompt_key=prompt data.max_response_length=8192 pad_token: <|endoftext|>",
        ),  # fmt: skip
        (
            "RouterArgs(api_key=None, ssl_keyfile_password=None, hf_transformers=1)",
            "RouterArgs(api_key=None, ssl_keyfile_password=None, hf_transformers=1)",
        ),  # fmt: skip
    ],
)
def test_redact_text_hides_secrets_by_name_and_shape_and_nothing_else(text: str, expected: str):
    assert redact_text(text) == expected


def test_redact_walks_dicts_env_and_argv_at_any_depth():
    node = {
        "env": {"WANDB_API_KEY": WANDB, "HF_TOKEN": "x", "NCCL_DEBUG": "WARN"},
        "argv": ["python", "-m", "train", "--api-key", "abc123", "--input-key", "prompt", f"--note={NOTES}"],
        "native": {
            "hf_token": "t",
            "api_keys": ["k1", "k2"],
            "use_auth_token": True,
            "secret_env": ["HF_TOKEN"],
        },
        "setup": [f"export HF_TOKEN={SETUP}"],
    }
    assert redact(node) == {
        "env": {"WANDB_API_KEY": REDACTED, "HF_TOKEN": REDACTED, "NCCL_DEBUG": "WARN"},
        "argv": ["python", "-m", "train", "--api-key", REDACTED, "--input-key", "prompt", f"--note={REDACTED}"],
        "native": {"hf_token": REDACTED, "api_keys": [REDACTED, REDACTED], "use_auth_token": True,
                   "secret_env": ["HF_TOKEN"]},  # a flag and the names of secrets are not secrets
        "setup": ["export HF_TOKEN=<redacted>"],
    }  # fmt: skip


@pytest.mark.parametrize(
    "name",
    ["micro_batch_tokens", "tool_output_tokens_mean", "max_tokens", "kv_tokens", "tokenizer",
     "key_value_heads", "num_key_value_heads", "kv_bytes_per_token", "secret_env", "secrets", "private_key_path"],
)  # fmt: skip
def test_ordinary_names_are_words_not_substrings(name: str):
    assert name_strength(name) == ""


@pytest.mark.parametrize(
    "name",
    ["api_key", "WANDB_API_KEY", "HF_TOKEN", "hfToken", "aws_secret_access_key", "password", "client_secret"],
)
def test_secret_names(name: str):
    assert name_strength(name) == "secret"


@pytest.mark.parametrize("framework", ["verl", "slime", "prime_rl"])
def test_a_real_config_without_secrets_comes_out_unchanged(framework: str):
    config = to_container(compose(["experiment=smoke", f"framework={framework}"]))
    assert redact(config) == config


def test_real_logs_hold_nothing_that_looks_like_a_secret(opd_results: Path):
    """No false positive on the opd-benchmark's real logs and configs (SGLang server args, verl's
    config dump, token counts): redaction leaves every file byte for byte."""
    for path in sorted(p for p in opd_results.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        assert redact_text(text) == text, path


def test_a_swept_secret_is_never_a_directory_name():
    assert rundir.point_slug({"+framework.native.wandb_api_key": WANDB}) == "wandb_api_key-redacted"


def test_dry_run_writes_no_secret_and_keeps_ordinary_keys(tmp_path: Path, capsys):
    rc = launch.main([*SMOKE, "cluster=local", *PLANTED, f"results_dir={tmp_path}", "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert leaks(tmp_path, printed=out + err) == []
    (run,) = (tmp_path / "smoke" / "dry-run").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert {
        "experiment.notes=ablation\\ run\\ <redacted>",  # escaped by Hydra's sweep parser
        'cluster.setup=["export HF_TOKEN=<redacted>"]',
        '+framework.native.overrides=["trainer.project_name=p","+trainer.hf_token=<redacted>"]',
        "+framework.native.wandb_api_key=<redacted>",
    } <= set(manifest["overrides"])
    resolved = (run / "config.resolved.yaml").read_text()
    for line in ("  notes: ablation run <redacted>", "    wandb_api_key: <redacted>",
                 "    micro_batch_tokens: 16384", "  tool_output_tokens_mean: 0"):  # fmt: skip
        assert f"\n{line}\n" in resolved
    sbatch = run / "launch" / "job.sbatch"
    assert "export HF_TOKEN=REDACTED\n" in sbatch.read_text()  # a plain word: the script still parses
    assert subprocess.run(["bash", "-n", str(sbatch)]).returncode == 0
    assert (
        "  warning: framework.native.overrides[1], cluster.setup[0]: a secret typed into the config "
        "reaches the launch, which is written redacted and so cannot use it; keep the secret out of "
        "the config: export it in the shell you submit from (sbatch passes that "
        "environment to the job) and refer to it by name, e.g. $HF_TOKEN or $WANDB_API_KEY"
    ) in err.splitlines()


def test_a_submission_that_would_run_a_secret_is_refused_before_anything_is_written(tmp_path: Path, capsys):
    """On Slurm, submitit's batch script runs cluster.setup in every mode: written redacted, the job
    could not work, so `bench run` refuses it (exit 2, nothing written)."""
    rc = launch.main([*SMOKE, "cluster=testbed", PLANTED[1], f"results_dir={tmp_path}"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert "  [verl] cluster.setup[0]: a secret typed into the config reaches the launch" in err
    assert list(tmp_path.iterdir()) == [] and leaks(printed=out + err) == []


def test_render_writes_no_secret_and_says_so(tmp_path: Path, capsys):
    assert bench(["render", *SMOKE, *PLANTED, "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert leaks(tmp_path, printed=out + err) == []
    assert "note: framework.native.overrides[1], cluster.setup[0]: a secret typed into the config" in out
    command = json.loads((tmp_path / "launch" / "command.json").read_text())
    assert command["processes"][-1]["argv"][-1] == "+trainer.hf_token=<redacted>"


def test_an_error_line_never_echoes_a_secret(capsys):
    assert bench(["run", "experiment=smoke", f"experiment.seed={NOTES}", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        "error: experiment.seed: Value '<redacted>' of type 'str' could not be converted to Integer\n"
    )


def test_emulated_run_and_its_report_hold_no_secret_even_from_an_older_run_directory(tmp_path: Path, capsys):
    """The report redacts what it reads too: a run directory written before redaction covered the
    overrides (secrets in manifest.json and launch/) still puts none into the HTML, Markdown, CSV
    or SVG figures."""
    run = tmp_path / "results" / "verl"
    assert bench(["emulate", *SMOKE, "emulator.steps=3", *PLANTED, "--out", str(run)]) == 0
    assert leaks(run) == []
    assert "  notes: ablation run <redacted>\n" in (run / "config.resolved.yaml").read_text()
    older = tmp_path / "results" / "verl-older"
    shutil.copytree(run, older)
    manifest = json.loads((older / "manifest.json").read_text())
    manifest["overrides"] = PLANTED  # as written before redaction covered them
    manifest["config"]["experiment"]["notes"] = NOTES
    (older / "manifest.json").write_text(json.dumps(manifest))
    (older / "launch").mkdir(exist_ok=True)
    (older / "launch" / "job.sbatch").write_text(f"export HF_TOKEN={SETUP}\n")
    assert bench(["report", str(tmp_path / "results"), "--all-runs", "--out", str(tmp_path / "report")]) == 0
    out, err = capsys.readouterr()
    assert leaks(tmp_path / "report", printed=out + err) == []
    html = (tmp_path / "report" / "index.html").read_text()
    assert "+framework.native.wandb_api_key=&lt;redacted&gt;" in html
    assert "export HF_TOKEN=&lt;redacted&gt;" in html


def test_ingested_real_logs_with_secret_overrides_hold_no_secret(tmp_path: Path, opd_results: Path):
    out = tmp_path / "verl"
    args = [
        "--framework",
        "verl",
        "--logs",
        str(opd_results / "verl"),
        "--out",
        str(out),
        PLANTED[0],
        PLANTED[3],
    ]
    assert bench(["ingest", *args]) == 0
    assert leaks(out) == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["framework"]["native"] == {"wandb_api_key": REDACTED}
