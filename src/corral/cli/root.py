"""The ``corral`` command group: global options and the registry of commands.

Command modules are imported only when their command runs (or help lists them),
so ``corral list`` does not pay for the supervisor, the daemon or the demo.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from corral.cli.app import App

# command name -> (module, attribute), in the order help shows them
COMMANDS: dict[str, tuple[str, str]] = {
    "create": ("tasks", "create"),
    "list": ("tasks", "list_"),
    "show": ("tasks", "show"),
    "edit": ("tasks", "edit"),
    "start": ("turns", "start"),
    "unblock": ("turns", "unblock"),
    "resume": ("turns", "resume"),
    "ask": ("turns", "ask"),
    "stop": ("turns", "stop"),
    "sync": ("turns", "sync"),
    "wait": ("turns", "wait"),
    "logs": ("logs", "logs"),
    "pair": ("review", "pair"),
    "chat": ("review", "chat"),
    "diff": ("review", "diff"),
    "accept": ("review", "accept"),
    "submit": ("review", "submit"),
    "close": ("review", "close"),
    "reject": ("review", "reject"),
    "reopen": ("review", "reopen"),
    "delete": ("review", "delete"),
    "comment": ("notes", "comment"),
    "journal": ("notes", "journal"),
    "paths": ("info", "paths"),
    "config": ("info", "config"),
    "doctor": ("info", "doctor"),
    "prune": ("prune", "prune"),
    "backup": ("store", "backup"),
    "restore": ("store", "restore"),
    "daemon": ("daemon", "daemon"),
    "demo": ("demo", "demo"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = COMMANDS.get(cmd_name)
        if found is None:
            return None
        module = importlib.import_module(f"corral.cli.commands.{found[0]}")
        command: Any = getattr(module, found[1])
        return command  # type: ignore[no-any-return]


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="""\b
Start here:
  corral demo                               the whole lifecycle on a scratch repository
  corral create "Fix the login timeout"     a task in backlog
  corral start fix-the-login-timeout        its own branch and worktree; the agent runs
  corral list                               what is going on
  corral show fix-the-login-timeout         one task: timeline, why it stopped, what next

\b
Every command takes --json. T is a task's ref, its id, or a unique prefix of either.
\b
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
