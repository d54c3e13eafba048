"""``corral project``: this checkout's project identity, and the state of projects that moved or went.

``show`` says who the project is and where its state lives; ``list`` lists every state directory
under ``CORRAL_HOME`` with the checkout it belongs to; ``attach`` and ``fresh`` answer the question
a copy asks; ``archive`` puts aside the state of a repository that is gone.
"""

from __future__ import annotations

from typing import Any

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.engine.api import Project, corral_home, orphan_states, read_record
from corral.errors import RefusedError, RepositoryCopied


@click.group(
    invoke_without_command=True,
    epilog="""\b
Examples:
  corral project show                  this checkout's identity and its state directory
  corral project list                  every project's state, and whether its repository is there
  corral project attach                in a copy: the tasks follow this checkout
  corral project fresh                 in a copy: an empty task list of its own
  corral project archive NAME          put aside the state of a repository that is gone
\b
A project is its repository's root commit plus its normalized origin URL, cached in
.git/corral/identity.json with the path it was seen at: a moved repository keeps its tasks
(the first command run in its new place reattaches them), and a copy is told apart.
""",
)
@click.pass_context
def project(ctx: click.Context) -> None:
    """Which project this checkout is, and state whose repository moved or is gone."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def _located(p: Project) -> dict[str, Any]:
    return {
        "repository": str(p.repo),
        "state": str(p.paths.root),
        "identity": p.identity.to_json() if p.identity else None,
        "moved_from": p.moved_from,
    }


def _lines(p: Project) -> list[str]:
    ident = p.identity
    out = [f"repository:  {p.repo}", f"state:       {p.paths.root}"]
    if ident is None:
        out.append("identity:    none yet (no commit): the state is keyed by the path until the first commit")
    else:
        out += [
            f"project:     {ident.project}",
            f"root commit: {ident.root_commit}",
            f"remote:      {ident.remote or '(none)'}",
        ]
        if ident.instance:
            out.append(f"instance:    {ident.instance} (a copy that started its own task list)")
    if p.moved_from:
        out.append(f"moved from:  {p.moved_from} (its tasks followed)")
    return out


@project.command("show")
@json_option
@pass_app
def show(app: App) -> None:
    """This checkout's identity and its state directory."""
    p = app.project
    app.answer({"project": _located(p)}, lambda: _lines(p))


@project.command("list")
@json_option
@pass_app
def list_(app: App) -> None:
    """Every state directory under CORRAL_HOME, with the repository it belongs to."""
    home = corral_home()
    lost = {o.state: o for o in orphan_states.orphans(home)}
    rows = []
    for state in sorted(p for p in (home / "projects").glob("*") if p.is_dir()) if (home / "projects").is_dir() else []:
        orphan = lost.get(state)
        if orphan is not None:
            rows.append({**orphan.as_view(), "attached": False})
            continue
        record = read_record(state)
        rows.append(
            {
                "state": str(state),
                "name": state.name,
                "repository": record.path if record else None,
                "reason": None,
                "identity": record.identity.to_json() if record and record.identity else None,
                "attached": True,
            }
        )

    def lines() -> list[str]:
        if not rows:
            return [f"No project state under {home}."]
        out = []
        for row in rows:
            where = row["repository"] or "(unknown repository)"
            mark = "ok" if row["attached"] else row["reason"]
            out.append(f"{mark:<9} {row['name']}  {where}")
            if not row["attached"]:
                out.append(f"{'':<9} hint: {row['hint']}")
        return out

    app.answer({"home": str(home), "projects": rows}, lines)


@project.command(
    "attach",
    epilog="""\b
Examples:
  corral project attach                         in a copy: the tasks follow this checkout
  corral project attach --state myrepo--1a2b    a re-cloned repository takes its old state back
""",
)
@click.option("--state", "state", metavar="NAME", help="The state directory to attach (see `corral project list`).")
@json_option
@pass_app
def attach(app: App, state: str | None) -> None:
    """Attach this checkout to its project's tasks (a copy, or a repository found again)."""
    p = Project.open(app.repo, copy="attach") if state is None else Project.attach(app.repo, state)
    try:
        app.answer(
            {"project": _located(p)},
            lambda: (
                [f"{p.repo} holds the tasks in {p.paths.root}."]
                + ([f"They were {p.moved_from}'s."] if p.moved_from else [])
            ),
        )
    finally:
        p.close()


@project.command("fresh")
@json_option
@pass_app
def fresh(app: App) -> None:
    """In a copy: start an empty task list here (the original keeps its tasks)."""
    try:
        Project.open(app.repo).close()
    except RepositoryCopied:
        pass
    else:
        raise RefusedError(
            "This checkout is not a copy: its tasks are its own.",
            code="not-a-copy",
            hint="`corral project fresh` answers the question a copy of a repository asks.",
        )
    p = Project.open(app.repo, copy="fresh")
    try:
        app.answer({"project": _located(p)}, lambda: [f"{p.repo} starts its own task list in {p.paths.root}."])
    finally:
        p.close()


@project.command("archive")
@click.argument("state")
@json_option
@pass_app
def archive(app: App, state: str) -> None:
    """Put aside the state of a repository that is gone (moved into CORRAL_HOME/archive/, not deleted)."""
    home = corral_home()
    moved = orphan_states.archive(orphan_states.find_state(home, state), home)
    app.answer({"archived": {"name": state, "path": str(moved)}}, f"Archived {state} to {moved}.")
