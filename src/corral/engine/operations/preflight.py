"""The harness preflight: can the configured harness run at all, asked before anything runs.

``create`` and ``edit`` call :func:`check_harness` with ``runnable=False`` (a known harness,
a ``command`` set) and ``start`` calls it in full before the task goes ``working``: a harness
whose executable is not on ``PATH``, a ``command`` harness whose command is unset or empty,
or a harness whose own configuration file exists but cannot be used is refused at once, with
the install hint, instead of being found later by a supervisor in the background
(docs/harnesses.md). ``doctor`` calls :func:`report`: for every harness it can
see configured, whether it is found, its version (``<bin> --version``, bounded in time) and
whether it can tell that it is logged in — never printing a secret, only where the
credential was found.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from corral.adapters.harness import NAMES, make_harness
from corral.adapters.harness.base import Harness
from corral.adapters.process import Runner
from corral.domain.redact import bounded
from corral.engine.config import harness_settings
from corral.engine.project import Project
from corral.errors import (
    HarnessMisconfigured,
    HarnessNotFound,
    ProgramError,
    ProgramMissing,
    ProgramTimeout,
    UsageError,
)

#: How long ``<bin> --version`` may take in ``doctor`` (a hanging binary never hangs doctor). Pi, a
#: Node program, takes seconds on a loaded machine; the harnesses are asked side by side.
VERSION_TIMEOUT = 20.0

#: How each harness is held to read-only in an ``ask`` (and a ``chat``), for ``--help`` and ``doctor``.
READ_ONLY_MODES = {
    "claude": "--permission-mode plan; Bash, Write, Edit, MultiEdit and NotebookEdit disallowed",
    "pi": "--tools read,grep,find,ls (its read-only tool set)",
    "codex": "-s read-only (its read-only sandbox)",
    "command": "CORRAL_READ_ONLY=1 in its environment (the command must honour it)",
}
#: What stands behind every harness's own mode.
READ_ONLY_BACKSTOP = (
    "Behind each, corral compares the branch and worktree before and after the turn:\n"
    "any change is kept on refs/corral/kept/<ref>/<turn> and reverted."
)


def read_only_help() -> str:
    """The lines for ``ask --help`` (and ``chat --help``): which harnesses corral holds read-only, and how."""
    lines = [f"  {name:<8} {how}" for name, how in READ_ONLY_MODES.items()]
    return "Read-only, per harness (docs/harnesses.md):\n" + "\n".join(lines) + "\n" + READ_ONLY_BACKSTOP


class HarnessReport(Struct, frozen=True):
    """What ``doctor`` says of one harness. ``logged_in`` is None when it cannot tell."""

    name: str
    executable: str
    found: bool
    path: str | None = None
    version: str | None = None
    logged_in: bool | None = None
    login_source: str | None = None  # where a credential was found (a file path or a variable's name), never its value
    problem: str | None = None  # why it cannot run, when it cannot
    hint: str | None = None
    read_only: str = ""  # how corral holds it to read-only (READ_ONLY_MODES)
    login_hint: str | None = None  # how to log in, when it can tell that it is not

    @property
    def ok(self) -> bool:
        return self.found and self.problem is None

    def to_json(self) -> dict[str, Any]:
        """The harness's report as --json gives it: its fields by name, then whether it is ``ok`` (derived)."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return {**doc, "ok": self.ok}


def _settings(project: Project, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    merged = harness_settings(project.config)
    for key, value in (overrides or {}).items():
        if key in merged:
            merged[key] = value
    return merged


def which(executable: str) -> str | None:
    """The path ``executable`` runs from (itself when it names a path), or None."""
    if not executable:
        return None
    if os.sep in executable:
        return executable if os.path.isfile(executable) and os.access(executable, os.X_OK) else None
    for d in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(d, executable) if d else ""
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def config_files(name: str) -> list[Path]:
    """The harness's own configuration files that must be readable when they exist."""
    h = home()
    if name == "claude":
        base = Path(os.environ["CLAUDE_CONFIG_DIR"]) if os.environ.get("CLAUDE_CONFIG_DIR") else h / ".claude"
        return [base / "settings.json"]
    if name == "codex":
        base = Path(os.environ["CODEX_HOME"]) if os.environ.get("CODEX_HOME") else h / ".codex"
        return [base / "config.toml"]
    if name == "pi":
        base = Path(os.environ["PI_CODING_AGENT_DIR"]) if os.environ.get("PI_CODING_AGENT_DIR") else h / ".pi" / "agent"
        return [base / "settings.json", base / "models.json"]
    return []


#: The most of a harness's configuration file the preflight reads to see that it parses.
CONFIG_BYTES = 4 * 1024 * 1024


def _unreadable(path: Path) -> str | None:
    """Why an existing config file cannot be used, or None (a missing file is fine: defaults apply)."""
    try:
        if not path.exists():
            return None
        if not path.is_file():
            return f"{path} is not a regular file"
        with path.open("rb") as fh:
            raw = fh.read(CONFIG_BYTES + 1)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    if len(raw) > CONFIG_BYTES or not raw.strip():
        return None  # too large to judge here, or empty: the harness has its own say
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"{path} is not UTF-8 text"
    if path.suffix == ".json":
        try:
            json.loads(text)
        except ValueError as exc:
            line, col = getattr(exc, "lineno", None), getattr(exc, "colno", None)
            where = f" (line {line}, column {col})" if line else ""
            return f"{path} is not valid JSON{where}"
    elif path.suffix == ".toml":
        import tomllib

        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            return f"{path} is not valid TOML ({exc})"
    return None


def check_harness(
    project: Project,
    harness: str | None = None,
    settings: Mapping[str, Any] | None = None,
    *,
    runnable: bool = True,
) -> None:
    """Refuse at once a harness that cannot run; return quietly when it can.

    ``harness`` is the task's harness (None: the project's default ``harness`` setting);
    ``settings`` are a task's own settings over the project's (only the harness keys count).
    With ``runnable`` (``start``, and every launch) the executable must be on ``PATH`` and
    the harness's own configuration files readable; without it (``create``, ``edit``) only
    the configuration corral holds is checked: a known harness, and a ``command`` set.

    Raises :class:`~corral.errors.UsageError` for a harness corral does not know,
    :class:`~corral.errors.HarnessMisconfigured` (the ``fatal_config`` class; code
    ``harness-command-unset``, ``harness-command-invalid`` or ``harness-config-unreadable``)
    and :class:`~corral.errors.HarnessNotFound` (code ``harness-missing``), each with its hint
    and exit code 1.
    """
    name = harness or str(project.config["harness"])
    if name not in NAMES:
        # The setting's name gets the line that sets it; a task's or a flag's the names to choose from.
        raise UsageError(f"'{name}' is not a harness corral knows.", hint=harness_hint(name, setting=harness is None))
    problem = _problem(name, _settings(project, settings), runnable=runnable)
    if problem is not None:
        raise problem


def nearest_harness(name: str) -> str | None:
    """The harness ``name`` was most likely meant to be (``claud``: claude), or None."""
    import difflib

    near = difflib.get_close_matches(name.strip().lower(), NAMES, n=1, cutoff=0.6)
    return near[0] if near else None


def harness_hint(name: str, *, setting: bool = True) -> str:
    """What to type instead of a harness corral does not know: the nearest one, or the list; for the
    ``harness`` setting, with the line that sets it."""
    near = nearest_harness(name)
    if not setting:
        return f"Did you mean {near}?" if near is not None else f"Use one of: {', '.join(NAMES)}."
    if near is not None:
        return f"Did you mean {near}? corral config set harness {near}"
    return f"Use one of: {', '.join(NAMES)} (corral config set harness claude)."


def not_installed(
    project: Project, harness: str | None, settings: Mapping[str, Any] | None = None
) -> HarnessNotFound | None:
    """The warning ``create`` gives when the task's harness is not installed on this host, or None.

    None too when the project's turns go to the workers: the agent runs on their hosts, which check it when
    they claim the turn. ``start`` refuses what this warns of (:func:`check_harness`)."""
    name = harness or str(project.config["harness"])
    if name not in NAMES or project.placement.goes_to_workers(project):
        return None
    problem = _problem(name, _settings(project, settings))
    return problem if isinstance(problem, HarnessNotFound) else None


def _problem(
    name: str, values: Mapping[str, Any], *, runnable: bool = True
) -> HarnessMisconfigured | HarnessNotFound | None:
    if name == "command":
        command = str(values.get("command") or "")
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return HarnessMisconfigured(
                f"The command harness's command cannot be parsed: {exc}.",
                code="harness-command-invalid",
                hint='Fix it: corral config set command "my-agent --flag" (quoted as a shell would).',
            )
        if not argv:
            return HarnessMisconfigured(
                "The command harness has no command to run (the setting `command` is unset or empty).",
                code="harness-command-unset",
                hint='Set it: corral config set command "my-agent --flag" (see docs/harnesses.md), '
                "or choose another harness with --harness.",
            )
    if not runnable:
        return None
    adapter = make_harness(name, values)
    if which(adapter.executable) is None:
        return HarnessNotFound(
            f"{adapter.display} ({adapter.executable}) is not installed or not on PATH.", hint=adapter.install_hint
        )
    for path in config_files(name):
        why = _unreadable(path)
        if why is not None:
            return HarnessMisconfigured(
                f"{adapter.display}'s configuration cannot be used: {why}.",
                code="harness-config-unreadable",
                hint=f"Make it readable (chmod u+r {path}) or move it aside.",
            )
    return None


def _version(runner: Runner, adapter: Harness, path: str) -> tuple[str | None, str | None]:
    """(its first line of ``--version``, why it could not tell): a binary that hangs is ended at
    :data:`VERSION_TIMEOUT`, with its process group."""
    try:
        done = runner.run([path, "--version"], timeout=VERSION_TIMEOUT)
    except ProgramTimeout:
        return None, f"`{adapter.executable} --version` did not answer within {int(VERSION_TIMEOUT)} s"
    except ProgramMissing:
        return None, f"`{adapter.executable} --version` could not run: {path} is gone or not executable"
    except ProgramError as exc:
        return None, f"`{adapter.executable} --version` could not run: {exc.message}"
    said = done.stdout or done.stderr  # read with surrogate escapes: made plain text here
    text = said.encode("utf-8", "surrogateescape").decode("utf-8", "replace").strip()
    first = text.splitlines()[0] if text else ""
    if done.returncode != 0:
        return (bounded(first, 200) or None), f"`{adapter.executable} --version` exited {done.returncode}"
    return bounded(first, 200) or None, None


def _nonempty_file(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def login(name: str, env: Mapping[str, str] | None = None) -> tuple[bool | None, str | None]:
    """Whether the harness can tell it is logged in, and where the credential is (never its value)."""
    env = os.environ if env is None else env
    h = home()
    if name == "claude":
        for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
            if env.get(var):
                return True, f"${var}"
        base = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else h / ".claude"
        for path in (base / ".credentials.json",):
            if _nonempty_file(path):
                return True, str(path)
        return False, None
    if name == "codex":
        if env.get("OPENAI_API_KEY"):
            return True, "$OPENAI_API_KEY"
        base = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else h / ".codex"
        if _nonempty_file(base / "auth.json"):
            return True, str(base / "auth.json")
        return False, None
    if name == "pi":
        base = Path(env["PI_CODING_AGENT_DIR"]) if env.get("PI_CODING_AGENT_DIR") else h / ".pi" / "agent"
        if _nonempty_file(base / "auth.json"):
            return True, str(base / "auth.json")
        for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"):
            if env.get(var):
                return True, f"${var}"
        if _nonempty_file(base / "models.json"):
            return None, f"{base / 'models.json'} (its providers may carry their own keys)"
        return False, None
    return None, None  # a command harness: corral cannot tell


LOGIN_HINTS = {
    "claude": "Log in: run `claude` and type /login (or set ANTHROPIC_API_KEY).",
    "codex": "Log in: run `codex login` (or set OPENAI_API_KEY).",
    "pi": "Log in: run `pi` and type /login (or set its provider's API key).",
}


def configured_harnesses(project: Project) -> list[str]:
    """The default harness first, then every other harness a task of this project uses."""
    names = [str(project.config["harness"])]
    try:
        with project.store.read() as tx:
            for task in tx.tasks():
                if task.harness and task.harness not in names:
                    names.append(task.harness)
    except Exception:  # a store doctor reports on its own; the harnesses are still worth checking
        pass
    return [n for n in names if n in NAMES] + [n for n in names if n not in NAMES]


def report(project: Project, names: list[str] | None = None) -> list[HarnessReport]:
    """One :class:`HarnessReport` per configured harness (or per name in ``names``), for ``doctor``."""
    from concurrent.futures import ThreadPoolExecutor  # doctor only

    values = harness_settings(project.config)
    wanted = names or configured_harnesses(project)
    with ThreadPoolExecutor(max_workers=max(1, len(wanted))) as pool:
        return list(pool.map(lambda name: report_one(name, values, project.runner), wanted))


def report_one(name: str, values: Mapping[str, Any], runner: Runner) -> HarnessReport:
    """The doctor's look at one harness: runs ``<bin> --version`` (by ``runner``) under :data:`VERSION_TIMEOUT`."""
    if name not in NAMES:
        return HarnessReport(
            name, "", False, problem=f"'{name}' is not a harness corral knows", hint=f"Use one of: {', '.join(NAMES)}."
        )
    read_only = READ_ONLY_MODES.get(name, "")
    problem = _problem(name, values)
    if isinstance(problem, HarnessMisconfigured) and problem.code.startswith("harness-command"):
        return HarnessReport(name, "", False, problem=problem.message, hint=problem.hint, read_only=read_only)
    adapter = make_harness(name, values)
    path = which(adapter.executable)
    if path is None:
        return HarnessReport(
            name,
            adapter.executable,
            False,
            problem=problem.message if problem else "not found",
            hint=adapter.install_hint,
            read_only=read_only,
        )
    version, version_problem = _version(runner, adapter, path) if name != "command" else (None, None)
    logged_in, source = login(name)
    return HarnessReport(
        name,
        adapter.executable,
        True,
        path=path,
        version=version,
        logged_in=logged_in,
        login_source=source,
        problem=(problem.message if problem else None) or version_problem,
        hint=problem.hint if problem else None,
        read_only=read_only,
        login_hint=LOGIN_HINTS.get(name) if logged_in is False else None,
    )
