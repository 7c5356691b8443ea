"""A GPU's hardware profile: the constants of the measured cost model, fitted on `bench probe` files,
and the cost model itself (decode iteration, prefill, training step) that reads only the profile and
a model's shape. docs/probe.md has the schema, the forms and the measured errors.

The forms (costs add; an overlap only where work overlaps a CPU that launches it):

- decode iteration (CUDA graph) = launch x (kernels_per_layer x layers + kernels_per_iteration)
  + weight_bytes / weight_Bps + kv_bytes / (kv_Bps x min(1, batch x kv_heads / attention_blocks_full))
  + flops x (h + width_half) / h / decode_flops. The launch term is the per-iteration cost that grows
  with layers, not bytes; attention gets a share of the GPU proportional to the blocks the batch
  gives it (one per sequence and KV head) until `attention_blocks_full` blocks fill it; a narrow
  model's GEMMs reach less of the GPU (the dense width factor, fitted once). Rows of one model
  cannot separate the launch term from the weight stream: then the weight stream is read at the
  measured device copy bandwidth.
- prefill (eager) = overlap(launch_per_layer x layers, flops / (gemm_peak x h / (h + width_half)))
- training step (eager) = overlap(train_launch_per_layer x layers, 3 x flops / (same rate))
  + optimizer bytes (16 B/param read + written) / device copy bandwidth, where overlap(a, b) =
  (a^p + b^p)^(1/p): the CPU's launches and the GPU's GEMMs overlap, fitted p (1: they add).

`gemm_peak`, the device copy bandwidth and the host/filesystem links are read straight from the probe
(measured); launch costs, streaming bandwidths, `attention_blocks_full` and `width_half` are fitted.
Kernels per layer and per iteration are chosen (counted from the probe's decode iteration).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.errors import UsageError

# The probe's decode iteration, counted: per layer RMSNorm, QKV matmul, q-norm, k-norm, KV write,
# attention, output projection, residual add, RMSNorm, gate-up matmul, SiLU x up, down projection,
# residual add (13); per iteration the final norm, the LM head and the argmax (3). Chosen, not fitted.
KERNELS_PER_LAYER = 13
KERNELS_PER_ITERATION = 3
ADAM_BYTES_PER_PARAM = 16  # fp32 master weight, grad, exp_avg, exp_avg_sq: each read and written
TRAIN_FLOPS_MULT = 3  # forward + backward (2x forward)
ATTENTION_BLOCKS_GRID = np.geomspace(4, 4096, 121)
WIDTH_HALF_GRID = np.linspace(0, 8192, 129)
# launches and GEMMs of eager work: 1 adds them, 32 is within 2.2% of the longer of the two (at equal sides)
OVERLAP_P_GRID = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


@dataclass(frozen=True)
class Arch:
    """A dense decoder's shape, as the probe records it (decode.<model>.model)."""

    layers: int
    hidden: int
    heads: int
    kv: int
    hd: int
    ffn: int
    vocab: int
    tied: bool

    @property
    def params(self) -> float:
        """Parameters of the matmuls a token passes (layers' projections, the LM head), no norms."""
        per_layer = self.hidden * (self.heads + 2 * self.kv) * self.hd + self.heads * self.hd * self.hidden
        per_layer += 3 * self.hidden * self.ffn
        return self.layers * per_layer + self.hidden * self.vocab

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv * self.hd * 2


@dataclass(frozen=True)
class Row:
    """One measured row of a probe file: section decode / prefill / train."""

    section: str
    model: str
    arch: Arch
    batch: int
    length: int  # decode: context tokens in the cache; prefill / train: sequence length
    measured_s: float
    weight_bytes: float = 0.0
    kv_bytes: float = 0.0
    params: float = 0.0
    source: str = ""

    def key(self) -> dict[str, Any]:
        length = {"context": self.length} if self.section == "decode" else {"seq": self.length}
        return {"section": self.section, "model": self.model, "batch": self.batch, **length}


def load_probe(path: Path) -> dict[str, Any]:
    try:
        probe = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}; expected a probe.json written by `bench probe`") from None
    except ValueError as e:
        raise UsageError(f"{path}: not JSON ({e}); expected a probe.json written by `bench probe`") from None
    if not isinstance(probe, dict) or not isinstance(probe.get("sections"), dict):
        raise UsageError(f"{path}: no 'sections' object; expected a probe.json written by `bench probe`")
    return probe


def _arch(section: dict[str, Any], name: str) -> Arch | None:
    model = (section.get(name) or {}).get("model") if isinstance(section.get(name), dict) else None
    return Arch(**{k: model[k] for k in Arch.__dataclass_fields__}) if model else None


def rows_of(probe: dict[str, Any], source: str = "") -> list[Row]:
    """Every timed decode / prefill / train row of a probe (failed and optimizer-only rows left out).
    A model's shape comes from its decode section (the probe writes it there)."""
    sections = probe["sections"]
    decode = sections.get("decode") or {}
    out: list[Row] = []
    for name, entry in decode.items():
        if not isinstance(entry, dict) or "rows" not in entry:
            continue
        arch = _arch(decode, name)
        for r in entry["rows"]:
            timed = r.get("graph") or r.get("eager")  # a CPU probe has no CUDA graph: its eager iteration
            if not timed or "error" in r:
                continue
            out.append(
                Row(
                    "decode",
                    name,
                    arch,
                    r["batch"],
                    r["context"],
                    timed["median_s"],
                    weight_bytes=r["weight_bytes"],
                    kv_bytes=r["kv_bytes"],
                    source=source,
                )
            )
    for sec in ("prefill", "train"):
        for name, entry in (sections.get(sec) or {}).items():
            if not isinstance(entry, dict) or "rows" not in entry:
                continue
            arch = _arch(decode, name) or _arch(sections.get("models") or {}, name)
            if arch is None:
                continue  # no shape for it in this file: cannot be modelled
            for r in entry["rows"]:
                if "median_s" not in r or r.get("optimizer_step_only") or "error" in r:
                    continue
                out.append(
                    Row(
                        sec,
                        name,
                        arch,
                        r["batch"],
                        r["seq"],
                        r["median_s"],
                        params=float(entry.get("params") or arch.params),
                        source=source,
                    )
                )
    return out


def measured_links(probe: dict[str, Any]) -> dict[str, Any]:
    """What the cost model reads straight from a probe (nothing fitted): GEMM peak, device copy,
    host links, allocation, filesystem."""
    s = probe["sections"]
    out: dict[str, Any] = {}
    if rows := [r for r in (s.get("matmul") or {}).get("rows", []) if "tflops" in r]:
        out["gemm_peak_flops"] = max(r["tflops"] for r in rows) * 1e12
    if "copy_tbps_rw" in (s.get("hbm") or {}):
        out["device_copy_Bps"] = s["hbm"]["copy_tbps_rw"] * 1e12
    host = s.get("host") or {}
    for key in ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"):
        if isinstance(host.get(key), dict) and "gbps" in host[key]:
            out[f"host_{key}_Bps"] = host[key]["gbps"] * 1e9
    if alloc := [r for r in (s.get("alloc") or {}).get("rows", []) if "take_s" in r]:
        out["alloc_take_s"] = float(np.median([r["take_s"] for r in alloc]))
        out["alloc_release_s"] = float(np.median([r["release_s"] for r in alloc]))
    fs = s.get("filesystem") or {}
    if (fs_rows := [r for r in fs.get("rows", []) if "d2h_write_fsync_s" in r]) and fs.get("bytes"):
        out["filesystem_write_Bps"] = fs["bytes"] / float(
            np.median([r["d2h_write_fsync_s"] for r in fs_rows])
        )
        # read_cold_s returns before reading (mmap); read_h2d_s is where the pages are read
        out["filesystem_read_Bps"] = fs["bytes"] / float(np.median([r["read_h2d_s"] for r in fs_rows]))
    if (env := s.get("env") or {}).get("name"):
        out["device"] = env["name"]
    return out


# ---------------------------------------------------------------------------------------------------
# The cost model: each function reads a profile (a dict, as written to PROFILE.yaml) and a shape.


def profile_value(profile: dict[str, Any], section: str, key: str) -> Any:
    """A profile constant: `{value: ...}` as `probe fit` writes it, or a bare number."""
    entry = profile[section][key]
    return entry.get("value") if isinstance(entry, dict) else entry


def _v(profile: dict[str, Any], section: str, key: str) -> float:
    return float(profile_value(profile, section, key))


def decode_s(
    profile: dict[str, Any],
    arch: Arch,
    batch: Any,
    context: float,
    weight_bytes: Any = None,
    kv_bytes: Any = None,
    flops: Any = None,
    gpus: int = 1,
) -> Any:
    """Seconds of one decode iteration of `batch` sequences with `context` tokens cached each.

    On an engine of `gpus` GPUs (tensor parallel) each GPU reads 1/gpus of the weight and KV bytes,
    does 1/gpus of the FLOPs and holds 1/gpus of the KV heads (at least one, as engines replicate
    them); the launch term is per iteration and is not split. Defaults are the probe's dense bf16
    decoder: weights 2 B x `arch.params`, KV `batch x context x arch.kv_bytes_per_token`, matmul
    FLOPs 2 x params x batch. `batch`, `weight_bytes`, `kv_bytes` and `flops` may be arrays (one
    iteration per element: the emulator's rate table)."""
    weights = weight_bytes if weight_bytes is not None else 2.0 * arch.params
    kv = kv_bytes if kv_bytes is not None else np.multiply(batch, context) * arch.kv_bytes_per_token
    features = _decode_features(profile, arch, batch, context, weights, kv, matmul_flops=flops, gpus=gpus)
    seconds = sum(c * f for c, f in zip(_decode_coefs(profile), features, strict=True))
    return float(seconds) if np.ndim(seconds) == 0 else seconds


def _decode_features(
    profile,
    arch: Arch,
    batch,
    context,
    weights,
    kv,
    blocks_full=None,
    matmul_flops=None,
    gpus: int = 1,
    width_half=None,
):
    """[kernel launches, weight bytes, KV bytes over the attention share, FLOPs] of one iteration
    on one of `gpus` GPUs; matmul FLOPs default to weights x batch (2 FLOPs per bf16 parameter).
    FLOPs are weighted by (hidden + width_half) / hidden: a narrow model's GEMMs reach less of the
    GPU, as in prefill and training (the dense section's width_half, the same GEMMs)."""
    full = blocks_full if blocks_full is not None else _v(profile, "decode", "attention_blocks_full")
    half = width_half if width_half is not None else _v(profile, "dense", "width_half")
    share = np.minimum(1.0, np.multiply(batch, max(arch.kv / gpus, 1.0)) / full)
    matmul = matmul_flops if matmul_flops is not None else np.multiply(weights, batch)
    flops = matmul + 4.0 * np.multiply(batch, context) * arch.heads * arch.hd * arch.layers
    launches = KERNELS_PER_LAYER * arch.layers + KERNELS_PER_ITERATION
    return [launches, weights / gpus, kv / share / gpus, flops / gpus * (arch.hidden + half) / arch.hidden]


def _decode_coefs(profile) -> list[float]:
    """Seconds per unit of each decode feature; a rate the fit could not identify (null) costs 0."""
    rates = [profile_value(profile, "decode", k) for k in ("weight_Bps", "kv_Bps", "flops")]
    return [_v(profile, "decode", "launch_s_per_kernel")] + [1.0 / r if r else 0.0 for r in rates]


def _forward_flops(arch: Arch, batch: int, seq: int, params: float) -> float:
    """2 x params x tokens + causal attention (QK^T and PV over half the square)."""
    return 2.0 * params * batch * seq + 2.0 * batch * seq * seq * arch.heads * arch.hd * arch.layers


def _rate(profile, arch: Arch, width_half: float | None = None) -> float:
    half = width_half if width_half is not None else _v(profile, "dense", "width_half")
    return _v(profile, "measured", "gemm_peak_flops") * arch.hidden / (arch.hidden + half)


def eager_s(profile, arch: Arch, section: str, flops: Any, passes: Any = 1, gpus: int = 1) -> Any:
    """Seconds of eager work of `flops` FLOPs in `passes` launches of every layer (`section`
    "prefill": forward passes; "train": forward + backward), spread over `gpus` GPUs: the CPU's
    launches overlap the GPUs' GEMMs (`overlap`, the profile's fitted exponent). Arrays broadcast."""
    launch = _v(profile, section, "launch_s_per_layer") * arch.layers * np.asarray(passes, dtype=np.float64)
    compute = np.asarray(flops, dtype=np.float64) / gpus / _rate(profile, arch)
    seconds = overlap(launch, compute, _overlap_p(profile))
    return float(seconds) if np.ndim(seconds) == 0 else seconds


def overlap(launch: Any, compute: Any, p: float | None) -> Any:
    """Seconds of a CPU's launches overlapping the GPU's work: (launch^p + compute^p)^(1/p), the
    longer of the two as p grows (None: the max), their sum at p = 1. Neither side hides the other
    entirely near where they are equal (launch queues drain, GEMMs wait on launches)."""
    if p is None:
        return np.maximum(launch, compute)
    return (np.power(launch, p) + np.power(compute, p)) ** (1.0 / p)


def _overlap_p(profile: dict[str, Any]) -> float | None:
    """The dense section's fitted overlap exponent; None (the max) in a profile fitted before it."""
    return (profile.get("dense") or {}).get("overlap_p", {}).get("value")


def prefill_s(profile, arch: Arch, batch: Any, seq: Any, params: float | None = None, gpus: int = 1) -> Any:
    """Seconds of one eager prefill forward over batch x seq tokens (on `gpus` GPUs: FLOPs split)."""
    return eager_s(profile, arch, "prefill", _forward_flops(arch, batch, seq, params or arch.params), 1, gpus)


def optimizer_s(profile, params: float) -> float:
    """Seconds of one AdamW step: optimizer-state bytes over the measured device copy bandwidth."""
    return params * ADAM_BYTES_PER_PARAM * 2 / _v(profile, "measured", "device_copy_Bps")


def host_roundtrip_s(profile, moved: float) -> float | None:
    """Seconds to load `moved` bytes from pinned host memory onto the GPU and put them back (the
    measured pinned host-to-device and device-to-host copies); None when the profile lacks either."""
    links = profile.get("measured") or {}
    h2d, d2h = links.get("host_h2d_pinned_Bps"), links.get("host_d2h_pinned_Bps")
    return moved / float(h2d) + moved / float(d2h) if h2d and d2h else None


def train_s(profile, arch: Arch, batch: int, seq: int, params: float | None = None) -> float:
    """Seconds of one training step (forward, backward, AdamW) over batch x seq tokens."""
    p = params or arch.params
    flops = TRAIN_FLOPS_MULT * _forward_flops(arch, batch, seq, p)
    return eager_s(profile, arch, "train", flops) + optimizer_s(profile, p)


def predict(profile: dict[str, Any], row: Row) -> float:
    if row.section == "decode":
        return decode_s(profile, row.arch, row.batch, row.length, row.weight_bytes)
    if row.section == "prefill":
        return prefill_s(profile, row.arch, row.batch, row.length, row.params)
    return train_s(profile, row.arch, row.batch, row.length, row.params)


# ---------------------------------------------------------------------------------------------------
# The fit: the inverse of the same functions.


def _fitted(value: float, rows: list[Row], errors: Iterable[float]) -> dict[str, Any]:
    errors = [abs(e) for e in errors]
    return {
        "value": float(value),
        "fitted_on": sorted({f"{r.source}:{r.section}.{r.model}" for r in rows}),
        "rows": len(rows),
        "residual_median": round(float(np.median(errors)), 4) if errors else None,
        "residual_max": round(float(max(errors)), 4) if errors else None,
    }


def _fit_decode(rows: list[Row], copy_Bps: float, width_half: float) -> dict[str, Any]:
    """Non-negative least squares on relative error, linear in the four coefficients for each
    attention_blocks_full on a grid (every subset of the terms is tried, so a term the rows cannot
    identify is dropped, not fitted negative); the smallest squared relative error wins.

    Rows of one model cannot separate the launch term from the weight stream: both are the same
    constant over its batch x context grid (one layer count, one weight size), so any split fits
    equally and the fit's split is arbitrary, while another size needs the right one. Then the weight
    stream is read at the measured device copy bandwidth `copy_Bps` (B/s; fitted on two or more
    sizes of the H200 probe it comes out 0.89-1.03x of it) and the launch term is fitted to the rest."""
    y = np.array([r.measured_s for r in rows])
    one_model = len({(r.arch.layers, r.weight_bytes) for r in rows}) == 1
    fixed = np.zeros(4)
    if one_model:
        fixed[1] = 1.0 / copy_Bps
    best = None
    for full in ATTENTION_BLOCKS_GRID:
        X = np.array(
            [
                _decode_features(
                    None, r.arch, r.batch, r.length, r.weight_bytes, r.kv_bytes, full, width_half=width_half
                )
                for r in rows
            ]
        )
        A = X / y[:, None]
        target = 1.0 - A @ fixed  # what the fitted terms explain, relative to each row
        free = [i for i in range(X.shape[1]) if not fixed[i]]
        for keep in itertools.product((True, False), repeat=len(free)):
            cols = [i for i, k in zip(free, keep, strict=True) if k]
            if not cols:
                continue
            sub, *_ = np.linalg.lstsq(A[:, cols], target, rcond=None)
            if (sub <= 0).any():
                continue
            coefs = fixed.copy()
            coefs[cols] = sub
            err = float(np.sum((X @ coefs / y - 1) ** 2))
            if best is None or err < best[0] - 1e-12:
                best = (err, full, coefs, X @ coefs / y - 1)
    if best is None:
        raise UsageError("decode rows admit no fit with positive costs; check the probe's decode section")
    _, full, c, errors = best

    def inverse(coef: float) -> dict[str, Any]:
        if coef > 0:
            return _fitted(1 / coef, rows, errors)
        return {
            "value": None,
            "not_identified": "these rows do not separate this term (fitted coefficient 0)",
        }

    weight = (
        {
            "value": float(copy_Bps),
            "read": "the measured device copy bandwidth: rows of one model do not separate the weight "
            "stream from the launch term (both constant over its grid); fit two or more sizes to fit it",
        }
        if one_model
        else inverse(c[1])
    )
    return {
        "launch_s_per_kernel": _fitted(c[0], rows, errors),
        "weight_Bps": weight,
        "kv_Bps": inverse(c[2]),
        "flops": inverse(c[3]),
        "attention_blocks_full": _fitted(full, rows, errors),
        "kernels_per_layer": {
            "value": KERNELS_PER_LAYER,
            "chosen": "counted from the probe's decode iteration",
        },
        "kernels_per_iteration": {"value": KERNELS_PER_ITERATION, "chosen": "final norm, LM head, argmax"},
    }


def _fit_dense(prefill: list[Row], train: list[Row], measured: dict[str, Any]) -> dict[str, Any]:
    """width_half (shared by prefill and training: the same GEMMs), the overlap exponent of launches
    and GEMMs (shared: the same eager launches) and each section's launch cost per layer, by grid
    search on squared relative error of the fitted rows; the GEMM peak and copy bandwidth are measured."""
    partial = {"measured": measured}
    best = None
    layers_p = np.array([r.arch.layers for r in prefill], dtype=float)
    layers_t = np.array([r.arch.layers for r in train], dtype=float)
    y_p = np.array([r.measured_s for r in prefill])
    y_t = np.array([r.measured_s for r in train])
    opt_t = np.array([optimizer_s(partial, r.params) for r in train])
    launch_grid = np.geomspace(1e-5, 1e-1, 161)[:, None]  # one row per candidate launch cost

    def err(layers, comp, extra, y, p):  # per launch candidate
        if not len(y):
            return np.zeros(len(launch_grid))
        return np.sum((overlap(launch_grid * layers, comp, p) + extra - y) ** 2 / y**2, axis=1)

    for p, half in itertools.product(OVERLAP_P_GRID, WIDTH_HALF_GRID):
        comp_p = np.array(
            [
                _forward_flops(r.arch, r.batch, r.length, r.params) / _rate(partial, r.arch, half)
                for r in prefill
            ]
        )
        comp_t = np.array(
            [
                TRAIN_FLOPS_MULT
                * _forward_flops(r.arch, r.batch, r.length, r.params)
                / _rate(partial, r.arch, half)
                for r in train
            ]
        )
        e_p, e_t = err(layers_p, comp_p, 0.0, y_p, p), err(layers_t, comp_t, opt_t, y_t, p)
        total = float(e_p.min() + e_t.min())
        if best is None or total < best[0] - 1e-12:
            best = (total, p, half, float(launch_grid[e_p.argmin(), 0]), float(launch_grid[e_t.argmin(), 0]))
    _, p, half, lp, lt = best
    profile = {
        "measured": measured,
        "dense": {"width_half": {"value": half}, "overlap_p": {"value": p}},
        "prefill": {"launch_s_per_layer": {"value": lp}},
        "train": {"launch_s_per_layer": {"value": lt}},
    }
    e_p = [predict(profile, r) / r.measured_s - 1 for r in prefill]
    e_t = [predict(profile, r) / r.measured_s - 1 for r in train]
    return {
        "dense": {
            "width_half": _fitted(half, prefill + train, e_p + e_t),
            "overlap_p": _fitted(p, prefill + train, e_p + e_t),
        },
        "prefill": {"launch_s_per_layer": _fitted(lp, prefill, e_p)},
        "train": {
            "launch_s_per_layer": _fitted(lt, train, e_t),
            "optimizer": "AdamW bytes (16 B/param, read and written) / measured device copy bandwidth",
        },
    }


def fit(probes: list[tuple[str, dict[str, Any]]], models: list[str] | None = None) -> dict[str, Any]:
    """A hardware profile from one or more probe files of one GPU (name, parsed probe); `models`
    restricts the rows fitted on (to hold the other sizes out)."""
    rows = [r for name, probe in probes for r in rows_of(probe, name) if not models or r.model in models]
    measured: dict[str, Any] = {}
    for _, probe in probes:
        for k, v in measured_links(probe).items():
            measured.setdefault(k, v)
    missing = [k for k in ("gemm_peak_flops", "device_copy_Bps") if k not in measured]
    if missing:
        raise UsageError(
            f"probe files lack {', '.join(missing)} (sections matmul, hbm); run `bench probe` without --quick"
        )
    by = {s: [r for r in rows if r.section == s] for s in ("decode", "prefill", "train")}
    if not by["decode"]:
        raise UsageError("probe files hold no decode rows" + (f" of {', '.join(models)}" if models else ""))
    profile = {
        "device": measured.get("device"),
        "sources": [name for name, _ in probes],
        "fitted_models": sorted({r.model for r in rows}),
        "measured": {k: v for k, v in measured.items() if k != "device"},
    }
    profile.update(_fit_dense(by["prefill"], by["train"], profile["measured"]))
    half = float(profile["dense"]["width_half"]["value"])
    profile["decode"] = _fit_decode(by["decode"], float(measured["device_copy_Bps"]), half)
    return profile


def check(probe: dict[str, Any], profile: dict[str, Any], source: str = "") -> dict[str, Any]:
    """Every measured row next to what the profile predicts, and the errors (relative, |p/m - 1|)."""
    rows = []
    for r in rows_of(probe, source):
        rows.append({**r.key(), "measured_s": r.measured_s, "predicted_s": predict(profile, r)})
    errors = [abs(r["predicted_s"] / r["measured_s"] - 1) for r in rows]
    by_section = {}
    for sec in ("decode", "prefill", "train"):
        e = [abs(r["predicted_s"] / r["measured_s"] - 1) for r in rows if r["section"] == sec]
        if e:
            by_section[sec] = {
                "rows": len(e),
                "median_abs_error": float(np.median(e)),
                "max_abs_error": max(e),
            }
    return {
        "rows": rows,
        "median_abs_error": float(np.median(errors)) if errors else None,
        "max_abs_error": max(errors) if errors else None,
        "sections": by_section,
    }
