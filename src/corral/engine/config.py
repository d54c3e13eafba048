"""Loads the settings and where each value came from, and adopts a repository's proposal into the user file.

What the settings are (names, types, defaults, help, trust) is the schema in
``corral.domain.settings``; this module only finds the values. Sources, strongest first:

1. the environment (``CORRAL_<NAME>``);
2. the user file's table for this repository, ``[projects."<repository path>"]``;
3. the repository's ``corral.toml`` (at the root of the main checkout, never a task's
   worktree, which the agent can edit);
4. the user file's top level (the platform config dir; ``CORRAL_CONFIG_FILE`` overrides);
5. the schema's defaults.

Trust: ``corral.toml`` was written by anyone who can push to the repository. A setting the
schema marks ``Trust.USER_ONLY`` (it widens what an agent may do) is left out when found
there and reported in ``Config.ignored``. A setting marked ``Trust.EXECUTES`` (it makes
corral execute something) is never adopted from there either: it is a :class:`Proposal`
(``Config.proposals``), which :func:`adopt` writes into the user file's table for this
repository when the person asks (``corral config adopt NAME``).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.domain.settings import BY_NAME, SETTINGS, SettingValue, toml_value
from corral.errors import ConfigError, UsageError

#: The user file's table of per-repository tables.
PROJECTS_TABLE = "projects"


@dataclass(frozen=True)
class Value:
    value: Any
    source: str  # default | user | project | user_project | env
    origin: str | None = None  # the file (and table) or variable it came from


@dataclass(frozen=True)
class Proposal:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "file": self.file,
            "repository": self.repo,
            "adopted": self.adopted,
            "adopt_command": self.adopt_command,
            "adopt_toml": self.adopt_toml,
        }


@dataclass
class Config:
    values: dict[str, Value]
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)
    repo: str | None = None  # the repository the settings are for (its main checkout)
    user_file: str | None = None
    user_table: str | None = None  # the key of the user file's table for this repository, when it has one

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


def read_toml(path: Path) -> dict[str, Any]:
    """A config file's table; missing means empty. Malformed is a clear error, never ignored."""
    if not path.exists():
        return {}
    if not path.is_file():
        raise ConfigError(f"{path} is not a regular file.", hint="Replace it with a TOML file, or remove it.")
    import tomllib  # only when a settings file exists

    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}.", hint="Fix the file or move it aside.") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text.", hint="Fix the file or move it aside.") from exc


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


def load_config(
    *,
    user_file: Path | None,
    project_file: Path | None,
    env: Mapping[str, str] | None = None,
    repo: Path | None = None,
) -> Config:
    """The settings for ``repo`` (default: the directory of ``project_file``, the main checkout's root)."""
    env = os.environ if env is None else env
    if repo is None and project_file is not None:
        repo = project_file.parent
    repo = repo.resolve() if repo is not None else None
    config = Config(
        {s.name: Value(s.default_value(), "default") for s in SETTINGS},
        repo=str(repo) if repo is not None else None,
        user_file=str(user_file) if user_file is not None else None,
    )
    values = config.values
    mine: dict[str, Any] = {}
    if user_file is not None:
        top, mine, config.user_table = _split_user_file(read_toml(user_file), user_file, repo)
        _take(config, top, "user", str(user_file))
    found: dict[str, Any] = {}
    if project_file is not None:
        for key, raw in read_toml(project_file).items():
            setting = BY_NAME.get(key)
            if setting is None:
                config.unknown.append(f"{project_file}: {key}")
            elif setting.repository_may_propose:
                found[key] = setting.coerce(raw, str(project_file))
            elif not setting.repository_may_set:
                config.ignored.append(
                    f"{key} in {project_file} (a repository may not set it: it widens what an agent may do;"
                    f" set it in your user file or {setting.env_var} instead)"
                )
            else:
                values[key] = Value(setting.coerce(raw, str(project_file)), "project", str(project_file))
    if mine:
        _take(config, mine, "user_project", f"{user_file} [{PROJECTS_TABLE}.{toml_value(config.user_table or '')}]")
    for setting in SETTINGS:
        var = setting.env_var
        if var in env:
            values[setting.name] = Value(setting.coerce(env[var], var), "env", var)
    for key, value in found.items():
        config.proposals.append(
            Proposal(key, value, str(project_file), config.repo or "", adopted=values[key].value == value)
        )
    return config


def _take(config: Config, table: Mapping[str, Any], source: str, where: str) -> None:
    """A table of the user's own file: every setting is trusted from it."""
    for key, raw in table.items():
        setting = BY_NAME.get(key)
        if setting is None:
            config.unknown.append(f"{where}: {key}")
            continue
        config.values[key] = Value(setting.coerce(raw, where), source, where)


def harness_settings(config: Config) -> dict[str, Any]:
    """The settings a harness adapter is made from (its executables and provider)."""
    return {k: config[k] for k in ("claude_bin", "pi_bin", "pi_provider", "codex_bin", "command")}


# -- adopting a proposal into the user file -------------------------------------------


def adopt(config: Config, name: str, *, expected: str | None = None) -> Proposal:
    """Write the repository's proposal for ``name`` into the user file's table for this repository.

    ``expected`` is the value the person saw (``--value``): when ``corral.toml`` now proposes
    something else, nothing is written. Returns the proposal adopted.
    """
    setting = BY_NAME.get(name)
    if setting is None or not setting.repository_may_propose:
        proposable = ", ".join(s.name for s in SETTINGS if s.repository_may_propose)
        raise UsageError(
            f"{name} is not a setting a repository may propose.",
            hint=f"The settings corral.toml may propose: {proposable}. Others you set in your user file.",
        )
    proposal = next((p for p in config.proposals if p.name == name), None)
    if proposal is None or proposal.value is None:
        raise UsageError(
            f"corral.toml proposes no {name} for {config.repo}.",
            hint="See what it proposes: corral config show",
        )
    if expected is not None and str(proposal.value) != expected:
        raise UsageError(
            f"{proposal.file} now proposes {name} = {toml_value(proposal.value)}, not {toml_value(expected)}; "
            "nothing was adopted.",
            hint="Review it (corral config show), then adopt the value you read.",
        )
    if config.user_file is None:
        raise UsageError("There is no user file to adopt into.", hint="Set CORRAL_CONFIG_FILE to a path.")
    write_repository_setting(Path(config.user_file), config.user_table or proposal.repo, name, proposal.value)
    return proposal


_HEADER = re.compile(r"^\s*\[")


def write_repository_setting(user_file: Path, repo: str, name: str, value: SettingValue) -> None:
    """Set ``name = value`` in the user file's ``[projects."<repo>"]`` table, keeping the rest of the file.

    The edit is checked by reading the result back: anything else changed, or the value not
    read back, and nothing is written (the error gives the lines to add by hand).
    """
    import tomllib

    from corral.adapters.files import write_atomic

    assert value is not None
    target = user_file.resolve() if user_file.is_symlink() else user_file
    before = read_toml(target)
    text = target.read_text(encoding="utf-8") if target.exists() else ""
    header = f"[{PROJECTS_TABLE}.{toml_value(repo)}]"
    line = f"{name} = {toml_value(value)}"
    lines = text.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.strip() == header), None)
    if at is None:
        if lines and lines[-1].strip():
            lines.append("")
        lines += [header, line]
    else:
        end = next((i for i in range(at + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
        key = re.compile(rf"^\s*{re.escape(name)}\s*=")
        existing = next((i for i in range(at + 1, end) if key.match(lines[i])), None)
        if existing is None:
            lines.insert(at + 1, line)
        else:
            lines[existing] = line
    after_text = "\n".join(lines) + "\n"
    by_hand = ConfigError(
        f"{target} could not be edited safely to adopt {name}.",
        hint=f"Add these lines to it yourself:\n{header}\n{line}",
    )
    try:
        after = tomllib.loads(after_text)
    except tomllib.TOMLDecodeError:
        raise by_hand from None
    table = after.get(PROJECTS_TABLE, {}).get(repo, {})
    if table.get(name) != value or _without(after, repo, name) != _without(before, repo, name):
        raise by_hand
    write_atomic(target, after_text.encode("utf-8"))


def _without(doc: dict[str, Any], repo: str, name: str) -> dict[str, Any]:
    """``doc`` without ``projects.<repo>.<name>`` (and without that table when it is left empty)."""
    out = dict(doc)
    projects = dict(out.get(PROJECTS_TABLE, {}))
    table = {k: v for k, v in projects.get(repo, {}).items() if k != name}
    projects.pop(repo, None)
    if table:
        projects[repo] = table
    if projects:
        out[PROJECTS_TABLE] = projects
    else:
        out.pop(PROJECTS_TABLE, None)
    return out
