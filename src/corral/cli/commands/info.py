"""``paths`` and ``doctor``: where things live and what is wrong (the settings are ``config``'s)."""

from __future__ import annotations

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.engine.api import doctor as doctor_checks
from corral.engine.api import lenient
from corral.errors import NotARepository


@click.command(
    epilog="""\b
Examples:
  corral paths
  corral paths --json | jq -r .paths.database
"""
)
@json_option
@pass_app
def paths(app: App) -> None:
    """Where this repository's corral state lives (CORRAL_HOME moves all of it)."""
    where = app.project.paths.as_dict()
    wide = max(len(k) for k in where)
    app.answer({"paths": where}, [f"{key:<{wide}}  {value}" for key, value in where.items()])


@click.command(
    epilog="""\b
Examples:
  corral doctor              check git, the state directory, the database, the settings,
                             the repository's objects (missing or corrupt, and the refs that reach them)
                             outside a repository: the install (git, the agent CLIs and their
                             logins, bubblewrap, the daemon); exit 0 when nothing fails
  corral doctor fix-login    re-derive the task's blocked/conflict label from its violations
"""
)
@click.argument("task", required=False)
@json_option
@pass_app
def doctor(app: App, task: str | None) -> int:
    """Check and repair; every problem comes with a hint. Outside a repository: check the install."""
    try:
        with lenient():  # broken settings are one of the things doctor reports, not a reason it cannot run
            project = app.project
    except NotARepository:
        if task is not None or app.repo is not None:
            raise
        checks = doctor_checks.run_install()  # the install check a new user runs first, from anywhere
    else:
        checks = [
            doctor_checks.Check("config", "fail", f"{p.code}: {p.message}", p.hint) for p in project.config.problems
        ]
        # with problems, the settings check's "settings are valid" would contradict them
        checks += [
            c for c in doctor_checks.run(project, task) if not (checks and c.name == "config" and c.status == "ok")
        ]
    failed = any(c.status == "fail" for c in checks)

    def lines() -> list[str]:
        out = []
        for c in checks:
            word, color = _MARKS[c.status]
            out.append(f"{app.style(f'{word:>5}', color)}  {c.name:<9} {c.message}")
            if c.hint and c.status != "ok":
                out.append(f"       {'':<9} hint: {c.hint}")
        return out

    app.answer({"ok": not failed, "checks": [c.to_json() for c in checks]}, lines)
    return 1 if failed else 0


_MARKS = {"ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "red"), "fixed": ("fixed", "cyan")}
