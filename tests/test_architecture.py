"""The code's shape, checked: no import cycle among bench/ and runners/ modules (deferred imports
inside functions included: a cycle hidden in a function body is still a cycle), runners import
nothing from bench/ but the trace contract, and no module grows past the size a reader holds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "runners")
MAX_MODULE_LINES = 600  # ~500 is the aim; past 600 a module is doing two jobs


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of ours that `name` imports anywhere in its body (top level or deferred)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `from bench.model import costmodel` -> the module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(name, path, known) for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan); a package importing its
    own submodules (bench.report -> bench.report.x) is not counted against the submodule."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def edges(v: str) -> set[str]:
        # a submodule importing its package's __init__ is the package namespace, not a cycle of ideas
        return {w for w in graph[v] if not v.startswith(w + ".")}

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_bench_and_runners():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_runners_import_only_the_trace_contract_from_bench():
    graph = _graph()
    reach = {
        (name, dep)
        for name, deps in graph.items()
        if name.startswith("runners")
        for dep in deps
        if dep.startswith("bench") and dep != "bench.trace"
    }
    assert reach == set()


# The commands: what a user runs (`python -m bench <command>`), each standing on the layers below.
COMMANDS = {
    "bench.__main__", "bench.calibrate", "bench.predict", "bench.plan", "bench.plan_page",
    "bench.plan_splits", "bench.profile_fit", "bench.probe", "bench.probe_cluster", "bench.compare",
    "bench.nightly", "bench.launch", "bench.speed_of_light", "bench.ingest", "bench.render",
}  # fmt: skip


def _upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports against the layers: bench/model (hardware and framework profiles, the one cost model,
    its fits) importing the emulator built on it, the report or a command; the emulator importing
    the report or a command."""
    above = ("bench.report", "bench.reproduce")
    return {
        (name, dep)
        for name, deps in graph.items()
        for dep in deps
        if (
            name.startswith("bench.model") and (dep.startswith(("bench.emulator", *above)) or dep in COMMANDS)
        )
        or (name.startswith("bench.emulator") and (dep.startswith(above) or dep in COMMANDS))
    }


def test_the_model_layer_stands_below_the_emulator_and_the_commands():
    assert _upward(_graph()) == set()


def test_the_layer_check_finds_an_upward_import():
    graph = {"bench.model.costmodel": {"bench.emulator.loop"}, "bench.emulator.run": {"bench.predict"}}
    assert _upward(graph) == {
        ("bench.model.costmodel", "bench.emulator.loop"),
        ("bench.emulator.run", "bench.predict"),
    }


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_size(name: str):
    lines = len(_modules()[name].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name}: {lines} lines; split it by idea"
