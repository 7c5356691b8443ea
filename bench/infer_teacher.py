"""The teacher of an ingested on-policy-distillation run: where it ran, from the logs and telemetry.

A framework that places its teacher itself says so in its config (verl's `teacher_pool`: dedicated;
slime's `opd_type megatron`: inside the training process): runners/<framework>_config.py reads it.
A teacher served outside the framework (slime's and Miles' external SGLang teacher, prime-rl's
frozen model) has no logged devices. Its GPUs are then read from GPU telemetry: the GPUs holding a
loaded model (>= BUSY_MIB) at the harness's `teacher_ready_epoch` (a wall-time file of `key=value`
lines beside the logs), when the teacher was up and the framework not yet started. Its placement
follows: with_generator when those GPUs are the generator's too (the generator's logged device ids,
or: the framework's logged GPU count does not fit on the other GPUs that held memory once it had
started), dedicated otherwise. Without telemetry or that epoch the placement stays unknown, with
the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runners.run_config import Fact, Facts, harness_values

BUSY_MIB = 1024.0  # a GPU with a model loaded holds GBs; an idle one shows a few MiB
EPOCH_KEYS = ("teacher_ready_epoch", "training_start_epoch", "start_epoch")


def harness_epochs(log_dir: Path) -> tuple[dict[str, float], str | None]:
    """Unix-second epochs of a wall-time file (`teacher_ready_epoch=1786108955` lines) under
    log_dir, and the file's name relative to it; ({}, None) when there is none."""
    vals, rel = harness_values(log_dir, ("teacher_ready_epoch",))
    return {k: v for k, v in vals.items() if k in EPOCH_KEYS}, rel


def _busy_at(rows: list[dict[str, Any]], epoch: float) -> set[int]:
    """GPUs whose last sample at or before `epoch` (Unix s) holds >= BUSY_MIB."""
    last: dict[int, tuple[float, float]] = {}
    for r in rows:
        t, mem = r.get("t_s"), r.get("mem_used_mib")
        if t is None or mem is None or t > epoch:
            continue
        if r["gpu"] not in last or t >= last[r["gpu"]][0]:
            last[r["gpu"]] = (t, mem)
    return {g for g, (_, mem) in last.items() if mem >= BUSY_MIB}


def _busy_after(rows: list[dict[str, Any]], epoch: float) -> set[int]:
    return {
        r["gpu"]
        for r in rows
        if r.get("t_s") is not None and r["t_s"] >= epoch and (r.get("mem_used_mib") or 0) >= BUSY_MIB
    }


def complete(
    facts: Facts, log_dir: Path, gpu_rows: list[dict[str, Any]], gpu_source: str | None
) -> str | None:
    """Add the external teacher's GPUs and placement to `facts` (in place) when the framework did
    not log them. gpu_rows: telemetry with t_s in Unix seconds. Returns why the placement stays
    unknown (None when it is known, or the run has no teacher)."""
    if facts.get("algorithm") is None or facts["algorithm"].value != "opd" or "teacher.placement" in facts:
        return None
    epochs, wall_src = harness_epochs(log_dir)
    if not gpu_rows or wall_src is None:
        return (
            "the teacher was served outside the framework and its GPUs are not logged "
            "(no GPU telemetry with a teacher_ready_epoch wall-time file); pass experiment.teachers"
        )
    ready = epochs["teacher_ready_epoch"]
    ids = sorted(_busy_at(gpu_rows, ready))
    if not ids:
        return f"no GPU held memory at teacher_ready_epoch ({wall_src}): the teacher's GPUs are unknown"
    src = f"{gpu_source}: GPUs holding >= {BUSY_MIB:.0f} MiB at teacher_ready_epoch ({wall_src})"
    facts["gpu_ids.teacher"] = Fact(ids, src)
    gen = facts.get("gpu_ids.rollout") or facts.get("gpu_ids.hybrid")
    if gen is not None:
        shared = set(gen.value) & set(ids)
        facts["teacher.placement"] = Fact(
            "with_generator" if shared else "dedicated", f"{src}; generator GPUs {gen.value} ({gen.source})"
        )
    else:
        need = _framework_gpus(facts)
        start = epochs.get("training_start_epoch")
        if need is None or start is None:
            return f"teacher on GPU(s) {ids} ({src}), but the framework's GPUs are not known to compare"
        others = sorted(_busy_after(gpu_rows, start) - set(ids))
        placement = "dedicated" if len(others) >= need else "with_generator"
        facts["teacher.placement"] = Fact(
            placement,
            f"{src}; the framework's {need} GPU(s) ran on {others or 'no other GPU'} after training_start_epoch",
        )
    if facts["teacher.placement"].value == "dedicated":
        facts.setdefault("gpus.teacher", Fact(len(ids), src))
    return None


def _framework_gpus(facts: Facts) -> int | None:
    if "gpus.hybrid" in facts:
        return int(facts["gpus.hybrid"].value)
    parts = [facts[k].value for k in ("gpus.trainer", "gpus.rollout") if k in facts]
    return int(sum(parts)) if len(parts) == 2 else None
