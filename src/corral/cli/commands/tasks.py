"""``create``, ``edit``, ``list`` and ``show``: making tasks and reading them."""

from __future__ import annotations

import click

from corral.cli.app import App, json_option, pass_app
from corral.cli.render import list_lines, show_lines
from corral.domain.status import ACTIVE, BLOCKED, TERMINAL, Status
from corral.engine.operations import tasks
from corral.engine.read import projection
from corral.engine.resolve import resolve_task
from corral.engine.runtime.liveness import live_facts


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
    with app.project.store.read() as tx:
        v = projection.view(tx, task)
    if app.json:
        app.emit({"task": v.task_json(), "next": v.next})
        return
    app.say(f"Created {app.style(task.ref, 'bold')} ({task.id}) in backlog.")
    app.say(f"Next: {v.next}")


@click.command(
    epilog="""\b
Examples:
  corral edit fix-login --goal "Fix the login timeout on slow networks"
  corral edit fix-login -m "Also cover the mobile client." --protect 'db/*'
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
) -> None:
    """Change a task that is not terminal (a finished task's fields are frozen)."""
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
    )
    with app.project.store.read() as tx:
        v = projection.view(tx, updated)
    if app.json:
        app.emit({"task": v.task_json()})
        return
    app.say(f"Updated {updated.ref}.")


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
@click.option("--active", "which", flag_value="active", help="Only working, interrupted, pairing and merging tasks.")
@click.option("--blocked", "which", flag_value="blocked", help="Only tasks waiting for review (blocked, conflict).")
@click.option("--all", "which", flag_value="all", help="Every task, finished ones included.")
@json_option
@pass_app
def list_(app: App, which: str | None) -> None:
    """One line per task: ref, status with substate, goal, and why it rests."""
    wanted: frozenset[Status] | None
    if which == "active":
        wanted = ACTIVE
    elif which == "blocked":
        wanted = BLOCKED
    elif which == "all":
        wanted = None
    else:
        wanted = frozenset(Status) - TERMINAL
    project = app.project
    from corral.engine.operations.refresh import settle

    for problem in settle(project):
        app.note(f"warning: could not reconcile {problem} (see corral doctor)")
    with project.store.read() as tx:
        found = tx.tasks(sorted(wanted) if wanted is not None else None)
        rows = [
            projection.list_row(
                projection.view(tx, t, live_facts(project, t), breaker_threshold=project.config["breaker_threshold"])
            )
            for t in found
        ]
    if app.json:
        app.emit({"tasks": rows})
        return
    if not rows:
        app.say("No tasks." if which in (None, "all") else f"No {which} tasks.")
        return
    for line in list_lines(app, rows):
        app.say(line)


@click.command(
    epilog="""\b
Examples:
  corral show fix-login
  corral show fix --details      (a unique prefix is enough)
  corral show 3f9a2c1e --json
"""
)
@click.argument("task")
@click.option("--details", is_flag=True, help="Add the technical detail: session, failures, diagnostics.")
@json_option
@pass_app
def show(app: App, task: str, details: bool) -> None:
    """The task, its timeline, why it stopped and what to do next."""
    project = app.project
    from corral.engine.operations.refresh import settle

    for problem in settle(project):
        app.note(f"warning: could not reconcile {problem} (see corral doctor)")
    with project.store.read() as tx:
        found = resolve_task(tx, task)
        doc = projection.show(
            tx,
            found,
            live_facts(project, found),
            breaker_threshold=project.config["breaker_threshold"],
            diagnostics=project.paths.diagnostics,
        )
    if app.json:
        app.emit({k: v for k, v in doc.items() if k != "schema_version"})
        return
    app.say("\n".join(show_lines(app, doc, details=details)))  # one write: a long history prints at once
