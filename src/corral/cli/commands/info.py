"""``paths``, ``config show`` and ``doctor``: where things live, what is set, what is wrong."""

from __future__ import annotations

import click

from corral.cli.app import App, json_option, pass_app
from corral.engine.config import BY_NAME
from corral.engine.operations import doctor as doctor_checks


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
    if app.json:
        app.emit({"paths": where})
        return
    wide = max(len(k) for k in where)
    for key, value in where.items():
        app.say(f"{key:<{wide}}  {value}")


@click.group()
def config() -> None:
    """Settings: flags beat environment beat corral.toml beat your user file beat defaults."""


@config.command(
    "show",
    epilog="""\b
Examples:
  corral config show
  CORRAL_WATCHDOG_TIMEOUT=600 corral config show --json
""",
)
@json_option
@pass_app
def config_show(app: App) -> None:
    """Each setting, its value, and where the value came from."""
    cfg = app.project.config
    if app.json:
        app.emit(
            {
                "settings": {
                    name: {
                        "value": v.value,
                        "source": v.source,
                        "origin": v.origin,
                        "trusted_only": BY_NAME[name].trusted_only,
                    }
                    for name, v in cfg.values.items()
                },
                "ignored": cfg.ignored,
                "unknown": cfg.unknown,
            }
        )
        return
    wide = max(len(n) for n in cfg.values)
    for name, v in cfg.values.items():
        origin = f" ({v.origin})" if v.origin else ""
        app.say(f"{name:<{wide}}  {v.value!r:<28}  {v.source}{origin}")
    for item in cfg.ignored:
        app.note(f"ignored: {item}")
    for item in cfg.unknown:
        app.note(f"unknown setting: {item}")


@click.command(
    epilog="""\b
Examples:
  corral doctor              check git, the state directory, the database, the settings
  corral doctor fix-login    re-derive the task's blocked/conflict label from its violations
"""
)
@click.argument("task", required=False)
@json_option
@pass_app
def doctor(app: App, task: str | None) -> int:
    """Check and repair; every problem comes with a hint."""
    checks = doctor_checks.run(app.project, task)
    failed = any(c.status == "fail" for c in checks)
    if app.json:
        app.emit({"ok": not failed, "checks": [c.to_json() for c in checks]})
    else:
        marks = {
            "ok": ("ok", "green"),
            "warn": ("warn", "yellow"),
            "fail": ("FAIL", "red"),
            "fixed": ("fixed", "cyan"),
        }
        for c in checks:
            word, color = marks[c.status]
            app.say(f"{app.style(f'{word:>5}', color)}  {c.name:<9} {c.message}")
            if c.hint and c.status != "ok":
                app.say(f"       {'':<9} hint: {c.hint}")
    return 1 if failed else 0
