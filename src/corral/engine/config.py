"""Settings and where each value came from: flags > environment > project > user > defaults.

The project file is ``corral.toml`` at the root of the main checkout (never a task's
worktree, which the agent can edit). The user file lives in the platform config
dir (``CORRAL_CONFIG_FILE`` overrides). Environment variables are ``CORRAL_<NAME>``.

Trust: settings that widen what an agent may do (``trusted_only``) are taken only
from the user's file, the environment or flags, never from ``corral.toml``, which
anyone who can push to the repository wrote. A value found there is reported as
ignored.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.errors import ConfigError


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type  # int, float, bool, str or list
    default: Any
    help: str
    trusted_only: bool = False
    optional: bool = False


DEFAULT_ALLOWED_TOOLS = ["Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "TodoWrite"]

SETTINGS: tuple[Setting, ...] = (
    Setting("harness", str, "claude", "default harness for new tasks (claude, pi, codex, command)"),
    Setting("model", str, None, "default model passed to the harness", optional=True),
    Setting("watchdog_timeout", float, 1800.0, "seconds without progress before the watchdog kills a turn"),
    Setting("protected", list, [], "path patterns an agent may not change without a decision"),
    Setting("post_turn_check", str, None, "command run in the worktree after each work phase", optional=True),
    Setting("post_turn_check_timeout", float, 300.0, "seconds the post-turn check may run"),
    Setting("auto_resume", bool, True, "resume a crashed turn automatically, under the circuit breaker"),
    Setting("breaker_threshold", int, 3, "consecutive interruptions that stop auto-resume"),
    Setting("grace_period", float, 30.0, "seconds a new turn's supervisor has to be seen alive"),
    Setting("budget_overload", float, 6 * 3600.0, "seconds of retrying transient_overload"),
    Setting("budget_network", float, 3600.0, "seconds of retrying transient_network"),
    Setting("budget_unreachable", int, 12, "attempts for transient_unreachable"),
    Setting("budget_unknown", int, 6, "attempts for an unclassified failure"),
    Setting("text_cap", int, 100 * 1024, "largest text (bytes) corral takes at intake"),
    Setting("remote", str, "origin", "remote that `corral submit` pushes to"),
    Setting("forge", str, None, "forge CLI for pull requests on submit (gh)", optional=True),
    Setting("pre_accept_prompt", str, None, "a last turn run before every accept's merge", optional=True),
    Setting(
        "permission_mode",
        str,
        "acceptEdits",
        "Claude Code permission mode for work turns",
        trusted_only=True,
    ),
    Setting(
        "allowed_tools",
        list,
        DEFAULT_ALLOWED_TOOLS,
        "tools the agent may use without asking",
        trusted_only=True,
    ),
    Setting("is_sandbox", bool, False, "tell the harness it runs inside a real sandbox", trusted_only=True),
    Setting("claude_bin", str, "claude", "the Claude Code executable", trusted_only=True),
    Setting("pi_bin", str, "pi", "the Pi executable", trusted_only=True),
    Setting("pi_provider", str, None, "the Pi provider (--provider)", optional=True),
    Setting("codex_bin", str, "codex", "the Codex executable", trusted_only=True),
    Setting("command", str, None, "the command run by the `command` harness", trusted_only=True, optional=True),
)

BY_NAME = {s.name: s for s in SETTINGS}
#: Environment variables corral reads that are not settings.
RESERVED_ENV = frozenset({"CORRAL_HOME", "CORRAL_CONFIG_FILE", "CORRAL_DEBUG", "CORRAL_ACTOR"})


@dataclass(frozen=True)
class Value:
    value: Any
    source: str  # default | user | project | env | flag
    origin: str | None = None  # the file or variable it came from


@dataclass
class Config:
    values: dict[str, Value]
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value

    def get(self, name: str) -> Any:
        return self.values[name].value


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _coerce(setting: Setting, raw: Any, where: str) -> Any:
    if raw is None and setting.optional:
        return None
    kind = setting.kind
    bad = ConfigError(
        f"{where}: '{setting.name}' must be {_kind_name(kind)}, not {raw!r}.",
        hint=f"{setting.name}: {setting.help}.",
    )
    if isinstance(raw, str) and kind is not str:
        text = raw.strip()
        if kind is bool:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise bad
        if kind is list:
            return [p.strip() for p in text.split(",") if p.strip()]
        try:
            return kind(text)
        except ValueError:
            raise bad from None
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        raise bad
    if kind is list:
        if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            return list(raw)
        raise bad
    if kind in (int, float):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise bad
        if kind is int and not isinstance(raw, int):
            raise bad
        return kind(raw)
    if isinstance(raw, str):
        return raw
    raise bad


def _kind_name(kind: type) -> str:
    return {int: "a whole number", float: "a number", bool: "true or false", list: "a list of strings"}.get(
        kind, "a string"
    )


def read_toml(path: Path) -> dict[str, Any]:
    """A config file's table; missing means empty. Malformed is a clear error, never ignored."""
    if not path.exists():
        return {}
    if not path.is_file():
        raise ConfigError(f"{path} is not a regular file.", hint="Replace it with a TOML file, or remove it.")
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}.", hint="Fix the file or move it aside.") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text.", hint="Fix the file or move it aside.") from exc


def load_config(
    *,
    user_file: Path | None,
    project_file: Path | None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Config:
    env = os.environ if env is None else env
    values = {s.name: Value(s.default, "default") for s in SETTINGS}
    config = Config(values)
    for source, path in (("user", user_file), ("project", project_file)):
        if path is None:
            continue
        table = read_toml(path)
        for key, raw in table.items():
            setting = BY_NAME.get(key)
            if setting is None:
                config.unknown.append(f"{path}: {key}")
                continue
            if source == "project" and setting.trusted_only:
                config.ignored.append(
                    f"{key} in {path} (it widens what an agent may do; set it in your user file instead)"
                )
                continue
            values[key] = Value(_coerce(setting, raw, str(path)), source, str(path))
    for name, setting in BY_NAME.items():
        var = f"CORRAL_{name.upper()}"
        if var in env:
            values[name] = Value(_coerce(setting, env[var], var), "env", var)
    for name, raw in (flags or {}).items():
        if raw is not None:
            values[name] = Value(_coerce(BY_NAME[name], raw, f"--{name}"), "flag", f"--{name}")
    return config


def harness_settings(config: Config) -> dict[str, Any]:
    """The settings a harness adapter is made from (its executables and provider)."""
    return {k: config[k] for k in ("claude_bin", "pi_bin", "pi_provider", "codex_bin", "command")}
