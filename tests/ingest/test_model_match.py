"""The model from what the logs print, against conf/model (bench/infer.match_model)."""

from __future__ import annotations

from types import SimpleNamespace

from bench import flops
from bench.infer import match_model
from runners.run_config import Fact


def _arch(**kw) -> dict:
    return {"architecture": Fact(kw, "run.log:904")}


def test_parameter_count_and_class_name_the_model():
    # verl's fsdp_workers line for Qwen2.5-7B: "Qwen2ForCausalLM contains 7.62B parameters"
    name, model, evidence, src = match_model(_arch(**{"class": "Qwen2ForCausalLM", "params": 7.62e9}))
    assert (name, model["name"], src) == ("qwen2_5_7b", "Qwen/Qwen2.5-Math-7B", "run.log:904")
    assert evidence.endswith("matches conf/model/qwen2_5_7b.yaml")
    # same parameter count, another family: no match
    assert match_model(_arch(**{"class": "LlamaForCausalLM", "params": 7.62e9}))[0] is None


def test_variants_of_one_architecture_match_and_the_path_picks_among_them():
    arch = _arch(**{"class": "Qwen3MoeForCausalLM", "params": 235.09e9})
    name, _, evidence, _ = match_model(arch)
    assert name == "qwen3_235b_a22b" and evidence.endswith("(same architecture as qwen3_235b_a22b_2507)")
    arch["model_path"] = Fact("/ckpt/Qwen3-235B-A22B-Thinking-2507", "config.yaml:3")
    assert match_model(arch)[0] == "qwen3_235b_a22b_2507"


def test_a_full_architecture_without_a_conf_entry_gives_its_own_flops():
    """Llama-3-8B's shape as Megatron's argument dump prints it: no conf/model entry, FLOPs from it."""
    arch = dict(layers=32, hidden=4096, q_heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=128256)
    name, model, evidence, _ = match_model(_arch(**arch, tied_embeddings=False))
    assert name is None and evidence.startswith("no conf/model entry matches the logged architecture")
    assert model["name"] == "logged architecture (unnamed)"
    # 6 x matmul parameters per token plus attention: 6 x (32 x (4096 x 6144 + 4096 x 4096 + 3 x 4096 x 14336)
    # + 128256 x 4096) = 45.3 GFLOP before attention
    per_token = flops.flops_per_token(SimpleNamespace(**model), 1, "suite")
    matmul = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336) + 128256 * 4096
    assert per_token >= 6 * matmul and per_token < 6 * matmul * 1.01


def test_a_path_naming_a_conf_model_is_evidence_when_no_architecture_is_logged():
    name, _, evidence, src = match_model({"model_path": Fact("/data/ckpt/Qwen3-8B-Base", "rl.toml:3")})
    assert (name, src) == (
        "qwen3_8b",
        "rl.toml:3",
    ) and evidence == "model path '/data/ckpt/Qwen3-8B-Base' names Qwen/Qwen3-8B"
    name, model, evidence, src = match_model({"model_path": Fact("/root/opd-bench/models/student", "x:1")})
    assert (name, model, src) == (None, None, None)
    assert evidence == "model unknown: the logs print no architecture; pass model=<conf/model name>"


def test_moe_matches_on_its_experts_not_the_unused_dense_ffn():
    """Qwen3-30B-A3B as Megatron's argument dump prints it (ffn_hidden_size 6144 is set but every
    layer is MoE: 128 experts of 768, top-8)."""
    arch = dict(layers=48, hidden=2048, q_heads=32, kv_heads=4, head_dim=128, ffn=6144, vocab=151936,
                experts=128, ffn_expert=768, top_k=8)  # fmt: skip
    assert match_model(_arch(**arch))[0] == "qwen3_30b_a3b"
    assert match_model(_arch(**{**arch, "experts": 64}))[0] is None


def test_a_vocabulary_padded_for_tensor_parallelism_matches_its_model(tmp_path, opd_results):
    """Miles' Megatron argument dump, as a TP-2 run prints it: padded_vocab_size 152064 for
    Qwen3-0.6B's 151936 tokens (a multiple of 128 x 2). The entry matches and the rule is stated;
    a vocabulary that no TP pads 151936 into does not match."""
    from runners import slime_config

    text = (opd_results / "miles" / "run.log").read_text()
    line = "  padded_vocab_size ............................... 151936"
    assert line in text
    for padded, match in ((152064, "qwen3_0_6b"), (152000, None)):
        (tmp_path / "run.log").write_text(text.replace(line, line.replace("151936", str(padded))))
        facts = slime_config.read(tmp_path)
        assert facts["architecture"].value["vocab"] == padded
        name, _, evidence, _ = match_model(facts)
        assert name == match
        if match:
            assert evidence.endswith("vocab 152064 is 151936 padded to a multiple of 128 x TP 2 (Megatron)")


def test_the_model_name_is_read_from_the_path_the_run_loaded():
    from bench.infer import model_name_from_path

    assert model_name_from_path("/workspace/verl/Qwen/Qwen2-7B-Instruct") == "Qwen/Qwen2-7B-Instruct"
    assert model_name_from_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert model_name_from_path("/root/models/deepseek-llm-7b-chat") == "deepseek-llm-7b-chat"
    assert model_name_from_path("/root/opd-bench/models/student") == "student"
    assert model_name_from_path("/hf/hub/models--Qwen--Qwen3-8B/snapshots/abc123") == "Qwen/Qwen3-8B"
    assert model_name_from_path("sft_model_path/global_step_58") == "sft_model_path/global_step_58"
