"""``watch`` on a terminal: the live board, its keys, a task's page and the actions the keys take.

It takes the alternate screen and redraws in place: only the lines that changed are rewritten
(cursor to the line, the text, erase to its end), never the whole screen, so nothing flickers.
The keys act on the selected task through the same operations as the commands (``show``,
``logs -f``, ``unblock``, ``accept``), where the operations table lets its status take them. The
terminal is restored however it ends: ``q``, Ctrl-C, SIGTERM or SIGHUP; Ctrl-Z gives the shell
its terminal back until ``fg``.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
import time
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from corral.cli import line_fit
from corral.cli import watch_view as view
from corral.cli.app import App
from corral.cli.render import show_lines
from corral.cli.watch_source import POLL_SECONDS, Source, signals
from corral.domain.operations_table import check_operation
from corral.domain.status import Status
from corral.engine.api import queries
from corral.errors import CorralError, TipMoved

_ALT_ON, _ALT_OFF = "\x1b[?1049h", "\x1b[?1049l"
_HIDE, _SHOW = "\x1b[?25l", "\x1b[?25h"
_CLEAR = "\x1b[H\x1b[2J"

_KEYS = {
    b"\x1b[A": "up",
    b"\x1bOA": "up",
    b"\x1b[B": "down",
    b"\x1bOB": "down",
    b"\x1b[5~": "pgup",
    b"\x1b[6~": "pgdn",
    b"\x1b[H": "home",
    b"\x1b[F": "end",
    b"\x1b[1~": "home",
    b"\x1b[4~": "end",
}


def keys_of(data: bytes) -> list[str]:
    """The keys in what the terminal sent: ``up``, ``enter``, ``esc``, ``q`` …"""
    out: list[str] = []
    i = 0
    while i < len(data):
        if data[i] == 0x1B:
            for seq, name in _KEYS.items():
                if data.startswith(seq, i):
                    out.append(name)
                    i += len(seq)
                    break
            else:
                if data.startswith(b"\x1b[", i) or data.startswith(b"\x1bO", i):  # a key we do not use
                    j = i + 2
                    while j < len(data) and not (0x40 <= data[j] <= 0x7E):
                        j += 1
                    i = j + 1
                else:
                    out.append("esc")
                    i += 1
            continue
        ch = data[i : i + 1]
        i += 1
        if ch in (b"\r", b"\n"):
            out.append("enter")
        elif ch in (b"\x7f", b"\x08"):
            out.append("back")
        elif ch == b" ":
            out.append("pgdn")
        else:
            out.append(ch.decode("latin-1"))
    return out


class Screen:
    """The live board on the terminal: frames drawn line by line, keys, the task view, the actions."""

    def __init__(self, app: App, source: Source, interval: float) -> None:
        self.app = app
        self.source = source
        self.interval = interval
        self.fd = sys.stdin.fileno()
        self.out = app.stdout
        self.saved: list[Any] | None = None
        self.drawn: list[str] | None = None  # what is on the screen now, line by line
        self.selected: view.Key | None = None
        self.top = 0
        self.detail: view.Key | None = None  # the task shown (Enter), or None for the board
        self.detail_top = 0
        self.detail_lines: list[str] = []
        self.message = ""
        self.asking: tuple[str, dict[str, Any]] | None = None  # a question awaiting its key: (what, row)
        self.where: list[tuple[int, view.Key]] = []
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    # -- the terminal --------------------------------------------------------------------------
    def wake(self) -> None:
        try:
            os.write(self.wake_w, b"!")
        except OSError:  # the pipe is full: the loop is awake already
            pass

    def enter(self) -> None:
        if self.saved is None:
            self.saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)  # keys as they are typed, no echo; Ctrl-C still interrupts
        self.write(_ALT_ON + _HIDE)
        self.drawn = None  # the next frame clears the screen and draws every line

    def leave(self, *, screen: bool = False) -> None:
        """The terminal as it was: settings, cursor and (unless ``screen``: a cleared board's
        screen instead) the screen the person had."""
        if self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
        self.write("\x1b[0m" + _SHOW + (_CLEAR if screen else _ALT_OFF))

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.out.fileno())
            return max(20, size.columns), max(5, size.lines)
        except (OSError, ValueError):
            return 80, 24

    # -- drawing -------------------------------------------------------------------------------
    def draw(self) -> None:
        width, height = self.size()
        body = height - 2
        board = self.source.board
        if self.detail is not None:
            lines = self.detail_lines
            self.detail_top = max(0, min(self.detail_top, len(lines) - body))
            shown = line_fit.window(lines, self.detail_top, body)
            keys = view.keys_line(self.status_of(self.detail), detail=True)
        else:
            doc = board.to_json() if board is not None else {"groups": [], "projects": []}
            paint = self.app.paint if self.app.colors() else view.plain
            aged = time.monotonic() - self.source.read_at

            def layout(selected: view.Key | None) -> tuple[list[str], list[tuple[int, view.Key]]]:
                named = self.source.only is not None
                return view.board_frame(doc, width=width, selected=selected, paint=paint, aged=aged, finished=named)

            before = [k for _i, k in self.where]
            lines, where = layout(self.selected)
            keys_now = [k for _i, k in where]
            if self.selected not in keys_now:
                self.selected = _replacement(self.selected, before, keys_now)
                if self.selected is not None:
                    lines, where = layout(self.selected)
            self.where = where
            at = next((i for i, k in where if k == self.selected), 0)
            self.top = 0 if where and at == where[0][0] else line_fit.scroll_to(self.top, at, body)
            shown = line_fit.window(lines, self.top, body)
            keys = view.keys_line(self.status_of(self.selected))
        self.paint([line_fit.fit(self.app.safe(line), width - 1) for line in [*shown, self.message, keys]])

    def paint(self, frame: list[str]) -> None:
        """Only what changed: each changed line rewritten where it is, the rest left alone."""
        buf: list[str] = []
        drawn = self.drawn
        if drawn is None:
            buf.append(_CLEAR)
            drawn = []
        for i, line in enumerate(frame):
            if i >= len(drawn) or drawn[i] != line:
                buf.append(f"\x1b[{i + 1};1H{line}\x1b[0m\x1b[K")
        for i in range(len(frame), len(drawn)):
            buf.append(f"\x1b[{i + 1};1H\x1b[K")
        if buf:
            self.write("".join(buf))
        self.drawn = frame

    def redraw(self) -> None:
        self.drawn = None
        self.draw()

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        with signals(self.wake) as flags:
            self.enter()
            try:
                self.source.read()
                self.draw()
                while True:
                    ready, _, _ = select.select([self.fd, self.wake_r], [], [], POLL_SECONDS)
                    if self.wake_r in ready:
                        os.read(self.wake_r, 512)
                    if flags["suspend"]:
                        flags["suspend"] = False
                        self.suspend_job()
                    if flags["resized"]:
                        flags["resized"] = False
                        self.redraw()
                    if self.fd in ready:
                        data = os.read(self.fd, 1024)
                        if not data:
                            return 0
                        for key in keys_of(data):
                            if self.key(key) == "quit":
                                return 0
                        self.draw()
                    if self.source.due(self.interval):
                        self.refresh()
            finally:
                try:
                    self.leave()
                except (OSError, termios.error):  # the terminal is gone (SIGHUP): nothing to give back
                    pass
                os.close(self.wake_r)
                os.close(self.wake_w)

    def refresh(self) -> None:
        self.source.read()
        if self.detail is not None:
            self.load_detail()
        self.draw()

    def suspend_job(self) -> None:
        """Ctrl-Z: the shell gets its terminal back as it was; ``fg`` brings the board back."""
        self.leave()
        os.kill(os.getpid(), signal.SIGSTOP)
        self.enter()
        self.redraw()

    # -- keys ----------------------------------------------------------------------------------
    def row(self, key: view.Key | None) -> dict[str, Any] | None:
        board = self.source.board
        if board is None or key is None:
            return None
        for row in [*board.rows(), *board.finished]:
            if view.key_of(row) == key:
                return row
        return None

    def status_of(self, key: view.Key | None) -> Status | None:
        """The status of the task ``key`` names, as the board last read it (None: no such task)."""
        row = self.row(key)
        return Status(row["status"]) if row is not None else None

    def key(self, key: str) -> str | None:
        if self.asking is not None:
            what, row = self.asking
            self.asking = None
            if key in ("y", "Y") and what == "accept":
                self.accept(row)
            elif key in ("y", "Y") and what == "accept-moved":
                self.accept(row, tip=row["moved_tip"])  # exactly the tip the question named
            else:
                self.message = f"{row['ref']} was not accepted."
            return None
        self.message = ""
        if self.detail is not None:
            return self.detail_key(key)
        keys = [k for _i, k in self.where]
        at = keys.index(self.selected) if self.selected in keys else 0
        if key in ("q", "Q"):
            return "quit"
        if key in ("up", "k") and keys:
            self.selected = keys[max(0, at - 1)]
        elif key in ("down", "j") and keys:
            self.selected = keys[min(len(keys) - 1, at + 1)]
        elif key == "pgup" and keys:
            self.selected = keys[max(0, at - 10)]
        elif key == "pgdn" and keys:
            self.selected = keys[min(len(keys) - 1, at + 10)]
        elif key == "home" and keys:
            self.selected = keys[0]
        elif key == "end" and keys:
            self.selected = keys[-1]
        elif key == "enter":
            if self.row(self.selected) is not None:
                self.detail, self.detail_top = self.selected, 0
                self.load_detail()
        else:
            self.act(key, self.row(self.selected))
        return None

    def detail_key(self, key: str) -> str | None:
        _width, height = self.size()
        page = max(1, height - 3)
        if key in ("q", "Q", "esc", "back", "enter", "h"):
            self.detail = None
        elif key in ("up", "k"):
            self.detail_top = max(0, self.detail_top - 1)
        elif key in ("down", "j"):
            self.detail_top += 1
        elif key == "pgup":
            self.detail_top = max(0, self.detail_top - page)
        elif key == "pgdn":
            self.detail_top += page
        elif key == "home":
            self.detail_top = 0
        elif key == "end":
            self.detail_top = len(self.detail_lines)
        else:
            self.act(key, self.row(self.detail))
        return None

    def act(self, key: str, row: dict[str, Any] | None) -> None:
        """``d`` and ``l`` read; a key that acts (``view.ACTION_KEYS``) is refused as the operations table
        refuses its operation, naming what it takes, before anything is asked or opened."""
        if key not in ("d", "l", *view.ACTION_KEYS):
            return
        if row is None:
            self.message = "No task selected."
            return
        try:
            if key in view.ACTION_KEYS:
                check_operation(view.ACTION_KEYS[key], Status(row["status"]), row["ref"])
            if key == "d":
                self.review(row)
            elif key == "l":
                self.follow(row)
            elif key == "u":
                self.unblock(row)
            else:
                self.asking = ("accept", row)
                self.message = f"Accept {row['ref']}: squash-merge its work into its target? [y/N]"
        except CorralError as exc:
            self.message = _said(exc)

    def load_detail(self) -> None:
        """The task's ``show`` page, as ``corral show`` prints it (timeline, Stopped because, Next)."""
        if self.detail is None:
            return
        path, task_id = self.detail
        try:  # a task that left the board (finished) is still shown: it is read by its id
            shown = queries.show_task(self.source.project_at(path), task_id, last_turns=queries.PAGE_TURNS)
        except CorralError as exc:
            self.detail = None
            self.message = _said(exc)
            return
        page = show_lines(self.app, shown.doc, merges_into=shown.merges_into, earlier_turns=shown.earlier_turns)
        self.detail_lines = [part for line in page for part in line.split("\n")]  # a journal entry has lines

    # -- the actions ---------------------------------------------------------------------------
    @contextmanager
    def outside(self, *, screen: bool = False) -> Iterator[None]:
        """The terminal as the person had it, for another program (the editor, ``logs -f``);
        ``screen``: on a cleared board's screen, not on the person's own."""
        self.leave(screen=screen)
        try:
            yield
        finally:
            self.enter()

    def follow(self, row: dict[str, Any]) -> None:
        """``l``: ``corral logs -f`` of the task, on this terminal, until its turn ends or Ctrl-C."""
        from corral.adapters.terminal import run_interactive

        project = self.source.project_of(row)
        argv = [sys.executable, "-m", "corral", "logs", "-f", row["id"], "--repo", str(project.paths.repo)]
        with self.outside(screen=True):
            title = _bold(self.app, f"corral logs -f {row['ref']}")
            self.write(f"{self.app.safe(title)}  (Ctrl-C: back to the board)\n")
            try:
                run_interactive(argv)
            except OSError as exc:
                self.write(f"could not run corral logs: {exc}\n")
            self.write("── press a key to go back to the board ")
            self._one_key()

    def review(self, row: dict[str, Any]) -> None:
        """``d``: ``corral diff`` of the task in git's pager, on this terminal. It records the tip it showed,
        so a later ``a`` merges that tip, or names what came since and asks again."""
        from corral.adapters.terminal import run_interactive

        project = self.source.project_of(row)
        argv = [sys.executable, "-m", "corral", "diff", row["id"], "--repo", str(project.paths.repo)]
        with self.outside(screen=True):
            try:
                run_interactive(argv)
            except OSError as exc:
                self.write(f"could not run corral diff: {exc}\n")
            self.write("── press a key to go back to the board ")
            self._one_key()

    def _one_key(self) -> None:
        saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)
        try:
            termios.tcflush(self.fd, termios.TCIFLUSH)
            os.read(self.fd, 64)
        finally:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)

    def unblock(self, row: dict[str, Any]) -> None:
        """``u``: feedback written in ``$EDITOR``, then ``corral unblock``'s operation."""
        from corral.cli.textinput import from_editor
        from corral.engine.api import turns

        with self.outside():
            text = from_editor("Your feedback for the agent. It is delivered verbatim.")
        if not text.strip():
            self.message = f"Nothing written: {row['ref']} is not unblocked."
            return
        started = turns.unblock(self.source.project_of(row), row["id"], actor=self.app.actor, message=text)
        self.message = f"{started.task.ref} is working ({started.launched.where()})."
        self.source.invalidate()

    def accept(self, row: dict[str, Any], tip: str | None = None) -> None:
        """``a`` then ``y``: ``corral accept``'s operation, its steps shown as they go. When the branch moved
        since its diff was shown, the new commits are named and a second ``y`` merges exactly that tip."""
        from corral.engine.api import accept as accepting

        def report(event: dict[str, Any]) -> None:
            if event.get("event") == "phase":
                detail = f" — {event['detail']}" if event.get("detail") else ""
                self.message = f"Accepting {row['ref']}: {event.get('label')}: {event.get('state')}{detail}"
                self.draw()

        try:
            result = accepting.accept(
                self.source.project_of(row), row["id"], actor=self.app.actor, report=report, tip=tip
            )
        except TipMoved as exc:
            self.asking = ("accept-moved", {**row, "moved_tip": exc.tip})
            named = "; ".join(exc.commits) or "its history was rewritten"
            self.message = (
                f"{row['ref']}'s branch moved since its diff was shown, to {exc.tip[:12]}: {named}. "
                "Merge these too? [y/N]"
            )
            return
        except CorralError as exc:
            self.message = _said(exc)
            return
        if result.already:
            said = f"{result.task.ref} was already accepted."
        else:
            said = f"{result.task.ref} is complete: merged as {result.commit[:12] if result.commit else '?'}."
        if result.conflict is not None:
            said += f" {result.conflict.message}"
        elif result.warning:
            said += f" warning: {result.warning}"
        self.message = said
        self.source.invalidate()


def _replacement(gone: view.Key | None, before: list[view.Key], now: list[view.Key]) -> view.Key | None:
    """The row to select once the selected one left the board: the one that took its place, else the first."""
    if not now:
        return None
    if gone is not None and gone in before:
        return now[min(before.index(gone), len(now) - 1)]
    return now[0]


def _said(exc: CorralError) -> str:
    return f"{exc.message} {exc.hint}" if exc.hint else exc.message


def _bold(app: App, text: str) -> str:
    return app.paint(text, "bold") if app.colors() else text
