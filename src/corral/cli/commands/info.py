"""``paths``, ``config show``, ``config adopt`` and ``doctor``: where things live, what is set, what is wrong."""

from __future__ import annotations

import click

from corral.cli.app import App, json_option, pass_app
from corral.domain.settings import SETTINGS, Setting, toml_comment, toml_value
from corral.engine.config import Config, adopt, proposals
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
    wide = max(len(k) for k in where)
    app.answer({"paths": where}, [f"{key:<{wide}}  {value}" for key, value in where.items()])


@click.group()
def config() -> None:
    """Settings: environment > your user file's table for this repository > corral.toml > your user file > defaults.

    A setting that makes corral execute something is never taken from corral.toml: it is a
    proposal, shown by `config show`, that `config adopt` copies into your user file's
    [projects."<repository>"] table.
    """


@config.command(
    "show",
    epilog="""\b
Examples:
  corral config show
  corral config show > my-settings.toml      the output is TOML, with each setting's help
  CORRAL_WATCHDOG_TIMEOUT=600 corral config show --json
""",
)
@json_option
@pass_app
def config_show(app: App) -> None:
    """Each setting as TOML, with its help and where its value came from."""
    cfg = app.project.config
    if not app.json:
        for item in cfg.ignored:
            app.note(f"ignored: {item}")
        for proposal in proposals(cfg):
            if not proposal.adopted:
                app.note(f"proposed: {proposal.message()}")
        for item in cfg.unknown:
            app.note(f"unknown setting: {item}")
    app.answer(
        {
            "settings": {
                s.name: {
                    "value": cfg.values[s.name].value,
                    "source": cfg.values[s.name].source,
                    "origin": cfg.values[s.name].origin,
                    "trusted_only": not s.repository_may_set,
                    "trust": s.trust.value,
                    "default": s.default_value(),
                    "help": s.help,
                }
                for s in SETTINGS
            },
            "ignored": cfg.ignored,
            "proposals": [p.to_json() for p in proposals(cfg)],
            "unknown": cfg.unknown,
            "repository": cfg.repo,
            "user_file": cfg.user_file,
        },
        lambda: settings_toml(cfg),
    )


@config.command(
    "adopt",
    epilog="""\b
Examples:
  corral config show                                   lists what corral.toml proposes
  corral config adopt post_turn_check --value 'make test'
""",
)
@click.argument("name")
@click.option("--value", "expected", help="The value you read in `config show`; refused if corral.toml now differs.")
@json_option
@pass_app
def config_adopt(app: App, name: str, expected: str | None) -> None:
    """Adopt corral.toml's proposal for NAME into your user file, for this repository only."""
    cfg = app.project.config
    done = adopt(cfg, name, expected=expected)
    shown = "(not set)" if done.value is None else toml_value(done.value)
    app.answer(
        {"adopted": done.to_json(), "user_file": cfg.user_file},
        [f"Adopted {done.name} = {shown} for {done.repo} in {cfg.user_file}."],
    )


_SOURCE_WORDS = {
    "env": "environment",
    "project": "project file",
    "user": "user file",
    "user_project": "user file, for this repository",
}
_TRUST_WORDS = {
    "user_only": " (corral.toml may not set this)",
    "executes": " (corral.toml may propose this, never set it)",
}


def _trust_words(s: Setting) -> str:
    return _TRUST_WORDS.get(s.trust.value, "")


def settings_toml(cfg: Config) -> list[str]:
    """The settings as a TOML document: each one's help, then ``name = value  # where it came from``.

    A setting that is not set is written commented out, so the document reads back
    (``tomllib``) as exactly the values that are set.
    """
    lines = [
        "# corral settings, as TOML. The environment (CORRAL_<NAME>) beats your user file's table for",
        '# this repository ([projects."<path>"]) beats corral.toml beats your user file beats the',
        "# defaults. A setting marked (corral.toml may not set this) or (corral.toml may propose this,",
        "# never set it) is taken only from your user file or the environment.",
    ]
    proposed = {p.name: p for p in proposals(cfg)}
    for s in SETTINGS:
        v = cfg.values[s.name]
        where = "default" if v.origin is None else f"from {v.origin} ({_SOURCE_WORDS.get(v.source, v.source)})"
        lines.append("")
        lines.append(f"# {toml_comment(s.help)}{_trust_words(s)}")
        if v.value is None:
            lines.append(f"# {s.name} = (not set)  # {toml_comment(where)}")
        else:
            lines.append(f"{s.name} = {toml_value(v.value)}  # {toml_comment(where)}")
        proposal = proposed.get(s.name)
        if proposal is not None and not proposal.adopted and proposal.value is not None:
            lines.append(f"# proposed by {toml_comment(proposal.file)}: {toml_comment(toml_value(proposal.value))}")
            lines.append(f"# adopt it for this repository: {toml_comment(proposal.adopt_command)}")
    return lines


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
