"""Batch-to-data-parallel rules of the frameworks that split each mini-batch evenly over the
trainer's data-parallel ranks (verl, slime through Megatron). Each runner states its own source
where it calls `mini_batch_dp_problem`; prime-rl has no such rule (it packs samples into micro-
batches and pads their count up to a multiple of the DP size, modelled by the emulator instead:
bench.model.costmodel.dp_padded_work)."""

from __future__ import annotations

from typing import Any


def trainer_dp(cfg: Any) -> int | None:
    """The trainer's data-parallel size, trainer GPUs / (tp x pp x cp); None when it does not divide
    (bench validate names that problem on its own)."""
    t = cfg.experiment.trainer
    mp = int(t.tp) * int(t.pp) * int(t.cp)
    gpus = int(cfg.experiment.trainer_gpus)
    return gpus // mp if mp > 0 and gpus > 0 and gpus % mp == 0 else None


def mini_batch_dp_problem(cfg: Any) -> str | None:
    """One line when the samples of one mini-batch (one optimizer step) do not divide by the
    trainer's data-parallel size, naming workload.prompts_per_step; None when they do."""
    w, e = cfg.workload, cfg.experiment
    dp, t = trainer_dp(cfg), e.trainer
    mb = int(w.mini_batches_per_step)
    if dp is None or mb < 1 or int(w.prompts_per_step) % mb:
        return None  # mini-batches of partial groups: validate names mini_batches_per_step itself
    per_mb = int(w.prompts_per_step) * int(w.group_size) // mb
    if per_mb % dp == 0:
        return None
    mp = int(t.tp) * int(t.pp) * int(t.cp)
    return (
        f"workload.prompts_per_step={w.prompts_per_step}: {per_mb} samples per mini-batch "
        f"({w.prompts_per_step} x group {w.group_size} / {mb}) is not divisible by the trainer's "
        f"data-parallel size {dp} (= {e.trainer_gpus} GPUs / tp x pp x cp {mp})"
    )
