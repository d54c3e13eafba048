"""submit: push a task's branch to the configured remote (and open a pull request on the forge).

blocked → submitted. The push is the fact; a pull request is opened (or the one open from the branch
updated) when the person's settings name a forge (``forge = "gh"``, docs/forge.md), through corral's own
calls to the forge (``adapters/gh_forge``); ``draft`` opens it as a draft. Its number is kept in the task's
``forge`` record, so a later accept merges that pull request.
"""

from __future__ import annotations

from msgspec import Struct

from corral.domain.actors import Actor
from corral.domain.explain import decide_files
from corral.domain.operations_table import Op, check_operation
from corral.domain.sanitize import one_line, sanitize_prose
from corral.domain.status import Status, check_transition
from corral.engine import workspace
from corral.engine.git_remote import remote_name
from corral.engine.project import Project
from corral.engine.recovery.merges import escape_stranded
from corral.engine.resolve import resolve_task
from corral.engine.task_locks import task_lock
from corral.errors import CorralError, GitError, RefusedError


class Submitted(Struct, frozen=True):
    ref: str
    remote: str
    branch: str
    pull_request: str | None


def submit(project: Project, given: str, *, actor: Actor, draft: bool = False) -> Submitted:
    escape_stranded(project, given, Op.SUBMIT)  # a merge its accept left behind is put back first
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    with task_lock(project, task.id, what="submit"):
        with project.store.read() as tx:
            task = tx.get_task(task.id) or task
            check_operation(Op.SUBMIT, task.status, task.ref)
            check_transition(task.status, Status.SUBMITTED, actor, what=f"submit {task.ref}")
            pending = tx.pending_paths(task.id)
            if pending:
                raise RefusedError(
                    f"Protected files of {task.ref} await a decision: {', '.join(pending)}",
                    code="undecided-files",
                    hint=f"Decide them: {decide_files(task.ref, pending)}",
                )
            target = workspace.target_branch(tx, task)
        remote = remote_name(project)  # a remote the repository has, never an option
        git = project.git
        push = git.run(
            "push",
            "--porcelain",
            remote,
            f"refs/heads/{task.branch}:refs/heads/{task.branch}",
            cwd=project.repo,
            check=False,
        )
        if push.returncode != 0:
            raise GitError(
                f"Pushing {task.branch} to {remote} failed: {(push.stderr or push.stdout).strip()[-300:]}",
                hint=f"Run `git push {remote} {task.branch}` to see the whole message.",
            )
        pull_request, record = None, None
        if project.config["forge"] == "gh":
            from corral.engine.operations.forge_accept import RECORD, forge_for

            try:
                forge = forge_for(project)
                title, body = (
                    one_line(task.goal, 200),
                    f"{sanitize_prose(task.prompt)}\n\nCorral-Task: {task.id}".strip(),
                )
                found = forge.find_pull(task.branch)
                pull = (
                    forge.update_pull(found.number, title, body)
                    if found
                    else forge.open_pull(task.branch, target, title, body, draft=draft)
                )
            except CorralError as exc:
                raise CorralError(
                    f"The branch was pushed, but the forge did not open its pull request: {exc.message}",
                    code="forge-failed",
                    hint=f"Check gh's login (gh auth status), then submit again: corral submit {task.ref}",
                ) from None
            pull_request = pull.url
            record = {"number": pull.number, "url": pull.url, "node": pull.node_id, "base": target}
        with project.store.write() as tx:
            current = tx.get_task(task.id) or task
            meta = {**current.metadata, "remote": remote, "remote_branch": task.branch}
            if pull_request:
                meta["pull_request"] = pull_request
            if record is not None:
                old = meta.get(RECORD)
                meta[RECORD] = {**(old if isinstance(old, dict) else {}), **record}
            tx.update_task(task.id, metadata=meta)
            tx.set_status(task.id, Status.SUBMITTED, actor, f"pushed to {remote}", expected_from=current.status)
        return Submitted(task.ref, remote, task.branch, pull_request)
