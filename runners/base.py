"""The runner interface: what the suite knows about one framework.

A runner is one module, `runners/<framework>.py`, with a class named in
`conf/framework/<framework>.yaml` as `_target_`. It has two jobs and no others:

- `render_launch(cfg) -> Launch`: the framework's real native launch for a composed workload
  (argv per role and node rank, environment variable names, native config files, sbatch text);
- `parse_logs(log_dir) -> ParseResult`: what the framework really logged -> trace rows.

Adding a fourth framework is one module plus one YAML; nothing here or in bench/ changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.utils import instantiate

from bench.trace import atomic_path, redact


@dataclass
class Process:
    """One process to start: on which node rank, in which role, with which argv and env."""

    role: str  # driver | ray_head | ray_worker | trainer | inference | orchestrator | ...
    node_rank: int  # index into the job's node list
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # values; secrets are named in secret_env
    secret_env: list[str] = field(default_factory=list)  # names only, values never written


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

    def command_json(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "version": self.version,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "processes": [
                {
                    "role": p.role,
                    "node_rank": p.node_rank,
                    "argv": p.argv,
                    "env": redact(p.env),
                    "secret_env": sorted(p.secret_env),
                }
                for p in self.processes
            ],
            "notes": self.notes,
        }

    def write(self, launch_dir: Path | str) -> list[Path]:
        """Write command.json, job.sbatch and the native files atomically; return the paths."""
        launch_dir = Path(launch_dir)
        written = []
        items = {"command.json": json.dumps(self.command_json(), indent=2) + "\n", **self.files}
        if self.sbatch:
            items["job.sbatch"] = self.sbatch
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


class Runner:
    """Base class: subclasses set `name` and implement render_launch and parse_logs."""

    name: str = ""

    def __init__(self, **framework_conf: Any):
        # The whole conf/framework/<name>.yaml node, for version-keyed translation tables.
        self.conf = framework_conf

    def render_launch(self, cfg: Any) -> Launch:
        """Translate a composed BenchConf (workload, experiment, cluster, framework) into a Launch."""
        raise NotImplementedError

    def resolve_mode(self, cfg: Any) -> str:
        """The framework's native mode for this run: cfg.framework.mode, or the runner's choice
        from placement / staleness budget / partial rollout when it is "auto"."""
        raise NotImplementedError

    def validate(self, cfg: Any) -> list[str]:
        """Framework-specific pre-flight problems, one message per problem (key, value, expected)."""
        return []

    def parse_logs(self, log_dir: Path | str) -> ParseResult:
        """Parse a native run's output directory (files found by content) into trace rows."""
        raise NotImplementedError


def load_runner(framework_cfg: Any) -> Runner:
    """Instantiate the runner named by a framework config node's `_target_`."""
    return instantiate(framework_cfg, _convert_="all")
