"""The CLI's application object: it owns output, the ``--json`` contract and aborts.

Human text goes to stdout, or to stderr in ``--json`` mode, where stdout carries
exactly one JSON document (or JSON Lines for streaming commands). Colour only on a
terminal and never with ``NO_COLOR``.

A command answers once, through ``answer``: the JSON document and the human text of
the same result, and the mode picks one. A streaming command (``logs``, ``accept``'s
progress, ``daemon run``) sends each event through ``event`` instead: a JSON Line, or
its line of text.

Human text is untrusted on its way out: an agent's output, a path, a branch or an error
line may hold escape sequences or bidi controls. Every line written here passes through
``corral.domain.sanitize.display``, so a terminal shows them as ``\\x1b`` or ``\\u202e``
instead of acting on them. corral's own colours survive it: :meth:`App.style` marks them
with a random per-process token that no text from outside can contain, and only those
marks become escape codes. JSON is exact: the text a document carries is the text stored,
with the characters a terminal would act on written as ``\\u`` escapes, so even a raw
``--json`` stream on a terminal is inert. ``logs --raw`` (:meth:`App.verbatim`) is the one
verbatim surface.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from corral.domain.agent_tools import TOKEN_ENV
from corral.errors import CorralError

if TYPE_CHECKING:
    from corral.domain.actors import Actor
    from corral.engine.api import Caller, Project

# The engine, the records and the sanitizer load where they are used, not here: a command answered
# without them (``failures --log``, click's own usage errors) starts without paying for them.

Text = str | Iterable[str]  # one string, or lines

_COLORS = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "dim": 2, "bold": 1}


def _style_mark() -> str:
    """Eight random private-use characters: what :meth:`App.style` writes where an escape code goes."""
    # os.urandom, not secrets: the mark need only be unguessable, and secrets costs a start-up import.
    return "".join(chr(0xE000 + int.from_bytes(os.urandom(2)) % 0x1900) for _ in range(8))


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
        self._caller: Caller | None = None
        self.stdout: TextIO = sys.stdout
        self.stderr: TextIO = sys.stderr
        self._mark = _style_mark()
        #: The task a prefix of its ref matched, for a command that changes it (``gate``): said in the answer.
        self.matched: dict[str, Any] | None = None
        #: The daemon this command started on its way (a launch whose agent gets corral's tools): said once.
        self.daemon_started: dict[str, Any] | None = None

    # -- the project ---------------------------------------------------------------
    @property
    def project(self) -> Project:
        if self._project is None:
            from corral.cli.copy_question import open_project  # it imports the engine's project

            self._project = open_project(self.repo, ask_ok=not self.json, note=self.note)
        return self._project

    @property
    def caller(self) -> Caller:
        """Who runs this command: a person (``CORRAL_ACTOR`` aside), or, inside a turn's process
        tree, that turn's agent, named by the token its supervisor put in the environment."""
        if self._caller is None:
            from corral.engine.api import Caller, agent_of_token, default_actor

            token = os.environ.get(TOKEN_ENV, "").strip()
            self._caller = agent_of_token(self.project, token) if token else Caller(default_actor())
            if self._caller.fence is not None:
                from corral.engine.api import fenced  # a worker's turn only

                # A worker's turn: what its agent writes through the CLI holds the turn's fence, as over MCP.
                self._project = fenced(self.project, self._caller)
        return self._caller

    @property
    def actor(self) -> Actor:
        from corral.engine.api import default_actor

        return self.caller.actor if os.environ.get(TOKEN_ENV, "").strip() else default_actor()

    def gate(self, command: str, params: dict[str, Any]) -> None:
        """An agent's gates on a command it runs (docs/mcp.md#gates): its own task or a direct subtask; and,
        whoever runs it, the rule for a prefix of the task's ref (docs/cli.md#task-references): said for a
        command that changes the task, refused for one that ends or merges it."""
        agent = bool(os.environ.get(TOKEN_ENV, "").strip())
        named = params.get("task")
        if not agent and not (isinstance(named, str) and _changes(command)):
            return
        caller = self.caller
        from corral.engine.api import gates

        if command == "create":
            params["parent"] = gates.parent_for_create(caller, params.get("parent"), self.project)
        elif isinstance(named, str):
            found = gates.aim(self.project, caller, command, named)
            if found.prefix is not None:
                params["task"] = found.task.ref  # the command runs on exactly the task said here
                self.matched = found.matched_json()
                if not self.json:
                    self.note(found.note or "")

    def close(self) -> None:
        if self._project is not None:
            self._project.close()

    # -- output --------------------------------------------------------------------
    @property
    def human(self) -> TextIO:
        """Where human-readable text goes: stdout, or stderr when stdout carries JSON."""
        return self.stderr if self.json else self.stdout

    def style(self, text: str, color: str, stream: TextIO | None = None) -> str:
        return self.paint(text, color) if self.colors(stream) else text

    def colors(self, stream: TextIO | None = None) -> bool:
        """Whether text styled for ``stream`` (default: where human text goes) is coloured."""
        return color_enabled(stream or self.human)

    def paint(self, text: str, color: str) -> str:
        """``text`` in ``color``, whatever the stream: for a caller that asked :meth:`colors` once."""
        return f"{self._mark}[{_COLORS[color]}m{text}{self._mark}[0m"

    def safe(self, text: str, *, keep_sgr: bool = False) -> str:
        """Human text as it may reach a terminal: escaped (:func:`display`), then our own colours.

        ``keep_sgr``: text a tool coloured (git's diff) keeps its colour sequences, and only them.
        """
        from corral.domain.sanitize import display

        text = display(text, keep_sgr=keep_sgr)
        return text.replace(self._mark, "\x1b") if self._mark in text else text

    def write(self, text: str, stream: TextIO, *, flush: bool = False, keep_sgr: bool = False) -> None:
        """One line (or block) of human text on ``stream``, made safe."""
        print(self.safe(text, keep_sgr=keep_sgr), file=stream, flush=flush)

    def verbatim(self, data: bytes) -> None:
        """Bytes written to stdout exactly as they are: only ``logs --raw`` does this."""
        out = getattr(self.stdout, "buffer", None)
        if out is None:
            self.stdout.write(data.decode("utf-8", "surrogateescape"))
            self.stdout.flush()
            return
        out.write(data)
        out.flush()

    def say(self, text: str = "") -> None:
        """A line of human text (stderr in --json mode)."""
        self.write(text, self.human)

    def note(self, text: str) -> None:
        """A side remark: always stderr, so stdout stays the command's answer."""
        self.write(text, self.stderr)

    def started_daemon(self, pid: int | None, line: str) -> None:
        """This command started the daemon: said once on stderr, or carried by the JSON answer
        (``daemon_started``; a streaming command's is one more JSON Line)."""
        doc = {"pid": pid, "message": line}
        if not self.json:
            self.note(line)
        elif self.streaming:
            self.emit_line({"event": "daemon-started", **doc})
        else:
            self.daemon_started = doc

    def answer(self, doc: dict[str, Any], human: Text | Callable[[], Text] = (), *, keep_sgr: bool = False) -> None:
        """The command's answer: ``doc`` as the one JSON document with --json, else ``human`` on stdout.

        ``human`` may be a function, so text that takes work to build is built only when shown;
        it is written at once, so a long page is one write. ``keep_sgr``: see :meth:`safe`.
        """
        if self.json:
            self.emit(doc)
            return
        text = human() if callable(human) else human
        lines = [text] if isinstance(text, str) else list(text)
        if lines:
            self.write("\n".join(lines), self.stdout, keep_sgr=keep_sgr)

    def event(self, doc: dict[str, Any], human: str | Callable[[], str] | None = None, *, aside: bool = False) -> None:
        """One event of a streaming command: a JSON Line with --json, else its text, flushed.

        ``aside`` sends the text to stderr (progress beside the answer); ``None`` shows nothing.
        """
        if self.json:
            self.emit_line(doc)
        elif human is not None:
            self.write(human() if callable(human) else human, self.stderr if aside else self.stdout, flush=True)

    def emit(self, doc: dict[str, Any]) -> None:
        """The one JSON document of a --json command (with the task a prefix matched, when one did)."""
        if self.matched is not None:
            doc = {**doc, "matched_by_prefix": self.matched}
        if self.daemon_started is not None:
            doc = {**doc, "daemon_started": self.daemon_started}
        from corral.domain.records import SCHEMA_VERSION

        self.stdout.write(dumps({"schema_version": SCHEMA_VERSION, **doc}) + "\n")

    def emit_line(self, doc: dict[str, Any]) -> None:
        """One JSON Lines event of a streaming command: the line and its end in one write, so a Ctrl-C
        between them (``print`` writes them apart) never leaves a line the error's line would continue."""
        self.stdout.write(dumps(doc) + "\n")
        self.stdout.flush()

    def fail(self, error: CorralError) -> int:
        if self.json and self.streaming:
            self.emit_line({"event": "error", "error": error.to_json()})
        elif self.json:
            self.emit({"error": error.to_json()})
        else:
            self.write(f"{self.style('error:', 'red', self.stderr)} {error.message}", self.stderr)
            if error.hint:
                self.write(f"{self.style('hint:', 'yellow', self.stderr)} {error.hint}", self.stderr)
        return error.exit_code


def _changes(command: str) -> bool:
    from corral.engine.api import Reach, reach

    return reach(command) is not Reach.READS


#: What ``json.dumps`` leaves raw with ``ensure_ascii=False`` that a terminal would act on (DEL, C1,
#: bidi controls, line separators) or could not encode (a lone surrogate): written as ``\\u`` escapes.
#: A pattern, compiled (and cached by :mod:`re`) at the first JSON answer: compiling it at import took
#: ~0.5 ms of the start of every command, those that answer in text included.
_JSON_UNSAFE = "[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def dumps(doc: Any) -> str:
    """One JSON text: the exact strings, with every character a terminal would act on ``\\u``-escaped."""
    text = json.dumps(doc, ensure_ascii=False, default=_default)
    # Outside strings JSON is ASCII, so every match is inside a string, where \uXXXX means the same.
    return re.sub(_JSON_UNSAFE, lambda m: f"\\u{ord(m.group()):04x}", text)


def _default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
