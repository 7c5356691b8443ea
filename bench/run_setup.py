"""A run directory's setup: its manifest and trace read back, and its configuration (manifest
`config` / `inferred`, written by `bench ingest`) composed as the suite's config, key=value filling
what the logs lack. The one bridge from a measured run to the model's inputs: calibrate, predict,
plan and profile fit all start here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from bench.config import CONF_DIR
from bench.errors import UsageError

# What the fits need from the run's configuration, and how a user gives it.
NEEDS = {
    "model": "model=<conf/model name>",
    "hardware": "hardware=<" + "|".join(sorted(p.stem for p in (CONF_DIR / "hardware").glob("*.yaml"))) + ">",
    "experiment.placement": "experiment.placement=colocated|disaggregated",
    "experiment.trainer_gpus": "experiment.trainer_gpus=N",
    "experiment.generator_gpus": "experiment.generator_gpus=N",
    "workload.max_response_len": "workload.max_response_len=N",
}
# Config keys carried from a run's manifest `config` into the composed setup (when not null).
CARRIED = (
    "experiment.placement",
    "experiment.trainer_gpus",
    "experiment.generator_gpus",
    "experiment.trainer.tp",
    "experiment.trainer.pp",
    "experiment.trainer.ep",
    "experiment.generator.tp",
    "experiment.generator.dp",
    "experiment.generator.ep",
    "experiment.generator.dtype_bytes",
    "experiment.generator.gpu_memory_utilization",
    "workload.group_size",
    "workload.prompts_per_step",
    "workload.max_prompt_len",
    "workload.max_response_len",
    "workload.steps",
    "workload.staleness_budget",
    "workload.algorithm",
    "workload.kl_coef",
    "experiment.teachers",
)


def read_run(run_dir: Path) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame | None]:
    """(manifest, steps, rollouts or None) of a run directory; UsageError when there is no trace."""
    from bench.trace import RunPaths, read_manifest

    paths = RunPaths(Path(run_dir))
    if not paths.manifest.is_file():
        raise UsageError(f"{run_dir}: no manifest.json; expected a run directory (bench ingest / emulate)")
    if not paths.steps.is_file():
        raise UsageError(
            f"{run_dir}: no trace/steps.parquet; nothing to calibrate on (ingest the run's logs first)"
        )
    steps = pd.read_parquet(paths.steps).sort_values("step").reset_index(drop=True)
    if steps.empty:
        raise UsageError(f"{paths.steps}: no steps; nothing to calibrate on")
    rollouts = pd.read_parquet(paths.rollouts) if paths.rollouts.is_file() else None
    return read_manifest(paths), steps, rollouts


def _conf_name(group: str, name: str | None) -> str | None:
    """conf/<group>/<stem>.yaml whose `name` is `name` (one match), else None."""
    if not name:
        return None
    if group == "model":
        from bench.infer import conf_models

        hits = [stem for stem, m in conf_models().items() if m.get("name") == name]
    else:
        from bench.config import CONF_DIR

        hits = [
            p.stem
            for p in sorted((CONF_DIR / group).glob("*.yaml"))
            if (yaml.safe_load(p.read_text()) or {}).get("name") == name
        ]
    return hits[0] if len(hits) == 1 else None


def known_setup(manifest: dict[str, Any]) -> dict[str, str]:
    """The run's configuration as override values (key -> value), from manifest inferred/config."""
    inferred, config = manifest.get("inferred") or {}, manifest.get("config") or {}
    out: dict[str, str] = {}
    for group, entry in (("model", "model_arch"), ("hardware", "hardware")):  # the conf entries
        stem = (inferred.get(entry) or {}).get("value") or _conf_name(
            group, (config.get(group) or {}).get("name")
        )
        if stem:
            out[group] = str(stem)
    for key in CARRIED:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            out[key] = override_value(node)
    return out


def override_value(node: Any) -> str:
    """A manifest config value as a Hydra override value: enums by member name (the manifest holds
    'Placement.colocated'), lists and dicts as Hydra literals (experiment.teachers), strings with
    anything but name characters quoted."""
    if isinstance(node, dict):
        return (
            "{"
            + ",".join(f"{k}:{override_value(v)}" for k, v in node.items() if v not in ("", [], None))
            + "}"
        )
    if isinstance(node, list):
        return "[" + ",".join(override_value(v) for v in node) + "]"
    text = str(node)
    if isinstance(node, str) and text.split(".")[0] in ENUM_REPRS:
        return text.split(".", 1)[1]
    return text if not isinstance(node, str) or re.fullmatch(r"[\w./-]+", text) else repr(text)


# the enum classes whose members the manifest writes as 'Class.member'
ENUM_REPRS = ("Placement", "TeacherPlacement", "Algorithm")


def compose_setup(
    manifest: dict[str, Any], given: list[str], extra: list[str] = ()
) -> tuple[Any, dict[str, str]]:
    """(composed config, known keys -> value) of the run. Override order: the run's framework and
    its manifest setup, then `extra` (e.g. a calibration), then `given` key=value, which wins.
    Keys none of them holds keep compose defaults, so callers check `missing()` before trusting
    any of NEEDS."""
    from bench.config import compose

    run = known_setup(manifest)
    known = dict(run)
    for o in given:
        key, _, value = o.partition("=")
        known[key.lstrip("+")] = value
    framework = known.pop("framework", None) or str(manifest.get("framework", ""))
    groups = [f"{k}={v}" for k, v in run.items() if k in ("model", "hardware")]
    keys = [f"{k}={v}" for k, v in run.items() if k not in ("model", "hardware")]
    head = [f"framework={framework}"] if framework else []
    rest = [o for o in given if not o.startswith("framework=")]
    return compose([*head, *groups, *keys, *extra, *rest]), known


def missing(known: dict[str, str], needs: dict[str, str] = NEEDS) -> list[str]:
    return [how for key, how in needs.items() if key not in known]
