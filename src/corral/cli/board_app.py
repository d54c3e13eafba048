"""``watch`` on a terminal: the board as a Textual app, its task pane, and the keys for the whole loop.

The board is the one every surface reads (``corral.engine.operations.board``), grouped by what each
task needs from the person, read again when :class:`corral.cli.watch_source.Source` says something it
is made of changed. A row is selected with the arrows or the mouse; Enter (or a click) opens the task's
pane: its timeline, its live log and its diff (:mod:`corral.cli.board_pane`). The keys act on the
selected task through the operations the commands call (:mod:`corral.cli.board_actions`), offered
where the operations table lets its status take them (:mod:`corral.cli.board_keys`); an action that
takes time runs on a thread of its own while the board stays live, an accept's phases shown as
they go. Unblock's ``$EDITOR`` and ``pair``'s agent get the terminal: the app suspends, and comes back.

Every text an agent could have written reaches the screen as a Rich ``Text`` made safe by corral's
sanitizer, never as markup: ``[bold]`` or ``[@click=…]`` in a goal or a log is shown as written.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import OptionList, Static, TabbedContent, TabPane
from textual.widgets.option_list import Option

from corral.cli import board_actions as actions
from corral.cli import board_keys
from corral.cli import board_rows as rows_of
from corral.cli import watch_view as view
from corral.cli.app import App as CliApp
from corral.cli.board_dialogs import Ask, Confirm, NewTask
from corral.cli.board_pane import diff_text, log_text, timeline_text
from corral.cli.watch_source import POLL_SECONDS, Source
from corral.domain.operations_table import Op, check_operation
from corral.domain.sanitize import display
from corral.domain.status import Status
from corral.engine.api import Project
from corral.errors import CorralError, TipMoved

#: How long a board ended by a signal may take to give its terminal back before the process ends anyway.
GONE_SECONDS = 3.0

#: The pane's tabs, by the key that opens each.
TABS = {"t": "timeline", "l": "log", "d": "diff"}

_CSS = """
#title { height: 1; padding: 0 1; }
#board { height: 1fr; border: none; padding: 0; }
#pane { height: 4fr; display: none; }
BoardApp.detail #board { height: 1fr; }
BoardApp.detail #pane { display: block; }
#message { height: auto; max-height: 3; padding: 0 1; color: $warning; }
#keys { height: 1; padding: 0 1; background: $panel; }
.page { padding: 0 1; }
"""


def _key_id(key: view.Key) -> str:
    return f"{key[0]}\n{key[1]}"


def _key_of(option_id: str | None) -> view.Key | None:
    if not option_id or "\n" not in option_id:
        return None
    path, task_id = option_id.split("\n", 1)
    return (path, task_id)


def _safe(text: str) -> Text:
    """Text for the screen: escaped by corral's sanitizer, and a ``Text``, so never read as markup."""
    return Text(display(text))


class BoardApp(App[int]):
    """The live board: its rows, the selected task's pane, the keys that act on it."""

    CSS = _CSS
    TITLE = "corral watch"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("q", "quit_board", "quit"),
        Binding("ctrl+c", "ctrl_c", "quit", show=False, priority=True),
        Binding("ctrl+z", "suspend_process", show=False),
        Binding("escape", "close_pane", "back", show=False),
        Binding("n", "new_task", "new"),
        Binding("j", "move('down')", "down", show=False),
        Binding("k", "move('up')", "up", show=False),
        *[Binding(key, f"tab('{tab}')", tab, show=False) for key, tab in TABS.items()],
        *[
            Binding(board_keys.KEY_NAMES.get(key, key), f"act('{key}')", op.value)
            for key, op in board_keys.ACTION_KEYS.items()
        ],
    ]

    def __init__(self, cli: CliApp, source: Source, interval: float) -> None:
        super().__init__()
        self.cli = cli
        self.source = source
        self.interval = interval
        self.selected: view.Key | None = None
        self.order: list[view.Key] = []  # the rows' keys, as shown
        self.tab = "timeline"
        self.busy = False  # an action runs on its thread: one at a time
        self._shown: list[tuple[str | None, Text]] | None = None  # the board's options, as last set
        self._rows: dict[view.Key, dict[str, Any]] = {}  # the rows shown, with how they were laid out
        self._layout: tuple[rows_of.Widths, int, float] | None = None
        #: What kept the board from being read at all: ``corral watch`` ends with it.
        self.failed: CorralError | None = None
        #: What the last read's failure said, while the board shows the one before it (None: it read).
        self.unreadable: str | None = None

    # -- layout --------------------------------------------------------------------------------
    had_terminal = False

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield OptionList(id="board")
        yield Static(id="message")
        yield Static(id="keys")

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):  # the terminal restored on the way out, as for q
            loop.add_signal_handler(sig, self.ended_by, sig)
        self.app_resume_signal.subscribe(self, self.resumed)
        self.had_terminal = on_terminal()
        self.query_one("#board", OptionList).focus()
        if self.source.board is None or self.source.stale:
            self.read_board()
        else:  # read already, while Textual loaded (``corral watch``)
            self.draw_board()
        self.set_interval(POLL_SECONDS, self.poll)

    def resumed(self, _app: object) -> None:
        """Back from Ctrl-Z (``fg``): the terminal's screen was the shell's meanwhile, so all of it is drawn again."""
        self.screen.refresh(layout=True)
        self.refresh(layout=True)

    def ended_by(self, signum: int) -> None:
        """SIGTERM or SIGHUP: the board ends as for ``q``, its terminal given back. After a hang-up there
        may be no terminal to give back to: Textual's goodbye would then wait forever on a write that
        cannot happen, so the process ends by itself :data:`GONE_SECONDS` later, whatever is left undone."""
        code = 128 + signum
        timer = threading.Timer(GONE_SECONDS, os._exit, args=(code,))
        timer.daemon = True
        timer.start()
        self.exit(code)

    def on_unmount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)

    def terminal_gone(self) -> bool:
        """Whether the terminal the board was drawn on hung up: its window closed while the hang-up went
        elsewhere (to a pair's agent, which had the terminal then). Textual does not notice; it would read
        the dead terminal forever. The board then ends as for SIGHUP."""
        if self.had_terminal and not on_terminal():
            self.ended_by(signal.SIGHUP)
            return True
        return False

    # -- the board -----------------------------------------------------------------------------
    def poll(self) -> None:
        if self.terminal_gone():
            return
        if self.source.due(self.interval):
            self.read_board()

    def read_board(self) -> None:
        """The board read again and drawn. A read that fails once the board is shown leaves it as last read,
        says why, and is tried again after the interval (or sooner, when something it is made of changed),
        on the projects opened afresh; the first read that works again takes the failure's words away."""
        try:
            if self.unreadable is not None:
                self.reopen()
            self.source.read()
        except CorralError as exc:
            if self.source.board is None:  # nothing to show: the watch ends with the error, as a command does
                self.failed = exc
                self.exit(1)
                return
            self.unreadable = actions.said(exc)
            self.say(self.unreadable)  # the board as last read stays
            # Seen as it is now: a store that stays unreadable is not read again before the interval.
            self.source.read_at, self.source.stale, self.source.seen = (
                time.monotonic(),
                False,
                self.source.fingerprint(),
            )
            return
        if self.unreadable is not None:
            if str(self.query_one("#message", Static).content) == display(self.unreadable):
                self.say("")
            self.unreadable = None
        self.draw_board()
        if self.has_class("detail") and self.tab != "diff":
            self.load_tab(self.tab)

    def reopen(self) -> None:
        """Each project watched, opened afresh after a failed read: an SQLite connection that met a damaged
        file may keep failing once the file is put right, as it keeps what it read of it; a new one reads
        the file as it is. The projects the board opened itself are closed; the command's own closes with it."""
        fresh: list[tuple[str, Project]] = []
        try:
            for name, project in self.source.projects:
                fresh.append((name, Project.open(project.paths.repo)))
        except CorralError:
            for _name, project in fresh:
                project.close()
            raise
        for _name, project in self.source.projects:
            if project in self.source.opened:
                self.source.opened.remove(project)
                project.close()
        self.source.projects[:] = fresh
        self.source.opened.extend(project for _name, project in fresh)

    def draw_board(self) -> None:
        board = self.source.board
        doc = board.to_json() if board is not None else {"groups": [], "projects": [], "finished": []}
        width = max(40, self.size.width - 2)
        _update(self.query_one("#title", Static), rows_of.title_line(doc))
        groups = rows_of.groups_of(doc, finished=self.source.only is not None)
        many = len(doc.get("projects") or []) > 1
        widths = rows_of.Widths([r for _n, _t, rows in groups for r in rows], many)
        keys = [view.key_of(r) for _n, _t, rows in groups for r in rows]
        before, self.order = self.order, keys
        if self.selected not in keys:
            self.selected = _replacement(self.selected, before, keys)
        self._layout = (widths, width, time.monotonic() - self.source.read_at)
        self._rows = {}
        shown: list[tuple[str | None, Text]] = []  # each option's id (None: a heading) and its text
        for need, title, rows in groups:
            shown.append((None, rows_of.group_line(need, title, len(rows))))
            for row in rows:
                key = view.key_of(row)
                self._rows[key] = row
                shown.append((_key_id(key), self.prompt(key)))
        if not groups:
            shown.append((None, Text("Nothing unfinished.")))
        for problem in doc.get("problems") or []:
            shown.append((None, Text(f"! {display(str(problem), multiline=False)}", style="yellow")))
        self.draw_keys()
        if shown == self._shown:  # a read that changed nothing shown redraws nothing
            return
        self._shown = shown
        listing = self.query_one("#board", OptionList)
        listing.set_options([Option(text, id=ident, disabled=ident is None) for ident, text in shown])
        if self.selected is not None:
            listing.highlighted = listing.get_option_index(_key_id(self.selected))

    def prompt(self, key: view.Key) -> Text:
        """The row of task ``key`` as laid out last, marked when it is the selected one."""
        assert self._layout is not None
        widths, width, aged = self._layout
        return rows_of.row_text(self._rows[key], widths, width=width, aged=aged, selected=key == self.selected)

    def on_resize(self, _event: events.Resize) -> None:
        laid_out = self._layout is not None and self._layout[1] == max(40, self.size.width - 2)
        if self.source.board is not None and not laid_out:  # a new height scrolls; only a new width lays out
            self.draw_board()

    async def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        key = _key_of(event.option.id)
        if key is None or key == self.selected:
            return
        before, self.selected = self.selected, key
        listing = self.query_one("#board", OptionList)
        for changed in (before, key):  # the mark moves with the selection
            if changed in self._rows:
                listing.replace_option_prompt(_key_id(changed), self.prompt(changed))
        self.draw_keys()
        if self.has_class("detail"):  # the pane follows the selection; a diff is read only when asked for
            await self.action_tab(self.tab if self.tab != "diff" else "timeline")

    async def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter, or a click: the task's pane opens on its timeline."""
        key = _key_of(event.option.id)
        if key is not None:
            self.selected = key
            await self.action_tab("timeline")

    def draw_keys(self) -> None:
        line = board_keys.keys_line(self.status_of(self.selected), detail=self.has_class("detail"))
        _update(self.query_one("#keys", Static), Text(line))

    def say(self, words: str) -> None:
        self.query_one("#message", Static).update(_safe(words))

    # -- the selected task ---------------------------------------------------------------------
    def row(self, key: view.Key | None) -> dict[str, Any] | None:
        board = self.source.board
        if board is None or key is None:
            return None
        for row in [*board.rows(), *board.finished]:
            if view.key_of(row) == key:
                return row
        return None

    def status_of(self, key: view.Key | None) -> Status | None:
        row = self.row(key)
        return Status(row["status"]) if row is not None else None

    def project_of(self, row: dict[str, Any] | None) -> Project:
        return self.source.project_of(row) if row is not None else self.source.projects[0][1]

    # -- the pane ------------------------------------------------------------------------------
    async def action_tab(self, tab: str) -> None:
        row = self.row(self.selected)
        if row is None:
            self.say("No task selected.")
            return
        if not self.query("#pane"):  # made when first opened: a board that is only looked at starts sooner
            pane = TabbedContent(id="pane")
            await self.mount(pane, before="#message")
            for name in TABS.values():
                page = Static(classes="page", id=f"{name}-page")
                await pane.add_pane(TabPane(name.capitalize(), VerticalScroll(page), id=name))
        self.add_class("detail")
        self.tab = tab
        self.query_one("#pane", TabbedContent).active = tab
        self.load_tab(tab)
        self.draw_keys()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """A tab clicked: its page, read now."""
        tab = event.pane.id or "timeline"
        if tab != self.tab and self.has_class("detail"):
            self.tab = tab
            self.load_tab(tab)

    def load_tab(self, tab: str) -> None:
        row = self.row(self.selected)
        if row is None:
            return
        project = self.project_of(row)
        try:
            if tab == "timeline":
                text = timeline_text(project, row["id"])
            elif tab == "log":
                text = log_text(project, row["id"])
            else:
                text = diff_text(project, row["id"], self.cli.actor)
        except CorralError as exc:
            text = actions.said(exc)
        page = self.query_one(f"#{tab}-page", Static)
        scroller = page.parent
        assert isinstance(scroller, VerticalScroll)
        following = scroller.scroll_y >= scroller.max_scroll_y - 1  # at its end: a live log keeps to it
        page.update(_safe(text))
        if tab == "log" and following:
            self.call_after_refresh(scroller.scroll_end, animate=False)

    def action_move(self, way: str) -> None:
        """``j``/``k``: the next or the previous row, as ``↓``/``↑``."""
        listing = self.query_one("#board", OptionList)
        listing.action_cursor_down() if way == "down" else listing.action_cursor_up()

    def action_close_pane(self) -> None:
        if self.has_class("detail"):
            self.remove_class("detail")
            self.query_one("#board", OptionList).focus()
            self.draw_keys()

    # -- the keys that act ---------------------------------------------------------------------
    def action_quit_board(self) -> None:
        self.exit(0)

    def action_ctrl_c(self) -> None:
        self.exit(130)

    def action_new_task(self) -> None:
        """``n``: the new-task form; the task is created from it (a refusal keeps the form open, as typed)."""
        repo, actor = str(self.project_of(self.row(self.selected)).paths.repo), self.cli.actor

        def create(form: actions.NewTaskForm) -> str:  # on the form's thread, the project opened afresh
            with actions.opened(repo) as project:
                return actions.create(project, form, actor=actor)

        def made(words: str | None) -> None:
            if words is None:
                self.say("No task created.")
                return
            self._done(words)

        self.push_screen(NewTask(create), made)

    def action_act(self, key: str) -> None:
        """A key that acts: refused as the operations table refuses its operation, before anything is asked."""
        if self.busy:
            self.say("One action at a time: the last one is still running.")
            return
        row = self.row(self.selected)
        if row is None:
            self.say("No task selected.")
            return
        op = board_keys.ACTION_KEYS[key]
        try:
            check_operation(op, Status(row["status"]), row["ref"])
        except CorralError as exc:
            self.say(actions.said(exc))
            return
        repo, task_id, ref, actor = str(self.project_of(row).paths.repo), row["id"], str(row["ref"]), self.cli.actor
        if op is Op.START:
            self.on_thread(repo, lambda p: actions.start(p, task_id, actor=actor))
        elif op is Op.STOP:
            self.on_thread(repo, lambda p: actions.stop(p, task_id, actor=actor))
        elif op is Op.UNBLOCK:
            self.unblock(repo, task_id, ref)
        elif op is Op.ASK:
            self.ask_text(
                f"Your question for {ref}'s agent (it will not change any files):",
                lambda q: self.on_thread(repo, lambda p: actions.ask(p, task_id, actor=actor, question=q)),
            )
        elif op is Op.ACCEPT:
            self.confirm_accept(repo, task_id, ref, f"Accept {ref}: squash-merge its work into its target?", None)
        elif op in (Op.CLOSE, Op.REJECT):
            how = op.value
            self.ask_text(
                f"Why {how} {ref}?",
                lambda why: self.on_thread(
                    repo, lambda p: actions.abandon(p, task_id, actor=actor, reason=why, how=how)
                ),
            )
        elif op is Op.PAIR:
            self.pair(repo, task_id, ref)

    def ask_text(self, question: str, then: Callable[[str], None]) -> None:
        def answered(text: str | None) -> None:
            if text is None or not text.strip():
                self.say("Nothing written: nothing was done.")
                return
            then(text)

        self.push_screen(Ask(question), answered)

    def unblock(self, repo: str, task_id: str, ref: str) -> None:
        """``u``: the person's feedback written in ``$EDITOR`` (the terminal is the editor's meanwhile)."""
        from corral.cli.textinput import from_editor

        try:
            with self.outside():
                text = from_editor("Your feedback for the agent. It is delivered verbatim.")
        except CorralError as exc:
            self.say(actions.said(exc))
            return
        if not text.strip():
            self.say(f"Nothing written: {ref} is not unblocked.")
            return
        actor = self.cli.actor
        self.on_thread(repo, lambda p: actions.unblock(p, task_id, actor=actor, feedback=text))

    def confirm_accept(self, repo: str, task_id: str, ref: str, question: str, tip: str | None) -> None:
        """``a``: asked first; then accept's phases on the message line as they go. A branch that moved since
        its diff was shown is named, and a second ``y`` merges exactly the tip named."""

        def answered(yes: bool | None) -> None:
            if not yes:
                self.say(f"{ref} was not accepted.")
                return
            self.say(f"Accepting {ref}…")
            self.busy = True
            self.run_worker(lambda: self._accept(repo, task_id, ref, tip), thread=True, exit_on_error=False)

        self.push_screen(Confirm(question), answered)

    def _accept(self, repo: str, task_id: str, ref: str, tip: str | None) -> None:
        def report(event: dict[str, Any]) -> None:
            words = actions.phase_words(ref, event)
            if words is not None:
                self.call_from_thread(self.say, words)

        try:
            with actions.opened(repo) as project:
                words = actions.accept(project, task_id, actor=self.cli.actor, report=report, tip=tip)
        except TipMoved as exc:
            named = "; ".join(exc.commits) or "its history was rewritten"
            question = f"{ref}'s branch moved since its diff was shown, to {exc.tip[:12]}: {named}. Merge these too?"
            self.call_from_thread(self._done, "")
            self.call_from_thread(self.confirm_accept, repo, task_id, ref, question, exc.tip)
            return
        except CorralError as exc:
            words = actions.said(exc)
        except Exception as exc:  # said on the board, never a traceback over it
            words = f"accept failed: {type(exc).__name__}: {exc}"
        self.call_from_thread(self._done, words)

    def pair(self, repo: str, task_id: str, ref: str) -> None:
        """``p``: ``corral pair`` on this terminal (the app suspended), the agent on a terminal of its own."""
        from corral.adapters.terminal import run_interactive

        argv = [sys.executable, "-m", "corral", "pair", task_id, "--repo", repo]
        try:
            with self.outside():
                ended = run_interactive(argv)
        except OSError as exc:
            self.say(f"could not run corral pair: {exc}")
            return
        self.say(f"The pair on {ref} ended (exit {ended.status}).")
        self.source.invalidate()

    @contextmanager
    def outside(self) -> Iterator[None]:
        """The terminal as the person had it, for another program (the editor, the pair); under the test
        pilot, with no terminal to give, the program runs as it is."""
        try:
            with self.suspend():
                yield
        except SuspendNotSupported:
            yield
        if not self.terminal_gone():
            self.refresh(layout=True)

    def on_thread(self, repo: str, act: Callable[[Project], str]) -> None:
        """``act`` on a thread of its own, on the project opened afresh; its answer on the message line."""
        self.busy = True
        self.say("…")

        def work() -> None:
            try:
                with actions.opened(repo) as project:
                    words = act(project)
            except CorralError as exc:
                words = actions.said(exc)
            except Exception as exc:  # said on the board, never a traceback over it
                words = f"failed: {type(exc).__name__}: {exc}"
            self.call_from_thread(self._done, words)

        self.run_worker(work, thread=True, exit_on_error=False)

    def _done(self, words: str) -> None:
        self.busy = False
        if words:
            self.say(words)
        self.source.invalidate()
        self.read_board()


def _update(widget: Static, text: Text) -> None:
    """``widget`` shows ``text``, redrawn only when that is a change."""
    if widget.content != text:
        widget.update(text)


def _replacement(gone: view.Key | None, before: list[view.Key], now: list[view.Key]) -> view.Key | None:
    """The row to select once the selected one left the board: the one that took its place, else the first."""
    if not now:
        return None
    if gone is not None and gone in before:
        return now[min(before.index(gone), len(now) - 1)]
    return now[0]


def on_terminal() -> bool:
    """Whether the board's input is a terminal that has not hung up (a hung-up one answers no terminal ioctl)."""
    stream = sys.__stdin__
    try:
        return stream is not None and os.isatty(stream.fileno())
    except (OSError, ValueError):
        return False
