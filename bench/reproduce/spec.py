"""Published figures as data: the schema of conf/published/*.yaml and its loader.

One YAML file is one case: a publication (or one consistent part of it), the inputs it uses, and
the figures it predicts. Each figure names a computation kind (`compute.source`) from the fixed
set in bench/reproduce/sources.py, so adding a figure is adding data, never code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.config import CONF_DIR

PUBLISHED_DIR = CONF_DIR / "published"
OURS_KINDS = ("raw logs", "emulated", "computed")
UNITS_PERCENT = ("%",)  # ours (a fraction) is shown x100 for these units
# How an input came to be (Input.kind): `published` by the source (or a fact), `fitted` to one of
# this case's figures (that figure is then a calibration target), `back-solved` from a published
# figure (e.g. the token mix a price implies: that figure is then derived), `chosen` where the
# source is silent (an assumption; listed in the note of every figure that depends on it).
INPUT_KINDS = ("published", "fitted", "back-solved", "chosen")


# ---- what a computation gets and gives (bench/reproduce/sources.py, opd_logs.py) -------------


class Pending(Exception):
    """A dependency (another stage of the suite) is not available yet; the message says which."""


class NotReproducible(Exception):
    """The figure cannot be computed from the inputs at hand; the message says why."""


@dataclass
class Outcome:
    value: float | None  # in the unit the metric natively uses (fractions, seconds, ...)
    used: str = ""  # what the number was computed from, for the report
    checks: list[str] = field(default_factory=list)  # warnings to show beside the row
    # Non-empty when the value follows from inputs fitted on the same run (a replay, a fit's own
    # figure): the row is then "derived", never pass/fail; the text says what was fitted.
    derived_from: str = ""
    # Non-empty when an input of the value was fitted on the very run it is compared with (a
    # prediction whose target framework's profile was fitted on the target run): "calibrated".
    calibrated_on: str = ""


@dataclass
class Context:
    """What sources may use: where raw data lives, where to write run dirs, shared caches."""

    data_root: Path
    work_dir: Path  # reports/reproduce/runs: ingested and emulated run directories
    cache: dict[Any, Any] = field(default_factory=dict)


def import_dep(module: str, what: str) -> Any:
    """Import a module of another stage; raise Pending naming it when it is not there yet."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            raise Pending(f"pending: {what} ({module})") from e
        raise


class SpecError(ValueError):
    """A conf/published file is malformed; the message names the file, figure and key."""


@dataclass(frozen=True)
class Input:
    """A number a case takes as given (published elsewhere, or an explicit assumption)."""

    name: str
    value: float
    unit: str = ""
    source: str = ""  # URL, or "assumption: why"
    figure: str = ""  # id of this case's figure the input was fitted to / back-solved from, if any
    kind: str = "published"  # one of INPUT_KINDS
    key: str = ""  # the config key the value sits in (e.g. workload.response_len_sigma), if any


@dataclass(frozen=True)
class Figure:
    id: str
    figure: str  # what was measured, in words
    unit: str
    compute: dict[str, Any]  # {source: <kind>, ...kind-specific keys}
    published: float | None = None  # None: read from `report_cell` at run time
    report_cell: dict[str, str] | None = None  # {table, row, column} of the benchmark's REPORT.md
    tolerance_pct: float | None = None  # None: the case's tolerance
    source_url: str = ""
    note: str = ""  # shown in the table: caveats
    # The source's own other figures contradict this one (say how): a miss is then status
    # "contradicted", not "fail", so --strict does not fail on the publication's own error.
    contradicted: str = ""
    # An input of the case was fitted to this figure (say which): the row shows the fit, status
    # "calibrated"; it is not a prediction and never passes or fails.
    calibrated: str = ""
    # Inputs of the case (names) this figure's value follows from: a fitted or back-solved one
    # makes the row "derived"; a chosen one is listed as an assumption in the note.
    depends_on: tuple[str, ...] = ()
    # Instead of `published`: the reference value is measured, computed like `compute` (e.g. a
    # run's own raw logs, for a prediction of that run).
    measured: dict[str, Any] | None = None


@dataclass(frozen=True)
class Case:
    name: str  # file stem
    title: str
    source_url: str
    setup: str  # the published setup, in words
    ours: str  # one of OURS_KINDS: how "ours" is produced
    tolerance_pct: float
    figures: list[Figure]
    inputs: dict[str, Input] = field(default_factory=dict)
    notes: str = ""
    path: Path | None = None

    def tolerance(self, fig: Figure) -> float:
        return self.tolerance_pct if fig.tolerance_pct is None else fig.tolerance_pct


_CASE_KEYS = {"title", "source_url", "setup", "ours", "tolerance_pct", "figures", "inputs", "notes"}
_FIG_KEYS = {
    "id",
    "figure",
    "unit",
    "compute",
    "published",
    "report_cell",
    "tolerance_pct",
    "source_url",
    "note",
    "contradicted",
    "calibrated",
    "depends_on",
    "measured",
}
_INPUT_KEYS = {"value", "unit", "source", "figure", "kind", "key"}


def _known_keys(d: dict, allowed: Any, where: str) -> None:
    unknown = set(d) - set(allowed)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected {sorted(allowed)}")


def _need(d: dict, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in d:
        raise SpecError(f"{where}: key {key!r} missing")
    if not isinstance(d[key], kind):
        raise SpecError(f"{where}: key {key!r} is {d[key]!r}; expected {kind}")
    return d[key]


def _number(d: dict, key: str, where: str, required: bool = False) -> float | None:
    if d.get(key) is None:
        if required:
            raise SpecError(f"{where}: key {key!r} missing (a number expected)")
        return None
    if isinstance(d[key], bool) or not isinstance(d[key], int | float):
        raise SpecError(f"{where}: key {key!r} is {d[key]!r}; expected a number")
    return float(d[key])


def _parse_inputs(raw_inputs: dict[str, Any], where: str) -> dict[str, Input]:
    """`inputs:` of a case: a number, or {value, unit, source, kind, figure, key}."""
    inputs = {}
    for name, val in raw_inputs.items():
        w = f"{where}: inputs.{name}"
        if isinstance(val, int | float) and not isinstance(val, bool):
            val = {"value": val}
        if not isinstance(val, dict):
            raise SpecError(f"{w}: expected a number or {{value, unit, source}}")
        _known_keys(val, _INPUT_KEYS, w)
        kind = str(val.get("kind", "published"))
        if kind not in INPUT_KINDS:
            raise SpecError(f"{w}: kind={kind!r}; expected one of {INPUT_KINDS}")
        if kind in ("fitted", "back-solved") and not val.get("figure"):
            raise SpecError(f"{w}: kind={kind} needs `figure` (the id it was {kind} to/from)")
        inputs[name] = Input(
            name=name,
            value=_number(val, "value", w, required=True),
            unit=str(val.get("unit", "")),
            source=str(val.get("source", "")),
            figure=str(val.get("figure", "")),
            kind=kind,
            key=str(val.get("key", "")),
        )
    return inputs


def parse_case(raw: Any, path: Path) -> Case:
    """Validate one YAML document into a Case; every error names the file and key."""
    where = str(path)
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: expected a mapping at the top level")
    _known_keys(raw, _CASE_KEYS, where)
    ours = _need(raw, "ours", where, str)
    if ours not in OURS_KINDS:
        raise SpecError(f"{where}: ours={ours!r}; expected one of {OURS_KINDS}")
    inputs = _parse_inputs(raw.get("inputs") or {}, where)
    figures, seen = [], set()
    for i, f in enumerate(_need(raw, "figures", where, list)):
        w = f"{where}: figures[{i}]"
        if not isinstance(f, dict):
            raise SpecError(f"{w}: expected a mapping")
        _known_keys(f, _FIG_KEYS, w)
        fid = _need(f, "id", w, str)
        w = f"{where}: figure {fid!r}"
        if fid in seen:
            raise SpecError(f"{w}: duplicate id")
        seen.add(fid)
        compute = _need(f, "compute", w, dict)
        _need(compute, "source", f"{w}: compute", str)
        cell = f.get("report_cell")
        if cell is not None and (not isinstance(cell, dict) or set(cell) != {"table", "row", "column"}):
            raise SpecError(f"{w}: report_cell must be {{table, row, column}}, got {cell!r}")
        published = _number(f, "published", w)
        measured = f.get("measured")
        if measured is not None and (not isinstance(measured, dict) or "source" not in measured):
            raise SpecError(f"{w}: measured must be a computation {{source: ..., ...}}, got {measured!r}")
        if published is None and cell is None and measured is None:
            raise SpecError(
                f"{w}: give `published` (the number), `report_cell` (where REPORT.md has it) "
                "or `measured` (how to compute the reference from raw data)"
            )
        deps = f.get("depends_on") or []
        if not isinstance(deps, list) or any(d not in inputs for d in deps):
            raise SpecError(
                f"{w}: depends_on={deps!r}: expected a list of this case's inputs {sorted(inputs)}"
            )
        figures.append(
            Figure(
                id=fid,
                figure=_need(f, "figure", w, str),
                unit=str(f.get("unit", "")),
                compute=dict(compute),
                published=published,
                report_cell=dict(cell) if cell else None,
                tolerance_pct=_number(f, "tolerance_pct", w),
                source_url=str(f.get("source_url", "")),
                note=str(f.get("note", "")).strip(),
                contradicted=str(f.get("contradicted", "")).strip(),
                calibrated=str(f.get("calibrated", "")).strip(),
                depends_on=tuple(deps),
                measured=dict(measured) if measured else None,
            )
        )
    for inp in inputs.values():
        if inp.figure and inp.figure not in seen:
            raise SpecError(
                f"{where}: inputs.{inp.name}.figure={inp.figure!r}: expected a figure id of this case"
            )
    return Case(
        name=path.stem,
        title=_need(raw, "title", where, str),
        source_url=_need(raw, "source_url", where, str),
        setup=str(raw.get("setup", "")).strip(),
        ours=ours,
        tolerance_pct=_number(raw, "tolerance_pct", where, required=True),
        figures=figures,
        inputs=inputs,
        notes=str(raw.get("notes", "")).strip(),
        path=path,
    )


def load_case(path: Path | str) -> Case:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from e
    return parse_case(raw, path)


def load_cases(names: list[str] | None = None, directory: Path | str = PUBLISHED_DIR) -> list[Case]:
    """Load conf/published/<name>.yaml for each name (all files, sorted, when names is empty)."""
    directory = Path(directory)
    if not names:
        paths = sorted(directory.glob("*.yaml"))
        if not paths:
            raise SpecError(f"{directory}: no published figures (*.yaml) found")
    else:
        paths = [directory / f"{n}.yaml" for n in names]
        for p in paths:
            if not p.is_file():
                have = sorted(q.stem for q in directory.glob("*.yaml"))
                raise SpecError(f"published={p.stem!r}: {p} not found; available: {have}")
    return [load_case(p) for p in paths]
