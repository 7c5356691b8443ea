"""The argument parser of every `python -m bench <command>`: one layout, so one command's
conventions are every command's.

`--help` shows, in this order: the usage line (with `[key=value ...]` where the command composes a
config), what the command does, what it reads and what it writes (each a full sentence), the
arguments, and an example. Config overrides are always the positional `key=value` arguments, in
any order among the flags (argparse's intermixed parsing), and a run directory a command starts
from is always a positional RUN_DIR.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable

# what every composing command says about its key=value arguments (docs/bad-input.md: how a bad one is refused)
OVERRIDES_HELP = (
    "config overrides: a group option (experiment=smoke, framework=verl, hardware=h100_sxm, cluster=local) "
    "or a dotted key (workload.group_size=8); each is checked against the schema before anything runs"
)


class _Formatter(argparse.HelpFormatter):
    """Wraps each line of the description and epilog on its own (argparse would join them all into
    one paragraph); lines indented by two spaces (examples) are kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for line in text.splitlines():
            if not line.strip() or line.startswith("  "):
                out.append(indent + line if line.strip() else "")
            else:
                out.append(textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent))
        return "\n".join(out)


def command_parser(
    name: str, does: str, reads: str, writes: str, examples: list[str]
) -> argparse.ArgumentParser:
    """The parser of `python -m bench <name>`.

    `does`, `reads` and `writes` are full sentences (what the command does; the files, folders and
    settings it reads; what it writes, or that it writes nothing); `examples` are command lines for
    the epilog. A command that composes a config calls `add_overrides` after its other positionals,
    so the overrides come last in the usage line as `[key=value ...]`."""
    return argparse.ArgumentParser(
        prog=f"python -m bench {name}",
        description=f"{does}\n\nReads: {reads}\nWrites: {writes}",
        epilog="example" + ("s" if len(examples) > 1 else "") + ":\n" + "\n".join(f"  {e}" for e in examples),
        formatter_class=_Formatter,
    )


def add_overrides(ap: argparse.ArgumentParser, extra: str = "") -> None:
    """The positional `key=value` config overrides (after the command's other positionals); `extra`
    names the command's own keys that are not config keys (e.g. `seq_len=N`). Parse with
    `ap.parse_intermixed_args` so they may come before, between or after the flags."""
    ap.add_argument(
        "overrides", nargs="*", metavar="key=value", help=OVERRIDES_HELP + (f"; {extra}" if extra else "")
    )


def counted(n: int, noun: str, nouns: str | None = None) -> str:
    """`n` and the noun, plural unless n is 1: counted(1, "run") is "1 run", counted(3, "run") "3 runs"
    (`nouns` for an irregular plural). Every count the command line and the pages print goes through
    here (Jinja: the `counted` filter of bench.report.render.environment)."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def number_arg(lo: float, lo_ok: bool, kind: type = float) -> Callable[[str], float]:
    """argparse `type=` of every numeric flag of every command (`--timeout`, `--max-points`): a
    finite `kind` above `lo` (`lo_ok`: `lo` itself allowed), else argparse's one line, exit 2.
    `float("nan")` and `float("inf")` parse, and NaN passes every `<` test: both are refused here."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected a {'whole ' * (kind is int)}number"
            ) from None
        if not (math.isfinite(value) and (value >= lo if lo_ok else value > lo)):
            finite = "" if math.isfinite(value) else "a finite number "
            raise argparse.ArgumentTypeError(f"{text}: expected {finite}{'>=' if lo_ok else '>'} {lo}")
        return value

    return parse


positive_seconds = number_arg(0, False)  # a wait or timeout in seconds: finite and > 0
