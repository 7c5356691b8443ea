"""The pinned verl wheel's Hydra YAML, for composing rendered overrides offline (no torch).

`pip download verl==<version> --no-deps` into <repo>/.cache/wheels (git-ignored; CI reaches PyPI),
then unpack only the config YAML into <repo>/.cache/verl-<version>/. Returns that tree's `verl/`.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"


def verl_config_root(version: str) -> Path:
    """Path of `verl/` (trainer/config/, experimental/*/config/) from the verl `version` wheel."""
    root = CACHE / f"verl-{version}"
    marker = root / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    if marker.exists():
        return root / "verl"
    wheels = CACHE / "wheels"
    wheel = wheels / f"verl-{version}-py3-none-any.whl"
    if not wheel.exists():
        wheels.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"verl=={version}",
            "--no-deps",
            "-d",
            str(wheels),
            "-q",
        ]
        subprocess.run(cmd, check=True, timeout=600)
    tmp = root.with_name(root.name + ".tmp")
    with zipfile.ZipFile(wheel) as z:
        members = [n for n in z.namelist() if n.endswith(".yaml") and "/config/" in n]
        z.extractall(tmp, members=members)
    tmp.rename(root)
    return root / "verl"
