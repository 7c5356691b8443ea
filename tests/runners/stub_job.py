"""Run a rendered job.sbatch by hand against stub srun/ray/uv scripts (no Slurm, no GPU)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run_stub_job(
    tmp_path: Path, sbatch: str, stubs: dict[str, str], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Write `stubs` into tmp_path/bin (first on PATH) and the script into "tmp_path/run dir/launch/"
    (a space: every RUN_DIR use must be quoted), run it with bash, and return the result and the
    lines the stubs appended to $STUB_LOG."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in stubs.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    run_dir = tmp_path / "run dir"
    (run_dir / "launch").mkdir(parents=True)
    (run_dir / "launch" / "job.sbatch").write_text(sbatch)
    log = tmp_path / "stub.log"
    full_env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "SLURM_SUBMIT_DIR": str(run_dir),
        "STUB_LOG": str(log),
        "HF_TOKEN": "x",
        **env,
    }
    res = subprocess.run(
        ["bash", str(run_dir / "launch" / "job.sbatch")],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return res, log.read_text().splitlines() if log.exists() else []
