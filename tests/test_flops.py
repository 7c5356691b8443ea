"""FLOPs per token pinned to hand-computed values (arithmetic in the comments)."""

import pytest

from bench.config import compose
from bench.flops import flops_of_sequences, flops_per_token, param_counts


@pytest.fixture(scope="module")
def q235():
    return compose(["model=qwen3_235b_a22b"]).model


@pytest.fixture(scope="module")
def q8():
    return compose(["model=qwen3_8b"]).model


def test_qwen3_235b_params(q235):
    p = param_counts(q235)
    assert p["total"] == 235_092_836_352  # 235B published
    assert p["active"] == 22_189_965_312  # 22B published (embedding + LM head included)


def test_qwen3_235b_prime_rl(q235):
    # attn 94 x 4096 x 128 x (64+64+4+4) = 6,702,497,792; experts 94 x 8 x 3 x 1536 x 4096 = 14,193,524,736;
    # router 94 x 128 x 4096 = 49,283,072; LM head 151,936 x 4096 = 622,329,856 -> N = 21,567,635,456 (21.6B)
    # 6N = 129,405,812,736; attention 12 x 94 x 64 x (4096/64) x 16384 = 75,698,798,592
    assert flops_per_token(q235, 16384, "prime_rl") == 205_104_611_328


def test_qwen3_235b_verl(q235):
    # N adds the embedding again (2 x vocab x hidden) and has no shared experts: 22,189,965,312
    # 6N = 133,139,791,872; attention 6 x 16384 x 128 x 64 x 94 = 75,698,798,592
    assert flops_per_token(q235, 16384, "verl") == 208_838_590_464


def test_qwen3_235b_suite(q235):
    # 6 x 21,567,635,456 + 3 x 2 x 64 x (128+128) x (16385/2) x 94 = 129,405,812,736 + 75,703,418,880
    assert flops_per_token(q235, 16384, "suite") == 205_109_231_616


def test_qwen3_8b_all_conventions(q8):
    # attn 36 x 4096 x 128 x 80 = 1,509,949,440; MLP 36 x 3 x 4096 x 12288 = 5,435,817,984; LM head 622,329,856
    assert flops_per_token(q8, 4096, "prime_rl") == 45_408_583_680 + 12 * 36 * 4096 * 4096
    assert flops_per_token(q8, 4096, "verl") == 6 * (1_509_949_440 + 5_435_817_984 + 2 * 622_329_856) + (
        6 * 4096 * 128 * 32 * 36
    )
    assert flops_per_token(q8, 4096, "suite") == 49_033_347_072


def test_glm_models_give_zero_under_verl_like_verl_does():
    # verl 0.9.1 has no formula for model_type glm4_moe / glm_moe_dsa: "MFU will always be zero"
    assert flops_per_token(compose(["model=glm5"]).model, 4096, "verl") == 0.0
    assert flops_per_token(compose(["model=glm4_5"]).model, 4096, "verl") == 0.0


def test_glm5_dsa_caps_attention():
    glm5 = compose(["model=glm5"]).model
    # Past the 2,048-key top-k, attention per token grows only through the indexer term,
    # so the suite count at 64K is far below prime-rl's s-linear hidden/heads term.
    assert flops_per_token(glm5, 65536, "suite") < 0.6 * flops_per_token(glm5, 65536, "prime_rl")
    assert param_counts(glm5)["total"] == pytest.approx(744e9, rel=0.01)
    assert param_counts(glm5)["active"] == pytest.approx(40e9, rel=0.05)


def test_flops_of_sequences_matches_per_token_sum(q8):
    lens = [100, 4096, 8000]
    assert flops_of_sequences(q8, lens) == pytest.approx(
        sum(s * flops_per_token(q8, s) for s in lens), rel=1e-12
    )


def test_bad_convention_and_seq_len(q8):
    with pytest.raises(ValueError, match="convention='megatron'"):
        flops_per_token(q8, 10, "megatron")
    with pytest.raises(ValueError, match="seq_len=0"):
        flops_per_token(q8, 0)


def test_cli_prints_one_json_object(capsys):
    import json

    from bench.flops import main

    assert main(["model=qwen3_235b_a22b", "seq_len=16384"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params_active"] == 22_189_965_312
    assert out["flops_per_token"]["prime_rl"] == 205_104_611_328
