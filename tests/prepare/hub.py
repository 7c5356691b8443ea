"""An offline Hugging Face Hub cache made by a test (the Hub's own layout,
`<kind>s--<org>--<name>/snapshots/<commit>/` + `refs/main`), with the libraries kept offline.

The dataset rows have DAPO-Math-17k's real columns (data_source, prompt as chat messages, ability,
reward_model, extra_info), so the smoke experiment's workload.dataset resolves to them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATASET_COMMIT = "0f1e2d3c4b5a69788796a5b4c3d2e1f001122334"
MODEL_COMMIT = "9a8b7c6d5e4f30211203f4e5d6c7b8a9ab12cd34"


def hub_repo(cache: Path, kind: str, repo_id: str, commit: str, files: dict[str, bytes]) -> Path:
    """Write a snapshot in the Hub cache layout; returns the snapshot folder."""
    base = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    snap = base / "snapshots" / commit
    for name, data in files.items():
        (snap / name).parent.mkdir(parents=True, exist_ok=True)
        (snap / name).write_bytes(data)
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(commit)
    return snap


def dapo_rows(n: int) -> list[dict]:
    return [
        {
            "data_source": "math_dapo",
            "prompt": [
                {"content": f"Solve: what is {i} + {i}? The last line is Answer: $Answer", "role": "user"}
            ],
            "ability": "MATH",
            "reward_model": {"ground_truth": str(2 * i), "style": "rule-lean"},
            "extra_info": {"index": f"id-{i}"},
        }
        for i in range(n)
    ]


def make_hub(tmp_path: Path) -> dict:
    """Offline Hub cache with BytedTsinghua-SIA/DAPO-Math-17k (10 rows, train only) and a tiny
    Qwen/Qwen3-8B snapshot; env for a `python -m bench prepare` subprocess; site roots in tmp."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cache = tmp_path / "hf" / "hub"
    table = pa.Table.from_pylist(dapo_rows(10))
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    hub_repo(cache, "dataset", "BytedTsinghua-SIA/DAPO-Math-17k", DATASET_COMMIT,
             {"data/dapo-math-17k.parquet": buf.getvalue().to_pybytes(), "README.md": b"# card\n"})  # fmt: skip
    weights = os.urandom(4096)
    hub_repo(cache, "model", "Qwen/Qwen3-8B", MODEL_COMMIT, {
        "config.json": json.dumps({"model_type": "qwen3", "num_hidden_layers": 1}).encode(),
        "model.safetensors": weights,
        "tokenizer.json": b"{}", "tokenizer_config.json": b"{}",
        "README.md": b"not a weight", "original/consolidated.pth": b"not fetched",
    })  # fmt: skip
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(cache),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_TOKEN": ""}  # fmt: skip
    data, models = tmp_path / "site" / "data", tmp_path / "site" / "models"
    site = [f"cluster.data_root={data}", f"cluster.model_root={models}"]
    return {"env": env, "data": data, "models": models, "site": site, "weights": weights, "tmp": tmp_path}


def run_prepare(hub: dict, *args: str) -> subprocess.CompletedProcess:
    """`python -m bench prepare ARGS <site roots>` in a subprocess (the libraries read the offline env at import)."""
    return subprocess.run([sys.executable, "-m", "bench", "prepare", *args, *hub["site"]],
                          cwd=REPO, env=hub["env"], capture_output=True, text=True, timeout=300)  # fmt: skip
