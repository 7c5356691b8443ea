"""prime-rl logs -> trace rows (steps.parquet), streamed line by line, never raising.

What prime-rl writes (facts: ../shared/reference/prime-rl.md section 3):

- `metrics.jsonl` (the file monitor): one JSON object per `monitors.log()` call, `{"step", "time",
  ...}`. Trainer and orchestrator may append to the same file with no source tag, so every row
  is classified by its keys: orchestrator step rows carry `progress/*`, trainer rows carry
  `time/forward_backward` (timers) or `perf/*` (throughput, MFU). `time/step` exists in both with
  different meanings, which is why the classification comes first. Older runs (v0.7) wrote two
  files (trainer and orchestrator output dirs); both layouts are read the same way.
- console logs (`trainer.log`, `orchestrator.log`, the `rl` launcher's own output): ANSI colour
  codes, optional torchrun `[default0]:` / `[trainer0]:` prefixes, and Step lines whose format
  changed from `Key: value` (v0.5 and earlier) to `Key value` (v0.6+). They fill what the metric
  files lack (runs without a file monitor) and give `Max Off-Policy` staleness.

A step's row joins trainer step N with orchestrator batch N (prime-rl ships batch N to trainer
step N). Values from metrics.jsonl win over console values of the same step.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.trace import read_env_file
from runners.attempts import Stream
from runners.base import cr_only
from runners.prime_rl_columns import NAN, StepRows, StepTable, overlay, union
from runners.prime_rl_traces import check_against_steps, parse_traces
from runners.run_config import ANSI_BYTES, text_files

# "Step N | <duration> |" at a hit; the duration reads "Time: 0.60s" (v0.5) or "1m 18s" (v0.6+).
# Line prefixes (time, level, torchrun's "[default0]:") come before the hit and are never read.
STEP_START = re.compile(rb"Step \d+ \|")
STEP_AT = re.compile(rb"Step (\d+) \| +(?:Time:? )?([\dhdms. ]+?)(?= *\|)")
# fields read from Step lines (old "Key: value" and new "Key value" spellings)
THROUGHPUT = re.compile(rb"\| Throughput:? (\d+(?:\.\d+)?) tokens/s")
MFU = re.compile(rb"\| MFU:? (\d+(?:\.\d+)?)%")
REWARD = re.compile(rb"\| Reward:? (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)")
OFF_POLICY = re.compile(rb"\| Max\.? Off-Policy(?: Level)?:? (\d+)")
# The common orchestrator line in one match (step, seconds, reward, staleness); any other shape
# takes the general path. The same fields and first-match rules as STEP_AT, REWARD, OFF_POLICY.
ORCH_FAST = re.compile(
    rb"Step (\d{1,12}) \| +(?:Time:? )?(\d+(?:\.\d+)?)s +\| Reward:? (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
    rb"[^\n]*?\| Max\.? Off-Policy(?: Level)?:? (\d+)"
)
BLOCK = 1 << 23  # bytes read per block (8 MiB)
DETECTED = re.compile(
    rb"Detected (?P<hit>\d+)/(?P<n>\d+) rollouts \((?P<kinds>[^)]*)\), enforced (?P<enf>\d+)"
)
DURATION_PART = re.compile(rb"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
DURATION_S = {b"ms": 1e-3, b"s": 1.0, b"m": 60.0, b"h": 3600.0, b"d": 86400.0}

ORCH_KEYS = ("progress/tokens", "progress/rollouts", "progress/samples", "progress/input_tokens")
TRAINER_TIME_KEYS = ("time/forward_backward", "time/wait_for_batch")
TRAINER_PERF_KEYS = ("perf/mfu", "perf/throughput")
TEXT_SUFFIXES = {".log", ".out", ".err", ".txt", ""}
# Rows of one metrics.jsonl line -> trace columns. Each tuple lists alternatives, newest name first.
TRAINER_TIME = {
    "step_s": ("time/step",),
    "wait_s": ("time/wait_for_batch",),
    "compute_s": ("time/forward_backward",),
    "sync_s": ("time/broadcast_weights",),
    "data_s": ("time/load_data",),
    "checkpoint_s": ("time/save_ckpt",),
}
TRAINER_PERF = {
    "native_throughput_tokens_per_s": ("perf/throughput",),
    "native_peak_memory_gib": ("perf/peak_memory",),
}
ORCH = {
    "samples": ("progress/rollouts", "progress/samples"),
    "prompts": ("progress/tasks", "progress/problems"),
    "prompt_tokens": ("progress/input_tokens", "progress/prefill_tokens"),
    "response_tokens": ("progress/output_tokens", "progress/decode_tokens"),
    "native_tokens_processed": ("progress/tokens",),
    "staleness_mean": ("off_policy/mean",),
    "staleness_max": ("off_policy/max", "off_policy_level/all/max"),
    "discarded_samples": ("off_policy/dropped",),
    "reward_mean": ("train/agg/effective/agent/reward/mean", "reward/all/mean"),
    "solve_all_frac": ("train/agg/all/agent/solved_all", "solve_all/all"),
    "solve_none_frac": ("train/agg/all/agent/solved_none", "solve_none/all"),
    "native_orch_step_s": ("time/step",),
    "native_wait_for_policy_s": ("time/wait_for_policy", "time/wait_for_ckpt"),
}
INT_COLUMNS = frozenset(
    {
        "generated_tokens",
        "samples",
        "prompts",
        "prompt_tokens",
        "response_tokens",
        "discarded_samples",
        "filtered_samples",
    }
)


# Step numbers above this are misreads, not steps (no RL run logs a billion steps).
MAX_STEP = 1 << 40


@dataclass
class LogParse:
    """Accumulates per-step values from every file; `rows()` joins them into trace rows."""

    trainer: StepTable = field(default_factory=lambda: StepTable(TRAINER_COLUMNS))
    orch: StepTable = field(default_factory=lambda: StepTable(ORCH_COLUMNS))
    console_trainer: StepTable = field(default_factory=lambda: StepTable(CONSOLE_TRAINER))
    console_orch: StepTable = field(default_factory=lambda: StepTable(CONSOLE_ORCH))
    files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0  # metrics.jsonl lines that are not JSON objects
    skipped_console: int = 0  # Step lines that could not be read
    unclassified_rows: int = 0
    times: list[float] = field(default_factory=list)  # unix seconds of metric rows (min/max only)
    pending_filtered: int = 0
    rollouts: list[dict[str, Any]] = field(default_factory=list)  # from episode traces
    skipped_traces: int = 0  # traces.jsonl lines that are not JSON objects

    # ---- metrics.jsonl ------------------------------------------------------------------------
    def metrics_line(self, line: bytes) -> None:
        """One metrics.jsonl line: classify by keys, keep the trace-relevant values."""
        try:
            row = json.loads(line)
        except ValueError:
            self.skipped += 1  # truncated tail or two writers interleaved on one line
            return
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < MAX_STEP:
            self.skipped += 1
            return
        t = row.get("time")
        if isinstance(t, int | float):
            self._time(t)
        if any(k in row for k in ORCH_KEYS):
            self.orch.append_dict(step, _take(row, ORCH))
        elif any(k in row for k in TRAINER_TIME_KEYS):
            values = _take(row, TRAINER_TIME)
            if isinstance(t, int | float):
                values["t_end_unix_s"] = float(t)
            self.trainer.append_dict(step, values)
        elif any(k in row for k in TRAINER_PERF_KEYS):
            values = _take(row, TRAINER_PERF)
            if isinstance(row.get("perf/mfu"), int | float):
                values["native_mfu"] = _fraction(row["perf/mfu"])
            self.trainer.append_dict(step, values)
        elif not any(k.split("/")[0] in _TRAINER_MISC for k in row if k not in ("step", "time")):
            self.unclassified_rows += 1

    def _time(self, t: float) -> None:
        if not self.times:
            self.times = [t, t]
        else:
            self.times[0] = min(self.times[0], t)
            self.times[1] = max(self.times[1], t)

    # ---- console logs -------------------------------------------------------------------------
    def console_hit(self, seg: bytes) -> None:
        """A console line from its "Step N |" or "Detected" onwards (found by _scan)."""
        if b"\x1b" in seg:  # loguru colours are embedded even in files
            seg = ANSI_BYTES.sub(b"", seg)
        if seg.startswith(b"Detected"):
            m = DETECTED.match(seg)
            if m:
                self.pending_filtered += int(m["enf"])
            return
        m = STEP_AT.match(seg)
        if not m or len(m[1]) > 12:
            if STEP_START.match(seg):  # a Step line cut short (truncated file, interleaved writers)
                self.skipped_console += 1
            return
        step, dur, at = int(m[1]), parse_duration(m[2]), m.end()
        if b"| Loss" in seg:  # trainer
            thr, mfu = THROUGHPUT.search(seg, at), MFU.search(seg, at)
            self.console_trainer.append(
                step, (dur, float(thr[1]) if thr else None, _fraction(float(mfu[1])) if mfu else None)
            )
        elif reward := REWARD.search(seg, at):  # orchestrator
            off = OFF_POLICY.search(seg, at)
            filtered, self.pending_filtered = self.pending_filtered or None, 0
            self.console_orch.append(step, (dur, float(reward[1]), int(off[1]) if off else None, filtered))
        else:
            self.skipped_console += 1  # neither a trainer nor an orchestrator Step line

    # ---- join ---------------------------------------------------------------------------------
    def rows(self, t0: float | None) -> StepRows:
        """One row per trainer step (or per orchestrator batch when no trainer data exists).

        Call once, after the last file: the rows share the accumulated columns' memory.
        Precedence per value: metrics.jsonl over console; trainer and orchestrator columns are
        disjoint. t_end_s / t_start_s (seconds since t0) where the trainer logged a time."""
        c_trainer, trainer = self.console_trainer.last_rows(), self.trainer.last_values()
        c_orch, orch = self.console_orch.last_rows(), self.orch.last_values()
        steps = union(c_trainer[0], trainer[0])
        if not len(steps):
            steps = union(c_orch[0], orch[0])
        out: dict[str, np.ndarray] = {}
        for src_steps, cols in (c_orch, orch, c_trainer, trainer):
            overlay(out, steps, src_steps, cols)
        _generated(out)
        t_end = out.pop("t_end_unix_s", None)
        step_s = out.get("step_s")
        if t0 is not None and t_end is not None and step_s is not None:
            ok = ~np.isnan(step_s)
            out["t_end_s"] = np.where(ok, t_end - t0, np.nan)
            out["t_start_s"] = out["t_end_s"] - step_s
        return StepRows(steps, out, INT_COLUMNS)

    def first_step_start(self) -> float | None:
        """Unix seconds at which the first logged trainer step began (min of end - time/step)."""
        _, cols = self.trainer.last_values()
        starts = cols["t_end_unix_s"] - cols["step_s"]
        return float(np.nanmin(starts)) if (~np.isnan(starts)).any() else None


_TRAINER_MISC = {
    "optim",
    "loss",
    "entropy",
    "mismatch_kl",
    "system",
    "kl_ent_ratio",
    "max_vio",
    "routing_confidence",
}
_TRAINER_MISC |= {
    "masked_mismatch_kl",
    "unmasked_mismatch_kl",
    "is_masked",
    "is_masked_low",
    "is_masked_high",
}
_TRAINER_MISC |= {"masked_advantage_positive", "masked_advantage_negative", "ref_kl", "perf", "time"}


CONSOLE_TRAINER = ("step_s", "native_throughput_tokens_per_s", "native_mfu")
CONSOLE_ORCH = ("native_orch_step_s", "reward_mean", "staleness_max", "filtered_samples")
TRAINER_COLUMNS = (*TRAINER_TIME, *TRAINER_PERF, "native_mfu", "t_end_unix_s")
ORCH_COLUMNS = tuple(ORCH)


def _fraction(percent: float) -> float:
    """prime-rl logs MFU in percent; the trace stores fractions (rounded off float noise)."""
    return round(percent / 100.0, 12)


def _take(row: dict[str, Any], mapping: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """Trace column -> the first numeric metrics.jsonl value among its alternative names."""
    out = {}
    for col, names in mapping.items():
        for name in names:
            v = row.get(name)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[col] = v
                break
    return out


def _generated(cols: dict[str, np.ndarray]) -> None:
    """generated_tokens: shipped response tokens scaled by processed/shipped tokens.

    `progress/tokens` counts every token of the step's arrival window (dropped rollouts
    included); `progress/input_tokens` + `progress/output_tokens` only the shipped ones. prime-rl
    does not log dropped response tokens separately, so the dropped part is split in the shipped
    prompt/response proportion; with no drops this is exactly `progress/output_tokens`.
    """
    total, p, r = (cols.get(k) for k in ("native_tokens_processed", "prompt_tokens", "response_tokens"))
    if total is None or p is None or r is None:
        return
    shipped = p + r
    with np.errstate(invalid="ignore", divide="ignore"):
        gen = np.rint(r * np.maximum(total, shipped) / shipped)
    gen[~(shipped > 0)] = np.nan  # NaN compares False: unlogged or empty steps stay null
    if (~np.isnan(gen)).any():
        cols["generated_tokens"] = gen


def parse_duration(text: bytes | str) -> float | None:
    """prime-rl's `fmt_time` ('123ms', '4.5s', '1m 18s', '1h 3m', '1d 2h') or '0.60s' -> seconds."""
    raw = (text.encode() if isinstance(text, str) else text).strip()
    if raw[-1:] == b"s" and raw[-2:-1].isdigit() and b" " not in raw:
        try:  # the common "4.5s" form, without the regex
            return float(raw[:-1])
        except ValueError:
            pass
    parts = DURATION_PART.findall(raw)
    if not parts:
        return None
    return sum(float(n) * DURATION_S[u] for n, u in parts)


def _scan(buf: bytes, acc: LogParse, n: int | None = None) -> None:
    """Hand every Step/Detected line of a block of whole lines to the accumulator.

    bytes.find (memchr-speed) finds the candidates; Python only touches those lines, and the
    common orchestrator line (one per step in the rl launcher's console) goes straight into
    columns without a call per line."""
    t = acc.console_orch
    steps, (durs, rewards, offs, filtered) = t.step.append, (c.append for c in t.cols)
    fast = ORCH_FAST.match
    n = len(buf) if n is None else n  # lines end before n (the block's last whole line)
    step_at, det_at = buf.find(b"Step ", 0, n), buf.find(b"Detected ", 0, n)
    while step_at >= 0 or det_at >= 0:
        i = step_at if det_at < 0 or 0 <= step_at < det_at else det_at
        end = buf.find(b"\n", i, n)
        end = n if end < 0 else end
        if i == step_at and (m := fast(buf, i, end)):
            steps(int(m[1]))
            durs(float(m[2]))
            rewards(float(m[3]))
            offs(float(m[4]))
            filtered(acc.pending_filtered or NAN)
            acc.pending_filtered = 0
        else:
            acc.console_hit(buf[i:end].rstrip(b"\r"))
        pos = end + 1
        if 0 <= step_at < pos:
            step_at = buf.find(b"Step ", pos, n)
        if 0 <= det_at < pos:
            det_at = buf.find(b"Detected ", pos, n)


def read_file(path: Path, acc: LogParse) -> None:
    """Stream one file into `acc`: JSON lines by suffix, everything else as console text."""
    is_jsonl = path.suffix == ".jsonl"
    try:
        with open(path, "rb", buffering=1 << 20) as f:
            if is_jsonl:
                for line in f:
                    if line.strip():
                        acc.metrics_line(line)
            else:
                tail, cr = b"", None
                while True:
                    block = f.read(BLOCK)
                    if cr is None:
                        cr = cr_only(block)
                    if cr:  # a log with CR line ends only: its CRs end its records
                        block = block.replace(b"\r", b"\n")
                    data = tail + block
                    cut = len(data) if not block else data.rfind(b"\n") + 1
                    _scan(data, acc, cut)  # bounded, not sliced: no copy of the block
                    tail = data[cut:]
                    if not block:
                        break
    except OSError as e:
        acc.warnings.append(f"{path}: unreadable ({e})")
        return
    acc.files.append(str(path))


def candidate_files(log_dir: Path) -> list[Path]:
    """Metric and console files under `log_dir`, sorted (rollout traces and binaries excluded)."""
    found = []
    for root, dirs, names in os.walk(log_dir):
        dirs[:] = sorted(d for d in dirs if d not in {"rollouts", "broadcasts", "checkpoints", "weights"})
        for name in sorted(names):
            p = Path(root) / name
            if p.suffix == ".jsonl" or (p.suffix in TEXT_SUFFIXES and not name.startswith(".")):
                found.append(p)
    return found


def parse_dir(log_dir: Path | str) -> tuple[StepRows, LogParse, dict[str, Any]]:
    """Parse every log under `log_dir`; return (trace rows, accumulator, run_info)."""
    log_dir = Path(log_dir)
    acc = LogParse()
    run_info: dict[str, Any] = {}
    if not log_dir.is_dir():
        acc.warnings.append(f"{log_dir}: not a directory; expected a prime-rl output or log folder")
        return StepRows(np.empty(0, np.int64), {}), acc, run_info
    for path in candidate_files(log_dir):
        if path.name == "wall_time.env":
            continue
        read_file(path, acc)
    # the harness's wall-time file, at the top or in a folder below (one run's folder inside --logs)
    env = next((p for p in text_files(log_dir) if p.name == "wall_time.env"), None)
    if env is not None:
        run_info["wall_time_env"] = read_env_file(env)
    if acc.times:
        run_info["first_metric_time"], run_info["last_metric_time"] = acc.times
    start = run_info.get("wall_time_env", {}).get("start_epoch")
    t0 = float(start) if isinstance(start, int | float) else acc.first_step_start()
    if t0 is not None:
        run_info["t0_unix_s"] = t0
    # episode traces (rollouts/step_N/train/{all,effective}/traces.jsonl) -> rollout rows
    acc.rollouts, files, warnings, acc.skipped_traces = parse_traces(log_dir, t0)
    acc.files += files
    acc.warnings += warnings
    rows = acc.rows(t0)
    acc.warnings += check_against_steps(acc.rollouts, rows)
    if not rows:
        acc.warnings.append(f"{log_dir}: no prime-rl Step lines or metrics.jsonl rows found")
    if acc.unclassified_rows:
        acc.warnings.append(
            f"{acc.unclassified_rows} metrics.jsonl row(s) matched neither trainer nor orchestrator"
        )
    if acc.skipped:
        acc.warnings.append(f"{acc.skipped} metrics.jsonl line(s) were not valid JSON objects (skipped)")
    if acc.skipped_console:
        acc.warnings.append(f"{acc.skipped_console} console Step line(s) could not be read (skipped)")
    return rows, acc, run_info


# Attempt boundaries of a requeued run (runners/attempts.py): the trainer's console Step line (it
# carries `| Loss`; the orchestrator's runs ahead of it and is left out) and its metrics.jsonl timer
# row, one per trainer step, each with the step's wall time.
def _console_seconds(line: bytes) -> float | None:
    m = STEP_AT.search(ANSI_BYTES.sub(b"", line))
    return parse_duration(m[2]) if m else None


def _metrics_seconds(line: bytes) -> float | None:
    m = re.search(rb'"time/step": ?([-+\d.eE]+)', line)
    return float(m.group(1)) if m else None


def _metrics_time(line: bytes) -> float | None:
    m = re.search(rb'"time": ?([\d.eE+]+)', line)
    return float(m.group(1)) if m else None


STEP_STREAMS = (
    Stream("trainer console", re.compile(rb"Step (?<!\wStep )(\d+) \|[^\n]*\| Loss"), _console_seconds),
    Stream(
        "trainer metrics",
        re.compile(rb'\{"step": ?(\d+),[^\n]*"time/forward_backward"'),
        _metrics_seconds,
        _metrics_time,
    ),
)
