"""The one exception for "the user's input is wrong".

`UsageError(line)` carries one line (or a short list of lines) that names the key, file or value
and the fix. `python -m bench` (bench/__main__.py) prints it as `error: <line>` on stderr and exits
2, with no traceback; entry points called directly (tests) see the exception itself. Raise it only
before anything is written, so a refused command leaves the disk as it found it.
"""

from __future__ import annotations

EXIT_USAGE = 2  # exit status of every refused command (argparse's own for a bad flag)


class UsageError(ValueError):
    """The command line or the config it composes is wrong; str(e) is what the user sees."""
