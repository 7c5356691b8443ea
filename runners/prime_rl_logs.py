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
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
# "Step N | <duration> |" at a hit; the duration reads "Time: 0.60s" (v0.5) or "1m 18s" (v0.6+).
# Line prefixes (time, level, torchrun's "[default0]:") come before the hit and are never read.
STEP_START = re.compile(rb"Step \d+ \|")
STEP_AT = re.compile(rb"Step (\d+) \| +(?:Time:? )?([\dhdms. ]+?)(?= *\|)")
# fields read from Step lines (old "Key: value" and new "Key value" spellings)
THROUGHPUT = re.compile(rb"\| Throughput:? (\d+(?:\.\d+)?) tokens/s")
MFU = re.compile(rb"\| MFU:? (\d+(?:\.\d+)?)%")
REWARD = re.compile(rb"\| Reward:? (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)")
OFF_POLICY = re.compile(rb"\| Max\.? Off-Policy(?: Level)?:? (\d+)")
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
    "native_load_data_s": ("time/load_data",),
    "native_save_ckpt_s": ("time/save_ckpt",),
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
INT_COLUMNS = {
    "samples",
    "prompts",
    "prompt_tokens",
    "response_tokens",
    "discarded_samples",
    "filtered_samples",
}


@dataclass
class LogParse:
    """Accumulates per-step values from every file; `rows()` joins them into trace rows."""

    trainer: dict[int, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    trainer_time: dict[int, float] = field(default_factory=dict)  # unix s at the end of the step
    orch: dict[int, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    # console values as tuples (compact: a long console log has one Step line per step and role)
    console_trainer: dict[int, tuple] = field(default_factory=dict)  # (step_s, throughput, mfu)
    console_orch: dict[int, tuple] = field(default_factory=dict)  # (step_s, reward, staleness_max, filtered)
    files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0  # metrics.jsonl lines that are not JSON objects
    skipped_console: int = 0  # Step lines that could not be read
    unclassified_rows: int = 0
    times: list[float] = field(default_factory=list)  # unix seconds of metric rows (min/max only)
    pending_filtered: int = 0

    # ---- metrics.jsonl ------------------------------------------------------------------------
    def metrics_line(self, line: bytes) -> None:
        """One metrics.jsonl line: classify by keys, keep the trace-relevant values."""
        try:
            row = json.loads(line)
        except ValueError:
            self.skipped += 1  # truncated tail or two writers interleaved on one line
            return
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            self.skipped += 1
            return
        step = row["step"]
        t = row.get("time")
        if isinstance(t, int | float):
            self._time(t)
        if any(k in row for k in ORCH_KEYS):
            _take(self.orch[step], row, ORCH)
        elif any(k in row for k in TRAINER_TIME_KEYS):
            _take(self.trainer[step], row, TRAINER_TIME)
            if isinstance(t, int | float):
                self.trainer_time[step] = float(t)
        elif any(k in row for k in TRAINER_PERF_KEYS):
            _take(self.trainer[step], row, TRAINER_PERF)
            if isinstance(row.get("perf/mfu"), int | float):
                self.trainer[step]["native_mfu"] = _fraction(row["perf/mfu"])
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
            seg = ANSI.sub(b"", seg)
        if seg.startswith(b"Detected"):
            m = DETECTED.match(seg)
            if m:
                self.pending_filtered += int(m["enf"])
            return
        m = STEP_AT.match(seg)
        if not m:
            if STEP_START.match(seg):  # a Step line cut short (truncated file, interleaved writers)
                self.skipped_console += 1
            return
        step, dur, at = int(m[1]), parse_duration(m[2]), m.end()
        if b"| Loss" in seg:  # trainer
            thr, mfu = THROUGHPUT.search(seg, at), MFU.search(seg, at)
            self.console_trainer[step] = (
                dur,
                float(thr[1]) if thr else None,
                _fraction(float(mfu[1])) if mfu else None,
            )
        elif reward := REWARD.search(seg, at):  # orchestrator
            off = OFF_POLICY.search(seg, at)
            filtered, self.pending_filtered = self.pending_filtered or None, 0
            # staleness as int: small ints are shared objects, so a long log costs no memory for them
            self.console_orch[step] = (dur, float(reward[1]), int(off[1]) if off else None, filtered)
        else:
            self.skipped_console += 1  # neither a trainer nor an orchestrator Step line

    # ---- join ---------------------------------------------------------------------------------
    def rows(self, t0: float | None) -> list[dict[str, Any]]:
        """One row per trainer step (or per orchestrator batch when no trainer data exists).

        Consumes the console and orchestrator accumulators (call once)."""
        trainer_steps = self.trainer.keys() | self.console_trainer.keys()
        steps = sorted(trainer_steps or self.orch.keys() | self.console_orch.keys())
        c_orch, orch, c_trainer, trainer = self.console_orch, self.orch, self.console_trainer, self.trainer
        out = []
        # pop as rows are built, so the accumulated values are freed while the rows grow
        for s in steps:
            row: dict[str, Any] = {"step": s}
            if (v := c_orch.pop(s, None)) is not None:
                _put(row, CONSOLE_ORCH, v)
            if (d := orch.pop(s, None)) is not None:
                row.update(d)
                _generated(row)
            if (v := c_trainer.pop(s, None)) is not None:
                _put(row, CONSOLE_TRAINER, v)
            if (d := trainer.get(s)) is not None:
                row.update(d)
            t_end = self.trainer_time.get(s)
            if t0 is not None and t_end is not None and row.get("step_s") is not None:
                row["t_end_s"] = t_end - t0
                row["t_start_s"] = row["t_end_s"] - row["step_s"]
            out.append(row)
        return out


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


def _put(row: dict[str, Any], names: tuple[str, ...], values: tuple | None) -> None:
    for k, v in zip(names, values, strict=True):
        if v is not None:
            row[k] = v


def _fraction(percent: float) -> float:
    """prime-rl logs MFU in percent; the trace stores fractions (rounded off float noise)."""
    return round(percent / 100.0, 12)


def _take(dst: dict[str, Any], row: dict[str, Any], mapping: dict[str, tuple[str, ...]]) -> None:
    for col, names in mapping.items():
        for name in names:
            v = row.get(name)
            if isinstance(v, int | float) and not isinstance(v, bool):
                dst[col] = int(v) if col in INT_COLUMNS else v
                break


def _generated(row: dict[str, Any]) -> None:
    """generated_tokens: shipped response tokens scaled by processed/shipped tokens.

    `progress/tokens` counts every token of the step's arrival window (dropped rollouts
    included); `progress/input_tokens` + `progress/output_tokens` only the shipped ones. prime-rl
    does not log dropped response tokens separately, so the dropped part is split in the shipped
    prompt/response proportion; with no drops this is exactly `progress/output_tokens`.
    """
    total, p, r = row.get("native_tokens_processed"), row.get("prompt_tokens"), row.get("response_tokens")
    if total is None or p is None or r is None or p + r <= 0:
        return
    row["generated_tokens"] = int(round(r * max(total, p + r) / (p + r)))


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


def _scan(buf: bytes, acc: LogParse) -> None:
    """Hand every Step/Detected line of a block of whole lines to the accumulator.

    bytes.find (memchr-speed) finds the candidates; Python only touches those lines."""
    n = len(buf)
    step_at, det_at = buf.find(b"Step "), buf.find(b"Detected ")
    while step_at >= 0 or det_at >= 0:
        i = step_at if det_at < 0 or 0 <= step_at < det_at else det_at
        end = buf.find(b"\n", i)
        end = n if end < 0 else end
        acc.console_hit(buf[i:end].rstrip(b"\r"))
        pos = end + 1
        if 0 <= step_at < pos:
            step_at = buf.find(b"Step ", pos)
        if 0 <= det_at < pos:
            det_at = buf.find(b"Detected ", pos)


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
                tail = b""
                while True:
                    block = f.read(BLOCK)
                    data = tail + block
                    cut = len(data) if not block else data.rfind(b"\n") + 1
                    _scan(data[:cut], acc)
                    tail = data[cut:]
                    if not block:
                        break
    except OSError as e:
        acc.warnings.append(f"{path}: unreadable ({e})")
        return
    acc.files.append(str(path))


def wall_time_env(path: Path) -> dict[str, Any]:
    """KEY=VALUE lines of a harness's wall_time.env (e.g. the opd-benchmark launcher)."""
    out: dict[str, Any] = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            try:
                out[key.strip()] = float(value) if "." in value else int(value)
            except ValueError:
                out[key.strip()] = value.strip()
    return out


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


def parse_dir(log_dir: Path | str) -> tuple[list[dict[str, Any]], LogParse, dict[str, Any]]:
    """Parse every log under `log_dir`; return (trace rows, accumulator, run_info)."""
    log_dir = Path(log_dir)
    acc = LogParse()
    run_info: dict[str, Any] = {}
    if not log_dir.is_dir():
        acc.warnings.append(f"{log_dir}: not a directory; expected a prime-rl output or log folder")
        return [], acc, run_info
    traces = next(log_dir.rglob("rollouts/step_*/train/all/traces.jsonl"), None)
    if traces is not None:
        # verifiers Trace.to_record() dumps (nested pydantic records): no verified sample yet, so
        # rollouts.parquet is not derived from them rather than guessed
        acc.warnings.append(f"{traces.parent.parent.parent.parent}: episode traces present but not parsed")
    for path in candidate_files(log_dir):
        if path.name == "wall_time.env":
            continue
        read_file(path, acc)
    env = log_dir / "wall_time.env"
    if env.is_file():
        run_info["wall_time_env"] = wall_time_env(env)
    if acc.times:
        run_info["first_metric_time"], run_info["last_metric_time"] = acc.times
    start = run_info.get("wall_time_env", {}).get("start_epoch")
    t0 = float(start) if isinstance(start, int | float) else _first_step_start(acc)
    if t0 is not None:
        run_info["t0_unix_s"] = t0
    rows = acc.rows(t0)
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


def _first_step_start(acc: LogParse) -> float | None:
    starts = [t - acc.trainer[s]["step_s"] for s, t in acc.trainer_time.items() if "step_s" in acc.trainer[s]]
    return min(starts) if starts else None
