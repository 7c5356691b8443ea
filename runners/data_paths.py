"""Where prepared datasets and model weights live on a site: the one path rule shared by the writer
(`bench prepare`) and the readers (each runner's rendered launch, `bench inspect`).

Roots are site configuration (`cluster.data_root`, `cluster.model_root`, conf/cluster/<site>.yaml):
absolute on a site's shared filesystem, or relative to the repository root (the git-ignored
`.data/` and `.models/` of cluster=local and cluster=testbed, whose nodes are this machine). The
paths are rendered as they are seen on the compute nodes; a container must mount them at the same
path (conf/cluster/example_site.yaml).

    <data_root>/<org>__<dataset>/prepared.json             rows, sha256, source revision (bench prepare)
    <data_root>/<org>__<dataset>/verl/{train,test}.parquet verl's RLHFDataset rows
    <data_root>/<org>__<dataset>/slime/train.jsonl         slime's --prompt-data
    <data_root>/<org>__<dataset>/prime_rl/train.parquet    the dataset the verifiers environment loads
    <model_root>/<org>/<model>/                            Hugging Face snapshot (weights, tokenizer, config)
    <model_root>/<org>/<model>.prepared.json               revision, files and sizes (bench prepare)

The student (model.name) and every on-policy-distillation teacher (experiment.teachers: its
`checkpoint`, else its conf/model entry's name; runners/opd.py) follow the same model rule.

Runners import nothing from bench/ but the trace contract, so this module takes the composed
config and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PREPARED = "prepared.json"


def site_root(cfg: Any, key: str) -> Path:
    """cluster.<key> (data_root | model_root) as an absolute path; ValueError naming the key when the
    site file does not say where its shared filesystem is."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, f"cluster.{key}", throw_on_missing=False)
    if value in (None, "", "???"):
        name = OmegaConf.select(cfg, "cluster.name", default="?")
        raise ValueError(
            f"cluster.{key} is not set (conf/cluster/{name}.yaml): expected a path on the shared "
            "filesystem every compute node sees, e.g. /shared/rl-bench/" + key.split("_")[0]
        )
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else REPO / path


def dataset_dir(cfg: Any) -> Path:
    """<data_root>/<org>__<name> of workload.dataset (a Hub id holds one '/')."""
    return site_root(cfg, "data_root") / str(cfg.workload.dataset).replace("/", "__")


def dataset_record(cfg: Any) -> Path:
    """prepared.json beside the prepared data of workload.dataset."""
    return dataset_dir(cfg) / PREPARED


def verl_files(cfg: Any) -> tuple[Path, Path]:
    """verl's data.train_files and data.val_files (parquet)."""
    d = dataset_dir(cfg) / "verl"
    return d / "train.parquet", d / "test.parquet"


def slime_prompt_file(cfg: Any) -> Path:
    """slime's --prompt-data (JSONL, one prompt per line)."""
    return dataset_dir(cfg) / "slime" / "train.jsonl"


def prime_rl_dataset(cfg: Any) -> Path:
    """The folder the verifiers environment's `load_dataset(dataset_name)` reads (train.parquet)."""
    return dataset_dir(cfg) / "prime_rl"


def weights_dir(cfg: Any, weights: str) -> Path:
    """Where a model's weights are on the cluster: an absolute path as given (a site's own
    checkpoint), else <model_root>/<weights> (a Hub id, '<org>/<name>': the snapshot prepare writes)."""
    path = Path(weights)
    return path if path.is_absolute() else site_root(cfg, "model_root") / weights


def weights_record(cfg: Any, weights: str) -> Path:
    """<model_root>/<org>/<name>.prepared.json of a Hub id's snapshot (beside it, not inside it)."""
    d = weights_dir(cfg, weights)
    return d.with_name(d.name + ".prepared.json")


def model_dir(cfg: Any) -> Path:
    """<model_root>/<model.name>: the snapshot of model.name (the student; a Hub id)."""
    return weights_dir(cfg, str(cfg.model.name))


def model_record(cfg: Any) -> Path:
    """<model_root>/<org>/<name>.prepared.json of model.name's snapshot."""
    return weights_record(cfg, str(cfg.model.name))
