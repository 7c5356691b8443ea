"""Where a command may write: the one check of every `--out`, and the staged write of a report.

Every command that writes an `--out` (render, report, emulate, ingest, calibrate, predict, plan)
calls `check_out` before it writes anything. It refuses, with one line naming the path and the
fix (bench.errors.UsageError, exit 2):

- an `--out` under a file (a parent that is not a directory: the OS's ENOTDIR);
- an `--out` inside a run directory (a directory with manifest.json at or above it): a run
  directory is written only by its own run (docs/architecture.md, "The run directory");
- an `--out` that exists and holds something the command did not write (a report or a render may
  replace its own earlier output, recognised by the marker file MARKER that `staged` leaves in it);
- an `--out` on a read-only filesystem or in a directory this user cannot write (EROFS, EACCES).

What only shows while writing (disk full, ENOSPC) is turned into the same kind of line by
`os_refusal`; `staged` writes into a temporary directory beside the target and renames it into
place (report, render), so a failure never leaves a truncated index.html mixed with an earlier
report's files.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.errors import UsageError

MARKER = ".bench-output.json"  # {"command": "report"}: which command wrote this directory
NEVER_OVERWRITTEN = {  # command -> what its refusal of an existing --out says
    "emulate": "runs are never overwritten",
    "ingest": "runs are never overwritten",
    "predict": "runs are never overwritten",
    "render": "a render replaces only its own earlier render",
    "report": "a report replaces only its own earlier report",
    "reproduce": "a reproduce replaces only its own earlier output",
    "plan": "a plan is never overwritten",
    "calibrate": "a calibration is never overwritten",
}


def check_out(out: Path | str, command: str, *, is_file: bool = False, replace_own: bool = False) -> Path:
    """Refuse an `--out` that `command` may not write (see the module docstring); return it.

    `is_file`: the output is one file (calibrate's YAML), not a directory. `replace_own`: an
    existing directory that `command` itself wrote earlier (its MARKER) may be replaced whole.
    """
    out = Path(out)
    full = Path(os.path.abspath(out))
    for parent in reversed(full.parents):  # from / down: the first non-directory is the culprit
        if parent.exists() and not parent.is_dir():
            raise UsageError(
                f"--out {out}: {parent} is a file ({os.strerror(errno.ENOTDIR)}); choose a --out whose "
                "parent folders are directories"
            )
    run = next((p for p in full.parents if (p / "manifest.json").is_file()), None)
    if run is not None:
        raise UsageError(
            f"--out {out}: inside the run directory {run}; a run directory is written only by its run, "
            "choose a --out outside it"
        )
    if full.exists():
        _check_existing(out, full, command, is_file, replace_own)
    # where --out is created (or, staged, renamed into place), and --out itself when it exists
    for base in (next(p for p in full.parents if p.exists()), *([full] if full.is_dir() else [])):
        reason = _unwritable(base)
        if reason is not None:
            raise UsageError(
                f"--out {out}: {base} is not writable ({os.strerror(reason)}); choose a --out on a "
                "writable filesystem"
            )
    return out


def _check_existing(out: Path, full: Path, command: str, is_file: bool, replace_own: bool) -> None:
    policy = NEVER_OVERWRITTEN.get(command, "outputs are never overwritten")
    if is_file or not full.is_dir():
        what = "a directory" if full.is_dir() else "a file"
        raise UsageError(f"--out {out}: already exists ({what}); {policy}, choose a new --out")
    if (full / "manifest.json").is_file():
        raise UsageError(f"--out {out}: already exists (a run directory); {policy}, choose a new --out")
    if not any(full.iterdir()) or (replace_own and written_by(full) == command):
        return
    raise UsageError(
        f"--out {out}: already exists (not empty, holds files bench {command} did not write); "
        f"{policy}, choose a new --out"
    )


def _unwritable(base: Path) -> int | None:
    """errno why files cannot be created in directory `base` (EROFS, EACCES), else None."""
    try:
        if os.statvfs(base).f_flag & os.ST_RDONLY:
            return errno.EROFS
    except OSError as e:
        return e.errno
    return None if os.access(base, os.W_OK | os.X_OK) else errno.EACCES


# What a report or a reproduce wrote before the marker existed (the releases before this round): a
# directory holding its signature file and nothing but its own names is that command's earlier output,
# so `make bench` and `make reproduce` go on replacing what they wrote before the upgrade.
UNMARKED_OUTPUTS = {
    "report": ("summary.md", {"index.html", "summary.md", "summary.csv", "figures"}),
    "reproduce": ("reproduce.md", {"index.html", "reproduce.md", "reproduce.csv", "runs"}),
}


def written_by(directory: Path | str) -> str | None:
    """The command whose MARKER `directory` holds, or whose unmarked earlier output it is
    (UNMARKED_OUTPUTS); None otherwise."""
    directory = Path(directory)
    try:
        return json.loads((directory / MARKER).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        pass
    names = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    for command, (signature, own) in UNMARKED_OUTPUTS.items():
        if signature in names and names <= own:
            return command
    return None


def os_refusal(out: Path | str, e: OSError, kept: bool = True) -> UsageError:
    """The one line for an OS failure while writing `--out` (disk full, read-only, not a directory);
    `kept`: the write was staged (see `staged`), so `out` is as it was before the command."""
    why = os.strerror(e.errno) if e.errno else str(e)
    then = "nothing was changed there" if kept else "what it holds may be partial (a run: marked failed)"
    return UsageError(f"--out {out}: cannot write ({why}); {then}, choose another --out")


DISK_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT)  # the disk refused, not the program


def disk_refusal(e: OSError) -> UsageError | None:
    """The one line for a full or read-only disk met mid-write by any command (bench/__main__.py's
    last resort, where no --out is known), naming the file; None for any other OSError (a bug)."""
    if e.errno not in DISK_ERRNOS:
        return None
    where = e.filename or "a file"
    return UsageError(f"{where}: cannot write ({os.strerror(e.errno)}); free space or write elsewhere")


@contextlib.contextmanager
def staged(out: Path | str, command: str) -> Iterator[Path]:
    """Yield a new temporary directory beside `out` to write the whole output into; when the block
    succeeds, mark it as `command`'s (MARKER) and rename it onto `out` (an earlier output there,
    already accepted by check_out, is replaced whole). On any failure the temporary directory is
    removed and `out` is left as it was; an OSError becomes os_refusal's line."""
    out = Path(out)
    parent = Path(os.path.abspath(out)).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
    except OSError as e:
        raise os_refusal(out, e) from None
    try:
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"command": command}) + "\n")
        if out.exists():  # an empty directory or this command's earlier output: swap, then drop it
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=parent))
            os.replace(out, old / "previous")
            try:
                os.replace(tmp, out)
            except OSError:
                os.replace(old / "previous", out)  # put the earlier output back
                old.rmdir()
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except OSError as e:
        raise os_refusal(out, e) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
