"""Software experience: per framework, which attempts failed or ended partial, how often, and at
which phase (launch, before/at the first step, steady state, teardown).

Bring-up cost is part of a comparison: a framework that needs three attempts to finish one run
costs more than its throughput says. Every attempt counts, including older attempts of a point the
tables leave out (bench.report.load.load_attempts). The failure is what ingest read from the logs
(manifest `failure`: kind, message line, file:line, phase, runners/log_end.py), or the launcher's
`reason` for runs the suite started; a completed run whose log still ends in an error (verl's
DataLoader worker killed at teardown) is listed too, as completed. Nothing is inferred here:
a phase or source the run does not record is said to be unrecorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from bench.report.load import Run, dispatch, failure_reason

ENDED = ("completed", "failed", "partial")  # `running` / dry runs have not ended: not attempts
# ingest's phases (bench/ingest.py) in the order a run meets them
PHASE_ORDER = ("launch or first step", "warm-up", "steady state", "metrics", "teardown")
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Failure:
    """One attempt that failed, ended partial, or completed with an error in its logs."""

    framework: str
    run_id: str
    mode: str  # native | emulated
    status: str
    kind: str
    message: str
    source: str  # file:line, or NOT_RECORDED
    phase: str
    steps: int | None  # steps kept in trace/steps.parquet, None when it is absent


def steps_kept(run: Run) -> int | None:
    """Trainer steps the run's trace holds (rows of trace/steps.parquet); None without one."""
    if not run.paths.steps.is_file():
        return None
    return len(pd.read_parquet(run.paths.steps, columns=["step"]))


def failure_of(run: Run) -> Failure | None:
    """The attempt's failure, or None when it ended cleanly (or has not ended)."""
    m = run.manifest
    status = str(m.get("status"))
    f = m.get("failure") if isinstance(m.get("failure"), dict) else None
    if status not in ENDED or (status == "completed" and not f):
        return None
    if f:
        kind, message = str(f.get("kind") or "error"), str(f.get("message") or "")
        source, phase = str(f.get("source") or NOT_RECORDED), str(f.get("phase") or NOT_RECORDED)
    else:  # a run the suite launched: the launcher's reason, no log line
        kind, message = "reason", failure_reason(m) or "no reason recorded"
        source = "Slurm state " + str(dispatch(m)["state"]) if dispatch(m).get("state") else NOT_RECORDED
        phase = NOT_RECORDED
    return Failure(
        str(m["framework"]), run.run_id, str(m["mode"]), status, kind, message, source, phase, steps_kept(run)
    )


def _phase_key(phase: str) -> int:
    return PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER)


def _group_text(fails: list[Failure], n: int) -> str:
    f = fails[0]
    times = f"{len(fails)} of {n} attempt{'s' if n != 1 else ''}"
    after = sorted({x.steps for x in fails if x.steps is not None})
    kept = f"; steps kept: {', '.join(map(str, after))}" if after else ""
    return f"{f.kind} ({f.phase}): {times}{kept}"


def experience(attempts: list[Run]) -> list[dict[str, Any]]:
    """Per framework (sorted): attempts, how they ended, and their failures grouped by (kind,
    phase), most frequent first; each failure keeps its message line and file:line."""
    by_fw: dict[str, list[Run]] = {}
    for r in attempts:
        if str(r.manifest.get("status")) in ENDED and dispatch(r.manifest).get("state") != "DRY_RUN":
            by_fw.setdefault(str(r.manifest["framework"]), []).append(r)
    out = []
    for fw in sorted(by_fw):
        runs = by_fw[fw]
        ended = {s: sum(r.manifest["status"] == s for r in runs) for s in ENDED}
        fails = [f for f in map(failure_of, runs) if f]
        groups: dict[tuple[str, str], list[Failure]] = {}
        for f in sorted(fails, key=lambda f: (_phase_key(f.phase), f.kind, f.run_id)):
            groups.setdefault((f.kind, f.phase), []).append(f)
        ordered = sorted(groups.values(), key=lambda g: -len(g))
        out.append(
            {
                "framework": fw,
                "attempts": len(runs),
                "ended": ", ".join(f"{n} {s}" for s, n in ended.items() if n),
                "modes": sorted({"measured" if r.manifest["mode"] == "native" else "emulated" for r in runs}),
                "groups": [{"text": _group_text(g, len(runs)), "failures": g} for g in ordered],
                "summary": _summary(len(runs), fails),
            }
        )
    return out


def _summary(n: int, fails: list[Failure]) -> str:
    """One sentence per framework: how many attempts failed, how many completed runs still logged
    an error, and the phases."""
    if not fails:
        return "None failed or logged an error"
    broken = sum(f.status != "completed" for f in fails)
    parts = [f"{broken} of {n} failed or ended partial"] if broken else []
    if broken < len(fails):
        done = len(fails) - broken
        parts.append(f"{done} completed run{'s' if done != 1 else ''} logged an error")
    where = sorted({f.phase for f in fails}, key=_phase_key)
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + f" (phases: {', '.join(where)})"
