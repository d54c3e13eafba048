"""Telling a person about incidents: the daemon's notices and hook, and what ``corral wait`` prints.

The rule of what is due and when is ``corral.domain.attention``; receipts per channel are
``corral.engine.read.notices``. The hook is the user's ``notify_command`` — trusted only from
their own settings or environment, never from a repository's ``corral.toml`` (which may only
propose it) — run by the project's runner with the notice as JSON on stdin, a few seconds at most;
a hook that cannot run, fails or runs out of time is logged (``notify-failed``), never raised; a
receipt storage refuses is logged (``notice-receipt-unwritten``), kept in memory and written later.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from datetime import timedelta

from corral.adapters.process import Runner
from corral.domain.attention import Notice
from corral.domain.records import Task
from corral.domain.status import TERMINAL, Status
from corral.engine.project import Project
from corral.engine.read import notices
from corral.errors import ArgvError, ProgramError

HOOK_TIMEOUT_SECONDS = 10.0
#: A turn that ended this recently is still looked at for its completion notice.
RECENT = timedelta(hours=1)


def notice_doc(project: Project, task: Task, notice: Notice) -> dict[str, object]:
    """A notice as the daemon logs it and the hook reads it on stdin: ``{"event": "notice", "project",
    "task": {"id", "ref"}, "notice": {"kind", "key", "incidents", "unclassified", "already_told"}}``."""
    return {
        "event": "notice",
        "project": str(project.repo),
        "task": {"id": task.id, "ref": task.ref},
        "notice": notice.to_json(),
    }


def for_wait(project: Project, task: Task, show: Callable[[Notice], None]) -> Notice | None:
    """The waited task's due notice, shown by ``corral wait`` (channel ``wait``)."""
    return notices.deliver(project, task, "wait", show, project.clock())


def from_daemon(project: Project, log: Callable[[dict[str, object]], None]) -> list[tuple[Task, Notice]]:
    """Every due notice of the project's running and recently ended turns: logged, and handed to the hook
    (run by ``project.runner``). On the shared store, only of this host's own turns (``placement.own_tasks``)."""
    hook = project.config["notify_command"]
    now = project.clock()
    with project.store.read() as tx:
        tasks = [
            t
            for t in tx.tasks(set(Status) - TERMINAL)
            if t.session_id and (t.status is Status.WORKING or now - t.updated_at <= RECENT)
        ]
        tasks = project.placement.own_tasks(project, tx, tasks)
    delivered = []
    for task in tasks:

        def hand_over(notice: Notice, task: Task = task) -> None:
            doc = notice_doc(project, task, notice)
            log(doc)
            if hook:
                run_hook(project.runner, str(hook), doc, log)

        notice = notices.deliver(project, task, "daemon", hand_over, now)
        if notice is not None:
            delivered.append((task, notice))
            assert task.session_id is not None  # deliver tells nothing without one
            if (why := notices.unwritten(project.paths.journal_dir(task.id, task.session_id), "daemon")) is not None:
                log(
                    {
                        "event": "notice-receipt-unwritten",
                        "task": {"id": task.id, "ref": task.ref},
                        "notice": notice.key,
                        "message": f"the receipt could not be stored: {why}; it is kept in memory and written "
                        "at the next delivery",
                    }
                )
    return delivered


def run_hook(runner: Runner, hook: str, doc: dict[str, object], log: Callable[[dict[str, object]], None]) -> None:
    try:
        argv = shlex.split(hook)
    except ValueError as exc:  # an unclosed quote
        log({"event": "notify-failed", "notice": _key(doc), "message": f"notify_command cannot be parsed: {exc}"})
        return
    if not argv:
        log({"event": "notify-failed", "notice": _key(doc), "message": "notify_command holds no command"})
        return
    try:
        done = runner.run(argv, input=json.dumps(doc), timeout=HOOK_TIMEOUT_SECONDS)
    except (ProgramError, ArgvError) as exc:  # not there (ProgramMissing), out of time (ProgramTimeout), a NUL
        log({"event": "notify-failed", "notice": _key(doc), "code": exc.code, "message": exc.message})
        return
    if done.returncode != 0:
        log(
            {
                "event": "notify-failed",
                "notice": _key(doc),
                "message": f"exit {done.returncode}: {done.stderr[-300:]}",
            }
        )


def _key(doc: dict[str, object]) -> object:
    notice = doc.get("notice")
    return notice.get("key") if isinstance(notice, dict) else None
