"""prime-rl: the configuration that ran, read from the run's own files -> Facts.

Where prime-rl writes it (found by content):
- the config it was started with (`rl.toml`, or the per-process configs the `rl` launcher writes
  under `<output>/configs/`: TOML, or JSON in later versions): `[orchestrator] batch_size`
  (rollouts per step, not prompts) and `group_size` (`rollouts_per_example` before v0.8, or per
  `[[orchestrator.train.source]]`), `[orchestrator.train.sampling] max_completion_tokens`
  (`[orchestrator.sampling] max_tokens` before 2026-04), `max_steps`, `[model] name`,
  `[deployment] num_train_gpus / num_infer_gpus`, `max_off_policy_steps` (`max_async_level`);
- the launcher's console: `Starting inference on GPU(s) 0`, `Starting trainer on GPU(s) 1`;
- the trainer's console: `Starting RL trainer in World(world_size=1, ..., num_nodes=1)`;
- the orchestrator's console: `Starting orchestrator loop (max_steps=15)`, `Starting orchestrator
  (algorithm: opd)`, an on-policy distillation teacher `Initializing frozen model pool
  (model=/path/teacher, base_url=...)` (`[orchestrator.algo] type`, `[orchestrator.algo.teacher]
  name` in the config); the teacher is served outside prime-rl, its GPUs are not logged;
- the orchestrator's metrics.jsonl rows: `progress/tasks` (prompts) and `progress/rollouts` per
  step, whose ratio is the group size.
prime-rl prints no architecture: the model is matched only by its name, or given.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from runners.run_config import Facts, find_line, head_text, positive_int, put, source, text_files

LOG_FACTS = {
    # fact name -> regex on the console (group 1 is the value)
    "gpus.rollout": r"Starting inference on GPU\(s\) ([\d, ]+)",
    "gpus.trainer": r"Starting trainer on GPU\(s\) ([\d, ]+)",
    "total_steps": r"Starting (?:orchestrator|training) loop \(max_steps=(\d+)\)",
}
CONSOLE_TEXT = {
    # fact name -> regex on the orchestrator's console (group 1 is the value, kept as text)
    "algorithm": r"Starting orchestrator \(algorithm: (\w+)\)",
    # an on-policy distillation teacher: a frozen model served outside prime-rl (v0.7+)
    "teacher.model_path": r"Initializing frozen model pool \(model=([^,)\s]+)",
}
WORLD = re.compile(r"Starting RL trainer in World\(world_size=(\d+).*?num_nodes=(\d+)\)")


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _configs(log_dir: Path, files: list[Path]) -> list[tuple[dict[str, Any], Path, str]]:
    """(flattened config, path, text) of every TOML / JSON config of prime-rl under log_dir.
    A per-process config (orchestrator.json/.toml) gets its process name as key prefix."""
    out = []
    for path in files:
        if path.suffix not in (".toml", ".json") or path.stat().st_size > (1 << 20):
            continue
        text = head_text(path)
        try:
            data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if not isinstance(data, dict):
            continue
        if path.stem in ("orchestrator", "trainer", "inference") and path.stem not in data:
            data = {path.stem: data}
        flat = _flatten(data)
        if any(k.startswith(("orchestrator.", "trainer.", "inference.", "deployment.")) for k in flat):
            out.append((flat, path, text))
    return out


def _key_line(text: str, key: str) -> int | None:
    """Line of a dotted key: in TOML the leaf after its `[table]` header; else the leaf's first
    occurrence (`"batch_size": 128` in JSON)."""
    table, _, leaf = key.rpartition(".")
    leaf_re = rf"^[ \t]*\"?{re.escape(leaf)}\"?[ \t]*[=:]"
    if table:
        head, head_line = find_line(text, rf"^[ \t]*\[\[?{re.escape(table)}\]\]?[ \t]*$")
        if head:
            m, line = find_line(text[head.end() :], leaf_re)
            if m:
                return head_line + line - 1
    m, line = find_line(text, leaf_re)
    if m is None:  # JSON keeps nested objects on one line: the quoted key anywhere
        _, line = find_line(text, rf"\"{re.escape(leaf)}\"\s*:")
    return line


def _take(facts: Facts, name: str, keys: tuple[str, ...], cfg: tuple, conv=positive_int) -> None:
    """The first of `keys` (a leading `*` matches any prefix) the config holds, as fact `name`."""
    flat, path, text, log_dir = cfg
    for k in keys:
        for fk in (fk for fk in flat if fk == k or (k.startswith("*") and fk.endswith(k[1:]))):
            v = conv(flat[fk])
            if v is not None:
                put(facts, name, v, source(log_dir, path, _key_line(text, fk)))
                return


def _count_ids(v: Any) -> int | None:
    """GPU id lists of the pre-2026-02 configs (`trainer_gpu_ids = [1]`) -> how many."""
    return len(v) if isinstance(v, list) and v else None


def _from_configs(facts: Facts, log_dir: Path, configs: list) -> None:
    for flat, path, text in configs:
        cfg = (flat, path, text, log_dir)
        _take(facts, "group_size", ("orchestrator.group_size", "orchestrator.rollouts_per_example"), cfg)
        _take(
            facts,
            "max_response_len",
            ("*.sampling.max_completion_tokens", "orchestrator.sampling.max_tokens"),
            cfg,
        )
        _take(facts, "total_steps", ("max_steps", "orchestrator.max_steps", "trainer.max_steps"), cfg)
        _take(facts, "gpus.trainer", ("deployment.num_train_gpus",), cfg)
        _take(facts, "gpus.rollout", ("deployment.num_infer_gpus",), cfg)
        _take(facts, "gpus.teacher", ("deployment.num_teacher_gpus",), cfg)  # v0.5 - 2026-05
        _take(facts, "gpus.trainer", ("trainer_gpu_ids", "deployment.trainer_gpu_ids"), cfg, conv=_count_ids)
        _take(
            facts, "gpus.rollout", ("inference_gpu_ids", "deployment.inference_gpu_ids"), cfg, conv=_count_ids
        )
        per_node = positive_int(flat.get("deployment.gpus_per_node"))
        for role, key in (
            ("gpus.trainer", "deployment.num_train_nodes"),
            ("gpus.rollout", "deployment.num_infer_nodes"),
        ):
            nodes = positive_int(flat.get(key))
            if nodes and per_node:  # multi-node: whole nodes per role
                put(facts, role, nodes * per_node, source(log_dir, path, _key_line(text, key)))
        _take(
            facts,
            "staleness_bound",
            ("orchestrator.max_off_policy_steps", "orchestrator.max_async_level"),
            cfg,
        )
        as_str = lambda v: v if isinstance(v, str) else None  # noqa: E731
        _take(facts, "model_path", ("model.name", "trainer.model.name"), cfg, conv=as_str)
        _take(facts, "algorithm", ("orchestrator.algo.type", "*.train.source.algo.type"), cfg, conv=as_str)
        _take(facts, "teacher.model_path", ("*.algo.teacher.name",), cfg, conv=as_str)
        if positive_int(flat.get("deployment.num_teacher_gpus")):  # v0.5 - 2026-05: its own GPUs
            _take(
                facts, "teacher.placement", ("deployment.num_teacher_gpus",), cfg, conv=lambda v: "dedicated"
            )
        batch = positive_int(flat.get("orchestrator.batch_size"))
        if batch and "group_size" in facts and batch % facts["group_size"].value == 0:
            src = source(log_dir, path, _key_line(text, "orchestrator.batch_size"))
            put(
                facts,
                "prompts_per_step",
                batch // facts["group_size"].value,
                f"{src} (batch_size / group_size)",
            )


def _gpu_mapping(text: str) -> dict[int, int]:
    """`Using local->physical GPU mapping: {0: 2, 1: 3}` -> {0: 2, 1: 3} (empty when not logged)."""
    m = re.search(r"local->physical GPU mapping: \{([\d:, ]*)\}", text)
    return {int(a): int(b) for a, b in re.findall(r"(\d+): (\d+)", m.group(1))} if m else {}


def _from_logs(facts: Facts, log_dir: Path, files: list[Path]) -> None:
    for path in files:
        if path.suffix in (".toml", ".json", ".csv", ".parquet", ".env"):
            continue
        text = head_text(path)
        mapping = _gpu_mapping(text)
        for name, pattern in LOG_FACTS.items():
            m, line = find_line(text, pattern)
            if not m:
                continue
            if name.startswith("gpus."):
                ids = [int(x) for x in re.findall(r"\d+", m.group(1))]
                put(facts, name, len(ids), source(log_dir, path, line))
                # physical indices (nvidia-smi's) through the launcher's local->physical mapping
                role = name.split(".")[1]
                put(facts, f"gpu_ids.{role}", [mapping.get(i, i) for i in ids], source(log_dir, path, line))
            else:
                put(facts, name, positive_int(m.group(1)), source(log_dir, path, line))
        m, line = find_line(text, r"Initializing model \(name='([^']+)'")
        if m:
            put(facts, "model_path", m.group(1), source(log_dir, path, line))
        for name, pattern in CONSOLE_TEXT.items():
            m, line = find_line(text, pattern)
            if m:
                put(facts, name, m.group(1), source(log_dir, path, line))
        m, line = find_line(text, WORLD.pattern)
        if m:
            put(facts, "gpus.trainer", positive_int(m.group(1)), source(log_dir, path, line))
            put(facts, "nodes", positive_int(m.group(2)), source(log_dir, path, line))
        if path.suffix == ".jsonl" or "progress/tasks" in text[:65536]:
            _from_progress(facts, log_dir, path, text)


def _from_progress(facts: Facts, log_dir: Path, path: Path, text: str) -> None:
    """Prompts and rollouts per step from the orchestrator's metrics rows (first row that has both)."""
    for i, line in enumerate(text.split("\n"), 1):
        if '"progress/tasks"' not in line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        tasks, rollouts = positive_int(row.get("progress/tasks")), positive_int(row.get("progress/rollouts"))
        if tasks and rollouts and rollouts % tasks == 0:
            src = source(log_dir, path, i)
            put(facts, "prompts_per_step", tasks, f"{src} (progress/tasks)")
            put(facts, "group_size", rollouts // tasks, f"{src} (progress/rollouts / progress/tasks)")
            return


def read(log_dir: Path | str, run_info: dict[str, Any] | None = None) -> Facts:
    """Facts of a prime-rl output or log folder (or one log file)."""
    log_dir = Path(log_dir)
    facts: Facts = {}
    files = text_files(log_dir)
    _from_configs(facts, log_dir, _configs(log_dir, files))
    _from_logs(facts, log_dir, files)
    if facts:  # prime-rl has one mode: the orchestrator samples while the trainer trains
        put(facts, "mode", "async", "prime-rl's only mode (orchestrator and trainer overlap)")
    algo = facts.get("algorithm")
    if algo is not None and algo.value == "opd":  # the teacher's reverse KL: a loss weight prime-rl fixes
        put(facts, "kl_coef", 1.0, f"{algo.source} (prime-rl's ref_kl weight is fixed at 1)")
    return facts
