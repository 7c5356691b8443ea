"""A framework's config as a nested dict that remembers the line each key came from.

Three shapes frameworks write: a YAML file (verl's .hydra/config.yaml, a dumped config.yaml), a
Python dict pretty-printed into a console log (verl's TaskRunner prints its whole config with
pprint, each line behind a Ray `(TaskRunner pid=N)` prefix), and Hydra override lists
(`- key.path=value`, .hydra/overrides.yaml). `Tree.get("a.b.c")` returns (value, "<file>:<line>").
OmegaConf interpolations of the forms `${a.b}` and `${oc.select:a.b,default}` are resolved
against the same tree; anything else stays unresolved (the value is then not used).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import yaml

from runners.run_config import RAY_PREFIX, line_at, source

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# another actor's tag that Ray flushed onto the end of a dump line (`'name': 'x',(pid=934604) `)
TRAILING_TAG = re.compile(r"\((?:[\w.:-]+ )*pid=\d+[^)]*\)\s*$")
INTERP = re.compile(r"^\$\{(?:oc\.select:)?([\w.]+)(?:,\s*([^}]*))?\}$")


class Tree:
    """Nested config values plus the 1-based line of each dotted key in its file."""

    def __init__(self, data: dict, lines: dict[str, int], path: Path, root: Path):
        self.data, self.lines, self.path, self.root = data, lines, path, root

    def raw(self, key: str) -> Any:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def get(self, key: str, _depth: int = 0) -> tuple[Any, str | None]:
        """(resolved value, source) of a dotted key; (None, None) when absent or unresolvable."""
        v = self.raw(key)
        if isinstance(v, str) and _depth < 5:
            m = INTERP.match(v.strip())
            if m:
                target, default = m.group(1), m.group(2)
                got, _ = self.get(target, _depth + 1)
                if got is None and default is not None:
                    got = yaml.safe_load(default) if default.strip() not in ("", "null") else None
                v = got
            elif "${" in v:
                return None, None
        if v is None:
            return None, None
        return v, source(self.root, self.path, self.lines.get(key))


def yaml_scalar(raw: str) -> Any:
    """A value written as text (an override, an MLflow param) as YAML reads it; the text itself when
    it is not YAML; None when empty."""
    try:
        return yaml.safe_load(raw) if raw else None
    except yaml.YAMLError:
        return raw


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> bool:
    """tree[a][b][c] = value for key `a.b.c`; False (nothing set) when a prefix already holds a value."""
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            return False
    node[parts[-1]] = value
    return True


def from_yaml(text: str, path: Path, root: Path) -> Tree | None:
    """A YAML mapping with each key's line (from the YAML node marks)."""
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict) or node is None:
        return None
    lines: dict[str, int] = {}

    def walk(n: Any, prefix: str) -> None:
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = f"{prefix}{k.value}"
                lines[key] = k.start_mark.line + 1
                walk(v, key + ".")

    walk(node, "")
    return Tree(data, lines, path, root)


def from_overrides(text: str, path: Path, root: Path) -> Tree | None:
    """Hydra's overrides.yaml (`- a.b=value` lines) or an argv of `a.b=value` words."""
    data: dict = {}
    lines: dict[str, int] = {}
    for i, line in enumerate(text.split("\n"), 1):  # LF only: physical lines, as `grep -n` counts
        m = re.match(r"^\s*-?\s*['\"]?\+{0,2}([A-Za-z_][\w.]*)=(.*?)['\"]?\s*$", line)
        if not m:
            continue
        key, raw = m.group(1), m.group(2)
        if set_dotted(data, key, yaml_scalar(raw)):
            lines[key] = i
    return Tree(data, lines, path, root) if data else None


def from_pprint_dump(text: str, start: int, path: Path, root: Path) -> Tree | None:
    """A pprint'ed dict that starts at character `start` of a console log (Ray prefixes on every
    line). Lines of the dump are located by walking the keys in print order."""
    first_line = line_at(text, start)
    line_start = text.rfind("\n", 0, start) + 1
    prefix = RAY_PREFIX.match(ANSI.sub("", text[line_start:start]))
    actor = prefix.group(0).strip() if prefix else None
    body: list[str] = []
    body_lines: list[int] = []  # the physical line of each body line
    depth = 0
    # split on LF only: a tqdm `\r` inside a line is not a line end (`grep -n` numbering)
    for i, line in enumerate(text[start:].split("\n")):
        line = ANSI.sub("", line)
        m = RAY_PREFIX.match(line)
        if actor and i and (m is None or m.group(0).strip() != actor):
            continue  # another actor's output interleaved with the dump (Ray flushes them together)
        line = TRAILING_TAG.sub("", RAY_PREFIX.sub("", line))
        body.append(line)
        body_lines.append(first_line + i)
        depth += _bracket_delta(line)
        if depth <= 0:
            break
    try:
        data = ast.literal_eval("\n".join(body))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    lines: dict[str, int] = {}
    pos = [0]

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            at = _find_key(body, str(k), pos[0])
            if at is not None:
                pos[0] = at
                lines[f"{prefix}{k}"] = body_lines[at]
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")

    walk(data, "")
    return Tree(data, lines, path, root)


def _find_key(body: list[str], key: str, start: int) -> int | None:
    needle = f"{key!r}:"
    for i in range(start, len(body)):
        if needle in body[i]:
            return i
    return None


def _bracket_delta(line: str) -> int:
    """Net opening brackets of a line, ignoring those inside quoted strings."""
    delta, quote, i = 0, "", 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "{[(":
            delta += 1
        elif c in "}])":
            delta -= 1
        i += 1
    return delta


# A Hydra override on a launch command line (`actor_rollout_ref.rollout.n=5`, `++trainer.x=1`,
# quoted or not): a dotted key, so Python reprs (`TransformerConfig(tensor_model_parallel_size=2`)
# and shell assignments (`TP_VALUE=2`) are never read as one.
COMMAND_ARG = re.compile(r"""(?:^|[\s"'])\+{0,2}([A-Za-z_]\w*(?:\.\w+)+)=("[^"]*"|'[^']*'|[^\s"'\\]+)""")
SHELL_VAR = re.compile(r"""^\s*(?:export\s+)?([A-Za-z_]\w*)=("[^"]*"|'[^']*'|[^\s#;]*)""")
SHELL_REF = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")


def from_command(text: str, path: Path, root: Path) -> Tree | None:
    """Hydra overrides on the launch command lines a log quotes (`python3 -m verl.trainer.main_ppo
    a.b=1 ...`, a script's `a.b=$VAR \\` lines, `bash run.sh "a.b=1 c.d=2"`), `$VAR`s replaced by
    the script's own `VAR=value` lines. The last setting of a key wins, as in Hydra; its line is
    the physical line (LF only) that set it."""
    data: dict = {}
    lines: dict[str, int] = {}
    env: dict[str, str] = {}
    for i, line in enumerate(text.split("\n"), 1):
        line = RAY_PREFIX.sub("", ANSI.sub("", line))
        var = SHELL_VAR.match(line)
        if var and "." not in var.group(1):
            env[var.group(1)] = var.group(2).strip("\"'")
        for m in COMMAND_ARG.finditer(line):
            key, raw = m.group(1), m.group(2).strip("\"'")
            raw = SHELL_REF.sub(lambda r: env.get(r.group(1), r.group(0)), raw)
            if "$" in raw:
                continue  # a variable the log never sets: the value is unknown
            if set_dotted(data, key, yaml_scalar(raw)):
                lines[key] = i
    return Tree(data, lines, path, root) if data else None
