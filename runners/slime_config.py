"""slime / Miles: the configuration that ran, read from the run's own files -> Facts.

Where slime writes it (found by content):
- Megatron's argument dump, printed once by the driver between `---- arguments ----` and
  `---- end of arguments ----`, one `  name ........ value` line per argument (Python reprs);
- the driver's command line (`python3 train.py --actor-num-gpus-per-node 1 ...`, Ray's
  `Running entrypoint for job ...:` line or a launcher's echo), used for what the dump lacks;
- Megatron's ` > number of parameters on (tensor, pipeline) model parallel rank (0, 0): N`
  (the whole model only when TP = PP = 1 and no experts are sharded);
- an external SGLang server's log (a teacher for on-policy distillation, or a reward model):
  `server_args=ServerArgs(model_path='...', tp_size=1, ..., dp_size=1, ...)`;
- on-policy distillation: `use_opd`, `opd_type` (sglang: that external teacher; megatron: the
  teacher checkpoint `opd_teacher_load` inside the training process), or (2025-11 to 2026-02)
  `advantage_estimator on_policy_distillation`; else `advantage_estimator`.

Keys: group size `n_samples_per_prompt`; prompts per step `rollout_batch_size`;
`rollout_max_prompt_len` / `rollout_max_response_len`; trainer GPUs `actor_num_nodes x
actor_num_gpus_per_node`, the same GPUs for rollout when `colocate` (hybrid) else `rollout_num_gpus`;
`num_rollout` steps; architecture from `num_layers`, `hidden_size`, `num_attention_heads`,
`num_query_groups` (with `group_query_attention`), `kv_channels`, `ffn_hidden_size`,
`padded_vocab_size`, `num_experts`, `moe_ffn_hidden_size`, `moe_router_topk`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from runners.run_config import Facts, find_line, head_text, positive_int, put, source, text_files

DUMP = re.compile(r"^-+ arguments -+\s*$(.*?)^-+ end of arguments -+\s*$", re.M | re.S)
ARG_LINE = re.compile(r"^\s*(\w+) \.{2,} (.*?)\s*$", re.M)
ARGV_LINE = re.compile(r"^.*?\b(?:python3?|torchrun|uv run)\b[^\n]*?\b\w*train\w*\.py (--[^\n]*)$", re.M)
PARAMS = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \(0, 0\): (\d+)")
OPD_ESTIMATOR = "on_policy_distillation"  # --advantage-estimator before OPD became --use-opd
SERVER_ARGS = re.compile(r"server_args=ServerArgs\((.*?)\)\s*$", re.M)


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


class _Args:
    """name -> (value, source) from the argument dump, then the command line."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[Any, str]] = {}

    def add(self, name: str, value: Any, src: str) -> None:
        self.values.setdefault(name, (value, src))

    def get(self, name: str) -> tuple[Any, str]:
        return self.values.get(name, (None, ""))


def _read_args(log_dir: Path, files: list[Path]) -> tuple[_Args, list[tuple[Path, str]]]:
    args, others = _Args(), []
    argv_hits = []
    for path in files:
        text = head_text(path)
        dump = DUMP.search(text)
        if dump:
            for m in ARG_LINE.finditer(dump.group(1)):
                line = text.count("\n", 0, dump.start(1) + m.start(1)) + 1
                args.add(m.group(1), _value(m.group(2)), source(log_dir, path, line))
        argv, line = find_line(text, ARGV_LINE.pattern)
        if argv:
            argv_hits.append((argv.group(1), source(log_dir, path, line)))
        if not dump and not argv:
            others.append((path, text))
    for words, src in argv_hits:  # flags the dump did not print (older slime prints no dump)
        parts = words.split()
        for i, w in enumerate(parts):
            if w.startswith("--"):
                nxt = parts[i + 1] if i + 1 < len(parts) else None
                args.add(
                    w[2:].replace("-", "_"), True if nxt is None or nxt.startswith("--") else _value(nxt), src
                )
    return args, others


def read(log_dir: Path | str, run_info: dict[str, Any] | None = None) -> Facts:
    """Facts of a slime/Miles run folder (or one log file); run_info is the parser's (mode)."""
    log_dir = Path(log_dir)
    facts: Facts = {}
    files = text_files(log_dir)
    args, others = _read_args(log_dir, files)
    for name, key in (
        ("group_size", "n_samples_per_prompt"),
        ("prompts_per_step", "rollout_batch_size"),
        ("max_prompt_len", "rollout_max_prompt_len"),
        ("max_response_len", "rollout_max_response_len"),
        ("total_steps", "num_rollout"),
        ("nodes", "actor_num_nodes"),
    ):
        v, src = args.get(key)
        put(facts, name, positive_int(v), src)
    v, src = args.get("hf_checkpoint")
    put(facts, "model_path", v if isinstance(v, str) else None, src)
    nodes, _ = args.get("actor_num_nodes")
    per, t_src = args.get("actor_num_gpus_per_node")
    trainer = positive_int(nodes) and positive_int(per) and positive_int(nodes) * positive_int(per)
    colocate, _ = args.get("colocate")
    if trainer and colocate is True:
        put(facts, "gpus.hybrid", trainer, t_src)
    elif trainer:
        put(facts, "gpus.trainer", trainer, t_src)
        v, src = args.get("rollout_num_gpus")
        put(facts, "gpus.rollout", positive_int(v), src)
    if run_info and run_info.get("mode"):
        put(facts, "mode", run_info["mode"], "driver and --colocate flag (slime parser)")
        put(facts, "staleness_bound", run_info.get("staleness_bound"), "driver (slime parser)")
    _parallelism(facts, args)
    arch = _architecture(args)
    if arch:
        put(facts, "architecture", *arch)
        tp, pp = args.get("tensor_model_parallel_size")[0], args.get("pipeline_model_parallel_size")[0]
        if tp in (1, None) and pp in (1, None) and not arch[0].get("experts"):
            _params(facts, log_dir, files)
    for path, text in others:
        _external_server(facts, args, log_dir, path, text)
    _algorithm(facts, args)
    return facts


def _parallelism(facts: Facts, args: _Args) -> None:
    """Rollout TP (`rollout_num_gpus_per_engine`: GPUs per SGLang engine) and Megatron's trainer
    `tensor_model_parallel_size` / `pipeline_model_parallel_size` / `expert_model_parallel_size`;
    DP = trainer GPUs / (TP x PP)."""
    v, src = args.get("rollout_num_gpus_per_engine")
    put(facts, "rollout.tp", positive_int(v), src)
    for name, key in (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
                      ("ep", "expert_model_parallel_size")):  # fmt: skip
        v, src = args.get(key)
        put(facts, f"trainer.{name}", positive_int(v), src)
    gpus = facts.get("gpus.hybrid") or facts.get("gpus.trainer")
    tp, pp = facts.get("trainer.tp"), facts.get("trainer.pp")
    if gpus and tp and pp and gpus.value % (tp.value * pp.value) == 0:
        dp = gpus.value // (tp.value * pp.value)
        put(facts, "trainer.dp", dp, f"{gpus.source}: {gpus.value} GPUs / (TP {tp.value} x PP {pp.value})")


def _algorithm(facts: Facts, args: _Args) -> None:
    """On-policy distillation when `use_opd`: `opd_type megatron` loads the teacher
    (`opd_teacher_load`) into the training process itself, on the trainer's GPUs (the generator's
    too when colocated); `sglang` asks an external server (its GPUs: _external_server). Else the
    advantage estimator."""
    use_opd, src = args.get("use_opd")
    if use_opd is True:
        put(facts, "algorithm", "opd", src)
        coef, coef_src = args.get("opd_kl_coef")
        put(facts, "kl_coef", coef if isinstance(coef, int | float) else None, coef_src)
        kind, kind_src = args.get("opd_type")
        if kind == "megatron":
            colocate, _ = args.get("colocate")
            put(facts, "teacher.placement", "with_generator" if colocate is True else "with_trainer",
                f"{kind_src} (opd_type megatron: the teacher runs in the training process)")  # fmt: skip
            load, load_src = args.get("opd_teacher_load")
            put(facts, "teacher.model_path", load if isinstance(load, str) else None, load_src)
        return
    est, src = args.get("advantage_estimator")
    # slime from PR #673 to #1538 (2025-11 .. 2026-02): OPD was an estimator, the teacher an external server
    put(facts, "algorithm", "opd" if est == OPD_ESTIMATOR else est if isinstance(est, str) else None, src)


def _uses_opd(args: _Args) -> bool:
    return args.get("use_opd")[0] is True or args.get("advantage_estimator")[0] == OPD_ESTIMATOR


def _architecture(args: _Args) -> tuple[dict[str, Any], str] | None:
    layers, src = args.get("num_layers")
    hidden, _ = args.get("hidden_size")
    if not positive_int(layers) or not positive_int(hidden):
        return None
    heads = positive_int(args.get("num_attention_heads")[0])
    gqa = args.get("group_query_attention")[0] is True
    kv = positive_int(args.get("num_query_groups")[0]) if gqa else heads
    arch = {
        "layers": positive_int(layers),
        "hidden": positive_int(hidden),
        "q_heads": heads,
        "kv_heads": kv,
        "head_dim": positive_int(args.get("kv_channels")[0]),
        "ffn": positive_int(args.get("ffn_hidden_size")[0]),
        "vocab": positive_int(args.get("padded_vocab_size")[0]) or positive_int(args.get("vocab_size")[0]),
        "experts": positive_int(args.get("num_experts")[0]) or 0,
        "ffn_expert": positive_int(args.get("moe_ffn_hidden_size")[0]) or 0,
        "top_k": positive_int(args.get("moe_router_topk")[0]) or 0,
        "tied_embeddings": args.get("untie_embeddings_and_output_weights")[0] is not True,
    }
    if not arch["experts"]:  # Megatron prints its MoE defaults (top-k 2) for dense models too
        arch["ffn_expert"] = arch["top_k"] = 0
    return {k: v for k, v in arch.items() if v is not None}, src


def _params(facts: Facts, log_dir: Path, files: list[Path]) -> None:
    """Megatron's rank-(0, 0) parameter count (the whole model when TP = PP = 1)."""
    for path in files:
        m, line = find_line(head_text(path, 8 << 20), PARAMS.pattern)
        if m and "architecture" in facts:
            facts["architecture"].value["params"] = float(m.group(1))
            facts["architecture"].source += f"; params {source(log_dir, path, line)}"
            return


def _external_server(facts: Facts, args: _Args, log_dir: Path, path: Path, text: str) -> None:
    """An SGLang server started outside the driver: its GPUs are the teacher's (OPD) or the
    reward model's (--rm-url)."""
    m, line = find_line(text, SERVER_ARGS.pattern)
    if not m:
        return
    kw = dict(re.findall(r"\b(tp_size|pp_size|dp_size|enable_dp_attention)=(\w+)", m.group(1)))
    gpus = (positive_int(kw.get("tp_size")) or 1) * (positive_int(kw.get("pp_size")) or 1)
    if kw.get("enable_dp_attention") != "True":
        gpus *= positive_int(kw.get("dp_size")) or 1
    teacher = _uses_opd(args)
    src = source(log_dir, path, line)
    put(facts, "gpus.teacher" if teacher else "gpus.reward", gpus, src)
    if teacher:
        model = re.search(r"\bmodel_path='([^']*)'", m.group(1))
        put(facts, "teacher.model_path", model.group(1) if model else None, src)
        put(facts, "teacher.tp", positive_int(kw.get("tp_size")), src)
