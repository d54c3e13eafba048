"""The CLI's application object: it owns output, the ``--json`` contract and aborts.

Human text goes to stdout, or to stderr in ``--json`` mode, where stdout carries
exactly one JSON document (or JSON Lines for streaming commands). Colour only on a
terminal and never with ``NO_COLOR``.

A command answers once, through ``answer``: the JSON document and the human text of
the same result, and the mode picks one. A streaming command (``logs``, ``accept``'s
progress, ``daemon run``) sends each event through ``event`` instead: a JSON Line, or
its line of text.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

import click

from corral.domain.actors import Actor
from corral.engine.project import Project, default_actor
from corral.engine.read.projection import SCHEMA_VERSION
from corral.errors import CorralError

Text = str | Iterable[str]  # one string, or lines

_COLORS = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "dim": 2, "bold": 1}


def color_enabled(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class App:
    def __init__(self, repo: str | None = None) -> None:
        self.repo = repo
        self.json = False
        # A streaming command's --json errors are one more JSON Line (``{"event": "error", …}``),
        # not a document after the lines a reader is already parsing.
        self.streaming = False
        self._project: Project | None = None
        self.stdout: TextIO = sys.stdout
        self.stderr: TextIO = sys.stderr

    # -- the project ---------------------------------------------------------------
    @property
    def project(self) -> Project:
        if self._project is None:
            self._project = Project.open(self.repo)
        return self._project

    @property
    def actor(self) -> Actor:
        return default_actor()

    def close(self) -> None:
        if self._project is not None:
            self._project.close()

    # -- output --------------------------------------------------------------------
    @property
    def human(self) -> TextIO:
        """Where human-readable text goes: stdout, or stderr when stdout carries JSON."""
        return self.stderr if self.json else self.stdout

    def style(self, text: str, color: str, stream: TextIO | None = None) -> str:
        if not color_enabled(stream or self.human):
            return text
        return f"\x1b[{_COLORS[color]}m{text}\x1b[0m"

    def say(self, text: str = "") -> None:
        """A line of human text (stderr in --json mode)."""
        print(text, file=self.human)

    def note(self, text: str) -> None:
        """A side remark: always stderr, so stdout stays the command's answer."""
        print(text, file=self.stderr)

    def answer(self, doc: dict[str, Any], human: Text | Callable[[], Text] = ()) -> None:
        """The command's answer: ``doc`` as the one JSON document with --json, else ``human`` on stdout.

        ``human`` may be a function, so text that takes work to build is built only when shown;
        it is written at once, so a long page is one write.
        """
        if self.json:
            self.emit(doc)
            return
        text = human() if callable(human) else human
        lines = [text] if isinstance(text, str) else list(text)
        if lines:
            print("\n".join(lines), file=self.stdout)

    def event(self, doc: dict[str, Any], human: str | Callable[[], str] | None = None, *, aside: bool = False) -> None:
        """One event of a streaming command: a JSON Line with --json, else its text, flushed.

        ``aside`` sends the text to stderr (progress beside the answer); ``None`` shows nothing.
        """
        if self.json:
            self.emit_line(doc)
        elif human is not None:
            print(human() if callable(human) else human, file=self.stderr if aside else self.stdout, flush=True)

    def emit(self, doc: dict[str, Any]) -> None:
        """The one JSON document of a --json command."""
        print(dumps({"schema_version": SCHEMA_VERSION, **doc}), file=self.stdout)

    def emit_line(self, doc: dict[str, Any]) -> None:
        """One JSON Lines event of a streaming command."""
        print(dumps(doc), file=self.stdout, flush=True)

    def fail(self, error: CorralError) -> int:
        if self.json and self.streaming:
            self.emit_line({"event": "error", "error": error.to_json()})
        elif self.json:
            self.emit({"error": error.to_json()})
        else:
            print(f"{self.style('error:', 'red', self.stderr)} {error.message}", file=self.stderr)
            if error.hint:
                print(f"{self.style('hint:', 'yellow', self.stderr)} {error.hint}", file=self.stderr)
        return error.exit_code


def dumps(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


pass_app = click.make_pass_decorator(App)


def json_option(f: Any) -> Any:
    """``--json`` on every command: one JSON document on stdout, human text on stderr."""

    def set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.ensure_object(App).json = True
        return value

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=set_json,
        help="Print one JSON document on stdout (errors too); human text goes to stderr.",
    )(f)
