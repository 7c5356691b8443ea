"""The trace contract: schemas, validation naming the offending column, atomic writes."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.trace import (
    LATER_STEP_COLUMNS,
    ROLLOUT_SCHEMA,
    RolloutWriter,
    RunPaths,
    TraceError,
    atomic_path,
    read_rollouts,
    read_steps,
    redact,
    write_manifest,
    write_rollouts,
    write_steps,
)


def test_steps_roundtrip_keeps_native_columns(tmp_path):
    write_steps(tmp_path / "s.parquet", [{"step": 3, "step_s": 1.5, "native_mfu": 0.099}])
    df = read_steps(tmp_path / "s.parquet")
    assert df.loc[0, "step"] == 3 and df.loc[0, "native_mfu"] == 0.099
    assert df["wait_s"].isna().all()  # unknown stays null, never 0


def test_unknown_step_column_is_rejected(tmp_path):
    with pytest.raises(TraceError, match="wiat_s"):
        write_steps(tmp_path / "s.parquet", [{"step": 1, "wiat_s": 2.0}])


def test_reader_names_offending_column(tmp_path):
    bad = pa.table({"step": pa.array(["one"])})
    pq.write_table(bad, tmp_path / "s.parquet")
    with pytest.raises(TraceError, match="'step' has type string; expected int64"):
        read_steps(tmp_path / "s.parquet")
    pq.write_table(pa.table({"step": [1]}), tmp_path / "t.parquet")
    with pytest.raises(TraceError, match="column 't_start_s' missing"):
        read_steps(tmp_path / "t.parquet")


def test_a_trace_from_before_the_phase_columns_reads_them_as_unknown(tmp_path):
    """A run directory written before a column was added stays readable: the column is null, not 0."""
    write_steps(tmp_path / "s.parquet", [{"step": 1, "step_s": 9.0, "gen_s": 4.0, "compute_s": 5.0}])
    table = pq.read_table(tmp_path / "s.parquet")
    old = table.drop_columns(sorted(LATER_STEP_COLUMNS))
    pq.write_table(old, tmp_path / "old.parquet")
    df = read_steps(tmp_path / "old.parquet")
    assert list(df.columns) == [
        *old.column_names,
        *[c for c in table.column_names if c in LATER_STEP_COLUMNS],
    ]
    assert df.loc[0, "gen_s"] == 4.0 and df[sorted(LATER_STEP_COLUMNS)].isna().all().all()
    assert read_steps(tmp_path / "old.parquet", columns=["step", "checkpoint_s"])["checkpoint_s"].isna().all()


def test_rollout_status_is_checked(tmp_path):
    with pytest.raises(TraceError, match="'status' has \\['lost'\\]"):
        write_rollouts(tmp_path / "r.parquet", [{"rollout_id": 1, "status": "lost"}])


def test_rollout_writer_streams_row_groups(tmp_path):
    path = tmp_path / "r.parquet"
    with RolloutWriter(path) as w:
        for k in range(3):
            w.write({"rollout_id": list(range(k * 10, k * 10 + 10)), "status": ["used"] * 10})
    assert pq.ParquetFile(path).num_row_groups == 3
    assert len(read_rollouts(path)) == 30
    assert pq.read_schema(path).equals(ROLLOUT_SCHEMA)


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "metrics.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]  # no temporary left behind


def test_manifest_validation(tmp_path):
    paths = RunPaths(tmp_path / "run").make()
    with pytest.raises(TraceError, match="manifest keys missing"):
        write_manifest(paths, {"experiment": "smoke"})
    base = dict(experiment="e", run_id="r", framework="verl", framework_version="0.9.1", status="completed")
    with pytest.raises(TraceError, match="mode='real'"):
        write_manifest(paths, {**base, "mode": "real"})


def test_redact_hides_secret_values():
    assert redact({"WANDB_API_KEY": "abc", "HF_TOKEN": "x", "NCCL_DEBUG": "WARN"}) == {
        "WANDB_API_KEY": "<redacted>",
        "HF_TOKEN": "<redacted>",
        "NCCL_DEBUG": "WARN",
    }
