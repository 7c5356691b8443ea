"""Where each input of a prediction comes from: the workload's shape from the source run's
calibration, the framework's costs from the target framework's profile (the run's own calibration
only on a replay), the user's key=value over both, and every input none of them gives named with
its documented default. `bench predict` and `bench plan RUN_DIR` compose their config here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.model import fwprofile


def chosen_inputs(cfg: Any, inputs_from: dict[str, Any] | None = None) -> list[str]:
    """Inputs of the prediction that neither the calibration nor the target's profile fitted and
    the run did not log: the target framework's stated costs, the framework inputs its profile
    could not fit (their documented default), and the site inputs its paths need, each
    `key = value (why)`."""
    from omegaconf import OmegaConf

    from bench.model.costmodel import sync_path
    from bench.resolve import Resolved

    r, em, fw = Resolved.from_config(cfg), cfg.emulator, cfg.framework
    out = []
    profile = (inputs_from or {}).get("profile") or {}
    given = set((inputs_from or {}).get("given") or [])  # set by the user: not a default
    for key, why in (profile.get("not_fitted") or {}).items():
        floor_fitted = "emulator.decode_step_floor_s" in profile["inputs"]
        if (
            key in given
            or OmegaConf.select(cfg, key) is None
            or (key == "emulator.decode_bw_eff" and floor_fitted)
        ):
            continue  # the user's, no input (the hand-off line below), or the floor fitted at this share
        reasons = (
            "; ".join(sorted(set(why.values()))) if isinstance(why, dict) and why else "no run fitted it"
        )
        out.append(
            f"{key} = {OmegaConf.select(cfg, key)} (default: {fw.name}'s profile has no fit: {reasons})"
        )
    if sync_path(cfg, r) == "filesystem":
        out.append(
            f"emulator.filesystem_gbps = {em.filesystem_gbps:g} (site input: {fw.name} syncs weights by filesystem)"
        )
    if r.colocated and em.get("handoff_measured_on") != fw.name:
        stated = fw.get("handoff_fixed_s")
        out.append(
            f"framework.handoff_fixed_s = {stated:g} ({fw.name}'s conf: its sleep + wake)"
            if stated is not None
            else f"emulator.handoff_fixed_s = {em.handoff_fixed_s:g} (default: {fw.name} states no sleep + wake)"
        )
    if r.teachers:
        out.append(f"emulator.score_fixed_s = {em.score_fixed_s:g} (default: per scoring batch)")
    return out


def prediction_inputs(
    manifest: dict[str, Any],
    framework: str,
    rest: list[str],
    extra: list[str],
    text: str | None,
    cal_file: str,
    held_out: str = "",
) -> tuple[Any, dict[str, Any]]:
    """(prediction config, where its inputs came from). The calibration (`text`, fitted now, or
    the file `cal_file`) gives the workload's shape (workload.*: lengths, prompt length, environment
    latency) always, and the framework's costs (emulator.*) only on a replay: a run's trainer
    efficiency, engine floor, sync and hand-off are its own framework's. Predicting another
    framework, those come from the target's profile (conf/framework/<F>.yaml `profile:`); an input
    it has no fit for keeps its documented default (listed by chosen_inputs). The user's key=value
    (`rest`) wins over both. `held_out`: a run the target's profile is taken without
    (fwprofile.profile_overrides)."""
    import tempfile

    from bench.config import expand_calibration
    from bench.run_setup import compose_setup

    replay = framework == str(manifest.get("framework"))
    path = cal_file
    if text is not None:  # fitted now, not on disk yet: expanded the same way compose would
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(text)
        path = f.name
    try:
        fitted = [o for o in expand_calibration([f"calibration={path}"]) if "=" in o]
    finally:
        if text is not None:
            Path(path).unlink()

    def key(o: str) -> str:
        return o.split("=", 1)[0].lstrip("+")

    shape = [o for o in fitted if not fwprofile.is_framework_cost(o)]
    costs = [o for o in fitted if fwprofile.is_framework_cost(o)]
    from_profile, profile = ([], None) if replay else fwprofile.profile_overrides(framework, held_out)
    from_run = [*shape, *(costs if replay else [])]
    cfg, _ = compose_setup(manifest, [f"framework={framework}", *rest], [*extra, *from_run, *from_profile])
    inputs_from = {
        "run": sorted(key(o) for o in from_run),  # the source run's calibration
        "left_out": sorted(key(o) for o in costs if not replay),  # the source framework's own costs
        "profile": profile,  # the target framework's: each input with the runs it was fitted on
        "given": sorted({key(g) for g in rest}),  # the user's key=value, winning over both
    }
    return cfg, inputs_from
