"""prime-rl's rl.toml key schema (derived from its pydantic config classes at the pinned commit by
derive_prime_rl_schema.py) and the check of a TOML document against it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent
SCHEMAS = {"0.8.0": "prime_rl-v0.8.0.json"}  # prime-rl version -> derived schema file


def load_schema(version: str, schema_dir: Path = SCHEMA_DIR) -> dict[str, Any]:
    """The derived key schema of one prime-rl version."""
    if version not in SCHEMAS:
        raise KeyError(f"framework.version={version!r}: no prime-rl schema; known {sorted(SCHEMAS)}")
    return json.loads((Path(schema_dir) / SCHEMAS[version]).read_text())


def is_array_of_tables(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def check_keys(doc: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key of a TOML document against the schema: unknown keys and wrong types, one line each."""
    problems: list[str] = []
    keys, open_paths = schema["keys"], set(schema["open"])
    if prefix.rstrip(".") in open_paths:  # free-form dicts and plugin-narrowed configs
        return problems
    for k, v in doc.items():
        path = f"{prefix}{k}"
        spec = keys.get(path)
        if spec is None:
            problems.append(f"{path}: unknown key at prime-rl {schema['version']} ({schema['commit'][:8]})")
            continue
        kind = _toml_type(v)
        allowed = set(spec["types"])
        ok = kind in allowed or "any" in allowed
        ok = ok or (kind == "int" and "float" in allowed) or (kind == "table" and "dict" in allowed)
        ok = ok or (v == "None" and "null" in allowed)  # prime-rl's TOML spelling of null
        literals = spec.get("literal", {}).get(kind)
        if ok and literals is not None and v not in literals and v != "None":
            problems.append(f"{path}={v!r}: expected one of {literals}")
        elif not ok:
            problems.append(f"{path}={v!r}: {kind} given, expected {' | '.join(spec['types'])}")
        elif isinstance(v, dict):
            problems += check_keys(v, schema, f"{path}.")
        elif is_array_of_tables(v):
            for item in v:
                problems += check_keys(item, schema, f"{path}.")
    return problems


def _toml_type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, dict):
        return "table"
    if is_array_of_tables(v):
        return "array_of_tables"
    return "list"
