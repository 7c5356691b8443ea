"""Derive the valid-key schema of prime-rl's `rl` config (dotted TOML path -> types) at one commit.

prime-rl is not on PyPI, so the suite cannot import its config classes at test time. This script
is run once per pinned version, in a throwaway Python 3.12 environment that has prime-rl's slim
config package (`packages/prime-rl-configs`) and its submodule pins (verifiers, renderers,
prime-pydantic-config) importable, and walks the pydantic classes from `RLConfig` down:

    git -C <mirror> archive <commit> packages/prime-rl-configs | tar -x -C /tmp/prl/src
    python3.12 -m venv /tmp/prl/venv && /tmp/prl/venv/bin/pip install <verifiers@pin> renderers \
        'prime-pydantic-config[toml]'
    PYTHONPATH=/tmp/prl/src/packages/prime-rl-configs/src /tmp/prl/venv/bin/python \
        runners/schemas/derive_prime_rl_schema.py --commit <sha> --version 0.8.0 \
        --out runners/schemas/prime_rl-v0.8.0.json

Type names in the output: int, float, bool, str, null, table, array_of_tables, list, dict, any;
`literal` lists the allowed values when every accepted value is a literal. `open` paths accept
any sub-key (free-form dicts, and configs narrowed at run time to a plugin's class).
"""

from __future__ import annotations

import argparse
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

# Plugin-narrowed configs: verifiers resolves these by `id` to a class from the installed
# environment package, so their extra keys are unknowable from prime-rl alone.
PLUGIN_NARROWED = ("TasksetConfig", "HarnessConfig")


def _subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


class Walker:
    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {}
        self.open: set[str] = set()

    def _add(self, path: str, kind: str, literal: list | None = None) -> None:
        entry = self.keys.setdefault(path, {"types": [], "literal": {}, "free": set()})
        if kind not in entry["types"]:
            entry["types"].append(kind)
        if literal is not None:
            values = entry["literal"].setdefault(kind, [])
            values += [v for v in literal if v not in values]
        else:
            entry["free"].add(kind)  # any value of this type is accepted

    def model(self, cls: type, path: str, seen: tuple[type, ...]) -> None:
        from pydantic import BaseModel

        if cls in seen:
            return
        classes = [c for c in _subclasses(cls) if issubclass(c, BaseModel)]
        if any(c.__name__ in PLUGIN_NARROWED for c in classes) or cls.model_config.get("extra") == "allow":
            self.open.add(path)
        for c in classes:
            for name, field in c.model_fields.items():
                self.annotation(field.annotation, f"{path}.{name}" if path else name, (*seen, cls))

    def annotation(self, ann: Any, path: str, seen: tuple[type, ...]) -> None:
        from pydantic import BaseModel

        origin = typing.get_origin(ann)
        args = typing.get_args(ann)
        if origin is typing.Annotated:
            return self.annotation(args[0], path, seen)
        if origin in (typing.Union, types.UnionType):
            for a in args:
                self.annotation(a, path, seen)
            return
        if origin is typing.Literal:
            for v in args:
                self._add(path, _scalar_name(v), literal=[v])
            return
        if ann is type(None):
            return self._add(path, "null")
        if ann is Any:
            self._add(path, "any")
            return self.open.add(path)
        if origin in (list, tuple, set):
            models = _models(args[0] if args else Any)
            if models:  # list[Model] or list[Annotated[A | B, discriminator]]
                self._add(path, "array_of_tables")
                for m in models:
                    self.model(m, path, seen)
                return None
            return self._add(path, "list")
        if origin is dict or ann is dict:
            self._add(path, "dict")
            return self.open.add(path)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            self._add(path, "table")
            return self.model(ann, path, seen)
        if isinstance(ann, type) and issubclass(ann, enum.Enum):
            return self._add(path, "str", literal=[m.value for m in ann])
        if ann in (bool, int, float, str):
            return self._add(path, ann.__name__)
        if isinstance(ann, type) and issubclass(ann, Path | str):
            return self._add(path, "str")
        if origin is not None:  # e.g. typing aliases of containers we did not list
            return self.annotation(origin, path, seen)
        self._add(path, "any")


def _models(ann: Any) -> list[type]:
    """The pydantic classes an annotation stands for, if it is only classes (else [])."""
    from pydantic import BaseModel

    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _models(args[0])
    if origin in (typing.Union, types.UnionType):
        parts = [_models(a) for a in args]
        return [m for p in parts for m in p] if all(parts) else []
    return [ann] if isinstance(ann, type) and issubclass(ann, BaseModel) else []


def _scalar_name(v: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(v), "any")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commit", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--note", action="append", default=[])
    args = ap.parse_args(argv)

    from prime_rl.configs.rl import RLConfig

    w = Walker()
    w.model(RLConfig, "", ())
    for entry in w.keys.values():
        free = entry.pop("free")
        # a type keeps its literal list only if no field variant accepts any value of it
        entry["literal"] = {t: v for t, v in entry["literal"].items() if t not in free}
        if not entry["literal"]:
            del entry["literal"]
    doc = {
        "repository": "https://github.com/PrimeIntellect-ai/prime-rl",
        "commit": args.commit,
        "version": args.version,
        "root": "prime_rl.configs.rl.RLConfig",
        "derived_with": "runners/schemas/derive_prime_rl_schema.py",
        "notes": args.note,
        "open": sorted(w.open),
        "keys": dict(sorted(w.keys.items())),
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"{args.out}: {len(w.keys)} keys, {len(w.open)} open paths")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
