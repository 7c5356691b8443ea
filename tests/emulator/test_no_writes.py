"""The emulator computes and returns trace rows; only its writer-adapter writes files.

bench/emulator/run.py (emulate_into, stream_steps, emulate: the run directory) and trace_out.py
(write_trace) are the adapter; every other emulator module must neither import a writer nor call one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EMULATOR = Path(__file__).resolve().parents[2] / "bench" / "emulator"
ADAPTER = {"run.py", "trace_out.py"}
WRITER_MODULES = {"bench.trace", "bench.rundir", "pyarrow.parquet", "json", "shutil", "tempfile"}
WRITER_CALLS = {"open", "write", "write_text", "write_bytes", "mkdir", "touch", "save", "savez", "to_parquet",
                "to_csv", "dump", "write_table", "write_steps", "write_trace", "write_manifest"}  # fmt: skip


def _calls(tree: ast.AST) -> set[str]:
    """Names of every function or method called in `tree`."""
    return {
        n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
    }


def _modules() -> list[Path]:
    return sorted(p for p in EMULATOR.rglob("*.py") if p.name not in ADAPTER)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(EMULATOR)))
def test_emulator_module_writes_no_files(path):
    tree = ast.parse(path.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & WRITER_MODULES, f"{path.name} imports a writer: {imported & WRITER_MODULES}"
    called = _calls(tree)
    assert not called & WRITER_CALLS, f"{path.name} calls {called & WRITER_CALLS}"


def test_the_check_sees_the_adapter_write():
    # the same check flags the adapter, so it can fail
    assert {"write", "write_steps"} <= _calls(ast.parse((EMULATOR / "trace_out.py").read_text()))
