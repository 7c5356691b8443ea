"""Per framework at a glance: throughput, steady step, energy, MFU with the model it used, and
where each GPU role's devices sat (metrics.json `gpu_roles`, bench/telemetry.py `role_summary`).

Every figure is metrics.json's, labelled with the run's mode (measured or emulated). Generated
tokens/s is the one figure derived here: `generated_tokens / wall_s`, both of the same run over
the wall window metrics.json names. Where the logs do not name each role's devices, the report
says so and lists the devices unsplit (per nvidia-smi index), never a guessed role split.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from bench.phases import colocated
from bench.report.load import Run, resolved_config
from bench.telemetry import role_summary

MIB_PER_GIB = 1024.0


def _num(metrics: dict[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def generated_tokens_per_s(metrics: dict[str, Any]) -> float | None:
    """Generated response tokens over the run's wall (tokens/s); None when either is unknown."""
    tok, wall = _num(metrics, "generated_tokens"), _num(metrics, "wall_s")
    return tok / wall if tok is not None and wall else None


def model_used(run: Run) -> str:
    """The model the suite's MFU used, with where it came from: the ingested `inferred.model`
    (name and file:line, or "given"), else the launched run's config; unknown said so."""
    inf = run.manifest.get("inferred")
    # the conf/model entry the FLOPs came from (`model_arch`; manifests before it: `model`)
    model = (inf.get("model_arch") or inf.get("model")) if isinstance(inf, dict) else None
    if isinstance(model, dict):
        if model.get("value") is None:
            return str(inf.get("model_evidence") or "model unknown")
        return f"{model.get('name') or model['value']} ({model.get('source') or 'source not recorded'})"
    cfg_model = resolved_config(run.manifest).get("model")
    if isinstance(cfg_model, dict) and cfg_model.get("name"):
        return f"{cfg_model['name']} (run config)"
    return "model not recorded"


def _role_rows(roles: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for role, r in roles.items():
        if not isinstance(r, dict):
            continue
        gpus = ", ".join(map(str, r.get("gpus") or []))
        rows.append(
            {
                "role": role,
                "gpus": gpus,
                "util": float(r["util_mean_pct"]),
                "mem_gib": float(r["mem_peak_mib"]) / MIB_PER_GIB,
                "energy_wh": float(r["energy_wh"]),
            }
        )
    return sorted(rows, key=lambda x: x["util"])


def _devices(run: Run) -> list[dict[str, Any]]:
    """Per-device telemetry of a one-node run whose roles are not named (labels "GPU i")."""
    if not run.paths.gpu.is_file():
        return []
    gpu = pd.read_parquet(run.paths.gpu)
    if gpu.empty or ("node" in gpu and gpu["node"].nunique() > 1):
        return []
    ids = sorted(int(i) for i in gpu["gpu"].unique())
    return _role_rows(role_summary(gpu, {f"GPU {i}": [i] for i in ids}))


def gpu_roles(run: Run) -> dict[str, Any]:
    """Rows per role (or per device when roles are not named, `by`), `note`: the sentence on where
    idle GPUs sit (or that and why they are not split), `why`: the same without the device list."""
    roles = run.metrics.get("gpu_roles")
    if isinstance(roles, dict) and roles and "missing" not in roles:
        rows = _role_rows(roles)
        shared: dict[str, list[dict[str, Any]]] = {}  # roles on the same devices (a teacher beside rollout)
        for x in rows:
            shared.setdefault(x["gpus"], []).append(x)
        where = ", ".join(
            f"{' + '.join(x['role'] for x in xs)} GPU{'s' if ',' in g else ''} {g} at {xs[0]['util']:.1f}%"
            for g, xs in shared.items()
        )
        note = f"Idlest first: {where} mean utilisation."
        return {"rows": rows, "by": "role", "note": note, "why": note}
    why = roles.get("missing") if isinstance(roles, dict) else "metrics.json has no gpu_roles"
    inf = run.manifest.get("inferred")
    named = inf.get("gpus") if isinstance(inf, dict) and isinstance(inf.get("gpus"), dict) else {}
    counts = ", ".join(f"{k} {v.get('value')}" for k, v in named.items() if isinstance(v, dict))
    rows = _devices(run)
    unsplit = f"Not split by role: {why}" + (f" (GPUs by role from the config: {counts})" if counts else "")
    note = unsplit
    if rows:
        note += "; per device, idlest first: " + ", ".join(f"{x['role']} at {x['util']:.1f}%" for x in rows)
    return {"rows": rows, "by": "device", "note": note + ".", "why": unsplit + "."}


def overview(runs: list[Run]) -> list[dict[str, Any]]:
    """Per run: the headline figures as display strings (None = not reported, with the reason),
    its badge, the model its MFU used, and its GPU roles."""
    out = []
    for i, r in enumerate(runs):
        m = r.metrics
        mfu = _num(m, "mfu")
        figures = {
            "Trajectories/s": _fmt(_num(m, "trajectories_per_s"), "{:.2f}"),
            "Trajectories/s (step windows)": _fmt(_num(m, "trajectories_per_s_steps"), "{:.2f}"),
            "Generated tokens/s": _fmt(generated_tokens_per_s(m), "{:,.1f}"),
            "Steady step (s)": _fmt(_num(m, "steady_step_s"), "{:.2f}"),
            "Energy (Wh)": _fmt(_num(m, "energy_wh"), "{:.1f}"),
            "MFU, suite (%)": _fmt(None if mfu is None else 100 * mfu, "{:.2f}"),
        }
        reasons = {
            "Trajectories/s": r.missing.get("trajectories_per_s"),
            "Trajectories/s (step windows)": r.missing.get("trajectories_per_s_steps"),
            "Generated tokens/s": r.missing.get("generated_tokens") or r.missing.get("wall_s"),
            "Steady step (s)": r.missing.get("steady_step_s"),
            "Energy (Wh)": r.missing.get("energy_wh"),
            "MFU, suite (%)": r.missing.get("mfu"),
        }
        out.append(
            {
                "anchor": f"run-{i}",
                "label": r.label,
                "run_id": r.run_id,
                "badge": "measured" if r.manifest["mode"] == "native" else "emulated",
                "figures": [
                    {"name": k, "text": v, "reason": "" if v else (reasons[k] or "not in metrics.json")}
                    for k, v in figures.items()
                ],
                "model": model_used(r),
                "wall_window": str(m.get("wall_window") or r.manifest.get("wall_window") or "not recorded"),
                "gpu": gpu_roles(r),
            }
        )
    return out


def _fmt(v: float | None, spec: str) -> str:
    return "" if v is None else spec.format(v)


def _value(entry: Any) -> Any:
    return entry.get("value") if isinstance(entry, dict) else entry


def run_identity(run: Run) -> dict[str, str]:
    """What a run was, in words: framework, mode and emulator policy, placement, GPUs by role (the
    resolved layout of a launched run, the `inferred` block of an ingested one); unknown said so."""
    m, res, inf = run.manifest, run.manifest.get("resolved") or {}, run.manifest.get("inferred") or {}
    mode = res.get("mode") or _value(inf.get("mode"))
    policy = res.get("policy")
    co = colocated(m)
    placement = "placement unknown" if co is None else ("colocated" if co else "disaggregated")
    if res:
        gpus = ", ".join(
            f"{role} {(res.get(role) or {}).get('gpus')}"
            for role in ("trainer", "generator")
            if isinstance(res.get(role), dict)
        )
        total = res.get("total_gpus")
    else:
        named = {k: _value(v) for k, v in (inf.get("gpus") or {}).items()}
        gpus = ", ".join(f"{k} {v}" for k, v in named.items())
        total = sum(v for v in named.values() if isinstance(v, int)) if named else None
    return {
        "framework": str(m.get("framework")),
        "mode": (f"mode {mode}" if mode else "mode not recorded")
        + (f" (emulator policy {policy})" if policy else ""),
        "placement": placement,
        "gpus": f"{total} GPUs ({gpus})" if total else "GPUs not recorded",
    }


def where_time_goes(run: Run) -> str:
    """metrics.json `phases` in one line: the largest phase, then checkpoint save and validation
    whenever the run timed them, as shares of the steady steps' wall time (the breakdown's numbers)."""
    ph = run.metrics.get("phases") or {}
    parts = ph.get("parts") or {}
    if not parts:
        return "step phases not reported: " + str(ph.get("missing") or "metrics.json has no phases")
    largest = ph.get("largest")
    shown = [largest] + [
        c for c in ("checkpoint_s", "validation_s", "unattributed_s") if c in parts and c != largest
    ]
    text = ", ".join(f"{parts[c]['name']} {_share(parts[c]['share'])}" for c in shown)
    return f"largest phase: {text} of the steady steps' wall time"


def _share(v: float | None) -> str:
    """A share as a percentage; -0.0 (timers summing to the step within float error) prints 0.0."""
    return "not reported" if v is None else f"{round(100 * v, 1) + 0.0:.1f}%"


def what_ran(runs: list[Run]) -> dict[str, Any]:
    """The report's first lines: per run what it was (run_identity) and where its step time goes,
    and, when the runs differ in mode, placement or GPUs, the sentence saying they are not one
    experiment (their numbers compare setups, not frameworks alone)."""
    rows = [{"label": r.label, **run_identity(r), "time": where_time_goes(r)} for r in runs]
    differ = [k for k in ("mode", "placement", "gpus") if len({x[k] for x in rows}) > 1]
    note = (
        f"Not one experiment: these runs differ in {', '.join(differ)}; a difference between them is the "
        "setup's as much as the framework's."
        if len(rows) > 1 and differ
        else ""
    )
    return {"rows": rows, "note": note}
