"""``create``, ``edit``, ``list`` and ``show``: making tasks and reading them."""

from __future__ import annotations

import click

from corral.cli import reads
from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.domain.toml_text import toml_value
from corral.engine.api import queries


@click.command(
    epilog="""\b
Examples:
  corral create "Fix the login timeout"
  corral create "Add retry to uploads" --ref upload-retry -m "Use exponential backoff; keep it under 60 s."
  corral create "Write the parser tests" --parent upload-retry --protect 'migrations/*'
"""
)
@click.argument("goal")
@click.option("--ref", help="Short name for the task and its branch corral/REF (made from the goal if omitted).")
@click.option("--parent", metavar="T", help="Make it a subtask: its branch starts from, and merges into, T's.")
@click.option("--harness", help="Agent to run: claude, pi, codex or command (default from config).")
@click.option("--model", help="Model the harness should use.")
@click.option(
    "--protect",
    "protect",
    multiple=True,
    metavar="GLOB",
    help="Path pattern the agent may not change unasked (repeatable).",
)
@click.option("-m", "--message", "prompt", metavar="PROMPT", help="What the agent should know beyond the goal.")
@click.option("--target", metavar="BRANCH", help="Branch to merge into (default: the branch checked out now).")
@json_option
@pass_app
def create(
    app: App,
    goal: str,
    ref: str | None,
    parent: str | None,
    harness: str | None,
    model: str | None,
    protect: tuple[str, ...],
    prompt: str | None,
    target: str | None,
) -> None:
    """Create a task in backlog."""
    from corral.engine.api import doctor, tasks

    task = tasks.create(
        app.project,
        goal,
        actor=app.actor,
        ref=ref,
        parent=parent,
        harness=harness,
        model=model,
        protect=protect,
        prompt=prompt or "",
        target=target,
    )
    v = queries.task_view(app.project, task)
    # A harness not installed here is said now, while the person is at the keyboard; start refuses it.
    warning = doctor.harness_warning(app.project, task)
    if warning is not None and not app.json:
        app.note(f"{app.style('warning:', 'yellow', app.stderr)} {warning}")
    app.answer(
        {"task": v.task_json(), "next": v.next, **({"warning": warning} if warning is not None else {})},
        [f"Created {app.style(task.ref, 'bold')} ({task.id}) in backlog.", f"Next: {v.next}"],
    )


@click.command(
    epilog="""\b
Examples:
  corral edit fix-login --goal "Fix the login timeout on slow networks"
  corral edit fix-login -m "Also cover the mobile client." --protect 'db/*'
  corral edit fix-login --set watchdog_timeout=600     this task's own setting
  corral edit fix-login --unset watchdog_timeout       back to the repository's
"""
)
@click.argument("task")
@click.option("--goal", help="New one-line goal.")
@click.option("-m", "--message", "prompt", metavar="PROMPT", help="New prompt (replaces the old one).")
@click.option("--protect", multiple=True, metavar="GLOB", help="Protected patterns (replace the old list).")
@click.option("--no-protect", is_flag=True, help="Clear the task's protected patterns.")
@click.option("--harness", help="New harness.")
@click.option("--model", help="New model.")
@click.option("--target", metavar="BRANCH", help="New target branch.")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A setting this task keeps as its own, for every later turn, auto-resumes included (repeatable).",
)
@click.option("--unset", multiple=True, metavar="KEY", help="Stop keeping a setting of its own (repeatable).")
@json_option
@pass_app
def edit(
    app: App,
    task: str,
    goal: str | None,
    prompt: str | None,
    protect: tuple[str, ...],
    no_protect: bool,
    harness: str | None,
    model: str | None,
    target: str | None,
    settings: tuple[str, ...],
    unset: tuple[str, ...],
) -> None:
    """Change a task that is not terminal (a finished task's fields are frozen).

    A task keeps its own settings (--set): what the environment set when a person launched
    one of its turns, and what --set gives it. They win over the repository's settings for
    each of its turns; `corral show TASK --details` lists them.
    """
    from corral.engine.api import tasks

    patterns: tuple[str, ...] | None = () if no_protect else (protect or None)
    updated = tasks.edit(
        app.project,
        task,
        goal=goal,
        prompt=prompt,
        protect=patterns,
        harness=harness,
        model=model,
        target=target,
        settings=settings,
        unset=unset,
        actor=app.actor,
    )
    lines = [f"Updated {updated.ref}."]
    own = updated.settings
    for item in settings:
        key = item.partition("=")[0].strip()
        if key in own:
            lines.append(f"  {key} = {toml_value(own[key]['value'])} (its own, for every later turn)")
    lines += [f"  {key.strip()} unset (it follows the repository's settings again)" for key in unset]
    app.answer({"task": queries.task_view(app.project, updated).task_json()}, lines)


def _either(which: str) -> str:
    *most, last = queries.list_statuses(which)
    return f"{', '.join(most)} or {last}" if most else last


@click.command(
    "list",
    epilog="""\b
Examples:
  corral list            tasks that are not finished
  corral list --active   tasks with an agent, a pair or a merge in flight
  corral list --blocked  tasks waiting for your review
  corral list --all --json
""",
)
@click.option("--active", "which", flag_value="active", help=f"Only {_either('active')} tasks.")
@click.option("--blocked", "which", flag_value="blocked", help=f"Only tasks waiting for review ({_either('blocked')}).")
@click.option("--all", "which", flag_value="all", help="Every task, finished ones included.")
@json_option
@pass_app
def list_(app: App, which: str | None) -> None:
    """One line per task: ref, status with substate, goal, and why it rests."""
    reads.list_body(app, which)


@click.command(
    epilog=f"""\b
Examples:
  corral show fix-login
  corral show fix --details      (a unique prefix is enough)
  corral show fix-login --all    every turn, not just the last {queries.PAGE_TURNS}
  corral show 3f9a2c1e --json
"""
)
@click.argument("task")
@click.option("--details", is_flag=True, help="Add the technical detail: session, failures, diagnostics.")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help=f"Every turn in the timeline (it shows the last {queries.PAGE_TURNS}; --json always has every turn).",
)
@json_option
@pass_app
def show(app: App, task: str, details: bool, every: bool) -> None:
    """The task, its timeline, why it stopped and what to do next."""
    reads.show_body(app, task, details, every)
