"""Where a person's text comes from: ``-m``, piped stdin, or ``$EDITOR`` — in that order."""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path

from corral.adapters.terminal import run_interactive
from corral.errors import UsageError

SCISSORS = "# ------------------------ >8 ------------------------"


def read_stdin() -> str:
    data = sys.stdin.buffer.read()
    return data.decode("utf-8", "surrogateescape")


def from_editor(instructions: str) -> str:
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not editor:
        raise UsageError(
            "No text given and no editor to write it in.",
            code="no-text",
            hint="Pass -m 'TEXT', pipe it on stdin, or set $EDITOR.",
        )
    with tempfile.TemporaryDirectory(prefix="corral-") as tmp:
        path = Path(tmp) / "CORRAL_MESSAGE.md"
        path.write_text(f"\n{SCISSORS}\n# {instructions}\n# Everything from the line above down is removed.\n")
        # The editor owns the terminal as an agent in `pair` does: a Ctrl-C or Ctrl-Z in it is its own.
        code = run_interactive([*shlex.split(editor), str(path)]).status
        if code != 0:
            raise UsageError(
                f"The editor exited with status {code}; nothing was saved.",
                code="editor-failed",
                hint="Pass the text with -m instead.",
            )
        raw = path.read_bytes().decode("utf-8", "surrogateescape")
    text = raw.split(SCISSORS, 1)[0]
    return text.strip("\n")


def obtain(message: str | None, instructions: str, *, interactive_ok: bool = True) -> str | None:
    """The text from ``-m``, else piped stdin, else the editor on a terminal; None when none."""
    if message is not None:
        return message
    if not sys.stdin.isatty():
        text = read_stdin()
        return text if text.strip() else None
    if interactive_ok:
        text = from_editor(instructions)
        return text if text.strip() else None
    return None
