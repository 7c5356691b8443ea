"""`bench prepare` with the real `datasets` and `huggingface_hub`, offline, on a Hub cache the test
writes (tests/prepare/conftest.py): each framework's format read back with that framework's
expectations, a second run writes nothing, a corrupted file is re-made, the model is copied with
weights + tokenizer + config only and verified on the next run."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.prepare.hub import DATASET_COMMIT, MODEL_COMMIT

DATA = "BytedTsinghua-SIA__DAPO-Math-17k"


def _ok(res) -> str:
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_verl_parquet_has_the_columns_and_types_of_verls_preprocessing(hub, prepare):
    out = _ok(prepare("experiment=smoke", "--only", "data"))
    train = hub["data"] / DATA / "verl" / "train.parquet"
    assert f"verl: wrote {train} (10 rows)" in out
    t = pq.read_table(train)
    # examples/data_preprocess/gsm8k.py: data_source, prompt (chat), ability, reward_model, extra_info
    assert t.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert t.schema.field("data_source").type == pa.string()
    assert t.schema.field("prompt").type == pa.list_(
        pa.struct([("role", pa.string()), ("content", pa.string())])
    )
    assert t.schema.field("reward_model").type == pa.struct(
        [("style", pa.string()), ("ground_truth", pa.string())]
    )
    row = t.slice(3, 1).to_pylist()[0]
    assert row["data_source"] == "math_dapo"  # kept: verl's reward dispatch keys on it
    assert row["prompt"][0]["role"] == "user" and "what is 3 + 3" in row["prompt"][0]["content"]
    assert row["reward_model"]["ground_truth"] == "6"
    assert row["extra_info"] == {"split": "train", "index": "id-3"}  # the source's own id kept
    test = pq.read_table(hub["data"] / DATA / "verl" / "test.parquet")
    assert test.num_rows == 10  # no test split at the source: train[:64], said in prepared.json
    rec = json.loads((hub["data"] / DATA / "prepared.json").read_text())
    assert rec["frameworks"]["verl"]["notes"]["test.parquet"] == "train[:64] (the source has no test split)"


def test_slime_jsonl_uses_the_keys_of_the_rendered_flags(hub, prepare):
    from bench.config import for_framework
    from runners.slime import driver_flags

    _ok(prepare("experiment=smoke", "framework=slime", "framework.native.label_key=answer", "--only", "data"))
    cfg = for_framework(["experiment=smoke", "framework.native.label_key=answer", *hub["site"]], "slime")
    flags = dict(driver_flags(cfg, "sync"))
    assert (flags["--input-key"], flags["--label-key"]) == ("prompt", "answer")
    assert flags["--prompt-data"] == str(hub["data"] / DATA / "slime" / "train.jsonl")
    lines = Path(flags["--prompt-data"]).read_text().splitlines()
    assert len(lines) == 10
    first = json.loads(lines[1])
    assert set(first) == {"prompt", "answer"}
    assert first["prompt"] == [
        {"role": "user", "content": "Solve: what is 1 + 1? The last line is Answer: $Answer"}
    ]
    assert first["answer"] == "2"


def test_prime_rl_folder_loads_with_load_dataset_offline(hub, prepare, monkeypatch):
    _ok(prepare("experiment=smoke", "framework=prime_rl", "--only", "data"))
    folder = hub["data"] / DATA / "prime_rl"
    t = pq.read_table(folder / "train.parquet")  # the source rows, unchanged
    assert t.num_rows == 10 and t.column_names == [
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
    ]
    from bench.config import compose
    from runners.prime_rl import train_source

    taskset = train_source(compose(["experiment=smoke", "framework=prime_rl", *hub["site"]]))["env"][
        "taskset"
    ]
    assert taskset == {"id": "math-env-v1", "dataset_name": str(folder)}


def test_prime_rl_taskset_without_the_dataset_gets_no_copy(hub):
    from bench.config import compose
    from bench.prepare import framework_files

    cfg = compose(["experiment=semianalysis_case1", "framework=prime_rl", *hub["site"]])  # swe: r2e-gym-v1
    assert framework_files("prime_rl", cfg, {}, str(cfg.workload.dataset)) == {
        "files": {},
        "notes": {"loads_itself": "taskset r2e-gym-v1 does not take workload.dataset"},
    }


def test_prepared_json_records_rows_hashes_and_the_source_commit(hub, prepare):
    from bench.prepare import sha256

    _ok(prepare("experiment=smoke", "--only", "data"))
    root = hub["data"] / DATA
    rec = json.loads((root / "prepared.json").read_text())
    assert rec["source"]["revision"] == DATASET_COMMIT and rec["source"]["splits"] == {"train": 10}
    assert sorted(rec["frameworks"]) == ["prime_rl", "slime", "verl"]
    for entry in rec["frameworks"].values():
        for name, meta in entry["files"].items():
            assert meta["sha256"] == sha256(root / name) and meta["rows"] == 10
    assert rec["frameworks"]["slime"]["notes"] == {"input_key": "prompt", "label_key": "label"}


def test_second_prepare_is_a_noop_and_a_corrupted_file_is_remade(hub, prepare):
    _ok(prepare("experiment=smoke", "--only", "data"))
    root = hub["data"] / DATA
    files = sorted(p for p in root.rglob("*") if p.is_file())
    stamps = {p: p.stat().st_mtime_ns for p in files}
    out = _ok(prepare("experiment=smoke", "--only", "data"))
    assert out.splitlines()[1:] == [f"{fw}: unchanged ({root})" for fw in ("verl", "slime", "prime_rl")]
    assert {p: p.stat().st_mtime_ns for p in files} == stamps
    train = root / "verl" / "train.parquet"
    good = train.read_bytes()
    train.write_bytes(good[:100])  # truncated: same name, other bytes
    out = _ok(prepare("experiment=smoke", "--only", "data"))
    assert f"verl: wrote {train} (10 rows)" in out and f"slime: unchanged ({root})" in out
    assert pq.read_table(train).num_rows == 10


def test_local_mirror_with_question_answer_and_a_test_split(hub, prepare, tmp_path):
    mirror = tmp_path / "gsm8k"
    mirror.mkdir()
    for split, n in (("train", 5), ("test", 3)):
        rows = [{"question": f"Q{i}?", "answer": f"work\n#### 1,00{i}"} for i in range(n)]
        (mirror / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _ok(prepare("experiment=smoke", "framework=verl", "workload.dataset=openai/gsm8k", f"dataset_path={mirror}",
                "--only", "data"))  # fmt: skip
    root = hub["data"] / "openai__gsm8k"
    test = pq.read_table(root / "verl" / "test.parquet").to_pylist()
    assert len(test) == 3 and test[2]["reward_model"]["ground_truth"] == "1002"  # as verl's extract_solution
    assert test[2]["data_source"] == "openai/gsm8k" and test[2]["extra_info"] == {"split": "test", "index": 2}
    assert json.loads((root / "prepared.json").read_text())["source"]["revision"].startswith("local:")


def test_unknown_columns_are_refused_with_the_columns_found(hub, prepare, tmp_path):
    mirror = tmp_path / "odd"
    mirror.mkdir()
    (mirror / "train.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    res = prepare("experiment=smoke", "framework=verl", f"dataset_path={mirror}", "--only", "data")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: workload.dataset=BytedTsinghua-SIA/DAPO-Math-17k: columns ['text'] are not a layout prepare "
        "knows (verl's prompt + reward_model, question + answer, problem + answer)"
    ]


def test_model_snapshot_copied_verified_and_refetched_when_damaged(hub, prepare):
    out = _ok(prepare("experiment=smoke", "--only", "models"))
    target = hub["models"] / "Qwen" / "Qwen3-8B"
    assert sorted(p.name for p in target.rglob("*") if p.is_file()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"
    ]  # fmt: skip
    assert (target / "model.safetensors").read_bytes() == hub["weights"]
    rec = json.loads((hub["models"] / "Qwen" / "Qwen3-8B.prepared.json").read_text())
    assert rec["revision"] == MODEL_COMMIT and rec["files"]["model.safetensors"]["size"] == 4096
    assert f"model Qwen/Qwen3-8B: wrote {target}" in out
    out = _ok(prepare("experiment=smoke", "--only", "models"))
    assert f"model Qwen/Qwen3-8B: present at {target} (revision {MODEL_COMMIT}, 4 files verified)" in out
    (target / "model.safetensors").write_bytes(b"partial download")
    out = _ok(prepare("experiment=smoke", "--only", "models"))
    assert "wrote" in out and (target / "model.safetensors").read_bytes() == hub["weights"]


def test_secrets_are_named_never_written(hub, prepare):
    hub["env"]["HF_TOKEN"] = "hf_secret_value_123"
    out = _ok(prepare("experiment=smoke", "framework=verl"))
    assert "HF_TOKEN set" in out and "hf_secret_value_123" not in out
    for p in hub["tmp"].joinpath("site").rglob("*.json"):
        assert "hf_secret_value_123" not in p.read_text()


def test_unset_data_root_is_one_line(hub, prepare):
    hub["site"][0] = "cluster.data_root="
    res = prepare("experiment=smoke")
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "error: cluster.data_root is not set (conf/cluster/local.yaml): expected a path on the shared "
        "filesystem every compute node sees, e.g. /shared/rl-bench/data"
    )


def test_room_is_checked_before_copying(tmp_path):
    from bench.errors import UsageError
    from bench.prepare import check_room

    with pytest.raises(UsageError, match=r"model x: needs 1000000000000000.0 GB, .* GB free"):
        check_room(tmp_path / "not" / "yet", 10**24, "model x")
