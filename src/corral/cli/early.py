"""``corral --version`` and ``corral --help``: answered before click or the engine loads.

Both are a line or a page of text that click would write after loading itself (inspect, uuid,
datetime: about 25 ms) and, for the help, every command's module for its one-line summary: eight
times the start of a bare interpreter. Here ``--version`` is one line, and the group's help is
the text click writes, kept in :mod:`corral.cli.help_texts` for the widths a terminal mostly gives
it (generated from the click group; ``tests/cli/test_quick.py`` holds it equal and rewrites it).

Only the exact forms are answered here: ``--version``, ``--help``, ``-h`` and no arguments at all.
Anything else — a width with no kept text, ``--json``, a command, shell completion — returns None
and goes through click, which owns every other word of the command line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TextIO

#: The help's widest text column, as the command group sets it (``max_content_width``).
MAX_CONTENT_WIDTH = 100
#: The forms that print the group's help: click's ``--help``/``-h``, and ``corral`` alone.
HELP_FORMS: tuple[list[str], ...] = (["--help"], ["-h"], [])


def answer(args: Sequence[str], stdout: TextIO) -> int | None:
    """Write the answer to ``args`` and return its exit code, if they are a form answered here; else None."""
    if "_CORRAL_COMPLETE" in os.environ:  # the shell asks for completions: click's
        return None
    given = list(args)
    if given == ["--version"]:
        import corral

        text = f"corral {corral.__version__}"
    elif given in HELP_FORMS:
        from corral.cli.help_texts import ROOT_HELP

        found = ROOT_HELP.get(help_width())
        if found is None or (given and _ascii(stdout)):
            return None  # click writes --help to an ASCII stdout as UTF-8: its own way, then
        text = found
    else:
        return None
    try:
        print(text, file=stdout, flush=True)
    except BrokenPipeError:  # `corral --help | head`: as on click's way, no traceback and exit 0
        pass
    return 0


def _ascii(stream: TextIO) -> bool:
    """Whether ``stream`` encodes ASCII only (``PYTHONIOENCODING=ascii``), which click's ``echo`` overrides."""
    import codecs

    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name == "ascii"
    except LookupError:
        return False


def help_width() -> int:
    """The width click's help formatter takes: the terminal's columns up to the group's widest, less 2, at least 50."""
    return max(min(terminal_columns(), MAX_CONTENT_WIDTH) - 2, 50)


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns`` (what click asks), without loading shutil and its three
    compression modules: ``COLUMNS`` when it is a positive number, else the terminal's, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns
