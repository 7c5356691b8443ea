"""The runner interface: what the suite knows about one framework.

A runner is one module, `runners/<framework>.py`, with a class named in
`conf/framework/<framework>.yaml` as `_target_`. It has two jobs and no others:

- `render_launch(cfg) -> Launch`: the framework's real native launch for a composed workload
  (argv per role and node rank, environment variable names, native config files, sbatch text);
- `parse_logs(log_dir) -> ParseResult`: what the framework really logged -> trace rows.

The base class `Runner` holds what every framework does the same way (mode resolution,
validation before rendering, the Launch, parse_logs' path handling, console-line cleaning); a
runner fills in its framework's part. Adding a framework: docs/adding-a-framework.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.utils import get_class
from omegaconf import OmegaConf

from bench.trace import atomic_path, carried_secrets, carried_secrets_note, redact, redact_file
from runners.run_config import ANSI_BYTES, RAY_PREFIX_PATTERN


@dataclass
class Process:
    """One process to start: on which node rank, in which role, with which argv and env."""

    role: str  # driver | ray_head | ray_worker | trainer | inference | orchestrator | ...
    node_rank: int  # index into the job's node list
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # values; secrets are named in secret_env
    secret_env: list[str] = field(default_factory=list)  # names only, values never written
    log: str = ""  # its log file under <run>/logs/ in job.sbatch; "" = <role>-<node_rank>.log


@dataclass
class Launch:
    """A rendered native launch: everything written to <run>/launch/."""

    framework: str
    version: str
    nodes: int
    gpus_per_node: int
    processes: list[Process]
    files: dict[str, str] = field(default_factory=dict)  # name -> text (overrides.txt, rl.toml, ...)
    sbatch: str = ""  # complete job.sbatch text
    notes: list[str] = field(default_factory=list)  # translation caveats for this workload
    # config keys whose secret values the launch carries: written as <redacted>, so it cannot use them
    secrets: list[str] = field(default_factory=list)

    def command_json(self) -> dict[str, Any]:
        """command.json's content, redacted (bench.redact: argv, env and notes alike)."""
        return redact(
            {
                "framework": self.framework,
                "version": self.version,
                "nodes": self.nodes,
                "gpus_per_node": self.gpus_per_node,
                "processes": [
                    {
                        "role": p.role,
                        "node_rank": p.node_rank,
                        "argv": p.argv,
                        "env": p.env,
                        "secret_env": sorted(p.secret_env),
                    }
                    for p in self.processes
                ],
                "notes": self.notes,
            }
        )

    def write(self, launch_dir: Path | str) -> list[Path]:
        """Write command.json, job.sbatch and the native files atomically, every one redacted
        (a secret the launch carries is written as <redacted>: see `secrets`); return the paths."""
        launch_dir = Path(launch_dir)
        written = []
        items = {name: redact_file(name, text) for name, text in self.files.items()}
        if self.sbatch:
            items["job.sbatch"] = redact_file("job.sbatch", self.sbatch)
        items = {"command.json": json.dumps(self.command_json(), indent=2) + "\n", **items}  # redacted
        for name, text in items.items():
            with atomic_path(launch_dir / name) as tmp:
                tmp.write_text(text)
            written.append(launch_dir / name)
        return written


@dataclass
class ParseResult:
    """Trace rows parsed from native logs, plus what could not be parsed (never raised)."""

    steps: list[dict[str, Any]]  # rows for steps.parquet (trace.STEP_FIELDS + native_*)
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # human-readable, one per problem kind
    skipped_lines: int = 0
    files: list[str] = field(default_factory=list)  # files the parser read
    run_info: dict[str, Any] = field(default_factory=dict)  # e.g. native wall time, versions


NOT_INSTALLED = "not installed here"  # ends a native-check line that means "could not check", not "rejected"

# Colour codes (loguru, Ray) and Ray's actor prefix `(TaskRunner pid=12, ip=10.0.0.1) `, which every
# framework on Ray prints before a worker's line; parsers match what follows them.
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RAY_PREFIX = re.compile("^" + RAY_PREFIX_PATTERN + r"\s*")
RAY_PREFIX_BYTES = re.compile(("^" + RAY_PREFIX_PATTERN + r"\s*").encode())


def clean_line(line: str) -> str:
    """One console line without colour codes and without a leading Ray actor prefix."""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    return RAY_PREFIX.sub("", line, count=1)


def clean_line_bytes(line: bytes) -> bytes:
    """clean_line for raw bytes (parsers that scan files without decoding them)."""
    if b"\x1b" in line:
        line = ANSI_BYTES.sub(b"", line)
    return RAY_PREFIX_BYTES.sub(b"", line, count=1)


def cr_only(block: bytes) -> bool:
    """Whether a file's first block ends its lines with bare CR only (no LF at all): the parsers
    then read its CRs as line ends (records), while `grep -n` numbers the whole file as line 1."""
    return b"\n" not in block and b"\r" in block


def clean_text(text: str) -> str:
    """clean_line on every line of a block of text (line ends kept)."""
    return "".join(clean_line(ln) for ln in text.splitlines(keepends=True))


def enum_value(value: Any) -> str:
    """The plain string of a config enum (Placement.colocated -> "colocated") or of a string."""
    return str(getattr(value, "value", value))


@dataclass
class Build:
    """A runner's framework-specific part of a launch; Runner.render_launch adds the rest."""

    nodes: int
    gpus_per_node: int
    processes: list[Process]
    files: dict[str, str]  # native files: overrides.txt, flags.txt, rl.toml, ...
    sbatch: str
    notes: list[str] = field(default_factory=list)


class Runner:
    """Base class of every runner: the shared skeleton of render and parse, the hooks declared.

    A runner sets `name` and implements `auto_mode`, `build`, `parse` and `schema_problems`;
    `validate`, `validate_native` and `native_settings` are optional (defaults below). The base does the
    rest the same way for every framework: mode resolution, validation before rendering, the
    Launch, and parse_logs' path handling.
    """

    name: str = ""

    def __init__(self, **framework_conf: Any):
        # The whole conf/framework/<name>.yaml node (version, modes, native knobs).
        self.conf = framework_conf

    @property
    def version(self) -> str:
        return str(self.conf.get("version", ""))

    # ---- required -----------------------------------------------------------------------------
    def auto_mode(self, cfg: Any) -> str:
        """The runner's native mode for framework.mode=auto (from placement, staleness, partial rollout)."""
        raise NotImplementedError

    def build(self, cfg: Any, mode: str) -> Build:
        """The framework's native launch of a validated config in `mode`."""
        raise NotImplementedError

    def parse(self, log_dir: Path, **options: Any) -> ParseResult:
        """Parse an existing native output directory (or file) into trace rows."""
        raise NotImplementedError

    def schema_problems(self, launch: Launch, schema_root: Path | None = None) -> list[str]:
        """A rendered launch read back and checked against the framework's own schema (derived into
        runners/schemas/, or the framework's shipped config under `schema_root`): one line per
        unknown key or value the framework would read differently; [] when it round-trips."""
        raise NotImplementedError

    # ---- optional hooks, with their defaults ----------------------------------------------------
    def validate(self, cfg: Any) -> list[str]:
        """Framework-specific pre-flight problems, one message per problem (key, value, expected).
        Default: only the mode check."""
        return self.mode_problems(cfg)

    def validate_native(self, cfg: Any, launch: Launch) -> list[str]:
        """The installed framework's own verdict on a rendered launch; a line ending in
        NOT_INSTALLED means it could not be checked here. Default: no native check."""
        return [f"{self.name}: native check {NOT_INSTALLED}"]

    def native_settings(self, launch: Launch) -> dict[str, str]:
        """The launch's native settings as flat `key -> value` text, for comparing two renders
        (docs/frameworks.md). Default: each native file whole, under its name."""
        return dict(launch.files)

    # ---- the shared skeleton ------------------------------------------------------------------
    def modes(self) -> list[str]:
        """Native modes of the pinned version (keys of conf/framework/<name>.yaml `modes`)."""
        return sorted(self.conf.get("modes") or {})

    def mode_problems(self, cfg: Any) -> list[str]:
        """framework.mode checked against the pinned version's modes ([] when it is one, or auto)."""
        mode, modes = str(cfg.framework.mode), self.modes()
        if mode == "auto" or not modes or mode in modes:
            return []
        return [f"framework.mode={mode!r}: {self.name} {cfg.framework.version} supports {modes} (or 'auto')"]

    def resolve_mode(self, cfg: Any) -> str:
        """cfg.framework.mode, or the runner's choice (auto_mode) when it is "auto"; ValueError
        naming the key for a mode the pinned version does not have."""
        problems = self.mode_problems(cfg)
        if problems:
            raise ValueError(problems[0])
        mode = str(cfg.framework.mode)
        return self.auto_mode(cfg) if mode == "auto" else mode

    def render_launch(self, cfg: Any) -> Launch:
        """Validate, resolve the mode, build: a composed BenchConf -> the framework's Launch."""
        problems = self.validate(cfg)
        if problems:
            raise ValueError(f"{self.name} cannot run this workload: " + "; ".join(problems))
        b = self.build(cfg, self.resolve_mode(cfg))
        launch = Launch(
            framework=self.name,
            version=str(cfg.framework.version),
            nodes=b.nodes,
            gpus_per_node=b.gpus_per_node,
            processes=b.processes,
            files=b.files,
            sbatch=b.sbatch,
            notes=b.notes,
        )
        # A secret typed into the config (cluster.setup, framework.native...) that the launch carries
        # is written redacted, so the launch could not use it: said here, at render time.
        carried = [*b.files.values(), b.sbatch, *(x for p in b.processes for x in (*p.argv, *p.env.values()))]
        launch.secrets = carried_secrets(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), carried)
        if launch.secrets:
            launch.notes = [*launch.notes, carried_secrets_note(launch.secrets)]
        return launch

    def parse_logs(self, log_dir: Path | str, **options: Any) -> ParseResult:
        """A native run's output directory (files found by content) -> trace rows; never raises on
        bad input: a missing path is a warning. `options` go to the runner's parse."""
        log_dir = Path(log_dir)
        if not log_dir.exists():
            return ParseResult(steps=[], warnings=[f"{log_dir}: no such file or directory"])
        return self.parse(log_dir, **options)


def load_runner(framework_cfg: Any) -> Runner:
    """Instantiate the runner named by a framework config node's `_target_`, with the rest of the node
    as plain containers: what hydra's instantiate(node, _convert_="all") builds from a framework node
    (no nested `_target_`), without its deep copy of the whole node (30 ms -> 2 ms a call; bench plan
    makes two a split it validates)."""
    conf = (
        OmegaConf.to_container(framework_cfg, resolve=True)
        if OmegaConf.is_config(framework_cfg)
        else dict(framework_cfg)
    )
    return get_class(str(conf.pop("_target_")))(**conf)
