"""Loads the settings and where each value came from.

What the settings are (names, types, defaults, help, trust) is the schema in
``corral.domain.settings``; this module only finds the values. Sources, strongest first:

1. the environment (``CORRAL_<NAME>``);
2. the user file's table for this repository, ``[projects."<repository path>"]``;
3. the repository's ``corral.toml`` (at the root of the main checkout, never a task's
   worktree, which the agent can edit);
4. the user file's top level (the platform config dir; ``CORRAL_CONFIG_FILE`` overrides);
5. the schema's defaults.

Trust: ``corral.toml`` was written by anyone who can push to the repository. A setting the
schema marks ``Trust.USER_ONLY`` (it widens what an agent may do, or says where a person's
records go) is left out when found there and reported in ``Config.ignored``. A setting marked
``Trust.EXECUTES`` (it makes corral execute something) is never adopted from there either: it is a :class:`Proposal`
(``Config.proposals``), which ``setting_writes.adopt`` writes into the user file's table for
this repository when the person asks (``corral config adopt NAME``).

A repository cannot break corral with a value: one outside its setting's range (``git_timeout
= 0``, ``watchdog_timeout = nan``), a ``remote`` git would read as an option, or a delay, time
limit or text cap lower than the value it would replace (the schema's ``repository_may_lower``)
is ignored and reported in ``Config.ignored`` with the reason. The same value from the person's
own file or the environment is an error naming the range.

A key that names no setting, a value of the wrong type and a file that is not TOML are
errors (:class:`ConfigError`, naming the file, the line and column, or the nearest
setting's name). :func:`load_config` raises the first one; inside :func:`lenient` it
collects them in ``Config.problems`` and leaves out what it could not read, so ``corral
config`` and ``corral doctor`` still run and report them. A ``CORRAL_*`` variable that
names no setting but nearly does is only reported (``Config.unknown``): the environment is
shared with every program corral runs.

Writing a value into a settings file (``corral config set``, ``corral config adopt``) is
``engine/setting_writes``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from corral.domain.settings import BY_NAME, SETTINGS, Setting, SettingValue, nearest_setting, unknown_setting
from corral.domain.toml_text import toml_value
from corral.errors import ConfigError

#: The user file's table of per-repository tables.
PROJECTS_TABLE = "projects"


class Value(Struct, frozen=True):
    value: Any
    source: str  # default | user | project | user_project | env
    origin: str | None = None  # the file (and table) or variable it came from


class Proposal(Struct, frozen=True):
    """A value ``corral.toml`` gives a setting that makes corral execute something: shown, never used."""

    name: str
    value: SettingValue
    file: str  # the corral.toml that proposes it
    repo: str  # the repository it is proposed for: the key of the user file's table
    adopted: bool  # the value in force is this one (the person adopted it, or it changes nothing)

    @property
    def adopt_command(self) -> str:
        """The shell command that adopts this value into the user file, for this repository only."""
        quoted = shlex.quote(str(self.value))
        return f"corral --repo {shlex.quote(self.repo)} config adopt {self.name} --value {quoted}"

    @property
    def adopt_toml(self) -> str:
        """The same adoption as the lines to put in the user file by hand."""
        assert self.value is not None
        return f"[{PROJECTS_TABLE}.{toml_value(self.repo)}]\n{self.name} = {toml_value(self.value)}"

    def message(self) -> str:
        shown = "(not set)" if self.value is None else toml_value(self.value)
        if self.adopted:
            return f"{self.name} = {shown} proposed by {self.file} is the value in force."
        return (
            f"{self.file} proposes {self.name} = {shown}; it makes corral execute something, so corral does "
            f"not use it unless you adopt it for {self.repo}: {self.adopt_command}"
        )

    def as_view(self) -> dict[str, Any]:
        """The proposal as --json gives it: a view (``repo`` as ``repository``; the adoption command, lines derived)."""
        return {
            "name": self.name,
            "value": self.value,
            "file": self.file,
            "repository": self.repo,
            "adopted": self.adopted,
            "adopt_command": self.adopt_command,
            "adopt_toml": self.adopt_toml,
        }


class Config(Struct):
    values: dict[str, Value]
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)
    repo: str | None = None  # the repository the settings are for (its main checkout)
    user_file: str | None = None
    user_table: str | None = None  # the key of the user file's table for this repository, when it has one
    project_file: str | None = None
    problems: list[ConfigError] = field(default_factory=list)  # collected inside ``lenient()``, else raised

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value

    def get(self, name: str) -> Any:
        return self.values[name].value


def proposals(config: Config) -> list[Proposal]:
    """What the repository's ``corral.toml`` proposes for settings that make corral execute something.

    Each :class:`Proposal` says its setting, value and file, whether it is already the
    value in force (``adopted``), and ``adopt_command`` / ``adopt_toml``: how to adopt it.
    """
    return list(config.proposals)


#: Variables named CORRAL_* that are not settings (so never reported as a misspelt one).
NOT_SETTINGS = frozenset(
    {
        "CORRAL_HOME",
        "CORRAL_CONFIG_FILE",
        "CORRAL_ACTOR",
        "CORRAL_DEBUG",
        "CORRAL_CRASH_AT",
        "CORRAL_CRASH_HOW",
        "CORRAL_CRASH_TRACE",
        "CORRAL_FAKE_SCENARIO",
        "CORRAL_FAKE_RECORD",
    }
)

_LENIENT: ContextVar[bool] = ContextVar("corral_config_lenient", default=False)


@contextmanager
def lenient() -> Iterator[None]:
    """Inside, :func:`load_config` collects problems in ``Config.problems`` instead of raising.

    For the commands that must run on broken settings to report them (``config``, ``doctor``).
    """
    token = _LENIENT.set(True)
    try:
        yield
    finally:
        _LENIENT.reset(token)


_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_AT_END = re.compile(r"\s*\(at end of document\)$")


def _toml_error(path: Path, text: str, exc: Exception) -> ConfigError:
    """tomllib's message as ``<file>, line L, column C: <reason>``."""
    reason = str(exc)
    found = _AT.search(reason)
    if found:
        line, column = int(found.group(1)), int(found.group(2))
        reason = reason[: found.start()]
    else:
        lines = text.split("\n")
        line, column = len(lines), len(lines[-1]) + 1
        reason = _AT_END.sub("", reason) + " (at the end of the file)"
    return ConfigError(
        f"{path} is not valid TOML: line {line}, column {column}: {reason}.",
        hint=f"Fix that line ({'corral config edit' + edit_flag(path)}), or move the file aside.",
    )


def edit_flag(path: Path) -> str:
    """The ``--scope`` a ``corral config edit`` of ``path`` needs (none for the user file)."""
    return " --scope project" if path.name == "corral.toml" else ""


def parse_toml(text: str, path: Path) -> dict[str, Any]:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(path, text, exc) from None


def read_toml(path: Path) -> dict[str, Any]:
    """A config file's table; missing means empty. Malformed is a clear error, never ignored."""
    if not path.exists():
        return {}
    if not path.is_file():
        raise ConfigError(f"{path} is not a regular file.", hint="Replace it with a TOML file, or remove it.")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text.", hint="Fix the file or move it aside.") from exc
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror}.", hint="Fix its permissions.") from exc
    return parse_toml(text, path)


def _same_repo(key: str, repo: Path) -> bool:
    return key == str(repo) or Path(key).expanduser().resolve() == repo


def _split_user_file(
    doc: dict[str, Any], path: Path, repo: Path | None
) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """The user file's top level, its table for ``repo`` (empty when none), and that table's key."""
    top = {k: v for k, v in doc.items() if k != PROJECTS_TABLE}
    projects = doc.get(PROJECTS_TABLE, {})
    if not isinstance(projects, dict) or not all(isinstance(t, dict) for t in projects.values()):
        raise ConfigError(
            f'{path}: "{PROJECTS_TABLE}" must hold one table per repository.',
            hint=f'Write [{PROJECTS_TABLE}."/path/to/repository"] then that repository\'s settings.',
        )
    if repo is not None:
        for key, table in projects.items():
            if _same_repo(key, repo):
                return top, table, key
    return top, {}, None


class _Loading:
    """One load's problems: raised at once, or collected when lenient."""

    def __init__(self, config: Config, strict: bool) -> None:
        self.config = config
        self.strict = strict

    def problem(self, error: ConfigError) -> None:
        if self.strict:
            raise error
        self.config.problems.append(error)

    def read(self, path: Path) -> dict[str, Any]:
        try:
            return read_toml(path)
        except ConfigError as exc:
            self.problem(exc)
            return {}

    def coerce(self, setting: Setting, raw: object, where: str) -> tuple[bool, SettingValue]:
        try:
            return True, setting.coerce(raw, where)
        except ConfigError as exc:
            self.problem(exc)
            return False, None

    def typed(self, setting: Setting, raw: object, where: str) -> tuple[bool, SettingValue]:
        """``raw`` as the setting's type, not yet checked against its range (a repository's value)."""
        try:
            return True, setting.typed(raw, where)
        except ConfigError as exc:
            self.problem(exc)
            return False, None


def follow_move(user_file: Path, old: Path, new: Path) -> bool:
    """The user file's table for a repository that moved from ``old`` now names ``new``: its settings follow.

    Only that table's header line changes (every other line and comment stays), and only when
    the file has a table for ``old`` and none for ``new``; True when the file was rewritten.
    """
    import tomllib

    from corral.adapters.files import write_atomic

    try:
        text = user_file.read_text(encoding="utf-8")
        projects = tomllib.loads(text).get(PROJECTS_TABLE, {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # a missing or broken file: nothing to follow (a broken one is reported elsewhere)
    if not isinstance(projects, dict) or any(_same_repo(k, new) for k in projects):
        return False
    keys = [k for k in projects if _same_repo(k, old)]
    if len(keys) != 1:
        return False
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        head = line.strip()
        if not head.startswith(f"[{PROJECTS_TABLE}") or head.startswith("[["):
            continue
        try:
            parsed = tomllib.loads(head)
        except tomllib.TOMLDecodeError:
            continue
        if list(parsed.get(PROJECTS_TABLE, {})) == keys:
            # A JSON string is a TOML basic string: the new path is quoted as TOML quotes it.
            lines[i] = f"[{PROJECTS_TABLE}.{json.dumps(str(new), ensure_ascii=False)}]\n"
            after = "".join(lines)
            moved = tomllib.loads(after).get(PROJECTS_TABLE, {})
            if moved.get(str(new)) != projects[keys[0]]:
                return False  # never write a file that would not say the same
            write_atomic(user_file, after.encode("utf-8"))
            return True
    return False


def load_config(
    *,
    user_file: Path | None,
    project_file: Path | None,
    env: Mapping[str, str] | None = None,
    repo: Path | None = None,
    strict: bool | None = None,
) -> Config:
    """The settings for ``repo`` (default: the directory of ``project_file``, the main checkout's root).

    ``strict`` (default: true outside :func:`lenient`) raises the first problem found.
    """
    env = os.environ if env is None else env
    if repo is None and project_file is not None:
        repo = project_file.parent
    repo = repo.resolve() if repo is not None else None
    config = Config(
        {s.name: Value(s.default_value(), "default") for s in SETTINGS},
        repo=str(repo) if repo is not None else None,
        user_file=str(user_file) if user_file is not None else None,
        project_file=str(project_file) if project_file is not None else None,
    )
    load = _Loading(config, not _LENIENT.get() if strict is None else strict)
    values = config.values
    mine: dict[str, Any] = {}
    if user_file is not None:
        doc = load.read(user_file)
        try:
            top, mine, config.user_table = _split_user_file(doc, user_file, repo)
        except ConfigError as exc:
            load.problem(exc)
            top = {k: v for k, v in doc.items() if k != PROJECTS_TABLE}
        _take(load, top, "user", str(user_file))
    found: dict[str, Any] = {}
    if project_file is not None:
        for key, raw in load.read(project_file).items():
            setting = BY_NAME.get(key)
            if setting is None:
                load.problem(unknown_setting(key, str(project_file)))
            elif setting.repository_may_propose:
                ok, value = load.coerce(setting, raw, str(project_file))
                if ok:
                    found[key] = value
            elif not setting.repository_may_set:
                # A user-only setting: ignored and reported, unless the value only narrows (schema's ``narrowing``).
                ok, value = load.coerce(setting, raw, str(project_file)) if setting.narrowing else (False, None)
                if ok and setting.repository_may_set_value(value):
                    values[key] = Value(value, "project", str(project_file))
                else:
                    allowed = f"; it may only require {', '.join(setting.narrowing)}" if setting.narrowing else ""
                    config.ignored.append(
                        f"{key} in {project_file} (a repository may not set it: {setting.because}"
                        f"{allowed}; set it in your user file or {setting.env_var} instead)"
                    )
            else:
                ok, value = load.typed(setting, raw, str(project_file))
                why = _repository_refusal(setting, value, values[key]) if ok else None
                if why is not None:
                    config.ignored.append(f"{key} = {shown_value(value)} in {project_file} ({why})")
                elif ok:
                    values[key] = Value(value, "project", str(project_file))
    if mine:
        _take(load, mine, "user_project", f"{user_file} [{PROJECTS_TABLE}.{toml_value(config.user_table or '')}]")
    for setting in SETTINGS:
        var = setting.env_var
        if var in env:
            ok, value = load.coerce(setting, env[var], var)
            if ok:
                values[setting.name] = Value(value, "env", var)
    _near_misses(config, env)
    for key, value in found.items():
        config.proposals.append(
            Proposal(key, value, str(project_file), config.repo or "", adopted=values[key].value == value)
        )
    return config


def _repository_refusal(setting: Setting, value: SettingValue, replaced: Value) -> str | None:
    """Why ``corral.toml`` may not give ``setting`` this ``value`` of its type, or None.

    A repository cannot break corral: a number outside the setting's range, or a name git would
    read as an option, is ignored and reported rather than an error on every command; and a limit
    the schema keeps from being lowered (a delay, a time limit, the text cap) may be raised there,
    never lowered below the value it would ``replace`` (your user file's, or the default).
    """
    why = setting.refusal(value)
    if why is not None:
        return f"it {why}"
    if (
        not setting.repository_may_lower
        and isinstance(value, (int, float))
        and isinstance(replaced.value, (int, float))
        and value < replaced.value
    ):
        was = "the default" if replaced.origin is None else f"from {replaced.origin}"
        return (
            f"a repository may only raise this limit, never lower it: {shown_value(value)} is below "
            f"{shown_value(replaced.value)}, {was}; set a lower one in your user file or {setting.env_var}"
        )
    return None


def shown_value(value: SettingValue) -> str:
    """A value as a message shows it: its TOML text, or "(not set)"."""
    return "(not set)" if value is None else toml_value(value)


def _near_misses(config: Config, env: Mapping[str, str]) -> None:
    """``CORRAL_WATCHDOG_TIMOUT``: a variable that nearly names a setting is reported, not used.

    Nearly is one or two letters off: ``CORRAL_COMMAND_ID`` is a variable of its own, not a typo.
    """
    for var in env:
        if not var.startswith("CORRAL_") or var in NOT_SETTINGS or var[7:].lower() in BY_NAME:
            continue
        from corral.adapters.harness.command import CONTRACT_VARS  # only once a variable is unknown

        if var in CONTRACT_VARS:  # set for an agent inside a turn, which may run corral itself
            continue
        near = nearest_setting(var[7:], most=2)
        if near is not None:
            config.unknown.append(f"{var} in the environment is not a setting; did you mean {BY_NAME[near].env_var}?")


def _take(load: _Loading, table: Mapping[str, Any], source: str, where: str) -> None:
    """A table of the user's own file: every setting is trusted from it."""
    for key, raw in table.items():
        setting = BY_NAME.get(key)
        if setting is None:
            load.problem(unknown_setting(key, where))
            continue
        ok, value = load.coerce(setting, raw, where)
        if ok:
            load.config.values[key] = Value(value, source, where)


def file_problems(text: str, path: Path, *, project: bool) -> list[ConfigError]:
    """Every problem a settings file's text would have (for ``config edit``, before it is saved)."""
    try:
        doc = parse_toml(text, path)
    except ConfigError as exc:
        return [exc]
    config = Config({})
    load = _Loading(config, strict=False)
    tables: list[tuple[str, Mapping[str, Any]]] = []
    if project:
        tables.append((str(path), doc))
    else:
        tables.append((str(path), {k: v for k, v in doc.items() if k != PROJECTS_TABLE}))
        try:
            _split_user_file(doc, path, None)
        except ConfigError as exc:
            return [exc]
        for key, table in doc.get(PROJECTS_TABLE, {}).items():
            tables.append((f"{path} [{PROJECTS_TABLE}.{toml_value(key)}]", table))
    for where, table in tables:
        for key, raw in table.items():
            setting = BY_NAME.get(key)
            if setting is None:
                load.problem(unknown_setting(key, where))
            else:
                load.coerce(setting, raw, where)
    return config.problems


def harness_settings(config: Config) -> dict[str, Any]:
    """The settings a harness adapter is made from (its executables and provider)."""
    return {k: config[k] for k in ("claude_bin", "pi_bin", "pi_provider", "pi_extensions", "codex_bin", "command")}


def protected_patterns(config: Config, own: Sequence[str] = ()) -> tuple[str, ...]:
    """The protected patterns of a task's turn: ``protected_defaults`` (the harnesses' settings and
    CI's workflows unless the person removed them), the ``protected`` setting and the task's ``own``."""
    return tuple(sorted({*config["protected_defaults"], *config["protected"], *own}))
