"""Remote sync: what became of the pull requests that forge-pending merges wait on (docs/forge.md#remote-sync).

Every settle (the daemon's tick, each read, ``wait``) calls :func:`sync`; it asks the forge at most every
``forge_poll`` seconds, in one batched GraphQL query for all of a project's pending pull requests, and when the
forge is down or its rate limit is used up it waits until the stated reset, shows why on each task, and changes no
status. A pull request merged completes its task (verified); one closed, failed or with changes requested blocks
it, and with ``forge_auto_deliver`` the forge's feedback then goes to the agent by itself, within the circuit
breaker.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from corral.adapters.gh_forge import GhForge, PullState
from corral.adapters.locks import is_locked
from corral.domain.actors import Actor
from corral.domain.breaker import Breaker, Counters
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.git_remote import remote_name
from corral.engine.operations.forge_accept import (
    ASKED,
    back_out,
    follow_target,
    forge_for,
    pending,
    read_task,
    record_of,
    save_record,
    settle_pending,
    verify_merge,
)
from corral.engine.project import Project
from corral.engine.recovery.merges import complete_merged
from corral.engine.resolve import task_config
from corral.engine.task_locks import task_lock
from corral.errors import CorralError, ForgeBlocked, ForgeUnavailable, TaskBusy


def _sync_file(project: Project) -> Path:
    return project.paths.root / "forge-sync.json"


def sync(project: Project, *, force: bool = False) -> list[str]:
    """Remote sync: one batched query for every pending pull request of the project, at most every ``forge_poll``
    seconds (``force``: now), waiting out an outage or a rate limit until the forge's stated reset. A task whose
    pull request merged completes; closed, failed or changes requested, it is blocked. Returns problems met."""
    if project.config["forge"] != "gh":
        return []
    with project.store.read() as tx:
        tasks = [t for t in tx.tasks([Status.MERGING]) if pending(t)]
        tasks += [t for t in tx.tasks([Status.SUBMITTED]) if isinstance(record_of(t).get("number"), int)]
    if not tasks:
        return []
    path = _sync_file(project)
    try:
        memory = json.loads(path.read_text())
    except (OSError, ValueError):
        memory = {}
    now = time.time()
    if not force and now < max(float(memory.get("next", 0)), float(memory.get("retry_at") or 0)):
        return []
    memory = {"next": now + float(project.config["forge_poll"])}
    problems: list[str] = []
    try:
        forge = forge_for(project)
        numbers = [n for t in tasks if isinstance(n := record_of(t).get("number"), int)]
        states = forge.pulls(numbers) if numbers else {}
    except ForgeUnavailable as exc:
        memory["retry_at"] = exc.retry_at or now + float(project.config["forge_poll"])
        memory["said"] = exc.message
        for t in tasks:
            save_record(project, t.id, unavailable=exc.message)
        _write(path, memory)
        return [exc.message]
    except CorralError as exc:
        _write(path, memory)
        return [exc.message]
    _write(path, memory)
    for task in tasks:
        if is_locked(project.paths.lifecycle_lock(task.id)):
            continue  # an accept holds it and asks the forge itself
        try:
            with task_lock(project, task.id, what="remote sync", timeout=0):
                current = read_task(project, task.id)
                if current.status is Status.SUBMITTED:
                    _submitted(project, forge, current, states.get(record_of(current).get("number") or 0))
                    continue
                if not pending(current):
                    continue
                rec = record_of(current)
                if rec.get("stage") != ASKED:  # an accept died before it asked the forge to merge
                    back_out(project, task.id, Actor.SYSTEM, "restored: the forge accept died before it asked to merge")
                    continue
                number = rec.get("number")
                state = states.get(number) if isinstance(number, int) else None
                settle_pending(project, forge, current, Actor.SYSTEM, None, asked_by=None, state=state)
        except TaskBusy:
            continue
        except ForgeBlocked:
            try:  # the task is blocked and says why; its feedback may go to the agent by itself
                _auto_deliver(project, task.id)
            except CorralError as exc:
                problems.append(f"{task.ref}: forge feedback: {exc.message}")
        except CorralError as exc:
            problems.append(f"{task.ref}: remote sync: {exc.message}")
    return problems


def _submitted(project: Project, forge: GhForge, task: Task, state: PullState | None) -> None:
    """A submitted task whose pull request was merged or closed on the forge, outside corral: merged,
    it completes through zombie (the system's recovery status), verified against the pull request's last head;
    closed, it is blocked."""
    if state is None or state.state == "OPEN":
        return
    if state.state == "CLOSED":
        with project.store.write() as tx:
            tx.park(
                task.id,
                Actor.SYSTEM,
                f"its pull request {state.url} was closed on the forge without merging",
                expected_from=Status.SUBMITTED,
            )
        return
    if not state.merge_commit:
        return
    git, repo, remote = project.git, project.repo, remote_name(project)
    base = str(record_of(task).get("base") or "")
    fetched = git.run("fetch", "-q", remote, f"+refs/heads/{base}:refs/remotes/{remote}/{base}", state.head_oid,
                      cwd=repo, check=False)  # fmt: skip
    if fetched.returncode != 0 or verify_merge(project, state.merge_commit, state.head_oid) is not None:
        raise CorralError(
            f"The pull request of {task.ref} was merged on the forge as {state.merge_commit[:12]}, but that merge "
            "could not be verified against its head; the task stays submitted.",
            code="merge-unverified",
            hint=f"Look at it (git show {state.merge_commit[:12]}); close the task when it is done: "
            f"corral close {task.ref} -m 'merged on the forge'",
        )
    with project.store.read() as tx:
        session = tx.get_session(task.session_id) if task.session_id else None
    if session is None:
        return
    follow_target(project, base, state.merge_commit, remote)
    save_record(project, task.id, merged=state.merge_commit)
    complete_merged(project, read_task(project, task.id), session, f"its pull request was merged on the forge as "
                    f"{state.merge_commit[:12]}")  # fmt: skip


def _write(path: Path, memory: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(memory))
    tmp.replace(path)


def _auto_deliver(project: Project, task_id: str) -> None:
    """``forge_auto_deliver``: a task the forge blocked goes back to work with the forge's feedback (actor system),
    within the circuit breaker (domain/breaker.py): the turn counts as an automatic relaunch (the unblock writes
    the breaker's ``on_auto_deliver``), and once the breaker has tripped the feedback waits for a person, the
    record saying so (``held``: the count it tripped at) for ``show``."""
    if not project.config["forge_auto_deliver"]:
        return
    task = read_task(project, task_id)
    if task.status is not Status.BLOCKED or not record_of(task).get("feedback"):
        return
    with project.store.read() as tx:
        session = tx.get_session(task.session_id) if task.session_id else None
    counters = Counters.of(session)
    if Breaker.of(task_config(project.config, task)).tripped(counters):
        save_record(project, task_id, held=counters.consecutive)
        return
    save_record(project, task_id, held=None)
    from corral.engine.operations import turns

    turns.unblock(project, task_id, actor=Actor.SYSTEM, message="")
