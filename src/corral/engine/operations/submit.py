"""submit: push a task's branch to the configured remote (and open a pull request through a forge CLI).

blocked → submitted. The push is the fact; a pull request is made only when a forge
(``forge = "gh"``) is configured and its CLI is on PATH.
"""

from __future__ import annotations

import shutil

from msgspec import Struct

from corral.domain.actors import Actor
from corral.domain.explain import decide_files
from corral.domain.operations_table import Op, check_operation
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


def submit(project: Project, given: str, *, actor: Actor) -> Submitted:
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
        pull_request = None
        if project.config["forge"] == "gh" and shutil.which("gh"):
            result = project.git.runner.run(
                [
                    "gh",
                    "pr",
                    "create",
                    "--head",
                    task.branch,
                    "--base",
                    target,
                    "--title",
                    task.goal,
                    "--body",
                    f"{task.prompt}\n\nCorral-Task: {task.id}".strip(),
                ],
                cwd=str(project.repo),
            )
            if result.returncode != 0:
                raise CorralError(
                    f"The branch was pushed, but gh could not open a pull request: {result.stderr.strip()[-300:]}",
                    code="forge-failed",
                    hint="Open it by hand, or fix gh (gh auth status) and submit again.",
                )
            pull_request = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else None
        with project.store.write() as tx:
            current = tx.get_task(task.id) or task
            meta = {**current.metadata, "remote": remote, "remote_branch": task.branch}
            if pull_request:
                meta["pull_request"] = pull_request
            tx.update_task(task.id, metadata=meta)
            tx.set_status(task.id, Status.SUBMITTED, actor, f"pushed to {remote}", expected_from=current.status)
        return Submitted(task.ref, remote, task.branch, pull_request)
