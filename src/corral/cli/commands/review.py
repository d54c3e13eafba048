"""Reviewing a task's work and ending it: ``diff``, ``pair``, ``chat``, ``submit``, ``close``, ``reject``,
``reopen`` and ``delete`` (``accept`` has a module of its own, :mod:`corral.cli.commands.accept_cli`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from corral.adapters.process import environ_overlay
from corral.cli.app import App, color_enabled
from corral.cli.options import json_option, pass_app
from corral.cli.textinput import obtain
from corral.engine.api import queries, tasks, workspace
from corral.errors import CorralError, UsageError


def _abandon(app: App, task: str, message: str | None, how: str) -> None:
    reason = obtain(message, f"Why {'close' if how == 'close' else 'reject'} this task?")
    if reason is None:
        raise UsageError(f"{how.capitalize()} needs a reason.", hint=f"corral {how} {task} -m 'why'")
    ended = tasks.abandon(app.project, task, reason=reason, actor=app.actor, how=how)
    if ended.warning:
        app.note(ended.warning)
    ref = ended.task.ref
    said = [f"{ref} is abandoned ({'closed' if how == 'close' else 'rejected'})."]
    if ended.archived:
        said.append(f"Its work is kept under {workspace.archive_ref(ended.task)}; corral reopen {ref} brings it back.")
    app.answer({"task": queries.task_view(app.project, ended.task).task_json(), "archived": ended.archived}, said)


@click.command(
    epilog="""\b
Examples:
  corral close fix-login -m "Duplicate of login-rework"
  echo "Won't do: the endpoint is going away" | corral close fix-login
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="WHY", help="Why (else read from stdin or $EDITOR).")
@json_option
@pass_app
def close(app: App, task: str, message: str | None) -> None:
    """Close a task without accepting its work (→ abandoned; the work is archived)."""
    _abandon(app, task, message, "close")


@click.command(
    epilog="""\b
Examples:
  corral reject fix-login -m "Wrong approach: the timeout belongs in the client"
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="WHY", help="Why (else read from stdin or $EDITOR).")
@json_option
@pass_app
def reject(app: App, task: str, message: str | None) -> None:
    """Reject a task's work (→ abandoned; the work is archived)."""
    _abandon(app, task, message, "reject")


@click.command(
    epilog="""\b
Examples:
  corral reopen fix-login                       an abandoned task
  corral reopen fix-login -m "The fix regressed on Safari"   an accepted one
"""
)
@click.argument("task")
@click.option("-m", "--message", "--reason", "reason", metavar="WHY", help="Why (required for an accepted task).")
@json_option
@pass_app
def reopen(app: App, task: str, reason: str | None) -> None:
    """Bring back a complete or abandoned task (→ blocked with its work, or backlog)."""
    reopened = tasks.reopen(app.project, task, reason=reason, actor=app.actor)
    v = queries.task_view(app.project, reopened)
    said = [f"{reopened.ref} is {reopened.status.value} again."]
    if v.next:
        said.append(f"Next: {v.next}")
    app.answer({"task": v.task_json(), "next": v.next}, said)


@click.command(
    epilog="""\b
Examples:
  corral submit fix-login          push corral/fix-login to the remote (and open a PR with forge = "gh")
"""
)
@click.argument("task")
@click.option("--draft", is_flag=True, help='Open the pull request as a draft (with forge = "gh").')
@json_option
@pass_app
def submit(app: App, task: str, draft: bool) -> None:
    """Push the task's branch to the configured remote for review there (→ submitted)."""
    from corral.engine.api import submit as submitting

    result = submitting(app.project, task, actor=app.actor, draft=draft)
    app.answer(
        {"task": result.ref, "remote": result.remote, "branch": result.branch, "pull_request": result.pull_request},
        f"Pushed {result.branch} to {result.remote}."
        + (f" Pull request: {result.pull_request}" if result.pull_request else ""),
    )


@click.command(
    epilog="""\b
Examples:
  corral diff fix-login
  corral diff fix-login --stat
  corral diff fix-login | less          no colour and no pager when stdout is not a terminal
\b
It shows the branch's commits, read from git's objects (never the worktree's files, and with no
attribute, diff driver or textconv applied): what accept merges. Uncommitted changes in the
worktree are not part of it; their paths are named after the patch. The tip shown is recorded,
so accept can tell when the branch moved since.
\b
On a terminal the patch is coloured and paged as git does (git's color.diff, core.pager,
GIT_PAGER and PAGER apply; NO_COLOR turns colour off; --no-pager prints it straight).
"""
)
@click.argument("task")
@click.option("--stat", is_flag=True, help="A summary of changed files instead of the patch.")
@click.option("--no-pager", is_flag=True, help="Print straight to the terminal, without a pager.")
@json_option
@pass_app
def diff(app: App, task: str, stat: bool, no_pager: bool) -> None:
    """What the task's branch changed against its target (what accept merges), and its commits."""
    terminal = not app.json and app.stdout.isatty()
    pager = _pager(app) if terminal and not no_pager else None
    with _git_colour(terminal and color_enabled(app.stdout)):
        result = tasks.diff(app.project, task, stat=stat, actor=app.actor, surface="cli")
    said = [f"{len(result.commits)} commit(s) on {result.task.branch} beyond its target, at {result.tip[:12]}:"]
    if result.unverified:
        said.insert(
            0,
            "Not yet verified: the agent's turn is still writing this work (its objects are checked when it "
            "ends), so this view is not taken as your review; accept will show these commits again.",
        )
    said += [f"  {line}" for line in result.commits]
    said.append("")
    if result.text:
        said.append(result.text.removesuffix("\n"))  # the patch verbatim: its own last newline, no extra one
    if result.uncommitted:
        shown = ", ".join(result.uncommitted[:20]) + (" …" if len(result.uncommitted) > 20 else "")
        said += [
            "",
            f"Uncommitted in the worktree, not shown and not part of what accept merges "
            f"({len(result.uncommitted)} path(s)): {shown}",
        ]
    if pager is not None:
        # git's colours pass; every other escape in the agent's text is made visible first
        _page(pager, app.safe("\n".join(said), keep_sgr=True) + "\n")
        return
    app.answer(
        {
            "task": result.task.ref,
            "base": result.base,
            "tip": result.tip,
            "commits": result.commits,
            "diff": result.text,
            "uncommitted": list(result.uncommitted),
            "unverified": result.unverified,
        },
        said,
        keep_sgr=terminal,
    )


@contextmanager
def _git_colour(on: bool) -> Iterator[None]:
    """git colours its diffs (with the person's color.diff.* choices) though its output is a pipe to corral."""
    if not on:
        yield
        return
    try:
        n = int(os.environ.get("GIT_CONFIG_COUNT", "0") or "0")
    except ValueError:
        n = 0
    added = {"GIT_CONFIG_COUNT": str(n + 1), f"GIT_CONFIG_KEY_{n}": "color.diff", f"GIT_CONFIG_VALUE_{n}": "always"}
    with environ_overlay(added):
        yield


def _pager(app: App) -> str | None:
    """git's pager for this repository (``git var GIT_PAGER``: GIT_PAGER, core.pager, PAGER, less); None: none."""
    try:
        found = subprocess.run(
            ["git", "var", "GIT_PAGER"], cwd=app.project.repo, capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return None
    return found if found and found != "cat" else None


def _page(pager: str, text: str) -> None:
    """Show ``text`` in ``pager`` as git does: through the shell, with LESS=FRX and LV=-c unless set."""
    env = {**os.environ, "LESS": os.environ.get("LESS", "FRX"), "LV": os.environ.get("LV", "-c")}
    sys.stdout.flush()
    with subprocess.Popen(pager, shell=True, stdin=subprocess.PIPE, env=env) as proc:
        assert proc.stdin is not None
        try:
            proc.stdin.write(text.encode("utf-8", "backslashreplace"))
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the person quit the pager before the end


@click.command(
    epilog="""\b
Examples:
  corral delete old-experiment            asks first, on a terminal
  corral delete old-experiment --yes      in a script
\b
It cannot be undone. Without a terminal to ask on, it is refused unless --yes is given.
"""
)
@click.argument("task")
@click.option("-y", "--yes", is_flag=True, help="Do not ask; needed when there is no terminal.")
@json_option
@pass_app
def delete(app: App, task: str, yes: bool) -> None:
    """Delete a finished task and everything kept for it (archive ref, logs, evidence)."""
    if not yes:
        _confirm_delete(app, task)
    gone = tasks.delete(app.project, task, actor=app.actor)
    app.answer({"deleted": {"id": gone.id, "ref": gone.ref}}, f"Deleted {gone.ref} and everything kept for it.")


def _confirm_delete(app: App, given: str) -> None:
    """Ask on a terminal; without one, refuse. A task that may not be deleted is refused before asking."""
    from corral.domain.operations_table import Op, check_operation

    found = queries.find_task(app.project, given)
    check_operation(Op.DELETE, found.status, found.ref, hint=f"Close it first: corral close {found.ref} -m 'why'")
    ref = found.ref
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(
            f"Not deleting {ref}: there is no terminal to ask on, and deleting cannot be undone.",
            hint=f"Say so with --yes: corral delete {ref} --yes",
        )
    question = f"Delete {ref} and everything kept for it (its branch, archived work, logs, evidence)?"
    if not click.confirm(question, default=False, err=True):
        raise CorralError(f"{ref} was not deleted.", code="not-confirmed", hint=f"corral delete {ref} --yes")


@click.command(
    epilog="""\b
Examples:
  corral pair fix-login      work with the agent in its worktree; exit the agent to end the pair
"""
)
@click.argument("task")
@json_option
@pass_app
def pair(app: App, task: str) -> int:
    """Work interactively with the agent in the task's worktree (→ pairing, then back to review)."""
    from corral.domain.operations_table import Op, may
    from corral.engine.api import pair as pairing

    found = queries.find_task(app.project, task)
    if may(Op.PAIR, found.status):  # said before the agent takes the terminal, never for a pair refused
        app.note(_pair_banner(app, found))
    result = pairing(app.project, task, actor=app.actor)
    app.answer(
        {
            "task": {"ref": result.task.ref, "status": result.task.status.value},
            "commits": result.commits,
            "dirty": result.dirty,
            "exit_code": result.exit_code,
            "agent": result.ended.as_view() if result.ended else None,
        },
        f"The pair ended: the agent {result.ended.describe() if result.ended else 'could not start'}; "
        f"{result.task.ref} is {result.task.status.value} ({len(result.commits)} commit(s) made).",
    )
    return 0


def _pair_banner(app: App, found: Any) -> str:
    """What happens next, before the terminal is the agent's: where, with which agent, and how it ends."""
    view = queries.task_view(app.project, found).task_json()
    harness = view.get("harness") or "the agent"
    where = f" in {view['worktree']}" if view.get("worktree") else ""
    return (
        f"Pairing on {found.ref} with {harness}{where}. The terminal is the agent's now: exit the agent to end "
        f"the pair; what you both commit stays on {found.branch}, and {found.ref} goes back to review."
    )


@click.command(
    epilog="""\b
Examples:
  corral chat fix-login      ask the agent things interactively; nothing changes
"""
)
@click.argument("task")
@json_option
@pass_app
def chat(app: App, task: str) -> int:
    """Talk with the agent interactively, read-only; the task's status does not change."""
    from corral.engine.api import chat as chatting

    code = chatting(app.project, task)
    app.answer({"exit_code": code})  # the conversation was the text
    return 0 if code == 0 else 1
