"""A config's hardware profile: the PROFILE.yaml `bench probe fit` writes, read and checked, and the
one a config names (`hardware_profile=FILE`, else `hardware.profile`, else the datasheet), with the
manifest's `hardware_source` label. The forms that read it are bench.model.hwprofile's.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

import yaml

from bench.errors import UsageError
from bench.model.hwprofile import profile_value


def load_profile(path: Path) -> dict[str, Any]:
    try:
        profile = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise UsageError(
            f"{path}: {e.strerror}; expected a PROFILE.yaml written by `bench probe fit`"
        ) from None
    except yaml.YAMLError as e:
        raise UsageError(
            f"{path}: not YAML ({str(e).splitlines()[0]}); expected a PROFILE.yaml written by `bench probe fit`"
        ) from None
    need = [
        ("decode", "launch_s_per_kernel"),
        ("decode", "attention_blocks_full"),
        ("prefill", "launch_s_per_layer"),
        ("train", "launch_s_per_layer"),
        ("dense", "width_half"),
        ("measured", "gemm_peak_flops"),
        ("measured", "device_copy_Bps"),
    ]
    rates = [("decode", k) for k in ("weight_Bps", "kv_Bps", "flops")]  # null when not identified
    if not isinstance(profile, dict) or any(
        not isinstance(profile.get(s), dict) or k not in profile[s] for s, k in need + rates
    ):
        raise UsageError(
            f"{path}: not a hardware profile (needs {', '.join(f'{s}.{k}' for s, k in need)}); "
            "write one with `bench probe fit PROBE.json --out PROFILE.yaml`"
        )
    for s, k in need + rates:
        value = profile_value(profile, s, k)
        if (s, k) in rates and value is None:
            continue
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{path}: {s}.{k}={value!r}: expected a finite number >= 0")
    return profile


# ---------------------------------------------------------------------------------------------------
# A config's profile: `hardware_profile=FILE` (the user's, relative to the working directory) wins over
# `hardware.profile` (the hardware option's, relative to conf/hardware/); neither: the datasheet.

HARDWARE_CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "hardware"
REPO_DIR = HARDWARE_CONF_DIR.parent.parent
DATASHEET = "datasheet"  # manifest emulator.hardware_source when no profile is set


def profile_of(cfg: Any) -> tuple[str, Path] | None:
    """(the key that set it, the file) of cfg's hardware profile, or None: the datasheet path."""
    given = cfg.get("hardware_profile")
    if given:
        return "hardware_profile", Path(str(given))
    shipped = cfg.hardware.get("profile")
    if shipped:
        path = Path(str(shipped))
        return "hardware.profile", path if path.is_absolute() else HARDWARE_CONF_DIR / path
    return None


def for_config(cfg: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(profile, its manifest `hardware_source`) of cfg, or None (the datasheet). UsageError, one
    line naming the key, when the file is not a profile or was measured on another GPU than
    cfg.hardware (a profile of one GPU emulating another would pass its physics off as measured)."""
    found = profile_of(cfg)
    if found is None:
        return None
    key, path = found
    given = f"{key}={cfg.get('hardware_profile') if key == 'hardware_profile' else cfg.hardware.profile}"
    try:
        profile = _load_cached(str(path.resolve()), path.stat().st_mtime_ns)
    except OSError as e:
        raise UsageError(
            f"{given}: {path.resolve()}: {e.strerror}; expected a PROFILE.yaml written by "
            f"`bench probe fit` ({key}=null: the datasheet)"
        ) from None
    except UsageError as e:
        raise UsageError(f"{given}: {e}") from None
    device, name = str(profile.get("device") or ""), str(cfg.hardware.name)
    if not re.search(rf"(?<![A-Za-z0-9]){re.escape(name.split('-')[0])}(?![A-Za-z0-9])", device, re.I):
        raise UsageError(
            f"{given}: measured on {device or 'an unrecorded device'} but hardware.name={name}; expected "
            f"a profile measured on a {name} (`bench probe` on one, then `bench probe fit`) or the "
            f"hardware option of the {device or 'measured'} GPU"
        )
    shown = path.resolve()
    source = {
        "profile": str(shown.relative_to(REPO_DIR)) if shown.is_relative_to(REPO_DIR) else str(shown),
        "set_by": key,
        "device": device,
        "fitted_models": list(profile.get("fitted_models") or []),
    }
    return profile, source


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int) -> dict[str, Any]:
    """load_profile once per file version: compose checks it, then the emulator's engine and trainer
    models read it (callers never mutate the dict)."""
    return load_profile(Path(path))


def source_label(source: Any) -> str | None:
    """A manifest's `emulator.hardware_source` in a few words for figures and tables: "datasheet
    hardware" or "<device> profile <file>"; None when the manifest does not record it."""
    if source == DATASHEET:
        return "datasheet hardware"
    if isinstance(source, dict) and source.get("profile"):
        return f"{source.get('device') or 'unknown device'} profile {Path(source['profile']).name}"
    return None
