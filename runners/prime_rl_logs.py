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
# torchrun/launcher line prefixes: "[default0]:", "[trainer0]:", "[rank3]:"
PROC_PREFIX = re.compile(rb"^\[[A-Za-z_]*\d*\]:")
# "HH:MM:SS LEVEL Step N | <duration> | ..." ; the time field may read "Time: 0.60s" (old) or "1m 18s"
STEP_LINE = re.compile(
    rb"(?:^|\s)(?P<level>SUCCESS|INFO)\s+Step (?P<step>\d+) \| (?:Time:? )?(?P<dur>[\dhdms. ]+?) \|(?P<rest>.*)$"
)
# one "|"-separated segment: "Loss 0.0288", "Loss: 12.3125", "Max. Off-Policy Level: 0", "MFU 0.6%"
FIELD = re.compile(rb"^\s*(?P<key>[A-Za-z][A-Za-z. -]*?):? (?P<val>-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)")
DETECTED = re.compile(
    rb"Detected (?P<hit>\d+)/(?P<n>\d+) rollouts \((?P<kinds>[^)]*)\), enforced (?P<enf>\d+)"
)
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
DURATION_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

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
    orch: dict[int, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    console_trainer: dict[int, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    console_orch: dict[int, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0
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
            if isinstance(t, int | float):
                self.orch[step]["_time"] = float(t)
        elif any(k in row for k in TRAINER_TIME_KEYS):
            _take(self.trainer[step], row, TRAINER_TIME)
            if isinstance(t, int | float):
                self.trainer[step]["_time"] = float(t)
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
    def console_line(self, raw: bytes) -> None:
        """One console line (only lines containing b"Step " or b"Detected " reach here)."""
        line = PROC_PREFIX.sub(b"", ANSI.sub(b"", raw.rstrip(b"\r\n")))
        if b"Detected " in line:
            m = DETECTED.search(line)
            if m:
                self.pending_filtered += int(m["enf"])
            return
        m = STEP_LINE.search(line)
        if not m:
            return
        step = int(m["step"])
        fields = {}
        for segment in m["rest"].split(b"|"):
            f = FIELD.match(segment)
            if f:
                fields[f["key"].decode().strip()] = float(f["val"])
        dur = parse_duration(m["dur"].decode())
        if "Loss" in fields:  # trainer
            row = self.console_trainer[step]
            row["step_s"] = dur
            if "Throughput" in fields:
                row["native_throughput_tokens_per_s"] = fields["Throughput"]
            if "MFU" in fields:
                row["native_mfu"] = _fraction(fields["MFU"])
        elif "Reward" in fields:  # orchestrator
            row = self.console_orch[step]
            row["native_orch_step_s"] = dur
            row["reward_mean"] = fields["Reward"]
            for key in ("Max Off-Policy", "Max. Off-Policy Level"):
                if key in fields:
                    row["staleness_max"] = fields[key]
            if self.pending_filtered:
                row["filtered_samples"] = self.pending_filtered
                self.pending_filtered = 0

    # ---- join ---------------------------------------------------------------------------------
    def rows(self, t0: float | None) -> list[dict[str, Any]]:
        """One row per trainer step (or per orchestrator batch when no trainer data exists)."""
        steps = sorted(
            set(self.trainer) | set(self.console_trainer) or set(self.orch) | set(self.console_orch)
        )
        out = []
        for s in steps:
            row: dict[str, Any] = {"step": s}
            for source in (self.console_orch.get(s, {}), self.orch.get(s, {})):
                row.update(source)
            for source in (self.console_trainer.get(s, {}), self.trainer.get(s, {})):
                row.update(source)
            t_end = self.trainer.get(s, {}).get("_time")
            for k in [k for k in row if k.startswith("_")]:
                del row[k]
            if t0 is not None and t_end is not None and row.get("step_s") is not None:
                row["t_end_s"] = t_end - t0
                row["t_start_s"] = row["t_end_s"] - row["step_s"]
            _generated(row)
            for k in INT_COLUMNS & row.keys():
                row[k] = int(row[k])
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


def _fraction(percent: float) -> float:
    """prime-rl logs MFU in percent; the trace stores fractions (rounded off float noise)."""
    return round(percent / 100.0, 12)


def _take(dst: dict[str, Any], row: dict[str, Any], mapping: dict[str, tuple[str, ...]]) -> None:
    for col, names in mapping.items():
        for name in names:
            v = row.get(name)
            if isinstance(v, int | float) and not isinstance(v, bool):
                dst[col] = v
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


def parse_duration(text: str) -> float | None:
    """prime-rl's `fmt_time` ('123ms', '4.5s', '1m 18s', '1h 3m', '1d 2h') or '0.60s' -> seconds."""
    parts = DURATION_PART.findall(text)
    if not parts:
        return None
    return sum(float(n) * DURATION_S[u] for n, u in parts)


def read_file(path: Path, acc: LogParse, chunk_lines: int = 1 << 16) -> None:
    """Stream one file into `acc`: JSON lines by suffix, everything else as console text."""
    is_jsonl = path.suffix == ".jsonl"
    try:
        with open(path, "rb", buffering=1 << 20) as f:
            if is_jsonl:
                for line in f:
                    if line.strip():
                        acc.metrics_line(line)
            else:
                for line in f:
                    # cheap byte prefilter: only Step and filter lines are parsed at all
                    if b"Step " in line or b"Detected " in line:
                        acc.console_line(line)
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
    return rows, acc, run_info


def _first_step_start(acc: LogParse) -> float | None:
    starts = [r["_time"] - r["step_s"] for r in acc.trainer.values() if "_time" in r and "step_s" in r]
    return min(starts) if starts else None
