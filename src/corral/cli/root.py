"""The ``corral`` command group: global options and the registry of commands.

Command modules are imported only when their command runs (or help lists them),
so ``corral list`` does not pay for the supervisor, the daemon or the demo.

The global options (``--repo``, ``--json``) work before the command or after it: a
command gets ``--repo`` when it is loaded (``--json`` it has already), and an argument
named TASK completes task refs in the shell (``corral completion``). A command that is
not one is answered with the nearest names.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

import corral
from corral.cli.app import App
from corral.cli.options import json_option

# command name -> (module, attribute), in the order help shows them
COMMANDS: dict[str, tuple[str, str]] = {
    "create": ("tasks_cli", "create"),
    "list": ("tasks_cli", "list_"),
    "show": ("tasks_cli", "show"),
    "edit": ("tasks_cli", "edit"),
    "start": ("turns_cli", "start"),
    "unblock": ("turns_cli", "unblock"),
    "resume": ("turns_cli", "resume"),
    "ask": ("turns_cli", "ask"),
    "stop": ("turns_cli", "stop"),
    "sync": ("turns_cli", "sync"),
    "wait": ("turns_cli", "wait"),
    "watch": ("watch", "watch"),
    "dashboard": ("dashboard", "dashboard"),
    "logs": ("logs_cli", "logs"),
    "failures": ("failures_cli", "failures"),
    "pair": ("review", "pair"),
    "chat": ("review", "chat"),
    "diff": ("review", "diff"),
    "accept": ("accept_cli", "accept"),
    "submit": ("review", "submit"),
    "close": ("review", "close"),
    "reject": ("review", "reject"),
    "reopen": ("review", "reopen"),
    "delete": ("review", "delete"),
    "comment": ("notes", "comment"),
    "journal": ("notes", "journal"),
    "paths": ("info", "paths"),
    "project": ("project_cli", "project"),
    "config": ("config_cli", "config"),
    "doctor": ("info", "doctor"),
    "prune": ("prune_cli", "prune"),
    "backup": ("store", "backup"),
    "restore": ("store", "restore"),
    "store": ("store", "store"),
    "daemon": ("daemon", "daemon"),
    "worker": ("worker", "worker"),
    "workers": ("worker", "workers"),
    "mcp": ("mcp", "mcp"),
    "demo": ("demo", "demo"),
    "completion": ("completion", "completion"),
}

#: Arguments that name a task (so the shell completes refs for them).
TASK_ARGUMENTS = frozenset({"task", "tasks", "t", "ref"})


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = COMMANDS.get(cmd_name)
        if found is None:
            return None
        module = importlib.import_module(f"corral.cli.commands.{found[0]}")
        command: click.Command = getattr(module, found[1])
        _with_globals(command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its whole first sentence, wrapped: click's own list cuts it at the column's end.

        The sentences are kept in :mod:`corral.cli.help_texts` (generated from the commands and held equal
        to them by a test), so the help loads no command's module; one not kept there is loaded for it.
        """
        from corral.cli.help_texts import SUMMARIES

        rows = []
        for name in self.list_commands(ctx):
            summary = SUMMARIES.get(name)
            if summary is None:
                command = self.get_command(ctx, name)
                if command is None or command.hidden:
                    continue
                summary = command.get_short_help_str(limit=1_000)
            rows.append((name, summary))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = click.utils.make_str(args[0])
        if name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            raise click.exceptions.NoSuchCommand(name, possibilities=list(COMMANDS), ctx=ctx)
        return super().resolve_command(ctx, args)


def _set_repo(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(App).repo = value


def _repo_option() -> click.Option:
    return click.Option(
        ["--repo"],
        metavar="PATH",
        expose_value=False,
        callback=_set_repo,
        help="The repository (default: the one containing the current directory).",
    )


def _with_globals(command: click.Command) -> None:
    """``--repo`` on the command (and its subcommands), and ref completion on its TASK argument."""
    if getattr(command, "_corral_globals", False):
        return
    command._corral_globals = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_globals(sub)
        return
    if not any("--repo" in p.opts for p in command.params):
        command.params.append(_repo_option())
    for param in command.params:
        named_task = isinstance(param, click.Argument) and param.name in TASK_ARGUMENTS
        if named_task and param._custom_shell_complete is None:
            param._custom_shell_complete = _complete_refs


def _complete_refs(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    from corral.cli.commands.completion import complete_refs

    return complete_refs(ctx, incomplete)


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
Every command but mcp takes --json, and every one --repo, before or after the command. T is a
task's ref, its id, or a unique prefix of either. Shell completion: corral completion bash|zsh|fish.
\b
Exit codes: 0 done, 1 failed, 2 usage, 3 refused by the task's state, 4 not found,
124 wait timed out, 130 interrupted.
""",
)
@click.option(
    "--repo",
    metavar="PATH",
    expose_value=False,
    callback=_set_repo,
    help="The repository (default: the one containing the current directory); before or after the command.",
)
@json_option
@click.version_option(corral.__version__, package_name="corral", message="corral %(version)s")  # no metadata read
def cli() -> None:
    """Run AI coding agents on tasks in a git repository, one worktree and branch per task."""
