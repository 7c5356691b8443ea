"""The `published:` entries of the shipped framework profiles (conf/framework/<F>.yaml profile.published):
public tables of each framework on other models and GPUs, kept apart from the pooled `values`.

Every entry names its source. Every figure an entry derives is recomputed here from the figures as
published, with bench.flops on the conf/model entry, the hardware conf's peak and the emulator's own
weight-sync path (bench.model.costmodel.weight_sync_s), and must equal the conf, so the conf cannot
drift from its derivation. The phases fits of verl's one-step-off and fully_async rows (`fit:`) are
emulator fits (bench/reproduce/phases.py, tests/reproduce/test_phases.py), not recomputed here.

prime-rl's published MFU is checked against bench.flops's prime_rl convention (its perf.py), and the
suite's MFU against it through the one term where the two conventions differ: attention.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import yaml

from bench.config import CONF_DIR, compose
from bench.flops import flops_per_token, param_counts
from bench.model import costmodel as cm
from bench.model.fwprofile import PROFILE_KEYS, profile_overrides
from bench.resolve import Resolved

FRAMEWORKS = ("verl", "slime", "prime_rl")
# trainer_mfu: a trainer MFU / tokens-per-s row; weight_sync: a weight-update time; handoff: sleep + wake;
# emulator_conf: a value fitted elsewhere in conf/ (named by derived_by); none: figures only (not_derived says why)
DERIVATIONS = ("trainer_mfu", "weight_sync", "handoff", "emulator_conf", "none")


def framework_conf(framework: str) -> dict[str, Any]:
    return yaml.safe_load((CONF_DIR / "framework" / f"{framework}.yaml").read_text())


def published_entries() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for fw in FRAMEWORKS:
        block = (framework_conf(fw).get("profile") or {}).get("published") or {}
        out += [(fw, name, e) for name, e in block.items() if name != "note"]
    return out


ENTRIES = published_entries()
DERIVED = [(fw, name, e) for fw, name, e in ENTRIES if e.get("derivation") not in (None, "none")]


@functools.cache
def _composed(*overrides: str) -> Any:
    return compose(list(overrides))


def _model(name: str) -> Any:
    return cm.plain_model(_composed(f"model={name}").model)


def _peak(hardware: str) -> float:
    return float(_composed(f"hardware={hardware}").hardware.peak_bf16_flops)


def derive(framework: str, e: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What an entry's published figures give, rounded as the conf records them: {values, derived}."""
    kind, pub = e["derivation"], e.get("published") or {}
    values: dict[str, Any] = {}
    derived: dict[str, Any] = {}
    if kind == "trainer_mfu":
        m, s = _model(e["model"]), int(pub["seq_len"])
        per_gpu = float(pub["tokens_per_s"]) / (int(e["gpus"]) * _peak(e["hardware"]))
        suite, prime = flops_per_token(m, s, "suite"), flops_per_token(m, s, "prime_rl")
        values["trainer_mfu"] = round(suite * per_gpu, 5)
        derived["prime_rl_mfu_recomputed"] = round(prime * per_gpu, 4)
        derived["suite_over_prime_rl"] = round(suite / prime, 4)
    elif kind == "weight_sync":
        link, seconds = e.get("link"), float(pub["weight_update_s"])
        dtype = float((link or {}).get("dtype_bytes", 2))
        derived["transfer_gbps"] = round(param_counts(_model(e["model"]))["total"] * dtype / seconds / 1e9, 3)
        if link:
            cfg = _composed(
                "experiment=smoke", f"model={e['model']}", f"hardware={e['hardware']}", f"framework={framework}",
                f"experiment.placement={link['placement']}", f"experiment.trainer_gpus={link['trainer_gpus']}",
                f"experiment.generator_gpus={link['generator_gpus']}", f"experiment.generator.tp={link['engine_gpus']}",
                "experiment.generator.dp=1", f"experiment.generator.dtype_bytes={link['dtype_bytes']}",
                "emulator.weight_sync_fixed_s=0",
            )  # fmt: skip
            r = Resolved.from_config(cfg)
            derived["path"] = cm.sync_path(cfg, r)  # the framework's own path at this placement
            transfer = cm.weight_sync_s(cfg, r)
            derived["modelled_transfer_s"] = round(transfer, 4)
            values["weight_sync_fixed_s"] = round(
                max(seconds - transfer, 0.0), 4
            )  # as calibrate_fit.fit_sync
    elif kind == "handoff":
        derived["handoff_fixed_s"] = round(float(pub["sleep_s"]) + float(pub["wake_up_s"]), 2)
    elif kind == "emulator_conf":
        by = e["derived_by"]
        values[by["key"]] = yaml.safe_load((CONF_DIR.parent / by["file"]).read_text())[by["key"]]
    return {"values": values, "derived": derived}


def mismatches(framework: str, name: str, e: dict[str, Any]) -> list[str]:
    """One line per derived figure the conf records otherwise than its published figures give."""
    got = derive(framework, e)
    out = []
    if "path" in got["derived"]:
        path = got["derived"].pop("path")
        if path != e["link"]["path"]:
            out.append(
                f"{framework}.{name}: link.path {e['link']['path']!r}, the framework syncs over {path!r}"
            )
    for part in ("values", "derived"):
        want = e.get(part) or {}
        for key in sorted(set(want) | set(got[part])):
            if want.get(key) != got[part].get(key):
                out.append(
                    f"{framework}.{name}.{part}.{key}: conf {want.get(key)}, recomputed {got[part].get(key)}"
                )
    if e["derivation"] == "handoff":
        stated = framework_conf(framework).get("handoff_fixed_s")
        if stated != got["derived"]["handoff_fixed_s"]:
            out.append(
                f"{framework}.handoff_fixed_s: conf {stated}, sleep + wake {got['derived']['handoff_fixed_s']}"
            )
    return out


def test_every_published_entry_names_a_source_and_how_it_was_derived():
    assert len(ENTRIES) >= 30 and len(DERIVED) >= 20
    models = {p.stem for p in (CONF_DIR / "model").glob("*.yaml")}
    hardware = {p.stem for p in (CONF_DIR / "hardware").glob("*.yaml")}
    for fw, name, e in ENTRIES:
        where = f"{fw}.profile.published.{name}"
        assert str(e.get("source") or "").strip(), f"{where}: names no source"
        assert e.get("fit") or e.get("derivation") in DERIVATIONS, (
            f"{where}: neither a phases fit nor a derivation"
        )
        if e.get("derivation") == "none" or (e.get("derivation") == "weight_sync" and not e.get("link")):
            assert str(e.get("not_derived") or "").strip(), f"{where}: says not why nothing (more) is derived"
        if e.get("model") is not None and "derivation" in e:
            assert e["model"] in models, f"{where}: model {e['model']!r} has no conf/model entry"
        if e.get("hardware") is not None and "derivation" in e:
            assert e["hardware"] in hardware, (
                f"{where}: hardware {e['hardware']!r} has no conf/hardware entry"
            )
        for key in e.get("values") or {}:
            assert key in PROFILE_KEYS, f"{where}: values.{key} is not a profile input"


@pytest.mark.parametrize(("framework", "name", "entry"), DERIVED, ids=[f"{f}.{n}" for f, n, _ in DERIVED])
def test_derived_figures_are_recomputed_from_the_published_ones(framework, name, entry):
    assert mismatches(framework, name, entry) == []


def _first(kind: str, with_link: bool = False) -> tuple[str, str, dict[str, Any]]:
    return next(
        (f, n, e) for f, n, e in DERIVED if e["derivation"] == kind and (e.get("link") or not with_link)
    )


@pytest.mark.parametrize(
    ("kind", "with_link", "where", "key", "change"),
    [
        ("trainer_mfu", False, "published", "tokens_per_s", lambda v: v * 1.01),  # a misread throughput
        ("trainer_mfu", False, "values", "trainer_mfu", lambda v: v + 0.001),  # a hand-edited value
        ("trainer_mfu", False, "derived", "prime_rl_mfu_recomputed", lambda v: v + 0.001),
        ("weight_sync", True, "published", "weight_update_s", lambda v: v + 1.0),
        ("weight_sync", True, "values", "weight_sync_fixed_s", lambda v: v + 0.01),
        ("weight_sync", False, "derived", "transfer_gbps", lambda v: v * 1.01),
        ("handoff", False, "published", "sleep_s", lambda v: v + 0.1),
        ("emulator_conf", False, "values", "trainer_mfu", lambda v: v + 0.001),
    ],
)
def test_a_conf_that_drifted_from_its_published_figures_is_caught(kind, with_link, where, key, change):
    fw, name, entry = _first(kind, with_link)
    assert mismatches(fw, name, entry) == []
    bad = copy.deepcopy(entry)
    bad[where][key] = change(bad[where][key])
    assert mismatches(fw, name, bad), (fw, name, where, key)


def test_a_link_the_framework_does_not_sync_over_is_caught():
    fw, name, entry = _first("weight_sync", with_link=True)
    bad = copy.deepcopy(entry)
    bad["link"]["path"] = "nccl" if entry["link"]["path"] == "ipc" else "ipc"
    assert any("syncs over" in line for line in mismatches(fw, name, bad))


MFU_ROWS = [(f, n, e) for f, n, e in DERIVED if e["derivation"] == "trainer_mfu"]


@pytest.mark.parametrize(("framework", "name", "entry"), MFU_ROWS, ids=[n for _, n, _ in MFU_ROWS])
def test_prime_rl_publishes_its_own_convention_to_the_tables_rounding(framework, name, entry):
    """prime-rl's MFU = its perf.py FLOPs per token (bench.flops prime_rl) x tokens/s / (GPUs x peak): the
    table prints MFU to 0.1% and tokens/s to 10 tokens ("29.54k"), and the recomputation lands within that."""
    pub = entry["published"]
    m, s = _model(entry["model"]), int(pub["seq_len"])
    tps, gpus = float(pub["tokens_per_s"]), int(entry["gpus"])
    recomputed = flops_per_token(m, s, "prime_rl") * tps / (gpus * _peak(entry["hardware"]))
    assert abs(recomputed - float(pub["mfu"])) <= 0.0005 + recomputed * 5 / tps, (name, recomputed)


@pytest.mark.parametrize(("framework", "name", "entry"), MFU_ROWS, ids=[n for _, n, _ in MFU_ROWS])
def test_the_suite_and_prime_rl_differ_only_in_attention(framework, name, entry):
    """Both count 6 x the same matmul parameters (LM head and router in, embedding out); attention is
    6 L H head_dim (s+1) in the suite (real head dim, causal half) and 12 L hidden s in prime-rl
    (hidden / heads, the whole square). So the MFU ratio is 1 + O(1/s) where H x head_dim = 2 x hidden."""
    m, s = _model(entry["model"]), int(entry["published"]["seq_len"])
    prime = flops_per_token(m, s, "prime_rl")
    six_n = prime - 12 * m.layers * m.hidden * s
    suite = six_n + 6 * m.layers * m.q_heads * m.head_dim * (s + 1)
    assert flops_per_token(m, s, "suite") == pytest.approx(suite, rel=1e-12)
    ratio = entry["derived"]["suite_over_prime_rl"]
    if m.q_heads * m.head_dim == 2 * m.hidden:
        assert ratio == pytest.approx(1.0, abs=1e-4)
    else:
        assert ratio < 1.0 if m.q_heads * m.head_dim < 2 * m.hidden else ratio > 1.0


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_published_entries_never_reach_a_prediction(framework):
    """A prediction takes only `values` (pooled on the framework's own runs), never a published entry."""
    values = framework_conf(framework)["profile"]["values"]
    overrides, provenance = profile_overrides(framework)
    assert {o.split("=", 1)[0].removeprefix("emulator.") for o in overrides} - {"handoff_measured_on"} == set(
        values
    )
    assert {k.removeprefix("emulator.") for k in provenance["inputs"]} == set(values)
