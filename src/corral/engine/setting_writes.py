"""Writing settings: a repository's proposal adopted into the user file, and one value set in a file.

:func:`adopt` writes the repository's proposal for a setting into the user file's table for this
repository (``corral config adopt NAME``), only when ``corral.toml`` still proposes the value the
person saw. :func:`write_setting` changes one ``name = value`` line of a settings file (or removes
it), keeping every other line, comment and table, and checks the result by reading it back; which
file a scope names is :func:`scope_target`, and what a scope may hold, :func:`check_scope`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from corral.domain.settings import BY_NAME, SETTINGS, Setting, SettingValue
from corral.domain.toml_text import toml_value
from corral.engine.config import PROJECTS_TABLE, Config, Proposal, edit_flag, parse_toml, read_toml, shown_value
from corral.errors import ConfigError, UsageError


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
_CONTENT = re.compile(r"^\s*[^\s#]")

#: Where ``config set`` / ``unset`` / ``edit`` write: your user file (every repository), your
#: user file's table for this repository, or the repository's own corral.toml (shared).
SCOPES = ("user", "local", "project")


def scope_target(config: Config, scope: str) -> tuple[Path, str | None]:
    """The file and table (None: its top level) that ``scope`` names for ``config``."""
    if scope == "project":
        if config.project_file is None:
            raise UsageError("There is no repository here, so no corral.toml.", hint="Run it inside a repository.")
        return Path(config.project_file), None
    if config.user_file is None:
        raise UsageError("There is no user file.", hint="Set CORRAL_CONFIG_FILE to a path.")
    if scope == "local":
        if config.repo is None:
            raise UsageError("There is no repository here.", hint="Run it inside a repository, or use --scope user.")
        return Path(config.user_file), config.user_table or config.repo
    return Path(config.user_file), None


def check_scope(setting: Setting, scope: str, value: SettingValue = None) -> None:
    """A setting a repository may not set is refused in corral.toml (it would be ignored there);
    with ``value``, one of its narrowing values is not (``sandbox = "bwrap"``), and a limit a
    repository may only raise is refused there below its default (it would be ignored too)."""
    if value is not None and setting.narrowing and setting.repository_may_set_value(value):
        return
    if (
        scope == "project"
        and not setting.repository_may_lower
        and isinstance(value, (int, float))
        and isinstance(setting.default, (int, float))
        and value < setting.default
    ):
        raise ConfigError(
            f"{setting.name} cannot be lowered by a repository's corral.toml: {shown_value(value)} is below the "
            f"default {shown_value(setting.default)}, so corral ignores it there.",
            hint=f"Set it for yourself: corral config set {setting.name} {shown_value(value)} (or --scope local for "
            "this repository only).",
        )
    if scope == "project" and not setting.repository_may_set and not setting.repository_may_propose:
        raise ConfigError(
            f"{setting.name} cannot be set in a repository's corral.toml: {setting.because}, "
            "so corral ignores it there.",
            hint=f"Set it for yourself: corral config set {setting.name} VALUE (or --scope local for "
            "this repository only).",
        )


def write_setting(path: Path, table: str | None, name: str, value: SettingValue) -> bool:
    """Set ``name = value`` in ``path`` (in ``[projects."<table>"]``, or at the top level), or remove it (None).

    Every other line stays as it was, and a comment after the value is kept. The edit is
    checked by reading the result back: anything else changed, or the value not read back,
    and nothing is written (the error gives the lines to change by hand). Returns whether
    the file changed.
    """
    from corral.adapters.files import write_atomic

    target = path.resolve() if path.is_symlink() else path
    before = read_toml(target)
    text = target.read_text(encoding="utf-8") if target.exists() else ""
    header = None if table is None else f"[{PROJECTS_TABLE}.{toml_value(table)}]"
    line = None if value is None else f"{name} = {toml_value(value)}"
    lines = text.splitlines()
    if header is None:
        start = 0
        end = next((i for i, ln in enumerate(lines) if _HEADER.match(ln)), len(lines))
    else:
        at = next((i for i, ln in enumerate(lines) if ln.strip() == header), None)
        if at is None:
            if line is None:
                return False
            if lines and lines[-1].strip():
                lines.append("")
            lines += [header]
            at = len(lines) - 1
        start = at + 1
        end = next((i for i in range(start, len(lines)) if _HEADER.match(lines[i])), len(lines))
    key = re.compile(rf"^\s*{re.escape(name)}\s*=")
    existing = next((i for i in range(start, end) if key.match(lines[i])), None)
    if line is None:
        if existing is None:
            return False
        del lines[existing]
    elif existing is not None:
        lines[existing] = line + _trailing_comment(lines[existing])
    else:
        content = [i for i in range(start, end) if _CONTENT.match(lines[i])]
        if content:
            lines.insert(content[-1] + 1, line)
        elif header is None and end < len(lines):
            lines.insert(0, line)
        else:
            lines.insert(end, line)
    after_text = "\n".join(lines) + "\n" if lines else ""
    where = f"{header}\n" if header else ""
    by_hand = ConfigError(
        f"{target} could not be edited safely to {'remove' if line is None else 'set'} {name}.",
        hint=f"Change it yourself (corral config edit{edit_flag(target)}): {where}"
        + (f"{line}" if line else f"remove the {name} line"),
    )
    try:
        after = parse_toml(after_text, target)
    except ConfigError:
        raise by_hand from None
    if _changed(before, table, name, value) != after:
        raise by_hand
    mode = _mode_of(target)
    write_atomic(target, after_text.encode("utf-8"))
    if mode is not None:
        os.chmod(target, mode)
    return True


def write_repository_setting(user_file: Path, repo: str, name: str, value: SettingValue) -> None:
    """Set ``name = value`` in the user file's ``[projects."<repo>"]`` table, keeping the rest of the file."""
    assert value is not None
    write_setting(user_file, repo, name, value)


def _mode_of(path: Path) -> int | None:
    """The permission bits to keep: the file's own, or for a new corral.toml the usual 0644 (less the umask)."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        if path.name != "corral.toml":
            return None  # the user file stays 0600, as write_atomic makes it
        umask = os.umask(0)
        os.umask(umask)
        return 0o644 & ~umask


def _trailing_comment(line: str) -> str:
    """The ``  # comment`` after a line's value, or "" (a ``#`` inside a string is not one)."""
    import tomllib

    for at in [i for i, ch in enumerate(line) if ch == "#"]:
        try:
            tomllib.loads(line[:at])
        except tomllib.TOMLDecodeError:
            continue
        return "  " + line[at:].strip()
    return ""


def _changed(doc: dict[str, Any], table: str | None, name: str, value: SettingValue) -> dict[str, Any]:
    """``doc`` with ``name`` set to ``value`` (or removed) at the top level or in ``projects.<table>``."""
    out = dict(doc)
    if table is None:
        holder = out
    else:
        projects = dict(out.get(PROJECTS_TABLE, {}))
        holder = dict(projects.get(table, {}))
    holder.pop(name, None)
    if value is not None:
        holder[name] = value
    if table is not None:
        projects[table] = holder
        out[PROJECTS_TABLE] = projects
    return out
