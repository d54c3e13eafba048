"""The ``corral`` command group: global options and the registry of commands."""

from __future__ import annotations

import click

from corral.cli.app import App
from corral.cli.commands import daemon, demo, info, logs, notes, review, tasks, turns


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="""\b
Start here:
  corral create "Fix the login timeout"     a task in backlog
  corral list                               what is going on
  corral show fix-login                     one task: timeline, why it stopped, what next


Every command takes --json. T is a task's ref, its id, or a unique prefix of either.

Exit codes: 0 done, 1 failed, 2 usage, 3 refused by the task's state, 4 not found,
124 wait timed out, 130 interrupted.
""",
)
@click.option("--repo", metavar="PATH", help="The repository (default: the one containing the current directory).")
@click.version_option(package_name="corral", message="corral %(version)s")
@click.pass_context
def cli(ctx: click.Context, repo: str | None) -> None:
    """Run AI coding agents on tasks in a git repository, one worktree and branch per task."""
    app = ctx.ensure_object(App)
    app.repo = repo


for module in (tasks, turns, logs, review, notes, info, daemon, demo):
    for command in module.COMMANDS:
        cli.add_command(command)
