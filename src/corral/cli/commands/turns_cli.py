"""``start``, ``unblock``, ``resume``, ``ask``, ``stop``, ``sync`` and ``wait``: running agent turns."""

from __future__ import annotations

import os
import shlex
import shutil
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from corral.cli import render
from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.textinput import obtain
from corral.domain.attention import Notice
from corral.domain.operations_table import Op, may
from corral.domain.records import Task
from corral.domain.status import status_text
from corral.engine.api import Project, control, live_turn, notify, queries, turns
from corral.errors import UsageError


def _started(app: App, started: turns.Started, wait: bool, timeout: float | None) -> int:
    task = started.task
    if wait:
        return _wait(app, task.ref, timeout)
    app.answer(
        {
            "task": {"id": task.id, "ref": task.ref, "status": task.status.value},
            "supervisor_pid": started.launched.supervisor_pid,
            "queued": started.launched.queued,
            "command_id": started.launched.command_id,
        },
        [
            f"{task.ref} is working ({started.launched.where()}).",
            f"Follow it: corral logs -f {task.ref}   ·   wait for it: corral wait {task.ref}",
        ],
    )
    return 0


class LiveLine:
    """One line on a terminal, rewritten in place as the turn goes on, and erased before the answer.

    Only on a terminal (stderr), and never with ``--json``: a script reading either stream
    sees no carriage returns. Every piece of it passes ``display``: the agent's last line
    may hold escape sequences.
    """

    def __init__(self, app: App, project: Project) -> None:
        self.app = app
        self.project = project
        self.stream = app.stderr
        self.on = not app.json and bool(getattr(self.stream, "isatty", lambda: False)())
        self.shown = False
        self.started = time.monotonic()
        self.width = 79
        # A terminal that knows no erase-line code is wiped with spaces instead.
        self.dumb = os.environ.get("TERM") == "dumb"

    def _erase(self) -> str:
        return "\r" + " " * self.width + "\r" if self.dumb else "\r\x1b[2K"

    def tick(self, task: Task) -> None:
        if not self.on:
            return
        try:
            line = render.live_text(live_turn(self.project, task).as_view(), time.monotonic() - self.started)
        except (OSError, ValueError):  # a file half-written or gone: the wait goes on, the line waits a tick
            return
        erase = self._erase()
        self.width = width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        if len(line) > width:
            line = line[: width - 1] + "…"
        self.stream.write(erase + line)
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write(self._erase())
            self.stream.flush()
            self.shown = False


def _wait(app: App, ref: str, timeout: float | None) -> int:
    project = app.project
    live = LiveLine(app, project)

    def show(notice: Notice, task: Task) -> None:
        live.clear()  # the notice on a line of its own; the live line comes back at the next tick
        app.note(f"{task.ref}: {notice.line()}")

    def tick(task: Task) -> None:
        notify.for_wait(project, task, lambda n: show(n, task))
        live.tick(task)

    try:
        result = control.wait(project, ref, timeout=timeout, on_tick=tick)
    except KeyboardInterrupt:
        live.clear()
        app.note("Stopped waiting; the turn goes on.")
        return 130
    finally:
        live.clear()
    notify.for_wait(project, result.task, lambda n: show(n, result.task))  # the turn's end, told once
    doc = queries.task_doc(project, result.task)
    app.answer(
        {
            "task": doc["task"],
            "timed_out": result.timed_out,
            "resting_cause": doc["resting_cause"],
            "stopped_because": doc["stopped_because"],
            "next": doc["next"],
            "exit_code": result.exit_code,
        },
        lambda: _waited(result, doc, timeout),
    )
    return result.exit_code


def _waited(result: control.WaitResult, doc: dict[str, Any], timeout: float | None) -> list[str]:
    task = result.task
    if result.timed_out:
        out = [f"{task.ref} is still {task.status.value} after {timeout:g} s."]
    else:
        out = [f"{task.ref} is {status_text(task.status)}."]  # with what it means: blocked — waiting for you
        last = next((t for t in reversed(doc["turns"]) if t["role"] == "agent"), None)
        if last and last["content"]:
            out += ["", last["content"], ""]
    if doc["stopped_because"]:
        out.append(f"Stopped because: {doc['stopped_because']}")
    if doc["next"] and not result.timed_out:
        out.append(f"Next: {doc['next']}")
    return out


_wait_opts = [
    click.option("--wait", "wait", is_flag=True, help="Block until the task rests (exit codes as `corral wait`)."),
    click.option("--timeout", type=float, default=None, metavar="S", help="With --wait: give up after S seconds."),
]


F = TypeVar("F", bound=Callable[..., Any])


def wait_options(f: F) -> F:
    for opt in reversed(_wait_opts):
        f = opt(f)
    return f


@click.command(
    epilog="""\b
Examples:
  corral start fix-login
  corral start fix-login -m "Start with the failing test in tests/test_login.py" --wait
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="MSG", help="Said to the agent with the task's goal and prompt.")
@wait_options
@json_option
@pass_app
def start(app: App, task: str, message: str | None, wait: bool, timeout: float | None) -> int:
    """Start a backlog task: its branch and worktree are made, and its agent runs (→ working)."""
    return _started(app, turns.start(app.project, task, actor=app.actor, message=message), wait, timeout)


def _feedback_hint(app: App, given: str) -> str:
    """What to type when unblock got no feedback: with some, or — where the task's status lets it
    resume — without any (the operations table decides, so the hint is never refused)."""
    found = queries.find_task(app.project, given)
    ref = shlex.quote(found.ref)
    hint = f"Say it with -m: corral unblock {ref} -m 'your feedback'"
    if may(Op.RESUME, found.status):
        hint += f" (or resume it without feedback: corral resume {ref})"
    return hint


@click.command(
    epilog="""\b
Examples:
  corral unblock fix-login -m "Good. Now cover the retry path too."
  git diff | corral unblock fix-login            feedback from stdin
  corral unblock fix-login                       feedback in $EDITOR
  corral unblock fix-login -m "Keep the schema" --revert-file db/schema.sql --approve-file db/seed.sql
  corral unblock fix-login --retry-blocked      confirm one retry of an operation its agent reported blocked
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="MSG", help="Your feedback (else stdin or $EDITOR).")
@click.option("--approve-file", "approve", multiple=True, metavar="P", help="Keep the agent's change to protected P.")
@click.option("--revert-file", "revert", multiple=True, metavar="P", help="Undo the agent's change to protected P.")
@click.option("--no-approve-files", is_flag=True, help="Revert every pending protected file not approved here.")
@click.option(
    "--retry-blocked",
    is_flag=True,
    help="Confirm one retry of the operation the agent reported blocked by a permission (nothing more is granted).",
)
@wait_options
@json_option
@pass_app
def unblock(
    app: App,
    task: str,
    message: str | None,
    approve: tuple[str, ...],
    revert: tuple[str, ...],
    no_approve_files: bool,
    retry_blocked: bool,
    wait: bool,
    timeout: float | None,
) -> int:
    """Give feedback and run the agent again; upstream is merged first (→ working)."""
    # A confirmed retry needs no words: corral tells the agent what was confirmed.
    feedback = (
        message or "" if retry_blocked else obtain(message, "Your feedback for the agent. It is delivered verbatim.")
    )
    if feedback is None:
        raise UsageError("unblock needs feedback.", code="no-text", hint=_feedback_hint(app, task))
    started = turns.unblock(
        app.project,
        task,
        actor=app.actor,
        message=feedback,
        approve=approve,
        revert=revert,
        revert_rest=no_approve_files,
        retry_blocked=retry_blocked,
    )
    return _started(app, started, wait, timeout)


@click.command(
    epilog="""\b
Examples:
  corral resume fix-login
  corral resume fix-login --wait
"""
)
@click.argument("task")
@wait_options
@json_option
@pass_app
def resume(app: App, task: str, wait: bool, timeout: float | None) -> int:
    """Continue an interrupted task without feedback (pending feedback is redelivered)."""
    return _started(app, turns.resume(app.project, task, actor=app.actor), wait, timeout)


@click.command(
    epilog="""\b
Examples:
  corral ask fix-login -m "Why did you change the retry limit?"
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="QUESTION", help="The question (else stdin or $EDITOR).")
@click.option(
    "--timeout",
    type=float,
    default=600.0,
    show_default=True,
    metavar="S",
    help="Give up waiting after S seconds (the answer still lands in `corral show`).",
)
@json_option
@pass_app
def ask(app: App, task: str, message: str | None, timeout: float) -> int:
    """Ask the agent a question, read-only: the task is working while it answers, then waits for you again."""
    question = obtain(message, "Your question for the agent (it will not change any files).")
    if question is None:
        raise UsageError(
            "ask needs a question.", code="no-text", hint=f"corral ask {shlex.quote(task)} -m 'your question'"
        )
    project = app.project
    started = turns.ask(project, task, actor=app.actor, question=question)
    try:
        answer = control.wait_answer(project, started, timeout=timeout)
        if answer is None:
            app.note(f"No answer after {timeout:g} s; it will appear in corral show {started.task.ref}.")
            return 124
    except KeyboardInterrupt:
        control.stop(project, started.task.ref, actor=app.actor)
        app.note("Stopped the ask; the task's status is restored.")
        return 130
    app.answer(
        {
            "answer": answer.content,
            "kind": answer.kind,
            "failure": answer.failure.to_json() if answer.failure else None,
        },
        answer.content,
    )
    return 0 if answer.kind == "ask" else 1


@click.command(
    epilog="""\b
Examples:
  corral stop fix-login
"""
)
@click.argument("task")
@json_option
@pass_app
def stop(app: App, task: str) -> None:
    """End the running turn (SIGTERM, then SIGKILL after 5 s); its feedback stays pending."""
    stopped = control.stop(app.project, task, actor=app.actor)
    app.answer(
        {"task": {"id": stopped.id, "ref": stopped.ref, "status": stopped.status.value}},
        f"{stopped.ref} is {stopped.status.value}; the turn was stopped.",
    )


@click.command(
    epilog="""\b
Examples:
  corral sync fix-login
"""
)
@click.argument("task")
@json_option
@pass_app
def sync(app: App, task: str) -> None:
    """Merge the task's target into its branch while it rests; the status stays as it was."""
    from corral.engine.api import sync as syncing

    result = syncing(app.project, task, actor=app.actor)
    app.answer(
        {
            "task": {"ref": result.task.ref, "status": result.task.status.value},
            "state": result.state,
            "head": result.head,
        },
        f"{result.task.ref}: {'merged the target' if result.state == 'merged' else 'already up to date'}.",
    )


@click.command(
    epilog="""\b
Examples:
  corral wait fix-login
  corral wait fix-login --timeout 600 && corral accept fix-login
"""
)
@click.argument("task")
@click.option("--timeout", type=float, default=None, metavar="S", help="Give up after S seconds (exit 124).")
@json_option
@pass_app
def wait(app: App, task: str, timeout: float | None) -> int:
    """Block until the task rests: 0 with no resting cause, 1 with one (or abandoned, or in conflict), 124 timed out."""
    return _wait(app, task, timeout)
