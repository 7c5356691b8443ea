"""Derive runners/schemas/slime-v0.3.1.json: the flags slime accepts at its pinned version.

slime is not on PyPI, so its flag list is read from source, never imported:

- slime's own flags: every `add_argument` / `reset_arg` in `slime/utils/arguments.py` and the
  explicit ones in `slime/backends/sglang_utils/arguments.py`, read with `ast` from a git mirror;
- Megatron-LM flags (slime passes them through verbatim): only the ones runners/slime.py can
  emit (`MEGATRON_FLAGS`), each verified in `megatron/training/arguments.py` at the commit slime's
  Docker image pins - literal `add_argument` calls, or fields of the dataclasses Megatron turns
  into flags with `ArgumentGroupFactory` (`--field-name`; bool fields that default True become
  `--no-field-name`);
- SGLang flags, which slime accepts as `--sglang-<flag>`: only the ones the runner emits
  (`SGLANG_FLAGS`), verified in `sglang/srt/server_args.py` of the pinned SGLang wheel
  (`ServerArgs` fields and their aliases) and not in slime's skip list.

Usage (the mirrors are bare git directories, e.g. `git clone --bare`; server_args.py comes from
the pinned wheel: `pip download sglang==0.5.15.post1 --no-deps` then
`unzip sglang-*.whl sglang/srt/server_args.py`):

    python -m runners.schemas.derive_slime --slime-git DIR --slime-commit a6272da0d4f3 \
        --megatron-git DIR --megatron-commit 1dcf0daf... --sglang-server-args server_args.py \
        --sglang-version 0.5.15.post1 --out runners/schemas/slime-v0.3.1.json

A flag missing from its source is an error naming the flag and the file searched.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SLIME_FILES = ("slime/utils/arguments.py", "slime/backends/sglang_utils/arguments.py")
MEGATRON_ARGS = "megatron/training/arguments.py"
ACTION_TYPES = {"store_true": "bool", "store_false": "bool", "BooleanOptionalAction": "bool"}


def git_show(git_dir: str, commit: str, path: str) -> str:
    """Text of `path` at `commit` in a bare git mirror."""
    out = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"{git_dir}: cannot read {path} at {commit}: {out.stderr.strip()}")
    return out.stdout


def full_commit(git_dir: str, commit: str) -> str:
    out = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", commit], capture_output=True, text=True)
    return out.stdout.strip() or commit


def _src(node: ast.AST | None) -> str | None:
    return None if node is None else ast.unparse(node)


def _spec_from_kwargs(kwargs: dict[str, ast.AST]) -> dict[str, Any]:
    """type / nargs / choices of one argparse call, as plain data."""
    spec: dict[str, Any] = {}
    action = kwargs.get("action")
    if action is not None:
        name = _src(action).split(".")[-1].strip("'\"")
        spec["action"] = name
        spec["type"] = ACTION_TYPES.get(name, "str")
    else:
        spec["type"] = (_src(kwargs.get("type")) or "str").split(".")[-1]
    if "nargs" in kwargs:
        spec["nargs"] = (
            ast.literal_eval(kwargs["nargs"])
            if isinstance(kwargs["nargs"], ast.Constant)
            else _src(kwargs["nargs"])
        )
    if "choices" in kwargs:
        try:
            spec["choices"] = list(ast.literal_eval(kwargs["choices"]))
        except ValueError:
            spec["choices_expr"] = _src(kwargs["choices"])
    return spec


def argparse_calls(
    source: str, func_names: tuple[str, ...] = ("add_argument", "reset_arg")
) -> dict[str, dict]:
    """Every `--flag` registered by a literal add_argument / reset_arg call in `source`."""
    flags: dict[str, dict] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        fname = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if fname not in func_names:
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        names = [n for n in names if n.startswith("--")]
        if not names:
            continue
        spec = _spec_from_kwargs({k.arg: k.value for k in node.keywords if k.arg})
        for n in names:
            flags[n] = spec
        if spec.get("action") == "BooleanOptionalAction":
            for n in names:
                flags["--no-" + n[2:]] = spec
    return flags


def slime_flags(git_dir: str, commit: str) -> dict[str, dict]:
    flags: dict[str, dict] = {}
    for path in SLIME_FILES:
        flags.update(argparse_calls(git_show(git_dir, commit, path)))
    return dict(sorted(flags.items()))


# ---- Megatron: literal flags + ArgumentGroupFactory dataclass fields ----------------------


def _annotation_type(ann: ast.AST) -> str:
    text = ast.unparse(ann)
    for t in ("bool", "int", "float", "str"):
        if text in (t, f"Optional[{t}]", f"{t} | None", f"None | {t}"):
            return t
    if text.startswith(("list[", "List[", "Optional[list", "Optional[List")):
        return "list"
    if text.startswith("Literal["):
        return "str"
    return "str"  # enums and other parsed-from-string types


def _dataclass_fields(git_dir: str, commit: str, class_name: str, files: dict[str, str]) -> list[dict]:
    """Fields of `class_name` (and its in-repo base classes), in declaration order."""
    for text in files.values():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name == class_name:
                out: list[dict] = []
                for base in node.bases:
                    if isinstance(base, ast.Name):
                        out += _dataclass_fields(git_dir, commit, base.id, files)
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        meta_names = None
                        if stmt.value is not None and "argparse_meta" in ast.unparse(stmt.value):
                            for sub in ast.walk(stmt.value):
                                if isinstance(sub, ast.Dict):
                                    for k, v in zip(sub.keys, sub.values, strict=True):
                                        if isinstance(k, ast.Constant) and k.value == "arg_names":
                                            meta_names = ast.literal_eval(v)
                        default = _src(stmt.value) or ""
                        out.append(
                            {
                                "name": stmt.target.id,
                                "type": _annotation_type(stmt.annotation),
                                "default_true": default == "True",
                                "arg_names": meta_names,
                                "init_false": "init=False" in default.replace(" ", ""),
                            }
                        )
                return out
    return []


def megatron_flags(git_dir: str, commit: str) -> dict[str, dict]:
    """All flags Megatron's parser would register at `commit` (literal and dataclass-generated)."""
    args_text = git_show(git_dir, commit, MEGATRON_ARGS)
    flags = argparse_calls(args_text, ("add_argument",))
    tree = ast.parse(args_text)
    listing = subprocess.run(
        ["git", "--git-dir", git_dir, "grep", "-l", "^class .*Config", commit, "--", "megatron/*.py"],
        capture_output=True,
        text=True,
    ).stdout.split()
    files = {p.split(":", 1)[1]: git_show(git_dir, commit, p.split(":", 1)[1]) for p in listing}
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        assigns = {
            t.id: s.value
            for s in ast.walk(func)
            if isinstance(s, ast.Assign)
            for t in s.targets
            if isinstance(t, ast.Name)
        }
        for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
            if getattr(call.func, "id", "") != "ArgumentGroupFactory" or not call.args:
                continue
            exclude: set[str] = set()
            for kw in call.keywords:
                if kw.arg == "exclude":
                    node = assigns.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
                    exclude = set(ast.literal_eval(node)) if node is not None else set()
            for f in _dataclass_fields(git_dir, commit, call.args[0].id, files):
                if f["name"] in exclude or f["init_false"]:
                    continue
                if f["arg_names"]:
                    names = f["arg_names"]
                elif f["type"] == "bool" and f["default_true"]:
                    stem = f["name"].replace("_", "-")
                    names = [f"--no-{stem}", f"--disable-{stem}"]
                else:
                    names = ["--" + f["name"].replace("_", "-")]
                spec = {"type": f["type"], "from": call.args[0].id}
                if f["type"] == "bool":
                    spec["action"] = "store_false" if f["default_true"] else "store_true"
                for n in names:
                    flags.setdefault(n, spec)
    return flags


# ---- SGLang: ServerArgs fields + aliases, prefixed --sglang- by slime ---------------------


def sglang_flags(server_args_text: str, skipped: set[str]) -> dict[str, dict]:
    """`--sglang-<flag>` for every ServerArgs field/alias and literal add_argument, minus slime's skips."""
    flags: dict[str, dict] = {}
    tree = ast.parse(server_args_text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            for stmt in node.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                name = stmt.target.id
                if name in skipped or name.startswith("_"):
                    continue
                ann = stmt.annotation
                inner = (
                    ann.slice.elts[0]
                    if isinstance(ann, ast.Subscript) and isinstance(ann.slice, ast.Tuple)
                    else ann
                )
                spec = {"type": _annotation_type(inner)}
                aliases: list[str] = []
                for sub in ast.walk(ann):
                    if isinstance(sub, ast.keyword) and sub.arg == "aliases":
                        aliases = [a for a in ast.literal_eval(sub.value) if a.startswith("--")]
                    elif (
                        isinstance(sub, ast.keyword)
                        and sub.arg == "choices"
                        and isinstance(sub.value, ast.List)
                    ):
                        spec["choices"] = ast.literal_eval(sub.value)
                if spec["type"] == "bool":
                    spec["action"] = "store_true"
                for flag in ["--" + name.replace("_", "-"), *aliases]:
                    flags["--sglang-" + flag[2:]] = spec
    for flag, spec in argparse_calls(server_args_text, ("add_argument",)).items():
        if flag[2:].replace("-", "_") not in skipped:
            flags.setdefault("--sglang-" + flag[2:], spec)
    return flags


def sglang_skipped(git_dir: str, commit: str) -> set[str]:
    """slime's `skipped_args` list (ServerArgs it manages itself) from sglang_utils/arguments.py."""
    tree = ast.parse(git_show(git_dir, commit, SLIME_FILES[1]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "skipped_args" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise SystemExit(f"{SLIME_FILES[1]}: skipped_args list not found")


def pick(emitted: list[str], available: dict[str, dict], where: str) -> dict[str, dict]:
    missing = [f for f in emitted if f not in available]
    if missing:
        raise SystemExit(f"{where}: flags emitted by runners/slime.py not found: {missing}")
    return {f: available[f] for f in sorted(emitted)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slime-git", required=True)
    p.add_argument("--slime-commit", required=True)
    p.add_argument("--megatron-git", required=True)
    p.add_argument("--megatron-commit", required=True)
    p.add_argument("--sglang-server-args", required=True, help="server_args.py of the pinned SGLang wheel")
    p.add_argument("--sglang-version", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from runners.slime import MEGATRON_FLAGS, SGLANG_FLAGS

    skipped = sglang_skipped(a.slime_git, a.slime_commit)
    schema = {
        "framework": "slime",
        "version": "0.3.1",
        "sources": {
            "slime": {
                "repo": "THUDM/slime",
                "commit": full_commit(a.slime_git, a.slime_commit),
                "files": list(SLIME_FILES),
            },
            "megatron": {
                "repo": "NVIDIA/Megatron-LM",
                "commit": full_commit(a.megatron_git, a.megatron_commit),
                "files": [MEGATRON_ARGS],
                "why": "Megatron commit pinned by slime v0.3.1 docker/README.md (stable image)",
                "scope": "only the flags runners/slime.py emits (MEGATRON_FLAGS)",
            },
            "sglang": {
                "package": f"sglang=={a.sglang_version}",
                "files": ["sglang/srt/server_args.py"],
                "why": "SGLang release pinned by slime v0.3.1 docker/README.md (stable image)",
                "scope": "only the --sglang-* flags runners/slime.py emits (SGLANG_FLAGS)",
            },
        },
        "generated_by": "python -m runners.schemas.derive_slime",
        "slime": slime_flags(a.slime_git, a.slime_commit),
        "megatron": pick(MEGATRON_FLAGS, megatron_flags(a.megatron_git, a.megatron_commit), MEGATRON_ARGS),
        "sglang": pick(
            SGLANG_FLAGS, sglang_flags(Path(a.sglang_server_args).read_text(), skipped), "server_args.py"
        ),
    }
    Path(a.out).write_text(json.dumps(schema, indent=1) + "\n")
    print(
        f"{a.out}: {len(schema['slime'])} slime, {len(schema['megatron'])} megatron, {len(schema['sglang'])} sglang flags"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
