"""slime's flag schema (slime, Megatron-LM and SGLang flags at the pinned version, derived from their
sources by derive_slime.py into slime-v0.3.1.json) and the checks of a flag list against it."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_FILE = "slime-v0.3.1.json"
SCHEMA_PATH = Path(__file__).resolve().parent / SCHEMA_FILE


@cache
def load_schema(path: str = str(SCHEMA_PATH)) -> dict[str, Any]:
    """The derived flag schema (slime-v0.3.1.json beside this module, or `path`)."""
    return json.loads(Path(path).read_text())


def unknown_flags(argv: list[str], schema: dict[str, Any] | None = None) -> list[str]:
    """Flags of a driver argv that slime (with Megatron and SGLang pass-through) would not accept."""
    schema = schema or load_schema()
    known = set(schema["slime"]) | set(schema["megatron"]) | set(schema["sglang"])
    return [w for w in argv if w.startswith("--") and w not in known]


def check_values(flags: list[tuple[str, Any]], schema: dict[str, Any] | None = None) -> list[str]:
    """Values that the schema's type/choices would reject (e.g. a float for an int flag)."""
    schema = schema or load_schema()
    merged = {**schema["megatron"], **schema["sglang"], **schema["slime"]}
    casts = {"int": int, "float": float}
    problems = []
    for flag, value in flags:
        spec = merged.get(flag)
        if spec is None:
            continue
        if spec["type"] == "bool" and value is not None:
            problems.append(f"{flag} is a switch; got value {value!r}")
        elif spec["type"] != "bool" and value is None:
            problems.append(f"{flag} needs a value ({spec['type']})")
        elif spec["type"] in casts and not spec.get("nargs"):
            try:
                casts[spec["type"]](str(value))
            except ValueError:
                problems.append(f"{flag}={value!r}; expected {spec['type']}")
        if "choices" in spec and value is not None and str(value) not in map(str, spec["choices"]):
            problems.append(f"{flag}={value!r}; expected one of {spec['choices']}")
    return problems
