"""The public verl log corpus (corpus/README.md: eight real console logs the suite was not tuned
on): each ingests with its model, algorithm, GPUs, rollout TP, group size, steps logged and
configured, and how it ended as the README states them from the log text, each cited to the
physical line (`grep -n` numbering) that holds it; the SFT log is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.ingest import main as ingest
from bench.trace import RunPaths, read_manifest, read_steps

A = "yushengsu-thu-verl_training_log/grpo_run_deepseek7b_llm.log"
B = "yushengsu-thu-verl_training_log/ppo_run_deepseek7b_llm.log"
C = "diqiuzhuanzhuan-verldata/qwen2-7b_math_megatron.log"
D = "eric-haibin-lin-verl-data/Qwen2.5-0.5B-bsz256_2-prompt1024-resp512-0.567.log"
E = "eric-haibin-lin-verl-data/Qwen2.5-0.5B-bsz256_2-prompt512-resp256-0.538.log"
F = "eric-haibin-lin-verl-data/gemma-2-2b-it-ppo-bsz512_4-prompt1024-resp-512-0.640.log"
G = "eric-haibin-lin-verl-data/gemma-2-2b-it-sft-0.411.log"
H = "eric-haibin-lin-verl-data/deepseek-llm-7b-chat-megatron-bsz256_4-prompt512-resp512-0.695.log"

# The README's facts per log: (value, line) where the README cites the line, value alone where
# it cites none (None: the log does not print it). steps = trace rows (training records);
# total = configured steps; status / failure kind / its phase = how the run ended.
FACTS = {
    A: {
        "model": ("deepseek-ai/deepseek-llm-7b-chat", 16),  # MODEL_PATH (line 3) used on line 16
        "algorithm": ("grpo", 10),
        "gpus": ("hybrid", 8, 39),
        "rollout_tp": (2, 28),  # tensor_model_parallel_size=$TP_VALUE, TP_VALUE=2 (line 4)
        "group_size": (5, 31),
        "total_steps": None,  # not printed
        "steps": 1119,
        "end": ("completed", None, None),
    },
    B: {
        "model": ("deepseek-ai/deepseek-llm-7b-chat", 20),
        "algorithm": ("gae", 58),  # not printed: the critic's keys on the step lines (line 58)
        "gpus": ("hybrid", 8, 46),
        "rollout_tp": (4, 29),
        "group_size": None,  # rollout.n not set and not printed
        "total_steps": None,
        "steps": 1119,
        "end": ("completed", None, None),
    },
    C: {
        "model": ("Qwen/Qwen2-7B-Instruct", 453),
        "algorithm": ("gpg", 520),
        "gpus": ("hybrid", 8, 650),
        "rollout_tp": (2, 512),
        "group_size": (5, 507),
        "total_steps": (105, 669),
        "steps": 105,
        # 105/105 and the final validation, then Ray's SIGTERM teardown on the last line
        "end": ("completed", "RayActorDied", ("teardown", 1369)),
    },
    D: {
        "model": ("Qwen/Qwen2.5-0.5B-Instruct", 30),
        "algorithm": ("gae", 51),
        "gpus": ("hybrid", 1, 101),
        "rollout_tp": (1, 48),
        "group_size": (1, 217),  # no rollout.n: vLLM's sampling kwargs 'n': 1
        "total_steps": (435, 145),
        "steps": 435,
        "end": ("completed", None, None),
    },
    E: {
        "model": ("Qwen/Qwen2.5-0.5B-Instruct", 34),
        "algorithm": ("gae", 55),
        "gpus": ("hybrid", 1, 154),
        "rollout_tp": (1, 52),
        "group_size": (1, 241),
        "total_steps": (435, 171),
        "steps": 435,
        "end": ("completed", None, None),
    },
    F: {
        # the config dump is damaged by the upload (lines lost around the `commit:` artifacts):
        # the launch command's last override (line 7) names the same SFT checkpoint as line 33
        "model": ("sft_model_path/global_step_58", 7),
        "algorithm": ("gae", 334),  # the critic's keys on the step lines
        "gpus": ("hybrid", 2, 7),
        "rollout_tp": (2, 7),
        "group_size": (1, 319),
        "total_steps": (210, 186),
        "steps": 106,  # steps 0 ... 105 of 210
        "end": ("partial", "truncated", ("steady state", None)),
    },
    H: {
        # a local path (line 54) the log downloaded deepseek-ai/deepseek-llm-7b-chat into (line 22)
        "model": ("deepseek-ai/deepseek-llm-7b-chat", 22),
        "algorithm": ("gae", 87),
        "gpus": ("hybrid", 4, 149),
        "rollout_tp": (4, 84),
        "group_size": (1, 79),
        "total_steps": (105, 179),
        "steps": 104,  # step 105's training metrics are not logged; its validation is (line 1133)
        "end": ("completed", None, None),
    },
}


def _line(path: Path, n: int) -> str:
    """Physical line n (1-based, LF only), as `sed -n 'Np'` prints it."""
    return path.read_bytes().split(b"\n")[n - 1].decode("utf-8", "replace")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, verl_corpus: Path) -> dict[str, tuple[dict, int]]:
    """Each RL log of the corpus ingested once: log -> (manifest, trace rows)."""
    out = {}
    for log in FACTS:
        run = tmp_path_factory.mktemp("corpus") / "run"
        assert ingest(["--framework", "verl", "--logs", str(verl_corpus / log), "--out", str(run)]) == 0
        out[log] = (read_manifest(RunPaths(run)), len(read_steps(RunPaths(run).steps)))
    return out


def _cited(entry: dict, log: str) -> int | None:
    """The line number of an `inferred` entry's source (`<file>:<line>[ ...]`), its file checked."""
    src = entry["source"]
    name = Path(log).name
    assert src.startswith(f"{name}:"), src
    return int(src[len(name) + 1 :].split()[0].rstrip(","))


@pytest.mark.parametrize("log", list(FACTS), ids=lambda p: Path(p).name[:40])
def test_corpus_log_ingests_with_the_readme_facts(runs, verl_corpus, log):
    manifest, rows = runs[log]
    inf, want = manifest["inferred"], FACTS[log]
    path = verl_corpus / log

    name, line = want["model"]
    assert inf["model"]["value"] == name
    held = _line(path, line)  # the name, or the script's $MODEL_PATH set to it above
    assert _cited(inf["model"], log) == line and (Path(name).name in held or "$MODEL_PATH" in held)

    algo, line = want["algorithm"]
    assert inf["algorithm"]["value"] == algo
    assert _cited(inf["algorithm"], log) == line

    role, gpus, line = want["gpus"]
    assert {r: e["value"] for r, e in inf["gpus"].items()} == {role: gpus}
    assert _cited(inf["gpus"][role], log) == line

    tp, line = want["rollout_tp"]
    assert inf["rollout_tp"]["value"] == tp and _cited(inf["rollout_tp"], log) == line
    assert "tensor_model_parallel_size" in _line(path, line)

    if want["group_size"] is None:
        assert inf["group_size"]["value"] is None
        assert any("rollout.n unknown" in w for w in manifest["warnings"])
    else:
        n, line = want["group_size"]
        assert inf["group_size"]["value"] == n and _cited(inf["group_size"], log) == line
        assert f"'n': {n}" in _line(path, line) or f".n={n}" in _line(path, line)
        assert not any("rollout.n unknown" in w for w in manifest["warnings"])

    if want["total_steps"] is None:
        assert inf["total_steps"]["value"] is None
    else:
        total, line = want["total_steps"]
        assert inf["total_steps"]["value"] == total and _cited(inf["total_steps"], log) == line
        assert f" {total}" in _line(path, line)

    assert rows == want["steps"]
    status, kind, where = want["end"]
    assert manifest["status"] == status
    if kind is None:
        assert manifest["failure"] is None
    else:
        phase, line = where
        assert (manifest["failure"]["kind"], manifest["failure"]["phase"]) == (kind, phase)
        if line:
            assert manifest["failure"]["source"] == f"{Path(log).name}:{line}"


def test_trainer_parallelism_of_the_megatron_logs(runs):
    """C: actor Megatron TP 2 / PP 2 on 8 GPUs (DP 2); H: TP 4 / PP 1 on 4 GPUs (DP 1)."""
    for log, (tp, pp, dp) in ((C, (2, 2, 2)), (H, (4, 1, 1))):
        inf = runs[log][0]["inferred"]
        assert (inf["trainer_tp"]["value"], inf["trainer_pp"]["value"], inf["trainer_dp"]["value"]) == (
            tp,
            pp,
            dp,
        )


def test_the_model_name_is_the_runs_own_and_the_flops_entry_is_its_architecture(runs):
    """C logs Qwen/Qwen2-7B-Instruct; conf/model has no such entry, and the architecture it
    matches (qwen2_5_7b, the same layers, widths and vocabulary) is recorded separately."""
    inf = runs[C][0]["inferred"]
    assert inf["model"]["value"] == "Qwen/Qwen2-7B-Instruct"
    assert inf["model_arch"]["value"] == "qwen2_5_7b"
    assert inf["model_arch"]["source"] == "qwen2-7b_math_megatron.log:673"
    assert "matches conf/model/qwen2_5_7b.yaml" in inf["model_arch"]["rule"]
    assert runs[C][0]["config"]["model"]["name"] == "Qwen/Qwen2-7B-Instruct"  # what the report prices


def test_the_sft_log_is_refused_as_not_an_rl_run(tmp_path, verl_corpus, capsys):
    out = tmp_path / "run"
    assert ingest(["--framework", "verl", "--logs", str(verl_corpus / G), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: --logs {verl_corpus / G}: an SFT run's log (step lines of train/loss, "
        "gemma-2-2b-it-sft-0.411.log:63), not an RL run: nothing to ingest"
    ]
    assert _line(verl_corpus / G, 63).startswith("step:0 - train/loss:")
    assert not out.exists()


def test_calibrate_composes_the_logged_algorithm_and_parallelism(runs):
    """C ran GPG with rollout TP 2 and Megatron TP 2 / PP 2: calibrate / predict / plan compose
    exactly that (not the schema's grpo and TP 1)."""
    from bench import run_setup

    cfg, known = run_setup.compose_setup(runs[C][0], [])
    assert str(cfg.workload.algorithm.value) == "gpg" and known["workload.algorithm"] == "gpg"
    assert (cfg.experiment.generator.tp, cfg.experiment.trainer.tp, cfg.experiment.trainer.pp) == (2, 2, 2)
    assert cfg.workload.group_size == 5 and cfg.workload.steps == 105


def test_a_step_count_given_by_the_user_decides_how_the_run_ended(tmp_path, verl_corpus):
    """A prints no configured step count: with workload.steps=1119 its 1,119 steps are the whole
    run; with workload.steps=2000 the log ends early, with no error logged."""
    for steps, status in ((1119, "completed"), (2000, "partial")):
        out = tmp_path / f"run{steps}"
        args = [
            "--framework",
            "verl",
            "--logs",
            str(verl_corpus / A),
            "--out",
            str(out),
            f"workload.steps={steps}",
        ]
        assert ingest(args) == 0
        m = read_manifest(RunPaths(out))
        assert m["inferred"]["total_steps"] == {"value": steps, "source": "given"}
        assert m["status"] == status
    assert m["failure"]["message"] == "the logs end after step 1119 of 2000 with no error logged"
