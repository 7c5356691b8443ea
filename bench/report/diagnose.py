"""A run's metrics -> its verdict: which side is the bottleneck, why, and what to change.

One pure function, `diagnose`, of a run's numbers (metrics.json plus the report's own window
shares from bench.report.evidence) and its resources (placement, GPU counts, staleness budget).
docs/metrics.md ("Verdict") states the same rules and thresholds; change both together.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.report.load import resolved_config

# Thresholds (fractions). A side idle a fifth of its time is waiting on the other side; under a
# tenth it is saturated. docs/metrics.md "Verdict" explains each.
IDLE_HIGH = 0.20
IDLE_LOW = 0.10
SYNC_HIGH = 0.20  # weight sync's share of the trainer step
SCORING_HIGH = 0.50  # environment / reward time's share of a rollout's wall time
# Cause thresholds
TAIL_HIGH = 3.0  # p99 / median response length of trained rollouts
TRUNCATED_HIGH = 0.05  # share of generated tokens in responses that hit the response cap
DISCARD_HIGH = 0.20  # oversampling waste: discarded / dispatched rollouts
ZERO_ADV_HIGH = 0.10  # share of groups with zero advantage
PHASE_HIGH = 0.20  # a checkpoint or validation phase this large a share of the step decides the verdict

LABELS = (
    "generator-bound",
    "trainer-bound",
    "balanced",
    "sync-bound",
    "scoring-bound",
    "checkpoint-bound",
    "validation-bound",
    "hand-off-bound",
    "undetermined",
)


@dataclass(frozen=True)
class Resources:
    """What the run had: placement ('colocated' / 'disaggregated' / None when unknown), GPU
    counts (None when unknown) and the workload's staleness budget (policy versions)."""

    placement: str | None = None
    trainer_gpus: int | None = None
    generator_gpus: int | None = None
    staleness_budget: float | None = None
    # the run's composed config (manifest `config`), against which advised splits are validated
    config: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass
class Verdict:
    """The diagnosis of one run: label, the deciding numbers (name -> fraction), cause, action."""

    label: str
    deciding: dict[str, float | None] = field(default_factory=dict)
    cause: str = ""
    action: str = ""
    rule: str = ""  # the docs/metrics.md rule that fired, e.g. "V3"

    def numbers_text(self) -> str:
        """'trainer idle 44.7% · generator idle 2.8% · sync 1.2%' ('not reported' for None)."""
        return " · ".join(f"{k} {_pct(v)}" for k, v in self.deciding.items())


def _pct(v: float | None) -> str:
    return "not reported" if v is None else f"{100 * v:.1f}%"


def _num(m: Mapping[str, Any], key: str) -> float | None:
    v = m.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def diagnose(m: Mapping[str, Any], res: Resources) -> Verdict:
    """Apply rules V1-V6 of docs/metrics.md in order; the first that matches decides."""
    t_idle, g_idle = _num(m, "trainer_idle_frac"), _num(m, "generator_idle_frac")
    sync, scoring = _num(m, "sync_share"), _num(m, "scoring_share")
    deciding = {"trainer idle": t_idle, "generator idle": g_idle, "weight sync": sync}
    colocated = res.placement == "colocated"
    if colocated:  # one GPU pool: the generator's idle time is the trainer's busy time
        deciding.pop("generator idle")
    if t_idle is None:
        return Verdict(
            "undetermined",
            deciding,
            "trainer idle is not reported, so neither side can be named the bottleneck",
            "record wait_s and compute_s per trainer step (steps.parquet), then re-run the report",
            "V0",
        )
    phase = _phase_verdict(m, deciding)
    if phase is not None:
        return phase
    if sync is not None and sync >= SYNC_HIGH:
        return Verdict(
            "sync-bound",
            deciding,
            f"weight sync takes {_pct(sync)} of every trainer step, time in which neither side trains",
            "speed up or overlap weight sync (NCCL broadcast instead of a filesystem checkpoint, "
            "bucketed transfer, or syncing every k steps)",
            "V1",
        )
    if t_idle >= IDLE_HIGH and scoring is not None and scoring >= SCORING_HIGH:
        deciding["scoring share"] = scoring
        return Verdict(
            "scoring-bound",
            deciding,
            f"environment and reward scoring take {_pct(scoring)} of a rollout's wall time, so the "
            "trainer waits on scoring rather than on decoding",
            "scale out the reward / environment workers (or make scoring asynchronous); more "
            "generator GPUs would not help",
            "V2",
        )
    work = _num(m, "trainer_work_share")
    if colocated and work is not None and work > t_idle:
        deciding["trainer work"] = work
        return Verdict(
            "trainer-bound",
            deciding,
            f"on the shared GPUs the trainer's own passes (log-prob, update) take {_pct(work)} of each step, "
            f"more than generation ({_pct(t_idle)})",
            "cut trainer time per sample (larger micro-batches, fewer log-prob passes, sequence packing) "
            "or give training more GPUs",
            "V3c",
        )
    if t_idle >= IDLE_HIGH and (colocated or g_idle is None or g_idle < IDLE_HIGH):
        return Verdict(
            "generator-bound", deciding, _generation_cause(m, res), _generator_action(m, res), "V3"
        )
    if t_idle >= IDLE_HIGH:
        return Verdict(
            "undetermined",
            deciding,
            f"both sides wait (trainer idle {_pct(t_idle)}, generator idle {_pct(g_idle)}): the time goes "
            "to hand-offs the trace does not break down",
            "look at the step breakdown and queue depth; raising the in-flight cap lets the "
            "generators run ahead instead of waiting",
            "V4",
        )
    if g_idle is not None and g_idle >= IDLE_HIGH and not colocated:
        return Verdict("trainer-bound", deciding, _trainer_cause(m, res), _trainer_action(m, res), "V5")
    return Verdict(
        "balanced",
        deciding,
        "both sides are busy: production matches consumption within the idle thresholds",
        "keep the GPU split; the next gain is in waste (see the waste ledger)",
        "V6",
    )


# Phases outside the trainer/generator split that can decide a run (VC, VV, VH): the evidence key,
# the label, what the cause sentence calls it, the actions that fit, the rule
PHASE_RULES = (
    (
        "checkpoint_share",
        "checkpoint-bound",
        "checkpoint saves",
        "save less often (a larger save interval, e.g. verl trainer.save_freq), save asynchronously, "
        "or write checkpoints to faster storage",
        "VC",
    ),
    (
        "validation_share",
        "validation-bound",
        "validation",
        "validate less often (e.g. verl trainer.test_freq) or on a smaller validation set",
        "VV",
    ),
    (
        "handoff_share",
        "hand-off-bound",
        "the colocated hand-off (offloading the trainer, waking the engines)",
        "keep the trainer and the engines resident between phases where memory allows, or move to a "
        "disaggregated placement so no hand-off is needed",
        "VH",
    ),
)


def _phase_verdict(m: Mapping[str, Any], deciding: dict[str, float | None]) -> Verdict | None:
    """VC / VV / VH: checkpoint saves, validation or the colocated hand-off take PHASE_HIGH of the
    window's step time (metrics.json phases): the largest such phase, not a GPU split, decides."""
    over = [(v, rule) for rule in PHASE_RULES if (v := _num(m, rule[0])) is not None and v >= PHASE_HIGH]
    if not over:
        return None
    share, (_, label, what, action, rule) = max(over, key=lambda x: x[0])
    deciding[label.removesuffix("-bound")] = share
    cause = f"{what} take{'s' if what == 'validation' else ''} {_pct(share)} of the steady steps' wall time"
    return Verdict(label, deciding, cause + ", time in which no GPU trains or generates", action, rule)


def _generation_cause(m: Mapping[str, Any], res: Resources) -> str:
    """The generation side's shortfall in numbers, then what aggravates it (first that applies:
    discards, truncation, a long tail that leaves decode slots empty, zero-advantage groups)."""
    prod, cons = _num(m, "production_samples_per_s"), _num(m, "consumption_samples_per_s")
    g_idle, tail = _num(m, "generator_idle_frac"), _num(m, "tail_ratio")
    trunc, disc = _num(m, "truncated_frac"), _num(m, "oversampling_waste")
    zero, stale = _num(m, "zero_advantage_frac"), _num(m, "stale_drop_frac")
    gpus = f"the {res.generator_gpus} generator GPUs" if res.generator_gpus else "the generators"
    if res.placement == "colocated":
        base = "generation takes the trainer-idle share of every step on the shared GPUs"
    elif prod and cons:
        base = f"{gpus} deliver {prod:.3g} trained samples/s; the trainer could consume {cons:.3g}"
    else:
        base = f"{gpus} deliver fewer samples than the trainer could consume"
    if stale is not None and stale >= DISCARD_HIGH:
        return (
            base + f"; staleness-bound drops: {_pct(stale)} of generated tokens are dropped for exceeding "
            f"the staleness budget ({res.staleness_budget:g} versions)"
        )
    if disc is not None and disc >= DISCARD_HIGH:
        return (
            base + f"; {_pct(disc)} of dispatched rollouts are discarded (oversampling or staleness drops), "
            f"so they decode {1 / (1 - disc):.2f}× the rollouts trained"
        )
    if trunc is not None and trunc >= TRUNCATED_HIGH:
        return base + f"; {_pct(trunc)} of generated tokens are in responses cut at the response cap"
    if tail is not None and tail >= TAIL_HIGH and (g_idle is None or g_idle >= IDLE_LOW):
        return (
            base + f"; long-tail responses (99th percentile {tail:.1f}× the median) leave decode slots "
            "empty while a batch waits on its last rollouts"
        )
    if zero is not None and zero >= ZERO_ADV_HIGH:
        return base + f"; {_pct(zero)} of groups have zero advantage, decoded and trained without signal"
    return base


def _generator_action(m: Mapping[str, Any], res: Resources) -> str:
    prod, cons = _num(m, "production_samples_per_s"), _num(m, "consumption_samples_per_s")
    tail, g_idle = _num(m, "tail_ratio"), _num(m, "generator_idle_frac")
    if res.placement == "colocated":
        base = "generation dominates each step on the shared GPUs: move to a disaggregated placement"
        if _reaches_cap(m):  # only where responses do reach the cap (clip ratio or truncated tokens)
            base += ", or lower the response cap"
    elif prod and cons and res.generator_gpus:
        need = math.ceil(res.generator_gpus * cons / prod)
        base = (
            f"move GPUs to generation: at {prod:.3g} produced vs {cons:.3g} consumable samples/s, "
            f"production meets consumption near {need} generator GPUs (now {res.generator_gpus}; "
            "assumes decode scales linearly with GPUs)"
        ) + _legal_split(res, lambda g: g > res.generator_gpus, lambda g: (g < need, abs(g - need)))
    else:
        base = "move GPUs to generation (GPU counts not recorded, so no target is computed)"
    if tail is not None and tail >= TAIL_HIGH and (g_idle is None or g_idle >= IDLE_LOW):
        base += "; or use partial rollouts to cut the tail" + (
            " / lower the response cap" if _reaches_cap(m) else ""
        )
    disc, stale = _num(m, "oversampling_waste"), _num(m, "stale_drop_frac")
    if stale is not None and stale >= DISCARD_HIGH:
        base += "; or raise the staleness budget (in-flight cap) so fewer finished rollouts are dropped"
    elif disc is not None and disc >= DISCARD_HIGH:
        base += f"; cutting the discarded {_pct(disc)} of rollouts (oversampling surplus, cancellations) would return decode time"
    return base


def _legal_split(res: Resources, moves: Any, rank: Any) -> str:
    """The split the advice points to, among those bench validate accepts for the run's GPUs
    (res.splits): the one `moves` admits that ranks first (`rank`: the target, not below it, first);
    said when no accepted split moves that way. '' when the splits were not checked."""
    total = (res.trainer_gpus or 0) + (res.generator_gpus or 0)
    splits, nodes = _validated_splits(res.config, total) if res.config else (None, "")
    if splits is None:
        return ""
    options = [s for s in splits if moves(s[1])]
    if not options:
        legal = ", ".join(f"{t}:{g}" for t, g in splits) or "none"
        return (
            f"; but no trainer:generator split of the {total} GPUs that bench validate accepts does that "
            f"(it accepts {legal}{nodes}): add GPUs to that side, or cut its work per sample"
        )
    t, g = min(options, key=lambda s: rank(s[1]))
    return f"; the nearest split bench validate accepts: {t} trainer : {g} generator GPUs{nodes}"


def _reaches_cap(m: Mapping[str, Any]) -> bool:
    """Whether responses reach the response cap often enough for "lower the cap" to act on anything:
    TRUNCATED_HIGH of responses (clip_frac: the framework's clip ratio) or of generated tokens
    (truncated_frac); unknown is not a premise."""
    clip, trunc = _num(m, "clip_frac"), _num(m, "truncated_frac")
    return any(v is not None and v >= TRUNCATED_HIGH for v in (clip, trunc))


def _trainer_cause(m: Mapping[str, Any], res: Resources) -> str:
    stale = _num(m, "staleness_max")
    if stale is not None and res.staleness_budget is not None and stale >= res.staleness_budget:
        return (
            f"the generators wait for the trainer: staleness reaches its budget ({stale:g} of "
            f"{res.staleness_budget:g} versions), so the in-flight cap stops generation"
        )
    return "the generators wait for the trainer: consumption is below what the generators produce"


def _trainer_action(m: Mapping[str, Any], res: Resources) -> str:
    """Trainer-bound: more trainer capacity; the generators' idle share sizes the shift."""
    g_idle = _num(m, "generator_idle_frac") or 0.0
    if res.trainer_gpus and res.generator_gpus:
        spare = math.floor(res.generator_gpus * g_idle)
        keep = res.generator_gpus - spare
        return (
            f"move GPUs to training: about {spare} of {res.generator_gpus} generator GPUs' time is idle"
            + _legal_split(res, lambda g: g < res.generator_gpus, lambda g: (g < keep, abs(g - keep)))
            + "; or cut trainer time per sample (fewer log-prob passes, larger micro-batches)"
        )
    return "move GPUs to training (GPU counts not recorded, so no target is computed)"


def _count(v: Any) -> int | None:
    """A GPU count (> 0), or None when it is not one."""
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def resources(config: Mapping[str, Any]) -> Resources:
    """Resources recomputed from a run's config (experiment.placement, *_gpus, workload budget):
    the fallback of run_resources for run directories whose manifest has no `resolved` block."""
    exp = config.get("experiment") if isinstance(config.get("experiment"), Mapping) else {}
    wl = config.get("workload") if isinstance(config.get("workload"), Mapping) else {}
    placement = exp.get("placement")
    return Resources(
        placement=str(placement).rsplit(".", 1)[-1] if placement else None,
        trainer_gpus=_count(exp.get("trainer_gpus")),
        generator_gpus=_count(exp.get("generator_gpus")),
        staleness_budget=_num(wl, "staleness_budget"),
    )


def run_resources(manifest: Mapping[str, Any]) -> Resources:
    """Resources of one run from its manifest.json: placement and GPU counts from the `resolved`
    layout (bench.resolve.Resolved.to_dict, written with the manifest by bench.rundir and
    bench.trace.write_manifest: the suite computes the layout once, at launch), the staleness
    budget from the config (workload.staleness_budget, policy versions; not part of the layout).
    Manifests without `resolved` -- run directories written before the layout was recorded
    (commit ccf9d4f, 2026-11-25) and ingested runs (bench.ingest records what the logs say under
    `inferred`, not a resolved layout) -- fall back to recomputing it from the config (resources)."""
    config = resolved_config(dict(manifest))
    layout = manifest.get("resolved")
    if not isinstance(layout, Mapping) or not layout.get("placement"):
        return resources(config)

    def pool_gpus(role: str) -> int | None:
        pool = layout.get(role)
        return _count(pool.get("gpus")) if isinstance(pool, Mapping) else None

    wl = config.get("workload") if isinstance(config.get("workload"), Mapping) else {}
    return Resources(
        placement=str(layout["placement"]),
        trainer_gpus=pool_gpus("trainer"),
        generator_gpus=pool_gpus("generator"),  # the trainer's GPUs, time-shared, when colocated
        staleness_budget=_num(wl, "staleness_budget"),
        config=config,
    )


def _validated_splits(
    config: Mapping[str, Any], total: int
) -> tuple[tuple[tuple[int, int], ...] | None, str]:
    """(the splits of `total` GPUs bench validate accepts for the run's composed config, the
    whole-node phrase); (None, '') when the recorded config cannot be validated again."""
    import json

    from omegaconf import OmegaConf

    from bench.plan_splits import valid_splits, whole_nodes

    # the runs of a split sweep differ only in their split: validate each other split once (~40 ms each)
    exp = {k: v for k, v in dict(config.get("experiment") or {}).items() if not k.endswith("_gpus")}
    key = (json.dumps({**config, "experiment": exp}, sort_keys=True, default=str), total)
    if key not in _SPLITS:
        try:
            cfg = OmegaConf.create(dict(config))
            splits = valid_splits(cfg, total)
            _SPLITS[key] = (tuple(splits), whole_nodes(cfg, splits))
        except Exception:  # noqa: BLE001 - a partial or older config: the advice checks no split
            _SPLITS[key] = (None, "")
    return _SPLITS[key]


_SPLITS: dict[tuple[str, int], tuple[tuple[tuple[int, int], ...] | None, str]] = {}
