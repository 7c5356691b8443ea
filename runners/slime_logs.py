"""slime / Miles console logs -> trace rows (steps.parquet), streamed in blocks of whole lines.

slime logs one Python-dict record per rollout and kind through its logger
(`[%(asctime)s] %(filename)s:%(lineno)d - <kind> <id>: {...}`); under Ray each line carries an
`(ActorClass pid=N[, ip=...]) ` prefix. Miles (slime's fork) writes the same payloads with a
millisecond timestamp and a process tag (`[2026-08-07 13:45:05.009 rollout_manager]`). The file:line
prefix differs per version, so records are recognised by `<kind> <id>: {` and by the keys of
their payload, never by the source location.

Record kinds used (facts: ../shared/reference/slime.md section 3):
- train-side `perf N` (keys `perf/train_wait_time`, `perf/step_time`, ...): one trainer step;
  its timers are accumulated since the previous log, so `update_weights`, `sleep` and
  `save_model` printed in `perf N+1` belong to step N (the first dict carries the initial push);
- rollout-side `perf N` (keys `perf/rollout_time`, `rollout/...`): generation of rollout N;
- train-side `rollout N` (`rollout/response_lengths`, `rollout/raw_reward`, ...): batch means;
- `step N`, `passrate N`, `multi_turn N`, `eval N`: counted, not mapped.
The Megatron argument dump (`  rollout_batch_size ...... 8`) and the driver command line give the
batch shape. Nothing here raises on bad input: problems become warnings and skipped-line counts.
"""

from __future__ import annotations

import ast
import json
import math
import re
import shlex
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from sys import intern
from typing import Any

from runners.attempts import Stream
from runners.base import cr_only
from runners.run_config import ANSI_BYTES

# The record anchor `<kind> <id>: {` is found with bytes.find; these regexes then run on one short
# prefix, so the scan stays in C for the (many) lines that are not records.
KIND_TAIL = re.compile(rb"(?:^|[\s(])(perf|rollout|eval|step|critic-step|passrate|multi_turn) (\d+)$")
LINE_TS = re.compile(rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)[^\]\n]*\]")
ARG_DUMP = re.compile(rb"^(?:\([^)]*\) )?  (?P<key>\w+) \.{3,} (?P<value>.*)$", re.M)
RAY_TS = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+)\s", re.M)
BARE_VALUE = re.compile(r"(?<=[:,\[(] )(-?)(nan|inf|True|False|None)(?=[,}\])])")
JSON_VALUE = {"nan": "NaN", "inf": "Infinity", "True": "true", "False": "false", "None": "null"}
BARE_FLOAT = re.compile(r"(?<=[:,\[(] )(-?)(nan|inf)(?=[,}\])])")
NUMPY_SCALAR = re.compile(r"np\.(?:float|int)\d*\(([^()]*)\)")
REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
PARTIAL = re.compile(rb"Collected (\d+) partial samples into the data buffer")
MAPPED_KINDS = (b"perf", b"rollout")  # other kinds are counted, their payloads not decoded
DRIVERS = ("train.py", "train_async.py")
DRIVER_CMD = re.compile(rb"python[\d.]*\s+(?:-u\s+)?\S*?train(?:_async)?\.py(?:\s|$)")
LOG_SUFFIXES = {".log", ".out", ".err", ".txt", ""}
# Megatron/slime argument-dump keys that shape the trace (values are Python reprs)
SHAPE_KEYS = (
    "rollout_batch_size",
    "n_samples_per_prompt",
    "global_batch_size",
    "num_steps_per_rollout",
    "rollout_num_gpus",
    "actor_num_nodes",
    "actor_num_gpus_per_node",
    "colocate",
    "over_sampling_batch_size",
    "dynamic_sampling_filter_path",
    "partial_rollout",
    "update_weights_interval",
)
# Keys renamed across slime versions -> current name (perf/total_train_time before 2025-10-30)
LEGACY_KEYS = {"perf/total_train_time": "perf/step_time"}
TRAIN_PERF_MARKERS = ("perf/train_wait_time", "perf/step_time", "perf/actor_train_time", "perf/train_time")
# Only these payload keys are kept per record, so memory grows by a few hundred bytes per step.
KEPT_KEYS = frozenset(
    {
        *TRAIN_PERF_MARKERS,
        "perf/wait_time_ratio", "perf/update_weights_time", "perf/log_probs_time", "perf/ref_log_probs_time",
        "perf/teacher_log_probs_time", "perf/actor_train_tflops", "perf/actor_train_tok_per_s",
        "perf/rollout_time", "perf/tokens_per_gpu_per_sec", "rollout/raw_reward", "rollout/response_lengths",
        "rollout/total_lengths", "rollout/weight_version/mean", "rollout/weight_version/min",
        "rollout/zero_std/all_zero_percentage", "rollout/zero_std/all_one_percentage",
        "perf/data_preprocess_time", "perf/sleep_time", "perf/wake_up_time",
    }
)  # fmt: skip
KEPT_PREFIXES = ("rollout/dynamic_filter/drop_", "rollout/zero_std/count_")


def parse_payload(text: str) -> dict[str, Any] | None:
    """A logged Python dict repr -> dict, safely (never eval); None if malformed.

    Fast path: the repr is rewritten to JSON (quotes, True/False/None, bare nan/inf) and read with
    json.loads; anything that is not plain JSON then (strings with quotes, tuples, numpy scalar
    reprs such as `np.float64(0.5)`) goes through ast.literal_eval with nan -> NaN, inf -> infinity.
    """
    text = text.strip()
    if "[repeated" in text:
        text = REPEATED.sub("", text)
    if not text.endswith("}"):
        return None  # truncated or interleaved
    if '"' not in text and "np." not in text:
        as_json = text.replace("'", '"')
        if any(word in text for word in JSON_VALUE):  # rare: skip the regex pass for plain numbers
            as_json = BARE_VALUE.sub(lambda m: m.group(1) + JSON_VALUE[m.group(2)], as_json)
        try:
            value = json.loads(as_json)
        except ValueError:
            value = _literal_payload(text)
    else:
        value = _literal_payload(text)
    if not isinstance(value, dict):
        return None
    return {LEGACY_KEYS.get(k, k): (math.nan if v is None else v) for k, v in value.items()}


def _literal_payload(text: str) -> Any:
    if "np." in text:
        text = NUMPY_SCALAR.sub(r"\1", text)
    text = BARE_FLOAT.sub(lambda m: "None" if m.group(2) == "nan" else m.group(1) + "1e999", text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _timestamp(raw: bytes | None) -> float | None:
    if not raw:
        return None
    text = raw.decode("ascii", "replace").replace(",", ".")
    try:
        # slime and Ray log local wall-clock time without a zone; read as UTC (the machines the
        # fixtures come from ran in UTC: gpu.csv and wall_time.env epochs agree)
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


class LogState:
    """What the stream has seen so far; merged across files of one run."""

    def __init__(self) -> None:
        self.train_perf: dict[int, dict] = {}
        self.train_perf_ts: dict[int, float] = {}
        self.rollout_perf: dict[int, dict] = {}
        self.train_rollout: dict[int, dict] = {}
        self.counts: dict[str, int] = defaultdict(int)
        self.args: dict[str, Any] = {}
        self.argv: list[str] = []
        self.first_ts: float | None = None
        self.skipped = 0
        self.unknown_perf = 0
        # "Collected N partial samples into the data buffer" (partial rollout's abort) since the last
        # rollout-side perf record, then per rollout id: samples buffered for resumption
        self.partial_pending = 0
        self.partial_by_rollout: dict[int, int] = {}
        self.lines = 0

    def seen_ts(self, ts: float | None) -> None:
        if ts is not None and (self.first_ts is None or ts < self.first_ts):
            self.first_ts = ts

    def feed(self, buf: bytes) -> None:
        """Consume complete lines (one line or a block of many; a missing final newline is fine)."""
        self.lines += buf.count(b"\n") + (0 if buf.endswith(b"\n") or not buf else 1)
        find, rfind, size = buf.find, buf.rfind, len(buf)
        # The argument dump is printed once at start-up, before any record: stop looking after it.
        dump_end = size if not self.counts else 0
        # Partial-rollout aborts come before their rollout's perf record: merge both by position.
        partials = (
            [(m.start(), int(m.group(1))) for m in PARTIAL.finditer(buf)] if b"partial samples" in buf else []
        )
        pos = 0
        while (at := find(b": {", pos)) >= 0:
            start = rfind(b"\n", 0, at) + 1
            end = find(b"\n", at)
            end = size if end < 0 else end
            while partials and partials[0][0] < start:
                self.partial_pending += partials.pop(0)[1]
            self._record(buf, start, at, end)
            pos = end
        self.partial_pending += sum(n for _, n in partials)
        pos = 0
        while (at := find(b" ....", pos, dump_end)) >= 0:
            start = rfind(b"\n", 0, at) + 1
            end = find(b"\n", at)
            end = size if end < 0 else end
            m = ARG_DUMP.match(buf, start, end)
            if m and m.group("key").decode() in SHAPE_KEYS:
                self.args[m.group("key").decode()] = _literal(
                    m.group("value").decode("utf-8", "replace").strip()
                )
            pos = end
        if not self.argv and (m := DRIVER_CMD.search(buf)):
            end = find(b"\n", m.start())
            self._command(buf[m.start() : size if end < 0 else end].decode("utf-8", "replace"))

    def first_block(self, buf: bytes) -> None:
        """The start of a file: its first timestamped line (Ray's format or slime's logger) dates the run."""
        for m in (RAY_TS.search(buf), LINE_TS.search(buf, 0, 1 << 16)):
            if m:
                self.seen_ts(_timestamp(m.group(1)))

    def _record(self, buf: bytes, start: int, at: int, end: int) -> None:
        m = KIND_TAIL.search(buf, max(start, at - 40), at)
        if not m:
            return
        kind = m.group(1)
        payload_bytes = buf[at + 2 : end]
        if kind not in MAPPED_KINDS:
            if payload_bytes.rstrip().endswith(b"}") or b"[repeated" in payload_bytes:
                self.counts[kind.decode()] += 1
            else:
                self.skipped += 1
            return
        payload = parse_payload(payload_bytes.decode("utf-8", "replace"))
        if payload is None:
            self.skipped += 1  # truncated or interleaved record
            return
        rid = int(m.group(2))
        tsm = LINE_TS.search(buf, start, m.start() + 1)
        ts = _timestamp(tsm.group(1)) if tsm else None
        self.seen_ts(ts)
        self.counts[kind.decode()] += 1
        is_train = any(k in payload for k in TRAIN_PERF_MARKERS)
        is_rollout = "perf/rollout_time" in payload or any(k.startswith("rollout/") for k in payload)
        # interned keys: one copy of each key string however many steps a long run logs
        payload = {intern(k): v for k, v in payload.items() if k in KEPT_KEYS or k.startswith(KEPT_PREFIXES)}
        if kind == b"perf":
            if is_train:
                self.train_perf.setdefault(rid, {}).update(payload)
                if ts is not None:
                    self.train_perf_ts[rid] = ts
            elif is_rollout:
                self.rollout_perf.setdefault(rid, {}).update(payload)
                if self.partial_pending:
                    self.partial_by_rollout[rid] = self.partial_by_rollout.get(rid, 0) + self.partial_pending
                    self.partial_pending = 0
            else:
                self.unknown_perf += 1
        else:
            self.train_rollout.setdefault(rid, {}).update(payload)

    def _command(self, text: str) -> None:
        try:
            self.argv = shlex.split(text)
        except ValueError:  # unbalanced quotes in a truncated line
            self.argv = text.split()


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text.strip()


def argv_options(argv: list[str]) -> dict[str, Any]:
    """`--flag value` / `--switch` pairs of a driver command line (last occurrence wins)."""
    opts: dict[str, Any] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            opts[word[2:].replace("-", "_")] = True if nxt is None or nxt.startswith("--") else _literal(nxt)
    return opts


def log_files(log_dir: Path) -> list[Path]:
    """Text log files under log_dir (recursive, sorted); others are ignored."""
    return sorted(p for p in log_dir.rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES)


def scan(paths: list[Path], block: int = 8 << 20) -> LogState:
    """Stream every file once in blocks of whole lines; memory stays bounded by one block plus
    the per-step records (a few hundred bytes per step)."""
    state = LogState()
    for path in paths:
        with path.open("rb") as fh:
            carry, first, cr = b"", True, None
            while chunk := fh.read(block):
                if cr is None:
                    cr = cr_only(chunk)
                if cr:  # a log with CR line ends only: its CRs end its records
                    chunk = chunk.replace(b"\r", b"\n")
                buf = carry + chunk
                cut = buf.rfind(b"\n") + 1
                if cut == 0 and len(buf) < 4 * block:
                    carry = buf  # a line longer than the block: keep reading
                    continue
                cut = cut or len(buf)
                whole, carry = _uncoloured(buf[:cut]), buf[cut:]
                if first:
                    state.first_block(whole)
                    first = False
                state.feed(whole)
            if carry:
                if first:
                    state.first_block(_uncoloured(carry))
                state.feed(_uncoloured(carry))
    return state


def _uncoloured(buf: bytes) -> bytes:
    """Whole lines without their colour codes (a terminal's capture): records match without them."""
    return ANSI_BYTES.sub(b"", buf) if b"\x1b" in buf else buf


def _num(d: dict | None, key: str) -> float | None:
    """A finite-or-NaN float from a record, None when absent or not a number."""
    if not d or key not in d:
        return None
    v = d[key]
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _sum(d: dict | None, keys: tuple[str, ...]) -> float | None:
    vals = [x for x in (_num(d, k) for k in keys) if x is not None]
    return sum(vals) if vals else None


def batch_shape(state: LogState) -> dict[str, Any]:
    """Prompts per step, group size and the dispatch knobs: argument dump first, then the argv."""
    shape = argv_options(state.argv)
    shape.update({k: v for k, v in state.args.items() if v is not None})
    return shape


def _mode(shape: dict[str, Any], argv: list[str]) -> str | None:
    driver = next((w for w in argv if w.endswith(DRIVERS)), "")
    if shape.get("colocate") is True:
        return "colocate_sync"
    if driver.endswith("train_async.py"):
        return "partial_rollout" if shape.get("partial_rollout") is True else "async"
    if driver.endswith("train.py"):
        return "partial_rollout" if shape.get("partial_rollout") is True else "sync"
    return None


def staleness_bound(mode: str | None, shape: dict[str, Any]) -> int | None:
    """Policy versions a trained sample may lag, by construction of the driver (not measured).

    train.py is on-policy (0); train_async.py lags by --update-weights-interval; partial rollout
    and custom rollout functions (e.g. fully async) have no bound (None).
    """
    if shape.get("rollout_function_path"):
        return None
    if mode in ("sync", "colocate_sync"):
        return 0
    interval = shape.get("update_weights_interval", 1)
    return interval if mode == "async" and isinstance(interval, int) else None


@dataclass
class _Shape:
    """The batch facts every step row needs (from the driver's arguments)."""

    prompts: int | None  # --rollout-batch-size
    group: int | None  # --n-samples-per-prompt
    samples: int | None
    rollout_gpus: int | None
    drops_possible: bool  # over-sampling, a dynamic filter or partial rollout can drop or carry samples


def _shape(shape: dict[str, Any], warnings: list[str]) -> _Shape:
    def whole(key: str) -> int | None:
        return shape.get(key) if isinstance(shape.get(key), int) else None

    prompts, group = whole("rollout_batch_size"), whole("n_samples_per_prompt")
    samples = prompts * group if prompts and group else None
    if samples is None:
        warnings.append(
            "batch shape unknown (no --rollout-batch-size/--n-samples-per-prompt): samples and tokens left null"
        )
    # Kept generated tokens equal trained response tokens only when nothing is dropped or carried over.
    over = shape.get("over_sampling_batch_size")
    drops_possible = bool(
        (isinstance(over, int) and prompts and over > prompts)
        or shape.get("dynamic_sampling_filter_path") not in (None, "None", False)
        or shape.get("partial_rollout") is True
    )
    if drops_possible:
        warnings.append(
            "over-sampling / dynamic filter / partial rollout on: slime does not log discarded tokens, generated_tokens left null"
        )
    return _Shape(prompts, group, samples, whole("rollout_num_gpus"), drops_possible)


def _record_warnings(state: LogState, train_ids: list[int], warnings: list[str]) -> None:
    if not train_ids and state.rollout_perf:
        warnings.append(
            "no train-side perf records: rollout-only run (--debug-rollout-only?) or the trainer never logged"
        )
    orphans = sorted(set(state.rollout_perf) - set(state.train_perf))
    if train_ids and orphans:
        warnings.append(f"rollout(s) {orphans} generated but never trained (run cut short?)")
    if train_ids and train_ids != list(range(train_ids[0], train_ids[-1] + 1)):
        warnings.append(f"train perf records are not contiguous: {train_ids}")
    if train_ids:
        warnings.append(f"step {train_ids[-1]}: sync_s unknown (its update_weights time is never logged)")


def _step_row(state: LogState, k: int, sh: _Shape, peak_flops: float | None, t0: float | None) -> dict:
    """One trace row for rollout id k: timings, batch, tokens, native counters."""
    tp, rp, tr = state.train_perf.get(k), state.rollout_perf.get(k), state.train_rollout.get(k)
    step_s = _num(tp, "perf/step_time")
    row: dict[str, Any] = {
        "step": k,
        "step_s": step_s,
        "wait_s": _num(tp, "perf/train_wait_time"),
        "gen_s": _num(rp, "perf/rollout_time"),
        "logprob_s": _sum(tp, ("perf/log_probs_time", "perf/ref_log_probs_time")),
        # --opd-type megatron: the teacher's forward pass inside the train phase (timer
        # "teacher_log_probs"); an external SGLang teacher is called during rollout (not timed)
        "score_s": _num(tp, "perf/teacher_log_probs_time"),
        "compute_s": _num(tp, "perf/actor_train_time"),
        "sync_s": _num(state.train_perf.get(k + 1), "perf/update_weights_time"),
        "ref_s": _num(tp, "perf/ref_log_probs_time"),
        "old_logprob_s": _num(tp, "perf/log_probs_time"),
        "data_s": _num(tp, "perf/data_preprocess_time"),
        # the colocated hand-off (offload the trainer, wake the engines): inside perf/train_wait_time,
        # as handoff_s is inside wait_s (bench.trace.step_phases)
        "handoff_s": _sum(tp, ("perf/sleep_time", "perf/wake_up_time")),
        "samples": sh.samples if tp else None,
        "prompts": sh.prompts if tp else None,
        "reward_mean": _num(tr, "rollout/raw_reward"),
        "native_wait_time_ratio": _num(tp, "perf/wait_time_ratio"),
        "native_actor_train_tflops": _num(tp, "perf/actor_train_tflops"),
        "native_actor_train_tok_per_s": _num(tp, "perf/actor_train_tok_per_s"),
        "native_train_time_s": _num(tp, "perf/train_time"),
        "native_tokens_per_gpu_per_s": _num(rp, "perf/tokens_per_gpu_per_sec"),
        "native_partial_samples_buffered": (
            float(state.partial_by_rollout[k]) if k in state.partial_by_rollout else None
        ),
    }
    ts = state.train_perf_ts.get(k)
    if ts is not None and t0 is not None:
        row["t_end_s"] = ts - t0
        row["t_start_s"] = row["t_end_s"] - step_s if step_s is not None else None
    tflops = row["native_actor_train_tflops"]
    row["native_mfu"] = tflops * 1e12 / peak_flops if tflops is not None and peak_flops else None
    resp, total = _num(tr, "rollout/response_lengths"), _num(tr, "rollout/total_lengths")
    if sh.samples and resp is not None:
        row["response_tokens"] = round(resp * sh.samples)
        if total is not None:
            row["prompt_tokens"] = round((total - resp) * sh.samples)
    tok_rate, gen = _num(rp, "perf/tokens_per_gpu_per_sec"), row["gen_s"]
    if not sh.drops_possible and tok_rate is not None and gen is not None and sh.rollout_gpus:
        # identity from slime's own definition: sum(kept response lengths) / rollout_time / rollout GPUs
        row["generated_tokens"] = round(tok_rate * gen * sh.rollout_gpus)
    if rp:
        row.update(_rollout_quality(rp, k, sh))
    return {key: v for key, v in row.items() if v is not None}


def _rollout_quality(rp: dict[str, Any], k: int, sh: _Shape) -> dict[str, Any]:
    """Filtered samples, solve-all/none shares and staleness of rollout k, from its rollout dict."""
    out: dict[str, Any] = {}
    drops = [
        v
        for key, v in rp.items()
        if key.startswith("rollout/dynamic_filter/drop_") and isinstance(v, int | float)
    ]
    if drops and sh.group:
        out["filtered_samples"] = round(sum(drops) * sh.group)
    # Groups whose rewards are all 1 (solved by every sample) / all 0: Miles logs the share of
    # kept groups (its "percentage" keys are fractions); slime logs counts per reward value.
    for col, share, rewards in (
        ("solve_all_frac", "rollout/zero_std/all_one_percentage", ("1", "1.0")),
        ("solve_none_frac", "rollout/zero_std/all_zero_percentage", ("0", "0.0")),
    ):
        if _num(rp, share) is not None:
            out[col] = _num(rp, share)
        elif sh.prompts:
            counts = [_num(rp, f"rollout/zero_std/count_{r}") for r in rewards]
            if any(c is not None for c in counts):
                out[col] = sum(c for c in counts if c is not None) / sh.prompts
    # Miles logs the policy version of the kept samples; the trainer is at version k + 1
    # when it trains on rollout k (version 1 = the initial weight push).
    wv_mean, wv_min = _num(rp, "rollout/weight_version/mean"), _num(rp, "rollout/weight_version/min")
    if wv_mean is not None:
        out["staleness_mean"] = (k + 1) - wv_mean
    if wv_min is not None:
        out["staleness_max"] = (k + 1) - wv_min
    return out


def build_steps(
    state: LogState, peak_flops: float | None = None, t0: float | None = None
) -> tuple[list[dict], list[str], dict]:
    """Trace rows (one per trainer step = rollout id), warnings, and run_info from a scanned log.

    Units: seconds, samples, tokens. `sync_s` of step N is the `perf/update_weights_time` printed
    in step N+1's dict (slime logs the timer before the weight update runs); the last step's is
    unknown. `native_mfu` = perf/actor_train_tflops (per-GPU model TFLOP/s, 3x forward FLOPs, no
    recompute) / peak_flops, only when the GPU's peak dense BF16 FLOP/s is given. t_start_s/t_end_s
    count from t0 (Unix seconds, e.g. the launcher's start), else from the earliest logged timestamp.
    """
    t0 = state.first_ts if t0 is None else t0
    warnings: list[str] = []
    shape = batch_shape(state)
    sh = _shape(shape, warnings)
    train_ids = sorted(state.train_perf)
    _record_warnings(state, train_ids, warnings)
    rows = [_step_row(state, k, sh, peak_flops, t0) for k in train_ids or sorted(state.rollout_perf)]

    first = state.train_perf.get(train_ids[0]) if train_ids else None
    mode = _mode(shape, state.argv)
    run_info = {
        "driver_argv": state.argv,
        "mode": mode,
        "staleness_bound": staleness_bound(mode, shape),
        "batch_shape": {k: shape.get(k) for k in SHAPE_KEYS if k in shape},
        "initial_update_weights_s": _num(first, "perf/update_weights_time"),
        "t0_unix_s": t0,  # the time base t_start_s/t_end_s count from (None when nothing was stamped)
        "records": dict(sorted(state.counts.items())),
        "lines": state.lines,
        "unclassified_perf_records": state.unknown_perf,
    }
    if state.skipped:
        warnings.append(
            f"{state.skipped} record line(s) with an unparseable payload (truncated or interleaved) skipped"
        )
    return rows, warnings, run_info


# Attempt boundaries of a requeued run (runners/attempts.py): the train-side `perf N: {...}` record,
# one per trainer step, its wall time in perf/step_time (perf/total_train_time before 2025-10-30).
def _step_seconds(line: bytes) -> float | None:
    m = re.search(rb"'perf/(?:step_time|total_train_time)': ([-+\d.eE]+)", line)
    return float(m.group(1)) if m else None


STEP_STREAMS = (
    Stream(
        "trainer",
        re.compile(rb"perf (?<!\wperf )(\d+): \{[^\n]*'perf/(?:step_time|total_train_time|train_wait_time)'"),
        _step_seconds,
    ),
)
