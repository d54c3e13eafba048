"""The MCP tools that answer at once: each a thin call of the lifecycle operation the CLI calls.

An agent meets the gates of :mod:`corral.engine.operations.gates`; a builder meets none. Every
call is recorded with the caller's actor (``builder`` or ``agent``). A confined run's own tools
(``bash``, corral's shell with intents, and ``failure_disposition``) are here too: each acts on
the caller's own turn only.
"""

from __future__ import annotations

from typing import Any

from corral.domain.sanitize import sanitize_field
from corral.engine.api import control, gates, queries, shell, tasks, turns
from corral.errors import UsageError
from corral.mcp.calling import RESULT_TURNS, Args, Calling, Run, answer_with, cut_text, projection, task_of

#: A page of ``list``, and the most a caller may ask for.
PAGE_ROWS = 50
MAX_PAGE_ROWS = 500


def create(c: Calling, a: Args) -> dict[str, Any]:
    project = c.project()
    parent = gates.parent_for_create(c.caller, a.text("parent"), project)
    made = tasks.create(
        project,
        a.need("goal"),
        actor=c.caller.actor,
        ref=a.text("ref"),
        parent=parent,
        harness=a.text("harness"),
        model=a.text("model"),
        protect=a.texts("protect"),
        prompt=a.text("prompt") or "",
        target=a.text("target") if parent is None else None,
    )
    return answer_with(c, made)


def start(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "start", a)
    started = turns.start(c.project(), task.id, actor=c.caller.actor, message=a.text("message"))
    return answer_with(c, started.task, command_id=started.launched.command_id)


def unblock(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "unblock", a)
    started = turns.unblock(
        c.project(),
        task.id,
        actor=c.caller.actor,
        message=a.text("message") or ("" if a.flag("retry_blocked") else a.need("message")),
        approve=a.texts("approved_files"),
        revert=a.texts("reverted_files"),
        revert_rest=a.flag("revert_unapproved"),
        retry_blocked=a.flag("retry_blocked"),
    )
    return answer_with(c, started.task, command_id=started.launched.command_id)


def resume(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "resume", a)
    started = turns.resume(c.project(), task.id, actor=c.caller.actor)
    return answer_with(c, started.task, command_id=started.launched.command_id)


def stop(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "stop", a)
    return answer_with(c, control.stop(c.project(), task.id, actor=c.caller.actor))


def sync(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import sync as syncing

    task = task_of(c, "sync", a)
    result = syncing(c.project(), task.id, actor=c.caller.actor)
    return answer_with(c, result.task, sync={"state": result.state, "head": result.head})


def edit(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "edit", a)
    protect = a.texts("protect") if "protect" in a.raw else None
    edited = tasks.edit(
        c.project(),
        task.id,
        goal=a.text("goal"),
        prompt=a.text("prompt"),
        protect=protect,
        harness=a.text("harness"),
        model=a.text("model"),
        target=a.text("target"),
        actor=c.caller.actor,
    )
    return answer_with(c, edited)


def show(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "show", a)
    return projection(c, task, a.whole("last_turns", RESULT_TURNS, low=0, high=10_000))


def listing(c: Calling, a: Args) -> dict[str, Any]:
    caller = c.caller
    which = a.text("which")
    cursor = a.text("cursor") or "0"
    if not (cursor.isascii() and cursor.isdigit()):
        raise UsageError(
            f"'{cursor}' is not a cursor list gave.", code="bad-cursor", hint="Pass next_cursor from the previous page."
        )
    offset = int(cursor)
    page = queries.list_page(
        c.project(),
        None if which in (None, "", "unfinished") else which,
        offset=max(0, offset),
        limit=a.whole("limit", PAGE_ROWS, low=1, high=MAX_PAGE_ROWS),
        subtree_of=caller.task_id,
        settle=c.settles,
        live=c.live_of(),
    )
    return {
        "rows": page.rows,
        "total": page.total,
        "next_cursor": str(page.next_offset) if page.next_offset is not None else None,
    }


def logs(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import Line, TurnLog, log_text
    from corral.engine.api import logs as turn_logs

    task = task_of(c, "logs", a)
    project = c.project()
    turn = a.raw.get("turn")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int)):
        raise a._bad("turn", "a whole number")
    seq = turn_logs.pick_turn(project, task, turn)
    harness = log_text.harness_of(project, task)
    reader = TurnLog(project.paths.turn_dir(task.id, seq))
    lines: list[str] = []
    for piece in reader.finish():
        if isinstance(piece, Line):
            lines.extend(log_text.readable(harness, piece))
    last = a.whole("tail_lines", 200, low=1, high=100_000)
    text, cut = cut_text("\n".join(lines[-last:]))
    return {
        "task": task.ref,
        "turn": turn_logs.exchange_numbers(project, task).get(seq, seq),  # the number show prints (its exchange)
        "sequence": seq,
        "lines": len(lines),
        "text": text,
        "truncated": cut or len(lines) > last,
    }


def diff(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "diff", a)
    caller = c.caller
    found = tasks.diff(
        c.project(), task.id, stat=a.flag("stat"), actor=caller.actor, caller_task_id=caller.task_id, surface="mcp"
    )
    text, cut = cut_text(found.text)
    return {
        "task": task.ref,
        "base": found.base,
        "tip": found.tip,
        "commits": found.commits,
        "diff": text,
        "truncated": cut,
        "uncommitted": list(found.uncommitted),
    }


def accept(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import accept as accepting

    task = task_of(c, "accept", a)
    # No one to ask here: a branch moved since this diff is refused (tip-moved) unless ``tip`` pins it.
    done = accepting.accept(
        c.project(), task.id, actor=c.caller.actor, caller_task_id=c.caller.task_id, tip=a.text("tip")
    )
    extra: dict[str, Any] = {"commit": done.commit, "already_accepted": done.already, "warning": done.warning}
    if done.conflict is not None:
        extra["restore_conflict"] = done.conflict.to_json()
    return answer_with(c, done.task, **extra)


def submit(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import submit as submitting

    task = task_of(c, "submit", a)
    done = submitting(c.project(), task.id, actor=c.caller.actor, draft=a.flag("draft"))
    return answer_with(
        c, task, submitted={"remote": done.remote, "branch": done.branch, "pull_request": done.pull_request}
    )


def ender(how: str) -> Run:
    def run(c: Calling, a: Args) -> dict[str, Any]:
        task = task_of(c, how, a)
        ended = tasks.abandon(c.project(), task.id, reason=a.need("reason"), actor=c.caller.actor, how=how)
        return answer_with(c, ended.task, archived=ended.archived, warning=ended.warning)

    return run


def reopen(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "reopen", a)
    return answer_with(c, tasks.reopen(c.project(), task.id, reason=a.text("reason"), actor=c.caller.actor))


def comment(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import note_json

    task = task_of(c, "comment", a)
    note = tasks.comment(c.project(), task.id, a.need("body"), actor=c.caller.actor)
    return {"task": task.ref, "comment": note_json(note)}


def journal(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import note_json

    task = task_of(c, "journal", a)
    entry = a.text("entry")
    if entry is not None:
        tasks.journal_add(c.project(), task.id, entry, actor=c.caller.actor)
    found, entries = tasks.journal(c.project(), task.id)
    return {"task": found.ref, "journal": [note_json(n) for n in entries]}


def update_progress(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import post_progress

    own = gates.require_agent(c.caller, "update_progress")
    raw = a.raw.get("message")
    if not isinstance(raw, str):
        raise a._bad("message", "a string")
    posted = post_progress(c.project(), own, sanitize_field(raw))
    return {"message": posted.message, "truncated": posted.truncated}


def failures(c: Calling, a: Args) -> dict[str, Any]:
    task = task_of(c, "failures", a)
    found = queries.failures(
        c.project(),
        task.id,
        history=a.flag("history"),
        raw=a.flag("raw"),
        session=a.text("session"),
        cursor=a.text("cursor"),
        max_bytes=a.whole("max_bytes", 64_000, low=1024) if "max_bytes" in a.raw else None,
    )
    return {"task": task.ref, **found.doc}


def bash(c: Calling, a: Args) -> dict[str, Any]:
    turn = shell.own_turn(c.project(), c.caller, "bash")
    timeout = a.number("timeout_seconds", shell.SHELL_SECONDS, low=1.0, high=shell.SHELL_MAX_SECONDS)
    return shell.run(turn, a.need("command"), a.raw, timeout)


def failure_disposition(c: Calling, a: Args) -> dict[str, Any]:
    return shell.dispose(shell.own_turn(c.project(), c.caller, "failure_disposition"), a.raw)
