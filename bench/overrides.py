"""Overrides checked against the config schema before Hydra composes them, and Hydra's own
errors turned into one line: the key or group, and the fix.

`Schema(BenchConf, CONF_DIR)` (bench/config.py `SCHEMA`) knows every dotted key of the dataclass
schema and every option of each config group. `check(overrides)` refuses, before Hydra runs, an
unknown group option (listing the files that exist), a key the schema does not have (naming the
nearest one), and Hydra's `+key` / `++key` outside `framework.native`, the one documented place
where keys the schema does not type may be added (docs/bad-input.md). `error_line(e)` is the
same line for what only Hydra can see (a wrong type, a bad key inside a conf/ YAML).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import is_dataclass
from functools import cached_property
from pathlib import Path
from typing import get_origin, get_type_hints

from bench.errors import UsageError

# Config groups a `group=NAME` override picks a conf/<group>/NAME.yaml from.
GROUPS = ("model", "hardware", "workload", "framework", "cluster", "emulator", "experiment")
# The one place where keys the schema does not type may be added with `+key=value`: the
# framework-native knobs a runner passes through to its framework (FrameworkConf.native).
PASSTHROUGH = "framework.native"
PLUS_NOTE = f"('+' adds keys only under {PASSTHROUGH}, the framework-native passthrough)"


class Schema:
    """The keys of a root dataclass (`root`) and the config groups under `conf_dir`."""

    def __init__(self, root: type, conf_dir: Path) -> None:
        self.root, self.conf_dir = root, conf_dir

    def group_options(self, group: str) -> list[str]:
        """Names `group=NAME` accepts: the YAML files in conf/<group>/."""
        return sorted(p.stem for p in (self.conf_dir / group).glob("*.yaml"))

    def group_not_found(self, group: str, name: str) -> str:
        """`framework 'verll' not found; choose one of prime_rl, slime, verl`."""
        return f"{group} {name!r} not found; choose one of {', '.join(self.group_options(group))}"

    @cached_property
    def paths(self) -> dict[str, str]:
        """Every dotted key -> "node" (a dataclass), "dict" (an open mapping) or "value"."""
        out: dict[str, str] = {}

        def walk(cls: type, prefix: str) -> None:
            for name, t in get_type_hints(cls).items():
                path = f"{prefix}{name}"
                if is_dataclass(t):
                    out[path] = "node"
                    walk(t, path + ".")
                else:
                    out[path] = "dict" if get_origin(t) is dict else "value"

        walk(self.root, "")
        return out

    def check(self, overrides: list[str]) -> None:
        """UsageError for the first override Hydra would let pass or explain in a traceback.
        Sweeps, `hydra.*` and `group@package=` overrides are left to Hydra."""
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        parser = OverridesParser.create()
        for text in overrides:
            try:
                o = parser.parse_override(text)
            except HydraException as e:  # the parser's own words: "missing EQUAL at '<EOF>'"
                lines = [
                    ln for ln in str(e).splitlines() if ln and not ln.startswith(("See ", "Error parsing"))
                ]
                why = f" ({lines[0]})" if lines else ""
                raise UsageError(f"{text!r}: cannot parse the override{why}; expected key=value") from None
            key, value = o.key_or_group, None if o.is_sweep_override() else o.value()
            if not key:
                raise UsageError(f"{text!r}: no key before '='; expected key=value")
            if key == "hydra" or key.startswith("hydra.") or o.package is not None:
                continue
            if key in GROUPS:
                if isinstance(value, str) and value not in self.group_options(key):
                    raise UsageError(self.group_not_found(key, value))
                continue
            if key == PASSTHROUGH or key.startswith(PASSTHROUGH + "."):
                continue
            added = o.is_add() or o.is_force_add()
            kind = self.key_kind(key, plus=added)
            if kind == "dict":  # a key inside a dict-typed field (e.g. a framework name): '+' adds it
                continue
            if o.is_add():
                raise UsageError(f"{text}: {key} already exists; set it without '+': {text.lstrip('+')}")

    def key_kind(self, key: str, plus: bool = False) -> str:
        """ "value", "node" or "dict" (a key inside a dict-typed field) for a dotted key; UsageError
        naming the nearest existing key when the schema has no such key."""
        if key in self.paths:
            return self.paths[key]
        parts = key.split(".")
        for i in range(len(parts) - 1, 0, -1):
            head = ".".join(parts[:i])
            if self.paths.get(head) == "dict":
                return "dict"
            if self.paths.get(head) == "value":
                raise UsageError(f"{key}: no such key; {head} is a value, not a group of keys")
        raise UsageError(self.no_such_key(key, plus))

    def no_such_key(self, key: str, plus: bool = False) -> str:
        """`experiment.trainer_gpu: no such key; did you mean experiment.trainer_gpus?`"""
        paths = self.paths
        parent, _, field = key.rpartition(".")
        siblings = [p for p in paths if p.rpartition(".")[0] == parent]
        # the misspelt field among its siblings (a shared "experiment." would inflate the score),
        # then the same field name under another group, then the whole key among every key
        last = {s.rpartition(".")[2]: s for s in siblings}
        near = [last[n] for n in difflib.get_close_matches(field, list(last), n=1, cutoff=0.6)]
        near = near or [p for p in paths if p.rpartition(".")[2] == field][:1]
        near = near or difflib.get_close_matches(key, list(paths), n=1, cutoff=0.8)
        if near:
            hint = f"did you mean {near[0]}?"
        elif parent in paths:
            hint = f"{parent} has: {', '.join(s.rpartition('.')[2] for s in siblings)}"
        else:
            hint = f"top-level keys: {', '.join(p for p in paths if '.' not in p)}"
        return f"{key}: no such key; {hint}" + (f" {PLUS_NOTE}" if plus else "")

    def error_line(self, e: Exception) -> str:
        """One line from a Hydra/OmegaConf composition error: the file (when a conf/ YAML is at
        fault), the key or group, and the fix, without Hydra's search path and `+key` advice."""
        from omegaconf.errors import OmegaConfBaseException

        msg = str(e)
        found = re.search(r"Could not find '([^'/]+)/([^']*)'", msg)
        if found and found.group(1) in GROUPS:
            return self.group_not_found(found.group(1), found.group(2))
        inner = next(
            (x for x in (e.__cause__, e.__context__, e) if isinstance(x, OmegaConfBaseException)), None
        )
        text = str(inner) if inner is not None else msg
        key = re.search(r"full_key: (\S+)", text)
        full_key = getattr(inner, "full_key", None) or (key.group(1) if key else None)
        reason = next(
            (ln.strip() for ln in text.splitlines() if ln.strip() and "raised while composing" not in ln),
            type(e).__name__,
        )
        where = re.match(r"In '([^']+)'", msg)
        prefix = f"conf/{where.group(1)}.yaml: " if where and where.group(1) != "config" else ""
        if full_key and "not in" in reason:
            try:
                self.key_kind(full_key)
            except UsageError as u:
                return prefix + str(u)
            if full_key.startswith(PASSTHROUGH + "."):
                return f"{full_key}: not set in this framework's conf; add a passthrough key with +{full_key}=..."
            if self.key_kind(full_key) == "dict":  # an entry a dict-typed field does not hold yet
                return f"{full_key}: no such entry yet; add it with +{full_key}=VALUE (one '+' per entry)"
        return prefix + (f"{full_key}: {reason}" if full_key else reason)
