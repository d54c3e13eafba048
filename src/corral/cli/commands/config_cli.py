"""``config show | get | set | unset | edit | path | adopt``: the settings a person reads and changes.

Every subcommand runs on broken settings (a file that is not TOML, a misspelt key, a value
of the wrong type): it says what is wrong (file, line and column, or the nearest name) and
exits 2, so the person can fix it with the same command. Writes go through
:func:`corral.engine.setting_writes.write_setting`: one line changes, the rest of the file stays.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.domain.settings import BY_NAME, SETTINGS, Setting, SettingValue, lookup
from corral.domain.toml_text import toml_comment, toml_value
from corral.engine.api import (
    PROJECTS_TABLE,
    SCOPES,
    Config,
    Value,
    adopt,
    check_scope,
    file_problems,
    lenient,
    load_config,
    parse_toml,
    proposals,
    read_toml,
    scope_target,
    user_config_file,
    write_setting,
)
from corral.errors import ConfigError, CorralError, NotARepository, UsageError

_SCOPE_HELP = (
    "user: your user file, for every repository (default); local: your user file's table for this "
    "repository only; project: the repository's corral.toml, shared with everyone who clones it."
)


def settings(app: App) -> Config:
    """The settings as far as they can be read; outside a repository, your user file's alone."""
    with lenient():
        try:
            return app.project.config
        except NotARepository:
            return load_config(user_file=user_config_file(), project_file=None, strict=False)


def report_problems(app: App, cfg: Config) -> int:
    """Each problem on stderr (human) or the first as the error document (--json); the exit code."""
    if not cfg.problems:
        return 0
    if app.json:
        first = cfg.problems[0]
        more = len(cfg.problems) - 1
        raise ConfigError(
            first.message,
            hint=(first.hint or "") + (f" ({more} more problem(s): corral config show lists them.)" if more else ""),
        )
    for problem in cfg.problems:
        app.fail(problem)
    return 2


@click.group(
    no_args_is_help=True,
    epilog="""\b
Examples:
  corral config show                          every setting, its value and where it came from
  corral config get watchdog_timeout
  corral config set claude_bin ~/bin/claude   in your user file, for every repository
  corral config set model opus --scope local  in your user file, for this repository only
  corral config unset model
  corral config edit                          your user file in $EDITOR, checked before it is saved
  corral config path                          the files, and which exist
""",
)
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
\b
A settings file that cannot be read (not TOML, a misspelt key, a wrong type) is named
with its line and column, and the rest is shown; the exit status is then 2.
""",
)
@json_option
@pass_app
def config_show(app: App) -> int:
    """Each setting as TOML, with its help and where its value came from."""
    cfg = settings(app)
    code = report_problems(app, cfg)
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
            "settings": {s.name: _setting_json(cfg, s) for s in SETTINGS},
            "ignored": cfg.ignored,
            "proposals": [p.as_view() for p in proposals(cfg)],
            "unknown": cfg.unknown,
            "repository": cfg.repo,
            "user_file": cfg.user_file,
            "project_file": cfg.project_file,
        },
        lambda: settings_toml(cfg),
    )
    return code


def _setting_json(cfg: Config, s: Setting) -> dict[str, Any]:
    v = cfg.values[s.name]
    return {
        "value": masked(s, v.value),
        "source": v.source,
        "origin": v.origin,
        "trusted_only": not s.repository_may_set,
        "trust": s.trust.value,
        "default": s.default_value(),
        "help": s.help,
        # A number's bounds, both included; a repository may not lower a limit it may only raise.
        "range": None if s.kind not in (int, float) else {"least": s.least, "most": s.most},
        "repository_may_lower": s.repository_may_lower,
    }


@config.command(
    "get",
    epilog="""\b
Examples:
  corral config get watchdog_timeout         1800.0
  corral config get protected                ["secrets/*"]   (a list is written as TOML)
  corral config get model --json             with where the value came from
\b
A setting that is not set prints nothing (exit 0).
""",
)
@click.argument("name")
@json_option
@pass_app
def config_get(app: App, name: str) -> int:
    """The value in force of one setting (as `config set` takes it)."""
    s = lookup(name, "corral config get")
    cfg = settings(app)
    code = report_problems(app, cfg)
    v = cfg.values[s.name]
    if v.value is None and not app.json:
        app.note(f"{s.name} is not set ({s.help}).")
    app.answer({"name": s.name, **_setting_json(cfg, s)}, [] if v.value is None else [_plain(masked(s, v.value))])
    return code


def _plain(value: SettingValue) -> str:
    """A value as ``config set`` takes it back: text as it is, a list as a TOML array."""
    if isinstance(value, str):
        return value
    assert value is not None
    return toml_value(value)


def _scope_option(f: Any) -> Any:
    return click.option("--scope", type=click.Choice(SCOPES), default="user", show_default=True, help=_SCOPE_HELP)(f)


@config.command(
    "set",
    epilog="""\b
Examples:
  corral config set watchdog_timeout 600
  corral config set claude_bin /opt/claude/bin/claude
  corral config set protected '["secrets/*", "*.pem"]'     a list: a TOML array, or a,b,c
  corral config set post_turn_check 'make test' --scope local
  corral config set watchdog_timeout 900 --scope project    in corral.toml, for everyone
\b
The rest of the file (other settings, tables, comments) is kept as it is. A setting that
widens what an agent may do (permission_mode, allowed_tools, is_sandbox, agent_tools, sandbox)
is refused with --scope project: corral ignores it in corral.toml. A value that only narrows is
taken there (sandbox = bwrap).
""",
)
@click.argument("name")
@click.argument("value")
@_scope_option
@json_option
@pass_app
def config_set(app: App, name: str, value: str, scope: str) -> None:
    """Set NAME to VALUE in a settings file (checked against the setting's type first)."""
    s = lookup(name, "corral config set")
    parsed = _parse(s, value, "corral config set")
    check_scope(s, scope, parsed)  # a narrowing value a repository may set (sandbox = "bwrap") is taken
    cfg = settings(app)
    path, table = scope_target(cfg, scope)
    changed = write_setting(path, table, s.name, parsed)
    _answer_write(app, s, scope, path, table, changed, f"Set {s.name} = {_shown(masked(s, parsed))}")


def _check_choice(s: Setting, text: str, where: str) -> None:
    """A setting with a fixed set of values (the harness among them) takes one of them: a near miss is
    refused with the one it was likely meant to be, as a line to type."""
    import difflib

    from corral.adapters.harness import NAMES

    choices = s.choices or (NAMES if s.name == "harness" else ())
    if not choices or text in choices:
        return
    near = difflib.get_close_matches(text.strip().lower(), choices, n=1, cutoff=0.6)
    if near:
        raise ConfigError(
            f"{where}: {text!r} is not a value of {s.name}; did you mean {near[0]}? (one of {', '.join(choices)})",
            hint=f"corral config set {s.name} {near[0]}",
        )
    raise ConfigError(
        f"{where}: {s.name} must be one of {', '.join(choices)}, not {text!r}.",
        hint=f"corral config set {s.name} {choices[0]}   ({s.name}: {s.help})",
    )


def _parse(s: Setting, text: str, where: str) -> SettingValue:
    """VALUE as the setting's type: a list may be a TOML array or comma-separated."""
    if s.kind is str:
        _check_choice(s, text, where)
    if s.kind is list and text.strip().startswith("["):
        try:
            raw = parse_toml(f"value = {text}", Path(where)).get("value")
        except ConfigError:
            raise ConfigError(
                f"{where}: {text!r} is not a TOML array of strings.",
                hint=f'Write it as \'["a", "b"]\' or a,b. {s.name}: {s.help}.',
            ) from None
        return s.coerce(raw, where)
    return s.coerce(text, where)


def _answer_write(app: App, s: Setting, scope: str, path: Path, table: str | None, changed: bool, did: str) -> None:
    where = f"{path}" + (f" [{PROJECTS_TABLE}.{toml_value(table)}]" if table else "")
    after = _reload(app)
    now: Value = after.values[s.name]
    said = [f"{did} in {where}." if changed else f"Nothing to change in {where}."]
    source_of_scope = {"user": "user", "local": "user_project", "project": "project"}[scope]
    if scope == "project" and s.repository_may_propose:
        said.append(
            f"corral.toml only proposes {s.name}: corral uses it where a person adopts it "
            f"(corral config adopt {s.name})."
        )
    elif now.source not in (source_of_scope, "default") and now.origin:
        said.append(
            f"The value in force is {_shown(masked(s, now.value))} from {now.origin}, "
            f"which comes before {scope} settings."
        )
    app.answer(
        {
            "name": s.name,
            "scope": scope,
            "file": str(path),
            "table": table,
            "changed": changed,
            "in_force": {"value": now.value, "source": now.source, "origin": now.origin},
        },
        said,
    )


def _reload(app: App) -> Config:
    """The settings again, from the files as they are now."""
    try:
        project_file: Path | None = app.project.paths.project_config
    except CorralError:
        project_file = None
    return load_config(user_file=user_config_file(), project_file=project_file, strict=False)


#: Settings whose value may carry a password: shown with it masked (``postgresql://me:****@host/db``).
SECRET_SETTINGS = frozenset({"database_url"})


def masked(s: Setting, value: SettingValue) -> SettingValue:
    """``value`` as corral shows it: a password in a secret setting replaced by ``****``."""
    if s.name in SECRET_SETTINGS and isinstance(value, str):
        from corral.store.dsn import redact

        return redact(value)
    return value


def _shown(value: SettingValue) -> str:
    return "(not set)" if value is None else toml_value(value)


@config.command(
    "unset",
    epilog="""\b
Examples:
  corral config unset model
  corral config unset watchdog_timeout --scope project
  corral config unset watchdog_timout        a misspelt key in the file is removed too
""",
)
@click.argument("name")
@_scope_option
@json_option
@pass_app
def config_unset(app: App, name: str, scope: str) -> None:
    """Remove NAME from a settings file (the next source, or the default, applies again)."""
    cfg = settings(app)
    path, table = scope_target(cfg, scope)
    known = BY_NAME.get(name)
    if known is None:
        present = read_toml(path)
        if table is not None:
            present = present.get(PROJECTS_TABLE, {}).get(table, {})
        if name not in present:
            lookup(name, "corral config unset")  # raises, naming the nearest setting
    changed = write_setting(path, table, name, None)
    s = known or Setting(name, str, None, "not a setting")
    if known is None:
        where = f"{path}" + (f" [{PROJECTS_TABLE}.{toml_value(table)}]" if table else "")
        app.answer(
            {"name": name, "scope": scope, "file": str(path), "table": table, "changed": changed, "in_force": None},
            f"Removed {name} (not a setting) from {where}.",
        )
        return
    _answer_write(app, s, scope, path, table, changed, f"Removed {name}")


@config.command(
    "edit",
    epilog="""\b
Examples:
  corral config edit                     your user file ($VISUAL, else $EDITOR, else vi)
  corral config edit --scope project     the repository's corral.toml
  EDITOR='code --wait' corral config edit
\b
The edit is checked before it is saved: a file that is not TOML, a misspelt key or a value
of the wrong type is named, and on a terminal you may edit again. Refused, the file stays
as it was and your edit is kept beside it (FILE.rejected).
""",
)
@click.option(
    "--scope",
    type=click.Choice(["user", "project"]),
    default="user",
    show_default=True,
    help='user: your user file (its [projects."<path>"] tables too); project: the repository\'s corral.toml.',
)
@json_option
@pass_app
def config_edit(app: App, scope: str) -> None:
    """Open a settings file in your editor; it is saved only if it is valid."""
    from corral.adapters.files import write_atomic

    cfg = settings(app)
    path, _ = scope_target(cfg, scope)
    target = path.resolve() if path.is_symlink() else path
    try:
        before = target.read_text(encoding="utf-8") if target.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{target} cannot be read as text: {exc}.", hint="Fix or move the file aside.") from exc
    draft = target.with_name(f".{target.name}.edit.toml")
    text = before or _template(scope)
    from corral.adapters.files import private_dirs

    private_dirs(draft.parent)
    draft.write_text(text, encoding="utf-8")
    try:
        while True:
            try:
                click.edit(filename=str(draft))
            except click.ClickException as exc:
                raise UsageError(
                    f"The editor failed: {exc.format_message()}",
                    hint=f"{target} is unchanged. Set VISUAL or EDITOR to an editor that waits until you close it.",
                ) from None
            text = draft.read_text(encoding="utf-8", errors="replace")
            problems = file_problems(text, target, project=scope == "project")
            if not problems:
                break
            for problem in problems:
                app.fail(problem)
            if _interactive() and click.confirm("Edit it again?", default=True, err=True):
                continue
            rejected = target.with_name(f"{target.name}.rejected")
            shutil.copyfile(draft, rejected)
            raise ConfigError(
                f"{target} was not saved: {problems[0].message}",
                hint=f"It is unchanged; your edit is kept in {rejected}. Fix it there and copy it over, "
                "or run corral config edit again.",
            )
    finally:
        draft.unlink(missing_ok=True)
    changed = text != before and not (not before and text == _template(scope))
    if changed:
        mode = target.stat().st_mode & 0o777 if target.exists() else None
        write_atomic(target, text.encode("utf-8"))
        if mode is not None:
            os.chmod(target, mode)
    app.answer(
        {"file": str(target), "scope": scope, "changed": changed},
        f"Saved {target}." if changed else f"No change to {target}.",
    )


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def _template(scope: str) -> str:
    if scope == "project":
        return "# corral settings for everyone who clones this repository (corral config show lists them).\n"
    return (
        "# Your corral settings (corral config show lists them all, with their help).\n"
        "# For one repository only:\n"
        f'# [{PROJECTS_TABLE}."/path/to/repository"]\n'
        '# model = "opus"\n'
    )


@config.command(
    "path",
    epilog="""\b
Examples:
  corral config path
  corral config path --json | jq -r '.files[] | select(.exists) | .path'
""",
)
@json_option
@pass_app
def config_path(app: App) -> None:
    """The settings files corral reads, strongest first, and which exist."""
    cfg = settings(app)
    files: list[dict[str, Any]] = []
    if cfg.user_file is not None and cfg.repo is not None:
        files.append(_file_entry("local", Path(cfg.user_file), cfg.user_table or cfg.repo))
    if cfg.project_file is not None:
        files.append(_file_entry("project", Path(cfg.project_file), None))
    if cfg.user_file is not None:
        files.append(_file_entry("user", Path(cfg.user_file), None))

    def lines() -> list[str]:
        out = ["Strongest first (the environment, CORRAL_<NAME>, comes before all of them):"]
        for f in files:
            where = f["path"] + (f" [{PROJECTS_TABLE}.{toml_value(f['table'])}]" if f["table"] else "")
            state = "exists" if f["exists"] else "missing"
            if f["problem"]:
                state += f"; broken: {f['problem']}"
            out.append(f"  {f['scope']:<8} {where}  ({state})")
        return out

    app.answer({"files": files, "environment_prefix": "CORRAL_"}, lines)


def _file_entry(scope: str, path: Path, table: str | None) -> dict[str, Any]:
    exists = path.is_file()
    problem = None
    if exists:
        try:
            read_toml(path)
        except ConfigError as exc:
            problem = exc.message
    return {"scope": scope, "path": str(path), "table": table, "exists": exists, "problem": problem}


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
        {"adopted": done.as_view(), "user_file": cfg.user_file},
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


def _range_words(s: Setting) -> str:
    """A number's range, as config show writes it after the help (and ``corral.toml`` may only raise it)."""
    if s.kind not in (int, float):
        return ""
    return f" ({s.range_words()}" + ("; corral.toml may only raise it)" if not s.repository_may_lower else ")")


def _trust_words(s: Setting) -> str:
    if s.narrowing:  # user-only, but a value that only narrows is a repository's to require
        return f" (corral.toml may set only {', '.join(s.narrowing)})"
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
        lines.append(f"# {toml_comment(s.help)}{_range_words(s)}{_trust_words(s)}")
        if v.value is None:
            lines.append(f"# {s.name} = (not set)  # {toml_comment(where)}")
        else:
            shown = masked(s, v.value)
            assert shown is not None
            lines.append(f"{s.name} = {toml_value(shown)}  # {toml_comment(where)}")
        proposal = proposed.get(s.name)
        if proposal is not None and not proposal.adopted and proposal.value is not None:
            lines.append(f"# proposed by {toml_comment(proposal.file)}: {toml_comment(toml_value(proposal.value))}")
            lines.append(f"# adopt it for this repository: {toml_comment(proposal.adopt_command)}")
    return lines
