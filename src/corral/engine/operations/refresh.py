"""Settling a project before it is read or waited on: one reconcile pass, then auto-resume.

The reconcile-before-read policy lives here, so every surface (the CLI's read commands,
``wait``, the daemon's ticks) settles the same way.
"""

from __future__ import annotations

from corral.engine.operations.auto_resume import maybe_auto_resume
from corral.engine.operations.resume_gap import due
from corral.engine.project import Project
from corral.engine.recovery.reconcile import reconcile
from corral.engine.runtime.liveness import Observed


def settle(project: Project, observed: Observed | None = None) -> list[str]:
    """Reconcile, then auto-resume each task whose turn ended in this pass; returns the problems met.

    ``observed`` collects what the pass saw of the supervisors still running, so a read that
    follows shows what the pass judged (``liveness.Observed``); it never holds a task whose
    turn ended, so an auto-resumed task is read afresh.
    """
    report = reconcile(project, observed)
    problems = list(report.problems)
    if project.config["forge"] == "gh":  # a project with no forge loads none of remote sync (~5 ms of a read)
        from corral.engine.operations.forge_sync import sync  # at most every forge_poll (docs/forge.md)

        problems += sync(project)
    for task_id in due(project, report.ended):  # and the tasks the auto-resume gap held back
        try:
            maybe_auto_resume(project, task_id)
        except Exception as exc:  # one task's resume must not stop the others'
            problems.append(f"{task_id}: auto-resume: {type(exc).__name__}: {exc}")
    return problems
