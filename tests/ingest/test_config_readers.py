"""The per-framework config readers on the shapes real runs write beyond the opd fixtures: colour
codes and CRLF as the original consoles carry them, slime without its argument dump (argv only),
verl's separate rollout pool, prime-rl's multi-node and pre-2026 layouts."""

from __future__ import annotations

import re

from runners import prime_rl_config, slime_config, verl_config


def _facts(facts) -> dict:
    return {k: (f.value, f.source) for k, f in facts.items()}


def test_verl_console_with_colour_codes_and_crlf(tmp_path, opd_results):
    """The original console puts ESC colour codes around every Ray prefix (the fixture copy lost the
    ESC bytes and kept some `[0m`); read with CRLF line ends, the same facts at the same lines."""
    text = (opd_results / "verl" / "run.log").read_text()
    text = re.sub(r"^\[0m", "", text, flags=re.M)
    text = re.sub(r"^\((\w+) pid=(\d+)\)", lambda m: f"\x1b[36m({m[1]} pid={m[2]})\x1b[0m", text, flags=re.M)
    (tmp_path / "run.log").write_bytes(text.replace("\n", "\r\n").encode())
    got = _facts(verl_config.read(tmp_path))
    assert got["group_size"] == (16, "run.log:357") and got["prompts_per_step"] == (8, "run.log:627")
    assert got["gpus.hybrid"] == (1, "run.log:835") and got["gpus.teacher"] == (1, "run.log:652")
    assert got["architecture"] == ({"class": "Qwen3ForCausalLM", "params": 596.05e6}, "run.log:904")


def test_verl_separate_rollout_pool_is_trainer_plus_rollout(tmp_path):
    """One-step-off / fully-async recipes: `rollout.nnodes x rollout.n_gpus_per_node` beside the
    trainer's pool (verl's own example: 2 trainer + 6 rollout GPUs on one node)."""
    (tmp_path / "config.yaml").write_text(
        "actor_rollout_ref:\n  rollout:\n    n: 8\n  model:\n    path: Qwen/Qwen3-8B\n"
        "data:\n  train_batch_size: 64\n  max_prompt_length: 1024\n  max_response_length: 8192\n"
        "trainer:\n  nnodes: 1\n  n_gpus_per_node: 2\n  total_training_steps: 100\n"
        "rollout:\n  nnodes: 1\n  n_gpus_per_node: 6\n"
        "async_training:\n  staleness_threshold: 1\n"
    )
    got = _facts(verl_config.read(tmp_path))
    assert got["gpus.trainer"] == (2, "config.yaml:12") and got["gpus.rollout"] == (6, "config.yaml:16")
    assert "gpus.hybrid" not in got
    assert got["staleness_bound"] == (1, "config.yaml:18") and got["group_size"] == (8, "config.yaml:3")


def test_slime_without_an_argument_dump_reads_the_driver_argv(tmp_path, opd_results):
    """Older slime prints no Megatron argument dump: the driver's command line is enough."""
    line = next(ln for ln in (opd_results / "miles" / "run.log").open() if "python3 train.py" in ln)
    (tmp_path / "job.out").write_text("starting\n" + line)
    got = _facts(slime_config.read(tmp_path))
    assert got["group_size"] == (16, "job.out:2") and got["prompts_per_step"] == (8, "job.out:2")
    assert got["max_response_len"] == (128, "job.out:2") and got["total_steps"] == (15, "job.out:2")
    assert got["gpus.hybrid"] == (1, "job.out:2")  # --actor-num-gpus-per-node 1 --colocate
    arch = got["architecture"][0]
    assert (arch["layers"], arch["hidden"], arch["kv_heads"], arch["ffn"], arch["vocab"]) == (
        28,
        1024,
        8,
        3072,
        151936,
    )


def test_prime_multi_node_toml(tmp_path):
    (tmp_path / "rl.toml").write_text(
        'max_steps = 200\n[model]\nname = "Qwen/Qwen3-8B"\n[deployment]\ntype = "multi_node"\n'
        "num_train_nodes = 2\nnum_infer_nodes = 3\ngpus_per_node = 8\n[orchestrator]\nbatch_size = 512\n"
        "rollouts_per_example = 16\nmax_off_policy_steps = 4\n[orchestrator.sampling]\nmax_tokens = 4096\n"
    )
    got = _facts(prime_rl_config.read(tmp_path))
    assert got["gpus.trainer"] == (16, "rl.toml:6") and got["gpus.rollout"] == (24, "rl.toml:7")
    assert got["group_size"] == (16, "rl.toml:11") and got["prompts_per_step"][0] == 32
    assert got["max_response_len"] == (4096, "rl.toml:14") and got["staleness_bound"] == (4, "rl.toml:12")
    assert got["model_path"] == ("Qwen/Qwen3-8B", "rl.toml:3")


def test_prime_per_process_json_configs(tmp_path):
    """The `rl` launcher's configs/orchestrator.json (later versions write JSON, keys at top level)."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "orchestrator.json").write_text(
        '{\n  "batch_size": 256,\n  "group_size": 8,\n  "max_steps": 50,\n'
        '  "train": {"sampling": {"max_completion_tokens": 2048}}\n}\n'
    )
    got = _facts(prime_rl_config.read(tmp_path))
    assert got["group_size"] == (8, "configs/orchestrator.json:3")
    assert got["prompts_per_step"] == (32, "configs/orchestrator.json:2 (batch_size / group_size)")
    assert got["max_response_len"] == (2048, "configs/orchestrator.json:5")
    assert got["total_steps"] == (50, "configs/orchestrator.json:4")


QWEN2_CONFIG = """\
(WorkerDict pid=5120) Model config after override: Qwen2Config {
(WorkerDict pid=5120)   "architectures": [
(WorkerDict pid=5120)     "Qwen2ForCausalLM"
(WorkerDict pid=5120)   ],
(WorkerDict pid=5120)   "attention_dropout": 0.0,
(WorkerDict pid=5120)   "eos_token_id": 151643,
(WorkerDict pid=5120)   "hidden_act": "silu",
(WorkerDict pid=5120)   "hidden_size": 3584,
(WorkerDict pid=5120)   "intermediate_size": 18944,
(WorkerDict pid=5120)   "max_position_embeddings": 4096,
(WorkerDict pid=5120)   "model_type": "qwen2",
(WorkerDict pid=5120)   "num_attention_heads": 28,
(WorkerDict pid=5120)   "num_hidden_layers": 28,
(WorkerDict pid=5120)   "num_key_value_heads": 4,
(WorkerDict pid=5120)   "rope_theta": 10000,
(WorkerDict pid=5120)   "tie_word_embeddings": false,
(WorkerDict pid=5120)   "vocab_size": 152064
(WorkerDict pid=5120) }
(WorkerDict pid=5120)
(WorkerDict pid=5120) Qwen2ForCausalLM contains 7.62B parameters
"""


def test_verl_model_config_print_gives_the_full_architecture(tmp_path):
    """Versions that print the model config ('Model config after override: Qwen2Config {...}',
    transformers' repr) give every field: matched exactly, no parameter-count tolerance needed."""
    from bench.infer import match_model

    (tmp_path / "run.log").write_text("starting\n" + QWEN2_CONFIG)
    facts = verl_config.read(tmp_path)
    arch = facts["architecture"]
    assert arch.source == "run.log:2"
    assert arch.value == {
        "layers": 28, "hidden": 3584, "q_heads": 28, "kv_heads": 4, "head_dim": 128, "ffn": 18944,
        "vocab": 152064, "tied_embeddings": False, "class": "Qwen2ForCausalLM",
    }  # fmt: skip
    assert match_model(facts)[0] == "qwen2_5_7b"
