"""Loads the settings and where each value came from: environment > project file > user file > defaults.

What the settings are (names, types, defaults, help, trust) is the schema in
``corral.domain.settings``; this module only finds the values. The project file is
``corral.toml`` at the root of the main checkout (never a task's worktree, which the
agent can edit). The user file lives in the platform config dir (``CORRAL_CONFIG_FILE``
overrides). Environment variables are ``CORRAL_<NAME>``.

Trust: a setting the schema marks ``Trust.USER_ONLY`` (it widens what an agent may do,
or names what corral executes) is taken only from the user's file or the environment,
never from ``corral.toml``, which anyone who can push to the repository wrote. A value
found there is left out and reported in ``Config.ignored``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.domain.settings import BY_NAME, SETTINGS
from corral.errors import ConfigError


@dataclass(frozen=True)
class Value:
    value: Any
    source: str  # default | user | project | env
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


def load_config(
    *,
    user_file: Path | None,
    project_file: Path | None,
    env: Mapping[str, str] | None = None,
) -> Config:
    env = os.environ if env is None else env
    config = Config({s.name: Value(s.default_value(), "default") for s in SETTINGS})
    values = config.values
    for source, path in (("user", user_file), ("project", project_file)):
        if path is None:
            continue
        for key, raw in read_toml(path).items():
            setting = BY_NAME.get(key)
            if setting is None:
                config.unknown.append(f"{path}: {key}")
                continue
            if source == "project" and not setting.repository_may_set:
                config.ignored.append(
                    f"{key} in {path} (a repository may not set it: it widens what an agent may do or names"
                    f" what corral runs; set it in your user file or {setting.env_var} instead)"
                )
                continue
            values[key] = Value(setting.coerce(raw, str(path)), source, str(path))
    for setting in SETTINGS:
        var = setting.env_var
        if var in env:
            values[setting.name] = Value(setting.coerce(env[var], var), "env", var)
    return config


def harness_settings(config: Config) -> dict[str, Any]:
    """The settings a harness adapter is made from (its executables and provider)."""
    return {k: config[k] for k in ("claude_bin", "pi_bin", "pi_provider", "codex_bin", "command")}
