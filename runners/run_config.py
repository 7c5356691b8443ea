"""What ran, as the framework wrote it: facts read from a run's own files, each with its source.

The per-framework readers (runners/verl_config.py, slime_config.py, prime_rl_config.py) return a
`Facts` mapping: a name from FACT_NAMES -> Fact(value, source), where source is "<file>:<line>"
relative to the log folder. A fact the files do not hold is absent, never defaulted; bench/ingest.py
adds what the user gives ("given") and matches the architecture against conf/model.

Fact names:
- model_path: the checkpoint path or hub id the trainer loaded (often a local path: not a model id)
- model_hub_id: the hub id the logs downloaded into model_path (`huggingface-cli download X --local-dir`)
- architecture: {layers, hidden, q_heads, kv_heads, head_dim, ffn, vocab, params, class}, each
  present only when logged (params: total parameter count; class: e.g. Qwen3ForCausalLM)
- gpus.<role>: GPUs of one role: trainer, rollout, hybrid (trainer and rollout colocated on the
  same GPUs), teacher, reward
- gpu_ids.<role>: the physical (nvidia-smi) indices of one role's GPUs on a single node, when the
  logs name them
- nodes, group_size (samples per prompt), prompts_per_step, max_prompt_len, max_response_len
  (tokens), total_steps (the steps the run was configured for), mode (the framework's own name),
  staleness_bound (policy versions a sample may lag, when the mode has one)
- algorithm: what the loss was trained on, in the workload's words: opd (on-policy distillation
  against a teacher) or the advantage estimator (grpo, gspo, ...)
- teacher.model_path, teacher.tp (GPUs per teacher engine), teacher.placement: dedicated (its own
  GPUs) | with_generator (on the generator's GPUs) | with_trainer (inside the training process)
- rollout.tp (GPUs per inference engine), trainer.tp / trainer.pp / trainer.ep / trainer.dp (the
  trainer's tensor, pipeline, expert and data parallel sizes)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Ray's actor prefix `(TaskRunner pid=12, ip=10.0.0.1)` with the colour codes around it; logs copied
# through some tools keep the codes without their ESC byte (`[36m(TaskRunnerV1 pid=1)[0m`), so ESC
# is optional. The one definition: runners.base.clean_line and the config readers build on it.
RAY_PREFIX_PATTERN = r"(?:\x1b?\[[0-9;]*m)*\([\w.:-]+ pid=\d+[^)]*\)(?:\x1b?\[[0-9;]*m)*"
RAY_PREFIX = re.compile("^" + RAY_PREFIX_PATTERN + " ?")
# Colour codes (loguru, Ray) in raw bytes: the one definition (runners.base, the log scanners)
ANSI_BYTES = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")

FACT_NAMES = (
    "model_path",
    "model_hub_id",
    "architecture",
    "gpus.trainer",
    "gpus.rollout",
    "gpus.hybrid",
    "gpus.teacher",
    "gpus.reward",
    "gpu_ids.trainer",
    "gpu_ids.rollout",
    "gpu_ids.hybrid",
    "gpu_ids.teacher",
    "gpu_ids.reward",
    "nodes",
    "group_size",
    "prompts_per_step",
    "max_prompt_len",
    "max_response_len",
    "total_steps",
    "mode",
    "staleness_bound",
    "algorithm",
    "teacher.model_path",
    "teacher.placement",
    "teacher.tp",
    "rollout.tp",
    "trainer.tp",
    "trainer.pp",
    "trainer.ep",
    "trainer.dp",
)
SNIFF_BYTES = 1 << 20
BULK_DIRS = frozenset({"rollouts", "checkpoints", "ckpt", "weights", "broadcasts", "wandb"})
BULK_SUFFIXES = frozenset(
    {".safetensors", ".pt", ".bin", ".pth", ".parquet", ".arrow", ".distcp", ".npy"}
)  # config dumps sit at the start of a log: never read a whole 2 GB console


@dataclass
class Fact:
    value: Any
    source: str  # "<file relative to the log folder>:<1-based line>", or "given"

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source}


Facts = dict[str, Fact]


def source(root: Path, path: Path, line: int | None) -> str:
    """'<path relative to root>:<line>' (just the path when the line is unknown)."""
    rel = path.name if root == path or not root.is_dir() else str(path.relative_to(root))
    return f"{rel}:{line}" if line else rel


def head_text(path: Path, limit: int = SNIFF_BYTES) -> str:
    """The first `limit` bytes as text: NUL bytes and colour codes dropped, CRLF read as LF, bad
    UTF-8 replaced."""
    with open(path, "rb") as f:
        raw = f.read(limit)
    raw = raw.replace(b"\0", b"").replace(b"\r\n", b"\n")
    if b"\x1b" in raw:  # a colour code around a value would become part of it
        raw = ANSI_BYTES.sub(b"", raw)
    return raw.decode("utf-8", errors="replace")


def harness_values(log_dir: Path, required: tuple[str, ...]) -> tuple[dict[str, float], str | None]:
    """Numeric `KEY=value` lines of the first small text file under log_dir that holds every
    `required` key (a harness's wall-time file: start / end / teacher-ready epochs, Unix seconds),
    and its path relative to log_dir (the file's name when log_dir is the file); ({}, None) when
    none does. Read with bench.trace.read_env_file, the suite's one reader of such files."""
    from bench.trace import read_env_file

    for path in text_files(log_dir):
        if path.stat().st_size > 65536 or path.suffix in (".csv", ".parquet", ".jsonl", ".json"):
            continue
        vals = {k: float(v) for k, v in read_env_file(path).items() if isinstance(v, int | float)}
        if all(k in vals for k in required):
            return vals, (path.name if log_dir.is_file() else str(path.relative_to(log_dir)))
    return {}, None


def text_files(log_dir: Path) -> list[Path]:
    """Every regular file under log_dir (or log_dir itself), sorted, hidden folders included
    (.hydra holds verl's config). Bulk outputs are left out: per-rollout trace folders (one file
    per step, thousands on a long run), checkpoints and weight files hold no configuration or
    console line, and reading the head of each would cost more than the logs themselves."""
    if log_dir.is_file():
        return [log_dir]
    return sorted(
        p
        for p in log_dir.rglob("*")
        if p.is_file()
        and p.suffix not in BULK_SUFFIXES
        and not BULK_DIRS.intersection(p.relative_to(log_dir).parts[:-1])
    )


def line_at(text: str, offset: int) -> int:
    """1-based line number of character `offset` in text."""
    return text.count("\n", 0, offset) + 1


def find_line(text: str, pattern: str, flags: int = re.M) -> tuple[re.Match | None, int | None]:
    """First match of `pattern` in text and its 1-based line number."""
    m = re.search(pattern, text, flags)
    return (m, line_at(text, m.start())) if m else (None, None)


# `huggingface-cli download Org/Name --local-dir /root/models/Name` (also `hf download`): the hub
# id of a model the run then loads from a local path
HUB_DOWNLOAD = re.compile(
    r"\b(?:huggingface-cli|hf) download\s+([\w.-]+/[\w.-]+)\b[^\n]*?--local[-_]dir[ =]['\"]?([^\s'\"]+)"
)


def hub_id_of(facts: Facts, log_dir: Path, model_path: str) -> None:
    """model_hub_id: the hub id a log downloaded into `model_path` (HUB_DOWNLOAD), when it did."""
    for path in text_files(log_dir):
        text = head_text(path, 1 << 20)
        for m in HUB_DOWNLOAD.finditer(text):
            if m.group(2).rstrip("/") == model_path.rstrip("/"):
                put(facts, "model_hub_id", m.group(1), source(log_dir, path, line_at(text, m.start())))
                return


def positive_int(v: Any) -> int | None:
    """v as an int when it is a positive whole number (a YAML int, '16', 16.0); else None."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return int(f) if f > 0 and f == int(f) else None


def put(facts: Facts, name: str, value: Any, src: str) -> None:
    """Record a fact once: the first reader to find a value wins (callers read the most direct
    file first), and None is never recorded."""
    if value is not None and name not in facts:
        facts[name] = Fact(value, src)


def binary_share(head: bytes) -> float:
    """Share of a file's first bytes that are neither text nor UTF-8. NUL bytes are left out: a
    crash can leave zero-filled blocks in a text log, which stays a log."""
    head = head.replace(b"\0", b"")
    if not head:
        return 0.0
    control = sum(b < 9 or 13 < b < 32 for b in head)
    return (control + head.decode("utf-8", "replace").count("\ufffd")) / len(head)


HF_CONFIG = re.compile(r"\b(\w+Config) \{\s*$", re.M)
HF_KEYS = {  # Hugging Face config.json key -> architecture key (FACT_NAMES "architecture")
    "num_hidden_layers": "layers",
    "hidden_size": "hidden",
    "num_attention_heads": "q_heads",
    "num_key_value_heads": "kv_heads",
    "head_dim": "head_dim",
    "intermediate_size": "ffn",
    "vocab_size": "vocab",
    "num_experts": "experts",
    "n_routed_experts": "experts",
    "moe_intermediate_size": "ffn_expert",
    "num_experts_per_tok": "top_k",
    "tie_word_embeddings": "tied_embeddings",
}


def hf_config_architecture(text: str) -> tuple[dict[str, Any], int] | None:
    """The first Hugging Face config a log prints (`Qwen2Config {` + its JSON, as transformers'
    repr writes it; verl prints it as 'Model config after override'), as an architecture dict, and
    its 1-based line. Line prefixes (Ray's `(Worker pid=N)`) are dropped before reading the JSON."""
    import json

    m = HF_CONFIG.search(text)
    if not m:
        return None
    body, depth = ["{"], 1
    for line in text[m.end() :].split("\n")[1:]:  # LF only, as line_at counts
        line = RAY_PREFIX.sub("", line)
        body.append(line)
        depth += line.count("{") - line.count("}")
        if depth <= 0:
            break
    try:
        cfg = json.loads("\n".join(body))
    except json.JSONDecodeError:
        return None
    arch = {new: cfg[old] for old, new in HF_KEYS.items() if cfg.get(old) is not None}
    if "head_dim" not in arch and arch.get("hidden") and arch.get("q_heads"):
        arch["head_dim"] = arch["hidden"] // arch["q_heads"]
    names = cfg.get("architectures") or []
    if names:
        arch["class"] = names[0]
    if not arch.get("experts"):
        arch.pop("ffn_expert", None), arch.pop("top_k", None)
    return (arch, line_at(text, m.start())) if "layers" in arch and "hidden" in arch else None


# Compressed logs: read through a decompressed copy (ingest stages one), never as binary. zstd needs
# the `zstandard` module, which the suite does not depend on: without it a .zst file is named and skipped.
COMPRESSED_SUFFIXES = (".gz", ".zst")


def _zstd_reader(fh: Any) -> Any | None:
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard.ZstdDecompressor().stream_reader(fh)


def utf16(path: Path) -> bool:
    """Whether a file is UTF-16 text with its byte-order mark (what PowerShell's `>` writes)."""
    with open(path, "rb") as f:
        return f.read(2) in (b"\xff\xfe", b"\xfe\xff")


def needs_staging(logs: Path) -> bool:
    """Whether some file under `logs` must be read through a staged copy (stage_decompressed):
    compressed (COMPRESSED_SUFFIXES) or UTF-16 text."""
    return any(p.suffix in COMPRESSED_SUFFIXES or utf16(p) for p in text_files(logs))


def stage_decompressed(logs: Path, into: Path) -> tuple[Path, dict[str, str], list[str]]:
    """`logs` as a folder every reader can read: under `into`, each file linked as it is, each
    compressed file (COMPRESSED_SUFFIXES) decompressed under its name without the suffix, each
    UTF-16 file (utf16) written as UTF-8 under its name. Returns
    (the staged --logs, staged path -> original path of each decompressed file, one line per
    compressed file skipped: zstd without the zstandard module)."""
    import gzip
    import os
    import shutil

    staged = into / (logs.name[: -len(logs.suffix)] if logs.suffix in COMPRESSED_SUFFIXES else logs.name)
    paths = [logs] if logs.is_file() else sorted(p for p in logs.rglob("*") if p.is_file())
    decompressed, skipped = {}, []
    for path in paths:
        dest = staged if path == logs else staged / path.relative_to(logs)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix not in COMPRESSED_SUFFIXES:
            if utf16(path):  # a Windows redirect's UTF-16: every reader reads UTF-8
                dest.write_bytes(path.read_bytes().decode("utf-16", errors="replace").encode())
                decompressed[str(dest)] = str(path)
            else:
                os.symlink(path.resolve(), dest)
            continue
        if path != logs:  # (a single file's staged name is already without the suffix)
            dest = dest.with_suffix("")
        with open(path, "rb") as fh:
            reader = gzip.open(fh) if path.suffix == ".gz" else _zstd_reader(fh)
            if reader is None:
                skipped.append(
                    f"{path}: compressed (zstd) and skipped: the zstandard module is not installed here "
                    f"(pip install zstandard, or decompress it first: zstd -d {path})"
                )
                continue
            try:
                with reader, open(dest, "wb") as out:
                    shutil.copyfileobj(reader, out, 1 << 20)
            except (OSError, EOFError) as e:  # a corrupt or cut-off archive
                dest.unlink(missing_ok=True)
                skipped.append(f"{path}: compressed but unreadable ({e}); skipped")
                continue
        decompressed[str(dest)] = str(path)
    return staged, decompressed, skipped
