"""verl's own logs -> trace rows: the `file` logger's JSONL first, console step lines as fallback.

Files are found by content, never by name: JSONL metric records (`{"step": N, "data": {...}}`),
a dumped config YAML (top-level `actor_rollout_ref:` and `trainer:`), a harness wall-time file
(`wall_seconds=`), and any other text file is scanned for console step lines
(`[ANSI](TaskRunnerV1 pid=N)[ANSI] step:N - key:value - ...`). Formats: runners/verl.py PARSER_FORMATS.

Streaming: 8 MiB blocks, bytes.find jumps from one `step:` to the next (other lines are never
decoded), one prefix-factored regex picks only the ~25 keys the trace needs; records sharing a
step are merged. Memory grows with the number of steps only (~1.5 KB each), not with the log size.
Bad lines and bad key:value pairs are counted, never raised.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from bench.trace import read_env_file
from runners.attempts import Stream
from runners.base import ParseResult
from runners.run_config import ANSI_BYTES, binary_share

SNIFF_BYTES = 8192

# raw verl key -> the key this parser keeps (aliases fold version differences together)
KEYS: dict[str, str] = {
    k: k
    for k in (
        "timing_s/step",
        "timing_s/gen",
        "timing_s/generate_async",
        "timing_s/old_log_prob",
        "timing_s/ref",
        "timing_s/reward",
        "timing_s/values",
        "timing_s/update_actor",
        "timing_s/update_critic",
        "timing_s/update_weights",
        "timing_s/sync_rollout_weights",
        "timing_s/param_sync",
        "timing_s/adv",
        "timing_s/testing",
        "timing_s/save_checkpoint",
        "response_length/max",
        "response_length/clip_ratio",
        "perf/total_num_tokens",
        "perf/throughput",
        "perf/mfu/actor",
        "prompt_length/mean",
        "response_length/mean",
        "critic/score/mean",
        "training/off_policy/trajectory_staleness/mean",
        "training/off_policy/trajectory_staleness/max",
        "training/off_policy/evicted_samples",
        "training/filter_groups/evicted_samples",
        "training/rollout_failure/evicted_samples",
        "fully_async/trainer/idle_ratio",
        "fully_async/count/dropped_stale_samples",
        "actor/perf/max_memory_allocated_gb",
    )
}
KEYS["timing_s/timing_s/param_sync"] = "timing_s/param_sync"  # fully_async double prefix
KEYS["perf/max_memory_allocated_gb"] = "actor/perf/max_memory_allocated_gb"  # before the actor/ prefix
KEYS["total_num_tokens"] = "perf/total_num_tokens"  # before the perf/ prefix (early 2025)
# verl before `timing_s/` (early 2025) logged `timing/<name>` and no whole-step timer: kept under
# their own names, so _rows knows the record's era (_old_timers folds them into timing_s/*)
OLD_TIMING = "timing/"
OLD_KEYS = [
    OLD_TIMING + k.removeprefix("timing_s/") for k in KEYS if k.startswith("timing_s/") and k.count("/") == 1
]
KEYS.update({k: k for k in OLD_KEYS})

MODE_BY_PREFIX = {"OneStepTaskRunner": "one_step_off", "FullyAsyncTrainer": "fully_async"}
# native_* trace columns: what verl itself reported, kept for cross-checks
NATIVE = {
    "native_mfu": "perf/mfu/actor",
    "native_throughput_tokens_per_gpu_s": "perf/throughput",
    "native_total_num_tokens": "perf/total_num_tokens",
    "native_max_memory_allocated_gb": "actor/perf/max_memory_allocated_gb",
    "native_trainer_idle_ratio": "fully_async/trainer/idle_ratio",
    "native_response_length_max": "response_length/max",
    "native_response_clip_ratio": "response_length/clip_ratio",
}
# timing_s/<phase> -> the step's phase columns (bench.trace.STEP_PHASES); docs/metrics.md has the table.
# timing_s/generate_sequences and timing_s/reshard are timed inside timing_s/gen: not phases.
PHASE_TIMERS = {
    "ref_s": ("timing_s/ref",),
    "old_logprob_s": ("timing_s/old_log_prob", "timing_s/values"),
    "adv_s": ("timing_s/adv",),
    "validation_s": ("timing_s/testing",),
    "checkpoint_s": ("timing_s/save_checkpoint",),
}


class _Scan:
    """Accumulates records (step -> {key: value}) and problem counts over every file."""

    def __init__(self) -> None:
        self.records: dict[int, dict[str, float]] = {}
        self.skipped_lines = 0
        self.bad_pairs = 0
        self.prefixes: set[str] = set()
        self.saw_separate_async = False
        self.saw_fully_async = False
        self.last_step: int | None = None  # highest step number seen, validation-only records too
        self.file = ""  # the file being read, and the step numbers each file logged
        self.file_steps: dict[str, set[int]] = {}

    def add(self, step: int, key: str, value: float) -> None:
        rec = self.records.get(step)
        if rec is None:
            rec = self.records[step] = {}
        rec[key] = value


def _number(text: str | bytes) -> float:
    """A logged value: 0.5, 3e-06, nan, True, np.float64(0.5), np.int64(1) (str or bytes)."""
    if text[:3] in ("np.", b"np."):
        text = text[
            text.find("(" if isinstance(text, str) else b"(") + 1 : text.rfind(
                ")" if isinstance(text, str) else b")"
            )
        ]
    elif text in ("True", b"True"):
        return 1.0
    elif text in ("False", b"False"):
        return 0.0
    return float(text)


BYTE_KEYS = {k.encode(): v for k, v in KEYS.items()}


def _trie_pattern(words: list[str]) -> str:
    """A regex alternation of `words` factored by common prefix: the engine rejects a key at its
    first differing character instead of trying every word (twice as fast as splitting the line)."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        alts = [re.escape(ch) + emit(sub) if ch else "" for ch, sub in sorted(node.items())]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return emit(trie)


# " - <wanted key>:<value>"; "" sorts first in each alternation, so `timing_s/gen` backtracks to
# `timing_s/generate_async` when no ':' follows.
PAIR_RE = re.compile(rb" - (" + _trie_pattern(list(KEYS)).encode() + rb"):(\S*)")
STEP_RE = re.compile(rb"step:(\S*?)(?: - |\s*$)")
PREFIX_BRE = re.compile(
    rb"(?:\x1b\[[0-9;]*[A-Za-z])*(?:\((\w+) pid=\d+(?:, ip=[0-9A-Fa-f.:]+)?\))?\s*(?:\x1b\[[0-9;]*[A-Za-z])*\s*"
)
BLOCK = 8 << 20


def scan_console(path: Path, scan: _Scan) -> int:
    """Read console step lines of one file into `scan`; returns the number of step lines read.

    Reads 8 MiB blocks and jumps from one `step:` to the next with bytes.find, so lines without it
    (most of a console log) are never split or decoded.
    """
    found, scan.file = 0, str(path)
    with open(path, "rb") as f:
        tail = b""
        while True:
            block = f.read(BLOCK)
            at_eof = not block
            buf = tail + block
            if not buf:
                break
            # a record ends at LF or at a bare CR (tqdm, and logs written with CR line ends only)
            cut = len(buf) if at_eof else max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
            if cut == 0:  # no newline yet: keep reading
                tail = buf
                continue
            found += _scan_block(buf[:cut], scan)
            tail = buf[cut:]
            if at_eof:
                break
    return found


def _scan_block(buf: bytes, scan: _Scan) -> int:
    found, pos, size = 0, 0, len(buf)
    has_lf = b"\n" in buf
    while True:
        i = buf.find(b"step:", pos)
        if i < 0:
            return found
        # a record ends at LF or at a bare CR inside the line (both searched within the line only)
        line_start = buf.rfind(b"\n", 0, i) + 1
        start = max(line_start, buf.rfind(b"\r", line_start, i) + 1)
        end = buf.find(b"\n", i) if has_lf else -1  # a CR-only log: no LF to look for
        complete = end >= 0
        if not complete:
            end = size
        cr = buf.find(b"\r", i, end)
        if cr >= 0:
            end, complete = cr, True
        pos = end + 1
        m = PREFIX_BRE.fullmatch(buf, start, i)
        if m is None:
            continue  # "step:" inside some other message
        if m.group(1):
            scan.prefixes.add(m.group(1).decode())
        line = buf[i:end].rstrip(b"\r")
        if b"\x1b" in line:
            line = ANSI_BYTES.sub(b"", line)
        sm = STEP_RE.match(line)
        try:
            step = int(sm.group(1)) if sm else None
        except ValueError:
            step = None
        if step is None:
            scan.skipped_lines += 1
            continue
        found += 1
        scan.file_steps.setdefault(scan.file, set()).add(step)
        if complete:  # a record the file cuts short is not a step the run got through
            scan.last_step = step if scan.last_step is None else max(scan.last_step, step)
        if not scan.saw_fully_async and b"fully_async/" in line:
            scan.saw_fully_async = True
        if not scan.saw_separate_async and b"separate_async/" in line:
            scan.saw_separate_async = True
        if not complete:  # the file ends mid-line: the last value may be cut short, so drop it
            line = line[: max(line.rfind(b" - "), 0)]
        for k, v in PAIR_RE.findall(line):
            try:
                scan.add(step, BYTE_KEYS[k], _number(v))
            except ValueError:
                scan.bad_pairs += 1  # e.g. another process's output spliced into the value
    return found


def scan_jsonl(path: Path, scan: _Scan) -> int:
    """Read file-logger JSONL records into `scan`; returns the number of records read."""
    found = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                step, data = int(obj["step"]), obj["data"]
                items = data.items()
            except (ValueError, KeyError, TypeError, AttributeError):
                scan.skipped_lines += 1  # also a line cut short by a crash
                continue
            found += 1
            scan.file_steps.setdefault(str(path), set()).add(step)
            scan.last_step = step if scan.last_step is None else max(scan.last_step, step)
            for k, v in items:
                if k.startswith("fully_async/"):
                    scan.saw_fully_async = True
                elif k.startswith("separate_async/"):
                    scan.saw_separate_async = True
                canon = KEYS.get(k)
                if canon is None:
                    continue
                if v is None:  # orjson writes NaN as null
                    v = math.nan
                try:
                    scan.add(step, canon, float(v))
                except (TypeError, ValueError):
                    scan.bad_pairs += 1
    return found


def classify(path: Path) -> str:
    """'jsonl' | 'config' | 'wall_time' | 'text' | 'binary', from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    if binary_share(head) > 0.3:
        return "binary"
    head = head.replace(b"\0", b"")  # zero-filled blocks a crash left in a text log
    text = head.decode("utf-8", errors="replace")
    first = text.lstrip().split("\n", 1)[0]
    if first.startswith("{") and '"step"' in first and '"data"' in first:
        return "jsonl"
    if re.search(r"^wall_seconds=\d", text, re.M) and path.stat().st_size < 65536:
        return "wall_time"
    if re.search(r"^actor_rollout_ref:", text, re.M) and path.stat().st_size < (4 << 20):
        if re.search(r"^trainer:", path.read_text(errors="replace"), re.M):
            return "config"
    return "text"


def _config_info(path: Path) -> dict[str, Any]:
    try:
        cfg = yaml.safe_load(path.read_text(errors="replace")) or {}
        tr, rollout = cfg.get("trainer") or {}, (cfg.get("actor_rollout_ref") or {}).get("rollout") or {}
    except (yaml.YAMLError, AttributeError):
        return {}
    info = {
        "rollout_n": rollout.get("n"),
        "train_batch_size": (cfg.get("data") or {}).get("train_batch_size"),
        "use_v1": tr.get("use_v1"),
        "trainer_mode": (tr.get("v1") or {}).get("trainer_mode"),
        "trainer_gpus": _int(tr.get("nnodes")) * _int(tr.get("n_gpus_per_node")) or None,
        "model": ((cfg.get("actor_rollout_ref") or {}).get("model") or {}).get("path"),
    }
    return {k: v for k, v in info.items() if v is not None}


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _wall_info(path: Path) -> dict[str, Any]:
    keep = ("wall_seconds", "framework_wall_seconds", "start_epoch", "end_epoch")
    return {k: float(v) for k, v in read_env_file(path).items() if k in keep and isinstance(v, int | float)}


def parse_dir(log_dir: Path) -> ParseResult:
    """Every file under log_dir, classified by content -> a ParseResult (never raises on bad input)."""
    log_dir = Path(log_dir)
    if not log_dir.exists():
        return ParseResult(steps=[], warnings=[f"{log_dir}: no such directory"])
    paths = [log_dir] if log_dir.is_file() else sorted(p for p in log_dir.rglob("*") if p.is_file())
    kinds = {p: classify(p) for p in paths}
    run_info: dict[str, Any] = {"framework": "verl"}
    for p, kind in kinds.items():
        if kind == "config":
            run_info.update(_config_info(p))
        elif kind == "wall_time":
            run_info.update(_wall_info(p))
    scan, files, warnings = _Scan(), [], []
    for p in (p for p, k in kinds.items() if k == "jsonl"):
        if scan_jsonl(p, scan):
            files.append(str(p))
    run_info["source"] = "jsonl" if scan.records else "console"
    if not scan.records:  # console lines only when no JSONL metric file was found
        for p in (p for p, k in kinds.items() if k == "text"):
            if scan_console(p, scan):
                files.append(str(p))
    if not scan.records:
        warnings.append(
            f"{log_dir}: no verl step records (JSONL or console 'step:N - key:value' lines) found"
        )
        sft = _sft_line(log_dir, [p for p, k in kinds.items() if k == "text"])
        if sft:
            run_info["not_rl"] = sft
    runs = _runs(log_dir, scan.file_steps)
    if runs:
        run_info["runs"] = runs
    trained = [k for k, r in scan.records.items() if r]
    if trained:  # step numbers, validation-only records included: how far the run got
        run_info.update(first_step=min(trained), last_step=scan.last_step)
    if run_info.get("rollout_n") is None:  # the console's config dump or launch command
        from runners import verl_config

        group = verl_config.read_group_size(log_dir)
        if group is not None:
            run_info["rollout_n"] = group
    mode, how = _mode(scan, run_info)
    run_info.update(mode=mode, mode_source=how, actor_prefixes=sorted(scan.prefixes))
    if how == "assumed":
        warnings.append("verl mode not found in a config file or in the metric keys: assumed 'sync'")
    if scan.bad_pairs:
        warnings.append(f"{scan.bad_pairs} key:value pair(s) could not be read as numbers")
    if scan.skipped_lines:
        warnings.append(f"{scan.skipped_lines} step line(s)/record(s) skipped: malformed")
    steps = _rows(scan.records, mode, run_info, warnings)
    return ParseResult(
        steps=steps, warnings=warnings, skipped_lines=scan.skipped_lines, files=files, run_info=run_info
    )


def _runs(log_dir: Path, file_steps: dict[str, set[int]]) -> list[str]:
    """'file: steps a-b' of each file whose step records start at the run's first step, when more
    than one does: only verl's driver prints step records, so each is a run of its own (or a copy
    of one), never a resumed attempt (which starts after a checkpoint); [] when at most one does."""
    if not file_steps:
        return []
    first = min(min(s) for s in file_steps.values())
    starts = sorted(f for f, s in file_steps.items() if min(s) == first)
    if len(starts) < 2:
        return []
    shown = [Path(f).relative_to(log_dir) if log_dir.is_dir() else Path(f).name for f in starts]
    return [
        f"{n}: steps {min(file_steps[f])}-{max(file_steps[f])}" for n, f in zip(shown, starts, strict=True)
    ]


# verl's SFT trainer (verl.trainer.fsdp_sft_trainer) logs `step:N - train/loss:...`: not an RL run
SFT_STEP = re.compile(r"\bstep:\d+ - (?:train|val)/loss:")


def _sft_line(log_dir: Path, paths: list[Path]) -> str | None:
    """'<file>:<line>' of the first SFT step line, when the logs are an SFT run's."""
    from runners.run_config import find_line, head_text, source

    for path in paths:
        m, line = find_line(head_text(path, 8 << 20), SFT_STEP.pattern)
        if m:
            return source(log_dir, path, line)
    return None


def _mode(scan: _Scan, info: dict[str, Any]) -> tuple[str, str]:
    for prefix, mode in MODE_BY_PREFIX.items():
        if prefix in scan.prefixes:
            return mode, "prefix"
    if scan.saw_fully_async:
        return "fully_async", "keys"
    if any("timing_s/generate_async" in r for r in scan.records.values()):
        return "one_step_off", "keys"
    if info.get("use_v1") and info.get("trainer_mode"):
        return str(info["trainer_mode"]), "config"
    if scan.saw_separate_async:
        return "separate_async", "keys"
    return "sync", "assumed"


# every serial phase timer of a verl step (the whole-step timer's parts), for logs without timing_s/step;
# in colocated (sync) mode timing_s/gen is serial, in async modes it is the wait for the batch
STEP_TIMERS = (
    "timing_s/gen",
    "timing_s/reward",
    *(k for keys in PHASE_TIMERS.values() for k in keys),
    "timing_s/update_actor",
    "timing_s/update_critic",
    "timing_s/update_weights",
    "timing_s/sync_rollout_weights",
    "timing_s/param_sync",
)


def _old_timers(rec: dict[str, float]) -> bool:
    """Fold a record's `timing/<name>` timers (verl before `timing_s/`) into `timing_s/<name>`, in
    place; True when it had them and no whole-step timer (which that era never logged)."""
    old = [k for k in rec if k.startswith(OLD_TIMING)]
    for k in old:
        rec["timing_s/" + k[len(OLD_TIMING) :]] = rec.pop(k)
    return bool(old) and "timing_s/step" not in rec


def _sum(rec: dict[str, float], *keys: str) -> float | None:
    vals = [rec[k] for k in keys if k in rec]
    return sum(vals) if vals else None


def _rows(
    records: dict[int, dict[str, float]], mode: str, info: dict[str, Any], warnings: list[str]
) -> list[dict]:
    """Merged records -> steps.parquet rows (trace.STEP_FIELDS + native_*)."""
    n = info.get("rollout_n")
    rows, incomplete, untimed = [], [], []
    for step in sorted(records):
        r = records.pop(step)  # freed as rows are built: peak memory stays ~one copy of the trace
        if not r:
            continue  # validation-only record (val-core/..., val-aux/...)
        row: dict[str, Any] = {"step": step, "step_s": r.get("timing_s/step")}
        if _old_timers(r):  # verl before timing_s/step: the step is its timers back to back
            row["step_s"] = _sum(r, *STEP_TIMERS)
            untimed.append(step)
        if row["step_s"] is None:
            incomplete.append(step)
        gen = r.get("timing_s/gen")
        # timing_s/gen means different things per mode (verl.md section 4)
        if mode == "one_step_off":
            row.update(gen_s=r.get("timing_s/generate_async"), wait_s=gen)
        elif mode in ("separate_async", "fully_async"):
            row.update(gen_s=None, wait_s=gen)
        else:  # colocated: the trainer waits while its own GPUs generate
            row.update(gen_s=gen, wait_s=gen)
        row["logprob_s"] = _sum(r, "timing_s/old_log_prob", "timing_s/ref", "timing_s/values")
        # the reward model / judge pass when it is its own phase (`marked_timer("reward")`); a
        # distillation teacher streamed inside the agent loop (verl >= 0.8) is part of timing_s/gen
        if "timing_s/reward" in r:
            row["score_s"] = r["timing_s/reward"]
        row["compute_s"] = _sum(r, "timing_s/update_actor", "timing_s/update_critic")
        row["sync_s"] = _sum(
            r, "timing_s/update_weights", "timing_s/sync_rollout_weights", "timing_s/param_sync"
        )
        for col, keys in PHASE_TIMERS.items():
            row[col] = _sum(r, *keys)
        tokens, p_mean, r_mean = (
            r.get("perf/total_num_tokens"),
            r.get("prompt_length/mean"),
            r.get("response_length/mean"),
        )
        if tokens is not None and p_mean is not None and r_mean is not None and p_mean + r_mean > 0:
            samples = round(
                tokens / (p_mean + r_mean)
            )  # total_num_tokens = samples x (prompt + response) means
            row.update(
                samples=samples,
                prompt_tokens=round(p_mean * samples),
                response_tokens=round(r_mean * samples),
            )
            if n:
                row["prompts"] = samples // int(n)
            if mode == "sync":
                row.update(generated_tokens=row["response_tokens"], dispatched_samples=samples)
        if n:
            groups = _sum(
                r, "training/off_policy/evicted_samples", "training/rollout_failure/evicted_samples"
            )
            row["discarded_samples"] = None if groups is None else round(groups * int(n))
            filtered = r.get("training/filter_groups/evicted_samples")
            row["filtered_samples"] = None if filtered is None else round(filtered * int(n))
        if "fully_async/count/dropped_stale_samples" in r:
            row["discarded_samples"] = round(r["fully_async/count/dropped_stale_samples"])
        row["staleness_mean"] = r.get("training/off_policy/trajectory_staleness/mean")
        row["staleness_max"] = r.get("training/off_policy/trajectory_staleness/max")
        row["reward_mean"] = r.get("critic/score/mean")
        for col, key in NATIVE.items():
            if key in r:
                row[col] = r[key]
        rows.append({k: v for k, v in row.items() if v is not None})  # absent = null in the trace
    if incomplete:
        warnings.append(f"step(s) {incomplete} have no timing_s/step (truncated or interleaved record)")
    if untimed:
        warnings.append(
            f"{len(untimed)} step(s) have timing/* timers but no whole-step timer (verl before timing_s/step): "
            "step_s is the sum of the step's timers, so time outside them is not seen (unattributed 0)"
        )
    if n is None and rows:
        warnings.append(
            "rollout.n unknown (no dumped config found): prompts and evicted-group counts left null"
        )
    _place_in_time(rows, info, warnings)
    return rows


def _place_in_time(rows: list[dict], info: dict[str, Any], warnings: list[str]) -> None:
    """t_start_s/t_end_s: steps back to back; ending at the run's wall time when it is known."""
    total = sum(r["step_s"] for r in rows if r.get("step_s") is not None and not math.isnan(r["step_s"]))
    wall = info.get("wall_seconds")
    start = wall - total if wall is not None and wall >= total else 0.0
    if rows:
        info["init_s"] = start if wall is not None else None
        warnings.append(
            "t_start_s/t_end_s inferred from timing_s/step (steps assumed back to back"
            + (f", ending at wall_seconds={wall:g})" if wall is not None else ", from t=0)")
        )
    t = start
    for r in rows:
        s = r.get("step_s")
        if s is None or math.isnan(s):
            continue
        r["t_start_s"], r["t_end_s"] = t, t + s
        t += s


# Attempt boundaries of a requeued run (runners/attempts.py): one trainer record per step, a JSONL
# line `{"step": N, ...}` or a console line `step:N - ...` (not `timing_s/step:` nor `global_step:`;
# the pattern starts with its literal so the scan runs at memchr speed), its wall time in timing_s/step.
def _step_seconds(line: bytes) -> float | None:
    m = re.search(rb'timing_s/step"?: ?([-+\d.eE]+)', line)
    return float(m.group(1)) if m else None


STEP_STREAMS = (Stream("trainer", re.compile(rb'step(?<![\w/]step)(?::|": ?)(\d+)\b'), _step_seconds),)
