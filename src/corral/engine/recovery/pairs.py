"""The end of a pair, and the sweep of pairs whose corral process is gone.

A pair ends with its summary turn and the park (:func:`end_pair`; :func:`sweep_stale_pairs`
for a pair whose process died). A chat's end and its sweep are ``recovery/chats``.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from corral.adapters.pid_identity import Identity, stop_identified
from corral.adapters.process import pid_alive
from corral.domain.actors import Actor, Role
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.errors import CorralError


def pairing_lock(project: Project, task_id: str) -> Path:
    return project.paths.pairing_lock(task_id)


def end_pair(
    project: Project,
    task_id: str,
    actor: Actor,
    content: str,
    *,
    started_at: datetime | None = None,
    details: dict[str, Any] | None = None,
) -> Task:
    """The pair is over: a summary turn, back to blocked or conflict, the lock removed.

    ``started_at`` is when the pair began (the turn spans the session); ``details`` holds how
    the agent ended (``agent``: exit code or signal, seconds) when corral saw it end.
    """
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        assert task is not None
        if task.status is Status.PAIRING:
            tx.add_turn(
                task.id,
                role=Role.HUMAN,
                actor=actor,
                kind="pair summary",
                content=content,
                session_id=task.session_id,
                started_at=started_at,
                ended_at=tx.now(),
                details=details,
            )
            tx.park(task.id, actor, "the pair session ended", expected_from=Status.PAIRING)
        tx.unregister_process(task.id, "pair")
        task = tx.get_task(task_id) or task
    try:
        pairing_lock(project, task_id).unlink()
    except FileNotFoundError:
        pass
    return task


#: How long the agent of a pair whose corral died gets between SIGTERM and SIGKILL.
ORPHAN_AGENT_GRACE = 2.0


def _stop_orphan_agent(data: dict[str, Any]) -> bool:
    """The agent a dead pair's corral left running (it has a process group of its own): stopped.

    Only the process recorded (pid and start time) is signalled; False when it is gone.
    """
    pid, start = data.get("agent"), data.get("agent_start")
    if not isinstance(pid, int) or not isinstance(start, int) or isinstance(pid, bool):
        return False
    return stop_identified(Identity(pid, start=start), ORPHAN_AGENT_GRACE)


def _settle_pair_objects(project: Project, task: Task, quarantine_id: object) -> None:
    """A pair whose corral died left its objects in quarantine: verified and moved, and the branch
    checked, as the pair's own end would have (its agent is stopped first)."""
    if not isinstance(quarantine_id, str) or not quarantine_id.startswith("pair-"):
        return
    from corral.engine.runtime import branch_check, quarantine

    try:
        common = project.git.out("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=project.repo)
        quarantine.path_for(common, quarantine_id)  # a name no corral would make is refused here
    except (CorralError, OSError):
        return
    branch_check.after_confined(
        project.git,
        project.repo,
        common_dir=common,
        quarantine_id=quarantine_id,
        task_ref=task.ref,
        branch=task.branch,
        target=None,
        turn="pair",
        worktree=project.paths.worktree(task.ref),
    )


def sweep_stale_pairs(project: Project) -> int:
    """A pairing task whose pair process is gone → blocked or conflict, lock removed (docs/lifecycle.md).

    The agent it left (one that owned the terminal has a process group of its own, which a
    kill of corral's group does not reach) is stopped first, so it changes nothing after. On the
    shared store only this host's pairs: one open on another host is that host's to judge.
    """
    with project.store.read() as tx:
        pairing = tx.tasks([Status.PAIRING])
        # Another host's pair: its lock file and its pid are on that host, which ends it if its corral died.
        theirs = {p.task_id for p in project.placement.records_elsewhere(project, tx, "pair")} if pairing else set()
    pairing = [t for t in pairing if t.id not in theirs]
    ended = 0
    for task in pairing:
        try:
            data = json.loads(pairing_lock(project, task.id).read_text())
            pid = int(data.get("pid", 0))
        except (OSError, ValueError, AttributeError):
            data, pid = {}, 0
        if pid > 1 and pid_alive(pid):
            continue
        stopped = _stop_orphan_agent(data) if isinstance(data, dict) else False
        _settle_pair_objects(project, task, data.get("quarantine") if isinstance(data, dict) else None)
        text = "The pair session ended without corral (its process is gone)."
        if stopped:
            text += " Its agent was still running and was stopped."
        end_pair(project, task.id, Actor.SYSTEM, text)
        ended += 1
    return ended
