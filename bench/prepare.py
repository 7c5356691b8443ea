"""`python -m bench prepare`: datasets and model weights onto the site's shared filesystem, once.

    python -m bench prepare experiment=smoke [cluster=C] [dataset_path=PATH] [--only data|models] [--verify]

Datasets are read with Hugging Face `datasets` (the library the frameworks use): from the Hub
(`huggingface_hub.snapshot_download` of the dataset repo's data files, so the source revision is a
commit), from the Hub cache when `HF_HUB_OFFLINE=1`, or from a local mirror (`dataset_path=`).
Each framework of the experiment gets the format it reads at its pinned version, in the folders of
runners/data_paths.py (the paths the rendered launch names):

- verl: parquet with the columns of its own preprocessing examples (examples/data_preprocess/
  gsm8k.py): `data_source`, `prompt` (chat messages), `ability`, `reward_model.ground_truth`,
  `extra_info`. `data.val_files` is always loaded, so test.parquet is the source's test split, or,
  when it has none, the first TEST_ROWS training rows (said in prepared.json; the rendered run
  never validates: trainer.test_freq=-1).
- slime: JSONL with the keys its rendered `--input-key` / `--label-key` flags name.
- prime-rl: the verifiers environment loads its dataset itself (`load_dataset(dataset_name)` in
  the taskset); it gets the source rows unchanged as parquet in a folder, whose path the rendered
  taskset passes as `dataset_name`, so a compute node without the Hub reads it.

Row counts, sha256 of each file and the source revision go into prepared.json beside the data. A
second run with the same source and intact files writes nothing; a file whose hash differs is
re-made. Model weights (safetensors, tokenizer, config) go to <model_root>/<org>/<name> after a
disk-space check, with <name>.prepared.json recording the revision and each file's size and
sha256; a model present with every recorded size is not fetched again (`--verify` re-hashes).
On-policy-distillation teachers (experiment.teachers) are fetched the same way, each from its
`checkpoint` when set, else its conf/model entry's name, to the path every runner's OPD render names
(runners/opd.py); a checkpoint given as an absolute path is the site's own and is only checked.
slime's in-process teacher (--opd-type megatron) needs a Megatron torch_dist conversion, which needs
Megatron and a GPU: prepare names the folder and the conversion command, `bench inspect` checks it.
Secrets are read by the libraries from the environment by name (HF_TOKEN); nothing here writes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from bench.errors import UsageError
from runners import data_paths

TEST_ROWS = 64  # verl's val_files when the source has no test split (loaded, never evaluated)
# README.md: the dataset card's `configs:` block tells `datasets` which files form which split
DATA_PATTERNS = [
    "README.md",
    "*.parquet",
    "*.json",
    "*.jsonl",
    "*.csv",
    "**/*.parquet",
    "**/*.json",
    "**/*.jsonl",
    "**/*.csv",
]
MODEL_PATTERNS = [
    "*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json",
    "tokenizer*", "vocab*", "merges.txt", "special_tokens_map.json", "added_tokens.json", "*.tiktoken",
    "chat_template*",
]  # fmt: skip
SECRETS = ("HF_TOKEN", "WANDB_API_KEY")  # read by the libraries / the job from the environment


def sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes (1 MiB reads)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_atomic(path: Path, write: Any) -> None:
    """Call write(tmp_path), then rename it onto path: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


# ---- source ---------------------------------------------------------------------------------------


def dataset_source(dataset: str, dataset_path: str | None) -> tuple[Path, str]:
    """(folder of the dataset's data files, revision): a local mirror (revision = sha256 of its data
    files) or the Hub repo's snapshot (revision = its commit; the cache when HF_HUB_OFFLINE=1)."""
    if dataset_path:
        root = Path(dataset_path).expanduser().resolve()
        files = sorted(
            p for p in root.rglob("*") if p.is_file() and p.suffix in {".parquet", ".json", ".jsonl", ".csv"}
        )
        if not files:
            raise UsageError(f"dataset_path={dataset_path}: no .parquet/.json/.jsonl/.csv files under it")
        h = hashlib.sha256()
        for p in files:
            h.update(f"{p.relative_to(root)}\0{sha256(p)}\n".encode())
        return root, f"local:{h.hexdigest()[:16]}"
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        path = Path(snapshot_download(dataset, repo_type="dataset", allow_patterns=DATA_PATTERNS))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        raise UsageError(
            f"workload.dataset={dataset}: cannot fetch it from the Hub or its cache ({type(e).__name__}); "
            "set HF_TOKEN for a gated dataset, or pass dataset_path=<local mirror>"
        ) from None
    return path, path.name


def load_splits(folder: Path) -> dict[str, Any]:
    """The dataset's splits as `datasets` infers them from its files (train/test by file name)."""
    import datasets

    datasets.disable_progress_bars()  # one screen: the lines below say what was written
    try:
        dd = datasets.load_dataset(str(folder))
    except Exception as e:  # noqa: BLE001 - the library's own reason, on one line
        raise UsageError(
            f"{folder}: `datasets` cannot load it ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from None
    return dict(dd)


def canonical(row: dict[str, Any], dataset: str) -> dict[str, Any]:
    """One source row as (data_source, prompt messages, ability, ground truth, extra_info).

    Rows already in verl's layout (DAPO-Math-17k) keep their fields; `question`/`answer` rows take
    the answer after '#### ' when present (GSM8K, as verl's gsm8k.py), `problem`/`answer` rows the
    answer as is. Any other layout is refused by the caller with the columns it found."""
    if isinstance(row.get("prompt"), list) and isinstance(row.get("reward_model"), dict):
        return {
            "data_source": str(row.get("data_source") or dataset),
            "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in row["prompt"]],
            "ability": str(row.get("ability") or "math"),
            "ground_truth": str(row["reward_model"]["ground_truth"]),
            "extra_info": dict(row.get("extra_info") or {}),
        }
    question = row.get("question", row.get("problem"))
    answer = row.get("answer")
    if question is None or answer is None:
        raise KeyError(sorted(row))
    answer = str(answer)
    truth = answer.rsplit("#### ", 1)[1].replace(",", "").strip() if "#### " in answer else answer.strip()
    return {
        "data_source": dataset,
        "prompt": [{"role": "user", "content": str(question)}],
        "ability": "math",
        "ground_truth": truth,
        "extra_info": {},
    }


def canonical_rows(split: Any, dataset: str) -> list[dict[str, Any]]:
    try:
        return [canonical(r, dataset) for r in split]
    except KeyError:
        raise UsageError(
            f"workload.dataset={dataset}: columns {sorted(split.column_names)} are not a layout prepare "
            "knows (verl's prompt + reward_model, question + answer, problem + answer)"
        ) from None


# ---- per framework --------------------------------------------------------------------------------


def verl_rows(rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """verl's RLHFDataset rows, as in its examples/data_preprocess/gsm8k.py."""
    return [
        {
            "data_source": r["data_source"],
            "prompt": r["prompt"],
            "ability": r["ability"],
            "reward_model": {"style": "rule", "ground_truth": r["ground_truth"]},
            # the source's own ids win (DAPO's uuid index); else the row number, as gsm8k.py
            "extra_info": {"split": split, "index": i, **{k: str(v) for k, v in r["extra_info"].items()}},
        }
        for i, r in enumerate(rows)
    ]


def slime_keys(cfg: Any) -> tuple[str, str]:
    """(--input-key, --label-key) as slime's rendered driver flags name them."""
    from runners.base import load_runner
    from runners.slime import driver_flags

    flags = dict(driver_flags(cfg, load_runner(cfg.framework).resolve_mode(cfg)))
    return str(flags["--input-key"]), str(flags["--label-key"])


def framework_files(fw: str, cfg: Any, splits: dict[str, Any], dataset: str) -> dict[str, Any]:
    """{relative file: writer(tmp_path)} and notes for one framework's format of the dataset."""
    import datasets

    root = data_paths.dataset_dir(cfg)
    rel = lambda p: str(Path(p).relative_to(root))  # noqa: E731
    train = splits.get("train") or next(iter(splits.values()), None)
    if fw == "verl":
        rows = canonical_rows(train, dataset)
        test_src = "test split" if "test" in splits else f"train[:{TEST_ROWS}] (the source has no test split)"
        test = canonical_rows(splits["test"], dataset) if "test" in splits else rows[:TEST_ROWS]
        tr, te = data_paths.verl_files(cfg)
        files = {
            rel(tr): (
                len(rows),
                lambda p: datasets.Dataset.from_list(verl_rows(rows, "train")).to_parquet(str(p)),
            ),
            rel(te): (
                len(test),
                lambda p: datasets.Dataset.from_list(verl_rows(test, "test")).to_parquet(str(p)),
            ),
        }
        return {"files": files, "notes": {"test.parquet": test_src}}
    if fw == "slime":
        rows = canonical_rows(train, dataset)
        ik, lk = slime_keys(cfg)

        def write_jsonl(p: Path) -> None:
            with p.open("w") as f:
                for r in rows:
                    f.write(json.dumps({ik: r["prompt"], lk: r["ground_truth"]}, ensure_ascii=False) + "\n")

        return {"files": {rel(data_paths.slime_prompt_file(cfg)): (len(rows), write_jsonl)},
                "notes": {"input_key": ik, "label_key": lk}}  # fmt: skip
    if fw == "prime_rl":
        from runners.prime_rl import train_source

        folder = data_paths.prime_rl_dataset(cfg)
        taskset = dict(train_source(cfg)["env"]["taskset"])
        if str(folder) not in taskset.values():  # e.g. r2e-gym-v1: the environment brings its own tasks
            return {
                "files": {},
                "notes": {"loads_itself": f"taskset {taskset.get('id')} does not take workload.dataset"},
            }
        files = {rel(folder / f"{name}.parquet"): (len(s), lambda p, s=s: s.to_parquet(str(p)))
                 for name, s in splits.items()}  # fmt: skip
        return {"files": files, "notes": {"loads_itself": "the verifiers environment calls "
                "load_dataset(dataset_name) on this folder; its package must be installed with prime-rl"}}  # fmt: skip
    raise UsageError(f"framework={fw}: prepare knows verl, slime and prime_rl")


def intact(root: Path, entry: dict[str, Any]) -> bool:
    """Every file of a framework's prepared.json entry exists with its recorded sha256."""
    return "files" in entry and all(
        (root / f).is_file() and sha256(root / f) == meta["sha256"] for f, meta in entry["files"].items()
    )


def prepare_data(overrides: list[str], frameworks: list[str], dataset_path: str | None) -> list[str]:
    """Write each framework's format of workload.dataset; lines saying what was written or kept."""
    from bench.config import for_framework

    cfgs = {fw: for_framework(overrides, fw) for fw in frameworks}
    first = next(iter(cfgs.values()))
    dataset, root = str(first.workload.dataset), data_paths.dataset_dir(first)
    record_path = data_paths.dataset_record(first)
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    folder, revision = dataset_source(dataset, dataset_path)
    same_source = record.get("source", {}).get("revision") == revision
    entry = lambda fw: record.get("frameworks", {}).get(fw, {})  # noqa: E731
    todo = [fw for fw in frameworks if not (same_source and intact(root, entry(fw)))]
    if "slime" in cfgs and "slime" not in todo:  # the rendered flags name other keys than the file has
        ik, lk = slime_keys(cfgs["slime"])
        if (entry("slime")["notes"].get("input_key"), entry("slime")["notes"].get("label_key")) != (ik, lk):
            todo.append("slime")
    lines = [f"{fw}: unchanged ({root})" for fw in frameworks if fw not in todo]
    if not todo:
        return lines
    splits = load_splits(folder)
    entries = dict(record.get("frameworks", {})) if same_source else {}
    for fw in todo:
        spec = framework_files(fw, cfgs[fw], splits, dataset)
        files = {}
        for name, (rows, write) in spec["files"].items():
            write_atomic(root / name, write)
            files[name] = {"rows": rows, "sha256": sha256(root / name)}
            lines.append(f"{fw}: wrote {root / name} ({rows} rows)")
        entries[fw] = {"files": files, "notes": spec["notes"]}
    record = {
        "dataset": dataset,
        "source": {
            "revision": revision,
            "path": str(folder),
            "splits": {k: len(v) for k, v in splits.items()},
        },
        "frameworks": entries,
    }
    write_atomic(record_path, lambda p: p.write_text(json.dumps(record, indent=2) + "\n"))
    return [*lines, f"recorded {record_path}"]


# ---- models ---------------------------------------------------------------------------------------


def wanted(name: Path | str) -> bool:
    """A weights, tokenizer or config file (MODEL_PATTERNS), not a README or a .pth copy."""
    import fnmatch

    return any(fnmatch.fnmatch(str(name), p) for p in MODEL_PATTERNS)


def model_present(target: Path, record: dict[str, Any], verify: bool) -> bool:
    """Every recorded file exists with its size (and its sha256 with verify)."""
    files = record.get("files") or {}
    return bool(files) and all(
        (target / f).is_file()
        and (target / f).stat().st_size == meta["size"]
        and (not verify or sha256(target / f) == meta["sha256"])
        for f, meta in files.items()
    )


def check_room(where: Path, need: int, what: str) -> None:
    """UsageError when the filesystem of `where` has less than `need` bytes free."""
    probe = where
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise UsageError(
            f"{what}: needs {need / 1e9:.1f} GB, {probe} has {free / 1e9:.1f} GB free; "
            "free space or point cluster.model_root at a larger filesystem"
        )


def fetch_model(repo: str, target: Path, key: str = "model.name") -> tuple[str, dict[str, dict[str, Any]]]:
    """(revision, {file: {size, sha256}}) of repo's weights + tokenizer + config, now in target.

    Offline (HF_HUB_OFFLINE=1) the files come from the Hub cache snapshot and are copied; online
    snapshot_download writes them straight into target (resumable)."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub import constants as hf
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        if hf.HF_HUB_OFFLINE:
            src = Path(snapshot_download(repo, allow_patterns=MODEL_PATTERNS))
            files = sorted(f for p in src.rglob("*") if p.is_file() and wanted(f := p.relative_to(src)))
            check_room(target, sum((src / f).stat().st_size for f in files), f"model {repo}")
            for f in files:
                write_atomic(target / f, lambda p, f=f: shutil.copyfile(src / f, p))
            return src.name, {
                str(f): {"size": (target / f).stat().st_size, "sha256": sha256(target / f)} for f in files
            }
        info = HfApi().model_info(repo, files_metadata=True)
        siblings = [s for s in info.siblings if wanted(s.rfilename)]
        check_room(target, sum(s.size or 0 for s in siblings), f"model {repo}")
        snapshot_download(repo, revision=info.sha, allow_patterns=MODEL_PATTERNS, local_dir=target)
    except (LocalEntryNotFoundError, HfHubHTTPError) as e:
        raise UsageError(
            f"{key}={repo}: cannot fetch it from the Hub or its cache ({type(e).__name__}); set HF_TOKEN "
            "for a gated model, or run prepare where the Hub is reachable (HF_HUB_OFFLINE unset)"
        ) from None
    files = {s.rfilename: s for s in siblings}
    return str(info.sha), {
        f: {"size": (target / f).stat().st_size, "sha256": (s.lfs.sha256 if s.lfs else sha256(target / f))}
        for f, s in files.items()
    }


def prepare_weights(cfg: Any, repo: str, key: str, label: str, verify: bool) -> list[str]:
    """The Hub snapshot of `repo` (named by config key `key`) in <model_root>; lines saying what was
    done, each starting with `label`."""
    target, record_path = data_paths.weights_dir(cfg, repo), data_paths.weights_record(cfg, repo)
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    if model_present(target, record, verify):
        return [
            f"{label}: present at {target} (revision {record['revision']}, {len(record['files'])} files verified)"
        ]
    revision, files = fetch_model(repo, target, key)
    if not any(f.endswith(".safetensors") for f in files):
        raise UsageError(
            f"{key}={repo}: no *.safetensors weights in the snapshot; prepare fetches safetensors only"
        )
    record = {
        "model": repo,
        "revision": revision,
        "bytes": sum(m["size"] for m in files.values()),
        "files": files,
    }
    write_atomic(record_path, lambda p: p.write_text(json.dumps(record, indent=2) + "\n"))
    return [
        f"{label}: wrote {target} ({record['bytes'] / 1e9:.2f} GB, revision {revision})",
        f"recorded {record_path}",
    ]


def prepare_model(cfg: Any, verify: bool) -> list[str]:
    """model.name's (the student's) snapshot in <model_root>; lines saying what was done."""
    repo = str(cfg.model.name)
    return prepare_weights(cfg, repo, "model.name", f"model {repo}", verify)


def teacher_weights(cfg: Any) -> list[tuple[str, str]]:
    """(config key, weights) of each experiment.teachers entry: its checkpoint, else its conf/model
    entry's Hub id (runners/opd.py, the name every runner renders); a teacher with neither is refused."""
    from runners import opd

    out = []
    for i, t in enumerate(cfg.experiment.get("teachers") or []):
        key = f"experiment.teachers[{i}]." + ("checkpoint" if t.checkpoint else "model")
        weights = opd.weights(t)
        if not weights:
            raise UsageError(
                f"{key}={t.model}: no conf/model/{t.model}.yaml with a `name` to fetch; use a conf/model option "
                "or set the teacher's checkpoint=<Hub id or absolute path>"
            )
        out.append((key, weights))
    return out


def prepare_teachers(cfg: Any, frameworks: list[str], verify: bool) -> list[str]:
    """Each teacher's weights where the runners' OPD renders read them (data_paths.weights_dir):
    a Hub id is fetched like the student; an absolute checkpoint is the site's own and only checked.
    Weights already prepared (the student's, another teacher's) are not fetched twice."""
    lines, done = [], {str(cfg.model.name): "model.name"}
    for key, weights in teacher_weights(cfg):
        label = f"teacher {key.rsplit('.', 1)[0]} {weights}"
        if Path(weights).is_absolute():
            if not Path(weights).is_dir():
                raise UsageError(
                    f"{key}={weights}: no such folder from here; give a checkpoint folder on the shared "
                    "filesystem or a Hub id (prepare then fetches it into cluster.model_root)"
                )
            lines.append(f"{label}: a site checkpoint, used as given (not fetched)")
        elif weights in done:
            lines.append(f"{label}: the snapshot of {done[weights]}, prepared once")
        else:
            lines += prepare_weights(cfg, weights, key, label, verify)
            done[weights] = key
    return lines + slime_teacher_notes(cfg, frameworks)


def slime_teacher_notes(cfg: Any, frameworks: list[str]) -> list[str]:
    """slime's in-process teacher (--opd-type megatron) loads a Megatron torch_dist conversion that
    needs Megatron and a GPU, which prepare has not: the step is named, not done (inspect checks it)."""
    from runners import slime_opd

    if "slime" not in frameworks or slime_opd.teacher_mode(cfg) != "megatron":
        return []
    load = slime_opd.teacher_load(cfg)
    if Path(load).is_dir():
        return [f"slime --opd-teacher-load: {load} present"]
    return [
        f"slime --opd-teacher-load: {load} is not made by prepare; convert the teacher's snapshot with "
        "slime's tools/convert_hf_to_torch_dist.py --save <that folder> before a slime run"
    ]


def main(argv: list[str]) -> int:
    """`python -m bench prepare ...`: exit 0 when everything is in place, 2 on bad input."""
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "prepare",
        "Put an experiment's datasets (in each framework's format) and model weights on the site's shared "
        "filesystem, once: intact files already there are kept.",
        "conf/ and the overrides; the Hugging Face Hub (or its cache with HF_HUB_OFFLINE=1, or a local "
        "mirror given as dataset_path=PATH).",
        "datasets under cluster.data_root with prepared.json (rows, sha256, revision), and model weights "
        "under cluster.model_root with <name>.prepared.json.",
        ["python -m bench prepare experiment=smoke cluster=testbed --only data"],
    )
    add_overrides(ap, "dataset_path=PATH reads the dataset from a local mirror")
    ap.add_argument("--only", choices=["data", "models"], help="prepare only datasets or only models")
    ap.add_argument("--verify", action="store_true", help="re-hash every model file already present")
    args = ap.parse_intermixed_args(argv)
    dataset_path = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("dataset_path=")), None)
    overrides = [o for o in args.overrides if not o.startswith("dataset_path=")]
    from bench.config import compose

    cfg = compose(overrides)
    frameworks = [o.split("=", 1)[1] for o in overrides if o.startswith("framework=")] or list(
        cfg.experiment.frameworks
    )
    try:
        data_paths.site_root(cfg, "data_root"), data_paths.site_root(cfg, "model_root")
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(
        "secrets from the environment: "
        + ", ".join(f"{k} {'set' if os.environ.get(k) else 'unset'}" for k in SECRETS)
    )
    lines = []
    if args.only != "models":
        lines += prepare_data(overrides, frameworks, dataset_path)
    if args.only != "data":
        lines += prepare_model(cfg, args.verify) + prepare_teachers(cfg, frameworks, args.verify)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
