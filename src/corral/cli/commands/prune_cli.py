"""``prune``: detailed diagnostics past 90 days, and stale worktrees no live task owns."""

from __future__ import annotations

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.engine.api import prune as pruning


@click.command(
    epilog="""\b
Examples:
  corral prune                  diagnostics past 90 days, stale worktrees
  corral prune --dry-run        what it would remove; nothing is removed
  corral prune --json
\b
Failure evidence and the reason a task rests stay until the task is deleted; a pruned
diagnostic reads "Expired after 90 days" in corral show --details. A worktree with
uncommitted changes is never removed: it is listed with what to do.
"""
)
@click.option("-n", "--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@json_option
@pass_app
def prune(app: App, dry_run: bool) -> None:
    """Remove detailed diagnostics past 90 days and stale worktrees (never unsaved work)."""
    result = pruning.prune(app.project, dry_run=dry_run)
    app.answer({"pruned": result.as_view()}, lambda: _said(result))


def _said(result: pruning.PruneResult) -> list[str]:
    d = result.diagnostics
    removed = "would remove" if result.dry_run else "removed"
    lines = ["Dry run: nothing was removed."] if result.dry_run else []
    return [
        *lines,
        f"Diagnostics: {removed} {len(d.removed)} past 90 days"
        + (f" and those of {len(d.orphaned)} deleted task(s)" if d.orphaned else "")
        + f"; {d.kept} kept.",
        f"Worktrees: {removed} {len(result.worktrees_removed)}.",
        *(f"  {removed:<12} {path}" for path in result.worktrees_removed),
        *(f"  {'kept':<12} {kept['path']} — {kept['reason']}" for kept in result.worktrees_kept),
    ]
