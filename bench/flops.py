"""Training FLOPs per token: dense, MoE, GQA, MLA (+ DSA), under three conventions.

- `suite`: ours (docs/metrics.md argues it). 6 x active matmul parameters (q/k/v/o with the real
  head dims, dense MLP, top-k routed + shared experts, router, LM head; the embedding lookup is a
  gather, not a matmul) + causal attention counted on the keys each query really attends
  (s/2 on average, min(i, top-k) under DSA) with the real q/k and v head dims, plus the DSA
  indexer's scoring. Training = 3 x forward.
- `verl`: exactly verl 0.9.1 `verl/utils/flops_counter.py` (PyPI wheel): qwen3 -> `_estimate_qwen2_flops`,
  qwen3_moe -> `_estimate_qwen2_moe_flops` (no shared experts), deepseek_v3 -> MLA; the embedding is
  counted twice (`2 * vocab * hidden`); any other model_type (glm4_moe, glm_moe_dsa) gives 0, as verl does.
- `prime_rl`: exactly prime-rl v0.8.0 (commit 60bc2954) `src/prime_rl/trainer/perf.py`: 6 x
  `get_active_mm_params` + 12 * L * H * (hidden / H) * seq_len. Shared experts are counted only when
  the config names them `num_shared_experts` (GLM configs say `n_shared_experts`: not counted), and
  `seq_len` is the packed micro-batch length, not a sample's length.

All functions take a ModelConf node (conf/model/*.yaml) and return FLOPs (not FLOP/s).
"""

from __future__ import annotations

import json
from typing import Any

CONVENTIONS = ("suite", "verl", "prime_rl")


def _is_moe(m: Any) -> bool:
    return m.routed_experts > 0


def _sparse_dense_layers(m: Any) -> tuple[int, int]:
    """(dense layers, MoE layers)."""
    if not _is_moe(m):
        return m.layers, 0
    return m.dense_layers, m.layers - m.dense_layers


def _attn_linear_params(m: Any) -> int:
    """q/k/v/o projection parameters of one layer (GQA or MLA)."""
    h = m.hidden
    if str(m.attention) in ("mla", "Attention.mla"):
        q_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (
            h * m.q_lora_rank + m.q_lora_rank * m.q_heads * q_head
            if m.q_lora_rank
            else h * m.q_heads * q_head
        )
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * m.q_heads * (
            m.qk_nope_head_dim + m.v_head_dim
        )
        o = m.q_heads * m.v_head_dim * h
        return q + kv + o
    return h * m.head_dim * (2 * m.q_heads + 2 * m.kv_heads)


def _mlp_params(m: Any, experts_per_token: int) -> int:
    """MLP parameters of all layers touched by one token (SwiGLU: 3 matrices)."""
    dense, sparse = _sparse_dense_layers(m)
    per_dense = 3 * m.hidden * m.ffn_dense
    per_sparse = 3 * m.hidden * m.ffn_expert * experts_per_token + m.hidden * m.routed_experts  # + router
    return dense * per_dense + sparse * per_sparse


def param_counts(model: Any) -> dict[str, float]:
    """Parameters (matmul weights + embeddings; norms and biases are < 0.1% and left out).

    Returns `total` (all experts, embedding and LM head) and `active` (per token: top-k routed +
    shared experts, router, attention, embedding and LM head), both in parameters.
    """
    m = model
    embed = m.vocab * m.hidden
    lm_head = 0 if m.tied_embeddings else m.vocab * m.hidden
    attn = m.layers * _attn_linear_params(m)
    total = attn + _mlp_params(m, m.routed_experts + m.shared_experts) + embed + lm_head
    active = attn + _mlp_params(m, m.top_k + m.shared_experts) + embed + lm_head
    return {"total": float(total), "active": float(active)}


def _suite_matmul_params(m: Any) -> int:
    # LM head runs on every token even when tied to the embedding.
    return m.layers * _attn_linear_params(m) + _mlp_params(m, m.top_k + m.shared_experts) + m.vocab * m.hidden


def _suite_attention(m: Any, s: int) -> float:
    """Training attention FLOPs per token, averaged over a causal sequence of s tokens."""
    if str(m.attention) in ("mla", "Attention.mla"):
        d_qk, d_v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    else:
        d_qk = d_v = m.head_dim
    if m.dsa_topk and s > m.dsa_topk:
        k = m.dsa_topk
        # keys per query: i for i < k, then k; mean over positions 1..s
        mean_keys = (k * (k + 1) / 2 + (s - k) * k) / s
    else:
        mean_keys = (s + 1) / 2
    fwd = 2 * m.q_heads * (d_qk + d_v) * mean_keys
    if m.dsa_topk:
        fwd += 2 * m.dsa_index_heads * m.dsa_index_dim * (s + 1) / 2  # indexer scores every earlier key
    return 3 * fwd * m.layers


def _verl(m: Any, s: int) -> float:
    mt = m.model_type
    emb = 2 * m.vocab * m.hidden
    if mt in ("qwen3", "qwen2", "llama", "mistral"):
        n = (3 * m.hidden * m.ffn_dense + _attn_linear_params(m)) * m.layers + emb
        return 6 * n + 6 * s * m.head_dim * m.q_heads * m.layers
    if mt in ("qwen3_moe", "qwen2_moe"):
        moe = 3 * m.hidden * m.top_k * m.ffn_expert + m.hidden * m.routed_experts
        n = (moe + _attn_linear_params(m)) * m.layers + emb
        return 6 * n + 6 * s * m.head_dim * m.q_heads * m.layers
    if mt == "deepseek_v3":
        dense, sparse = _sparse_dense_layers(m)
        attn = _attn_linear_params(m)
        moe = m.hidden * m.routed_experts + 3 * m.hidden * m.ffn_expert * (m.top_k + m.shared_experts)
        n = (moe + attn) * sparse + (3 * m.hidden * m.ffn_dense + attn) * dense + emb
        q_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        return 6 * n + 3 * s * m.layers * (q_head + m.v_head_dim) * m.q_heads
    return 0.0  # verl: "MFU will always be zero" for model types it has no formula for


def _prime_rl(m: Any, s: int) -> float:
    dense, sparse = _sparse_dense_layers(m)
    attn = m.layers * _attn_linear_params(m)
    # Dense layers use `intermediate_size`; a Qwen3-MoE config carries one too, but with no
    # first_k_dense_replace every layer counts as sparse.
    mlp = dense * 3 * m.ffn_dense * m.hidden
    if sparse:
        mlp += sparse * m.top_k * 3 * m.ffn_expert * m.hidden
        mlp += sparse * m.routed_experts * m.hidden  # router (Qwen num_experts / DeepSeek n_routed_experts)
        # shared experts only under the key `num_shared_experts`, which no Qwen3/GLM config uses
    n = attn + mlp + m.vocab * m.hidden  # LM head; embedding excluded
    return 6 * n + 12 * m.layers * m.q_heads * (m.hidden // m.q_heads) * s


def flops_per_token(model: Any, seq_len: int, convention: str = "suite") -> float:
    """Training FLOPs (forward + backward) per token of a `seq_len`-token sequence.

    For `prime_rl`, `seq_len` is the packed micro-batch length the trainer was built with.
    Generation (forward only) costs one third of the `suite` value.
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len={seq_len}: expected a positive number of tokens")
    if convention == "suite":
        return 6.0 * _suite_matmul_params(model) + _suite_attention(model, seq_len)
    if convention == "verl":
        return float(_verl(model, seq_len))
    if convention == "prime_rl":
        return float(_prime_rl(model, seq_len))
    raise ValueError(f"convention={convention!r}: expected one of {CONVENTIONS}")


def flops_of_sequences(model: Any, seq_lens: Any, convention: str = "suite") -> float:
    """Training FLOPs of a batch of sequences (lengths in tokens): sum of s * flops_per_token(s)."""
    import numpy as np

    s = np.asarray(seq_lens, dtype=np.float64)
    if s.size == 0:
        return 0.0
    # flops_per_token is affine in s for every convention without DSA clipping: a*s + b
    if not model.dsa_topk:
        b = flops_per_token(model, 1, convention) - (slope := _slope(model, convention))
        return float(np.sum(s * (b + slope * s)))
    return float(sum(x * flops_per_token(model, int(x), convention) for x in s))


def _slope(model: Any, convention: str) -> float:
    return flops_per_token(model, 2, convention) - flops_per_token(model, 1, convention)


def summary(model: Any, seq_len: int) -> dict[str, Any]:
    """Parameters and FLOPs per token under every convention (the `bench flops` output)."""
    p = param_counts(model)
    return {
        "model": model.name,
        "seq_len": seq_len,
        "params_total": p["total"],
        "params_active": p["active"],
        "flops_per_token": {c: flops_per_token(model, seq_len, c) for c in CONVENTIONS},
    }


# Sizes every model has at least one of; the other counts (experts, MLA ranks, DSA) may be 0.
MODEL_SIZES = ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "vocab", "max_context")


def model_problems(model: Any) -> list[str]:
    """Model dimensions out of range (a negative count, zero layers), one line each."""
    out = []
    for key, v in model.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        lo = 1 if key in MODEL_SIZES else 0
        if v < lo or (key == "weight_bytes" and v <= 0):
            out.append(
                f"model.{key}={v}: expected {'>' if key == 'weight_bytes' else '>='} {lo} ({model.name})"
            )
    if 0 <= model.layers < model.dense_layers:
        out.append(f"model.dense_layers={model.dense_layers}: expected <= model.layers={model.layers}")
    return out


def main(argv: list[str]) -> int:
    """`python -m bench flops model=qwen3_235b_a22b seq_len=16384`: one JSON object on stdout.

    seq_len (tokens, default 4096) must be a whole number in [1, model.max_context]; anything else
    is a UsageError naming it.
    """
    from bench.cli import add_overrides, command_parser
    from bench.config import compose
    from bench.errors import UsageError

    ap = command_parser(
        "flops",
        "Print a model's training FLOPs per token at one sequence length, under the suite's convention "
        "and verl's and prime-rl's own (docs/metrics.md says how they differ).",
        "conf/model/<name>.yaml (model= picks it) and the overrides.",
        "nothing to disk; one JSON object on stdout.",
        ["python -m bench flops model=qwen3_235b_a22b seq_len=16384"],
    )
    add_overrides(ap, "seq_len=N: tokens per sequence (default 4096, at most model.max_context)")
    args = ap.parse_args(argv)
    seq_len, overrides = 4096, []
    for o in args.overrides:
        if o.startswith("seq_len="):
            text = o.split("=", 1)[1]
            try:
                seq_len = int(text)
            except ValueError:
                raise UsageError(f"seq_len={text!r}: expected a whole number of tokens >= 1") from None
            if seq_len < 1:
                raise UsageError(f"seq_len={seq_len}: expected a whole number of tokens >= 1")
        else:
            overrides.append(o)
    cfg = compose(overrides)
    if problems := model_problems(cfg.model):
        raise UsageError("\n".join(problems))
    if seq_len > cfg.model.max_context:
        raise UsageError(
            f"seq_len={seq_len}: expected <= model.max_context={cfg.model.max_context} ({cfg.model.name}); "
            "for a longer (rope-scaled) context, raise model.max_context too"
        )
    print(json.dumps(summary(cfg.model, seq_len), indent=2))
    return 0
