"""Shell text from values: the one place a value is quoted for bash (docs/security.md, Quoting).

Every value a render writes into a script (job.sbatch, the dry run's printed command) goes
through `shell_word`: the value is literal to bash (no `$(...)`, backticks, `;`, quotes or line
breaks act), and only the suite's own references (`SUITE_VARIABLES`, e.g. `${RUN_DIR}`, and the
`{run_dir}` placeholder, which becomes `${RUN_DIR}`) expand. A `#SBATCH` header line cannot
quote a line break (bash would read the rest as a command), so `header_value` refuses one, and
`script_value_problems(cfg)` names every config key that would reach a header with one, for the
pre-flight (bench validate / run / render) to refuse before anything is written. The one
deliberate exception, `cluster.setup`, is written verbatim by runners/slurm.py.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import Any

RUN_DIR_PLACEHOLDER = "{run_dir}"

# The variables job.sbatch itself sets (or Slurm sets for it) and that a rendered argv, env value
# or srun option may refer to as `${NAME}`; any other `$` in a value is literal text.
SUITE_VARIABLES = (
    "RUN_DIR", "OUTPUT_DIR", "CONFIG_DIR", "PRIME_RL_DIR", "MASTER_ADDR", "HEAD_IP", "NODE_IP",
    "SLURM_JOB_ID", "SLURMD_NODENAME",
)  # fmt: skip
SUITE_REFERENCE = re.compile(r"(\$\{(?:" + "|".join(SUITE_VARIABLES) + r"|NODES\[\d+\])\})")
# Inside double quotes these still act; each is written so that it stands for itself (`!`, history
# expansion when a printed command is pasted into a terminal, cannot be escaped there: it is
# single-quoted between two double-quoted parts).
_DOUBLE_QUOTED = str.maketrans({"\\": "\\\\", '"': '\\"', "$": "\\$", "`": "\\`", "!": "\"'!'\""})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Line breaks and other control characters: a #SBATCH line cannot carry them (see header_value).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shell_word(value: Any) -> str:
    """One bash word holding `value` literally, except its suite references (`${RUN_DIR}`, ...,
    and the `{run_dir}` placeholder), which expand. Without a reference it is shlex.quote; with
    one, the word is double-quoted with every character that acts there escaped, the references
    left as they are."""
    text = str(value).replace(RUN_DIR_PLACEHOLDER, "${RUN_DIR}")
    pieces = SUITE_REFERENCE.split(text)  # literal, reference, literal, ..., literal
    if len(pieces) == 1:
        return shlex.quote(text)
    return '"' + "".join(p if i % 2 else p.translate(_DOUBLE_QUOTED) for i, p in enumerate(pieces)) + '"'


def shell_join(argv: Iterable[Any]) -> str:
    """An argv list as bash words (see shell_word)."""
    return " ".join(shell_word(a) for a in argv)


def env_name(name: Any) -> str:
    """An environment variable name as written bare into a script (`export NAME=...`,
    `${NAME:-}`); ValueError unless it is a shell identifier."""
    text = str(name)
    if not _ENV_NAME.fullmatch(text):
        raise ValueError(
            f"environment variable name {text!r}: expected letters, digits and _ (not starting with a digit)"
        )
    return text


def one_line(text: Any) -> str:
    """`text` with line breaks and other control characters written as escapes (`\\n`), so a
    comment built from it cannot end early and start a command."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def comment(text: Any) -> str:
    """A `# text` line that stays one line (see one_line)."""
    return "# " + one_line(text)


def header_value(key: str, value: Any) -> str:
    """A value for a `#SBATCH --option=VALUE` line, quoted as submitit quotes it (shlex.quote);
    ValueError naming `key` for a line break or other control character, which would end the
    comment line and let bash run the rest as a command."""
    text = str(value)
    if _CONTROL.search(text):
        raise ValueError(_header_problem(key, text))
    return shlex.quote(text)


def _header_problem(key: str, text: str) -> str:
    return (
        f"{key}={text!r}: contains a line break or control character, which a #SBATCH line cannot hold; "
        "remove it"
    )


def string_values(prefix: str, node: Any) -> Iterable[tuple[str, str]]:
    """(key, value) for every string under a config node (dicts as key.sub, lists as key[i])."""
    if hasattr(node, "items"):
        for k, v in node.items():
            yield from string_values(f"{prefix}.{k}", v)
    elif isinstance(node, str):
        yield prefix, node
    elif hasattr(node, "__iter__") and not isinstance(node, bytes):
        for i, v in enumerate(node):
            yield from string_values(f"{prefix}[{i}]", v)


def script_value_problems(cfg: Any) -> list[str]:
    """One line per config value that would put a line break into a #SBATCH line of job.sbatch or
    submit.sbatch: every string of `cluster` (partition, account, qos, constraint, container
    image and mounts, ...; `cluster.setup` excepted: its lines are written verbatim), the job name
    (`experiment.name`), `results_dir` (submitit's log paths) and `framework.container`."""
    values = [
        *((k, v) for k, v in string_values("cluster", cfg.cluster) if not k.startswith("cluster.setup")),
        ("experiment.name", cfg.experiment.name),
        ("results_dir", cfg.results_dir),
        ("framework.container", cfg.framework.get("container") or ""),
    ]
    return [_header_problem(k, str(v)) for k, v in values if _CONTROL.search(str(v))]
