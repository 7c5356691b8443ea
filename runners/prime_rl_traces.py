"""prime-rl episode traces -> rollouts.parquet rows (bench/trace.py ROLLOUT_FIELDS), streamed.

What prime-rl v0.8.0 writes (facts: ../shared/reference/prime-rl.md 3.1 item 4; sources read at
prime-rl 60bc2954 and its pinned verifiers d30a3f48):

- `rollouts/step_N/train/all/traces.jsonl`: every finished train rollout (errored and cancelled
  ones included), appended the moment it arrives while batch N collects
  (orchestrator.py:528-550, `get_trace_path(..., step, kind, "all")`).
- `rollouts/step_N/train/effective/traces.jsonl`: the rollouts batch N shipped to the trainer
  (orchestrator.py:642-646): not errored, not filtered, `agent.trainable` (metrics.py:417).
- One line per `vf.Trace.to_record()` (verifiers/v1/trace.py:521, a pydantic dump; fields at
  trace.py:300-343): `id` (uuid hex), `run` {type, id, step}, `info` {env_name, group_id,
  episode_id, policy_version} stamped by `record_run` (orchestrator.py:539-545), `nodes`
  [{parent, sampled, ...}], `calls` [{node, usage {prompt_tokens, completion_tokens,
  cached_input_tokens}}], `rewards` {name: {score, weight} | null}, `ok`, `errors` [{type}],
  `agent` {trainable}, `timing` {start, boot/setup/finalize/scoring {start, end}, agent {start,
  end, model {duration}, harness {duration}}} (unix seconds, time.time()).
- Off-policy cancellations are synthetic traces with `errors[-1].type == "Cancelled"`
  (dispatcher.py:609, 637).

Token counts follow verifiers' own properties (trace.py:286-298 per branch, 357-370 per trace,
graph.py:625 leaves, types.py:166 total_tokens): per branch (root-to-leaf path of `nodes`), total
= the last call's usage total (prompt + cached + completion), output = the sum of completion
tokens, input = total - output; the rollout sums its branches. reward = sum of score x weight
over the rewards that ran (trace.py:349), null when none ran. turns = sampled nodes (trace.py:402).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

STEP_DIR = re.compile(r"step_(\d+)$")
SPANS = ("boot", "setup", "agent", "finalize", "scoring")


def trace_files(log_dir: Path, subset: str) -> list[tuple[int, Path]]:
    """(step, path) of every rollouts/step_N/train/<subset>/traces.jsonl under log_dir, by step."""
    found = []
    for path in log_dir.rglob(f"rollouts/step_*/train/{subset}/traces.jsonl"):
        m = STEP_DIR.search(path.parent.parent.parent.name)
        if m:
            found.append((int(m[1]), path))
    return sorted(found)


def _records(path: Path, bad: list[int]):
    """JSON objects of one traces.jsonl, one line at a time; unreadable lines counted in bad[0]."""
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if isinstance(rec, dict):
                yield rec
            else:
                bad[0] += 1  # truncated tail of a crashed run


def tokens(rec: dict[str, Any]) -> tuple[int, int]:
    """(prompt, response) tokens of one trace record, as verifiers' num_input/output_tokens."""
    nodes = rec.get("nodes") or []
    by_node = {
        c["node"]: c for c in rec.get("calls") or [] if isinstance(c, dict) and c.get("node") is not None
    }
    parents = {n.get("parent") for n in nodes if n.get("parent") is not None}
    prompt = response = 0
    for leaf in (i for i in range(len(nodes)) if i not in parents):
        path, nid = [], leaf
        while nid is not None and 0 <= nid < len(nodes) and len(path) <= len(nodes):
            path.append(nid)
            nid = nodes[nid].get("parent")
        usages = [by_node[n]["usage"] for n in reversed(path) if n in by_node and by_node[n].get("usage")]
        if not usages:
            continue
        last = usages[-1]
        total = last["prompt_tokens"] + (last.get("cached_input_tokens") or 0) + last["completion_tokens"]
        out = sum(u["completion_tokens"] for u in usages)
        prompt, response = prompt + total - out, response + out
    return prompt, response


def _status(rec: dict[str, Any], step: int, last_shipped: int | None) -> str | None:
    """Status of a rollout that is not in any effective file (so it was never trained)."""
    errors = rec.get("errors") or []
    if not rec.get("ok"):
        last = errors[-1] if errors and isinstance(errors[-1], dict) else {}
        # off-policy cancel (max_off_policy_steps) is a staleness drop; any other error aborted it
        return "discarded" if last.get("type") == "Cancelled" else "aborted"
    if last_shipped is None:
        return None  # no effective traces at all: whether it trained is unknown
    # a clean rollout of a shipped window was dropped by a filter (is_filtered is not serialised)
    # or belongs to an untrainable agent; after the last shipped batch it was never batched
    return "filtered" if step <= last_shipped else "discarded"


def _seconds(timing: dict[str, Any], t0: float | None) -> tuple[float | None, float | None, float | None]:
    """(t_dispatch_s, t_finish_s, env_s): start and end since t0, and time outside model calls."""
    spans = [timing.get(k) or {} for k in SPANS]
    ends = [s.get("end") or 0.0 for s in spans]
    start = timing.get("start")
    t_dispatch = start - t0 if t0 is not None and isinstance(start, int | float) else None
    t_finish = max(ends) - t0 if t0 is not None and max(ends, default=0.0) > 0 else None
    dur = {
        k: max(0.0, e - (s.get("start") or 0.0)) if e else 0.0
        for k, s, e in zip(SPANS, spans, ends, strict=True)
    }
    model = ((timing.get("agent") or {}).get("model") or {}).get("duration") or 0.0
    env = sum(dur.values()) - min(model, dur["agent"])
    return t_dispatch, t_finish, (env if any(ends) else None)


def _row(
    rec: dict[str, Any], step: int, consumed: int | None, last_shipped: int | None, t0: float | None
) -> dict:
    """One rollout row (without rollout_id and group_id) from a train/all record of batch `step`."""
    info = rec.get("info") or {}
    prompt, response = tokens(rec)
    t_dispatch, t_finish, env_s = _seconds(rec.get("timing") or {}, t0)
    rewards = [r for r in (rec.get("rewards") or {}).values() if isinstance(r, dict)]
    version = info.get("policy_version")
    return {
        "step_consumed": consumed,
        "policy_version_start": version if isinstance(version, int) else None,
        "policy_version_end": None,  # prime-rl records the dispatch version only
        "t_dispatch_s": t_dispatch,
        "t_finish_s": t_finish,
        "prompt_tokens": prompt,
        "response_tokens": response,
        "turns": sum(1 for n in rec.get("nodes") or [] if n.get("sampled")),
        "env_s": env_s,
        "reward": sum(r["score"] * r.get("weight", 1.0) for r in rewards) if rewards else None,
        "status": "used" if consumed is not None else _status(rec, step, last_shipped),
    }


def parse_traces(log_dir: Path, t0: float | None) -> tuple[list[dict[str, Any]], list[str], list[str], int]:
    """Rollout rows from train/all traces (statuses from train/effective); returns
    (rows, files read, warnings, unreadable lines). t0: unix seconds of the run's start."""
    bad = [0]
    shipped: dict[str, int] = {}  # trace id -> step whose effective file holds it
    files = []
    for step, path in trace_files(log_dir, "effective"):
        files.append(str(path))
        for rec in _records(path, bad):
            shipped[str(rec.get("id"))] = step
    last_shipped = max(shipped.values(), default=None)
    rows: list[dict[str, Any]] = []
    groups: dict[str, int] = {}  # group uuid -> dense group_id in order of first appearance
    malformed = 0
    for step, path in trace_files(log_dir, "all"):
        files.append(str(path))
        for rec in _records(path, bad):
            try:
                row = _row(rec, step, shipped.get(str(rec.get("id"))), last_shipped, t0)
                group = str((rec.get("info") or {}).get("group_id"))
            except (KeyError, TypeError, AttributeError, ValueError):
                malformed += 1  # JSON, but not a vf.Trace record of the expected shape
                continue
            row["rollout_id"] = len(rows)
            row["group_id"] = groups.setdefault(group, len(groups))
            rows.append(row)
    warnings = []
    if rows and last_shipped is None:
        warnings.append(f"{log_dir}: no train/effective traces: statuses of clean rollouts unknown")
    if bad[0]:
        warnings.append(f"{bad[0]} traces.jsonl line(s) were not valid JSON objects (skipped)")
    if malformed:
        warnings.append(f"{malformed} traces.jsonl record(s) lacked the vf.Trace fields read (skipped)")
    return rows, files, warnings, bad[0] + malformed


def check_against_steps(rollouts: list[dict[str, Any]], steps: Any) -> list[str]:
    """Cross-check: per step, the used rollouts' prompt/response tokens against the orchestrator's
    progress/input_tokens and progress/output_tokens (both sum the effective traces,
    orchestrator.py:668-669). One warning naming the steps that differ; none when they agree."""
    used: dict[int, list[int]] = {}
    for r in rollouts:
        if r["status"] == "used":
            tot = used.setdefault(r["step_consumed"], [0, 0])
            tot[0] += r["prompt_tokens"]
            tot[1] += r["response_tokens"]
    bad = []
    for row in steps if used else ():
        logged = (row.get("prompt_tokens"), row.get("response_tokens"))
        if row["step"] in used and None not in logged and list(logged) != used[row["step"]]:
            bad.append(row["step"])
    if not bad:
        return []
    return [f"traces.jsonl token sums differ from metrics.jsonl progress/*_tokens at step(s) {bad[:10]}"]
