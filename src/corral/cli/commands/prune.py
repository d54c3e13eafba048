"""``prune``: detailed diagnostics past 90 days, and stale worktrees no live task owns."""

from __future__ import annotations

import click

from corral.cli.app import App, json_option, pass_app
from corral.engine.operations import prune as pruning


@click.command(
    epilog="""\b
Examples:
  corral prune                  diagnostics past 90 days, stale worktrees
  corral prune --json
\b
Failure evidence and the reason a task rests stay until the task is deleted; a pruned
diagnostic reads "Expired after 90 days" in corral show --details. A worktree with
uncommitted changes is never removed: it is listed with what to do.
"""
)
@json_option
@pass_app
def prune(app: App) -> None:
    """Remove detailed diagnostics past 90 days and stale worktrees (never unsaved work)."""
    result = pruning.prune(app.project)
    app.answer({"pruned": result.to_json()}, lambda: _said(result))


def _said(result: pruning.PruneResult) -> list[str]:
    d = result.diagnostics
    return [
        f"Diagnostics: removed {len(d.removed)} past 90 days"
        + (f" and those of {len(d.orphaned)} deleted task(s)" if d.orphaned else "")
        + f"; {d.kept} kept.",
        f"Worktrees: removed {len(result.worktrees_removed)}.",
        *(f"  removed  {path}" for path in result.worktrees_removed),
        *(f"  kept     {kept['path']} — {kept['reason']}" for kept in result.worktrees_kept),
    ]
