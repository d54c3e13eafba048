"""Run the real Pi CLI (``@mariozechner/pi-coding-agent``) in tests, against the scripted model server.

Pi ignores ``ANTHROPIC_BASE_URL``; it is pointed at a :class:`~tests.support.model_server.ScriptedServer`
through ``$HOME/.pi/agent/models.json`` (a provider with ``baseUrl``, ``api: "anthropic-messages"``,
``apiKey`` and ``models: [{"id": …}]``), written by :func:`write_pi_config` into a temporary HOME.
The tests run exactly the argv that corral's :class:`~corral.adapters.harness.pi.PiHarness` builds
and read its stdout with ``PiHarness.parse`` / ``classify``.

This module also holds the pieces the Codex helper (``tests/support/codex.py``) shares: finding a
pinned agent binary (:func:`find_agent_bin`, :func:`bin_or_skip`), running a harness
:class:`~corral.adapters.harness.base.Launch` (:func:`run_launch`, :class:`HarnessRun`) and the
recorded fixtures (:func:`fixture_lines`, :func:`record_fixture`).

The constants below are what Pi ``PI_VERSION`` printed on this kind of machine (Linux x64, node
20, as root); ``tests/seams/test_pi_real.py`` re-checks them against the real binary.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.adapters.harness.base import AttemptFacts, Event, Harness, Launch, TurnRequest, Verdict
from tests.support.claude import agents_dir

# ---------------------------------------------------------------------------------------------
# Observed facts (Pi 0.73.1, `pi -p --mode json --provider P --model M [--session ID] --no-extensions`)

#: The pinned version; keep in step with PI_VERSION in .ci/install-agents.
PI_VERSION = "0.73.1"
#: ``pi --version`` prints exactly this line — on stderr, not stdout.
VERSION_LINE = PI_VERSION

# Every run prints one JSON object per line on stdout, stderr empty, exit 0 — also when every
# model call failed. The lines, in order:
#   {"type": "session", "version": 3, "id": <uuid v7>, "timestamp", "cwd"}
#   {"type": "agent_start"}, {"type": "turn_start"}
#   {"type": "message_start" | "message_end", "message": {"role": "user", "content": [text], "timestamp"}}
#   {"type": "message_start", "message": {"role": "assistant", "content": [], "api": "anthropic-messages",
#     "provider", "model", "usage": {"input", "output", "cacheRead", "cacheWrite", "totalTokens",
#     "cost": {...}}, "stopReason", "timestamp"}}
#   {"type": "message_update", "assistantMessageEvent": {"type": "text_start" | "text_delta" | "text_end"
#     | "toolcall_start" | "toolcall_delta" | "toolcall_end", ...}, "message": {...}}   (streaming)
#   {"type": "message_end", "message": {"role": "assistant", "content": [{"type": "text", "text"} |
#     {"type": "toolCall", "id", "name", "arguments": {...}}], "stopReason": "toolUse" | "stop" | "error",
#     "usage", "responseId", "errorMessage"?}}
#   {"type": "tool_execution_start", "toolCallId", "toolName", "args"}
#   {"type": "tool_execution_update", "toolCallId", "toolName", "args", "partialResult": {"content"}}
#   {"type": "tool_execution_end", "toolCallId", "toolName", "result": {"content": [text]}, "isError"}
#   {"type": "message_start" | "message_end", "message": {"role": "toolResult", "toolCallId", "toolName",
#     "content", "isError", "timestamp"}}
#   {"type": "turn_end", "message": <assistant>, "toolResults": [...]}   (one per model call)
#   {"type": "agent_end", "messages": [...]}
# A successful turn's last assistant message_end has "stopReason": "stop".

#: A failed model call: the assistant message_end has "stopReason": "error", empty content, and
#: "errorMessage": "<HTTP status> <the raw JSON error body>", e.g. this for a 529.
ERROR_MESSAGE_529 = '529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
ERROR_MESSAGE_500 = '500 {"type":"error","error":{"type":"api_error","message":"Internal server error"}}'
ERROR_MESSAGE_401 = '401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'
# Transient errors (529, 500) are retried by the agent: after each failed call's agent_end comes
# {"type": "auto_retry_start", "attempt": n, "maxAttempts": 3, "delayMs": 2000·2^(n-1), "errorMessage"}
# and a new agent_start; when all fail the run ends with
# {"type": "auto_retry_end", "success": false, "attempt": 3, "finalError": <errorMessage>}.
# With the defaults (retry.maxRetries 3, baseDelayMs 2000, and the Anthropic SDK's own 2 retries per
# call) a server answering 529 to everything gets 12 requests and the run takes ~20 s, exit 0.
# A 401 is not retried: one request, one error message_end, no auto_retry_*, exit 0.
DEFAULT_MAX_ATTEMPTS = 3
#: An unreachable baseUrl: the same shapes with "errorMessage": "Connection error." (retried).
ERROR_MESSAGE_UNREACHABLE = "Connection error."

# Resume: `--session <id>` with the id of the `session` event resumes that session (stored as
# $HOME/.pi/agent/sessions/--<cwd with / as ->--/<timestamp>_<id>.jsonl): the same id comes back in
# the `session` event and the model request carries the earlier messages.
#: `--session <id>` for an id Pi does not know: exit 1, nothing on stdout, this on stderr.
UNKNOWN_SESSION_STDERR = "No session found matching '{id}'"
#: `--session <id>` from another cwd than the session's: Pi asks on stdin
#: "Session found in different project: <cwd>\nFork this session into current directory? [y/N]"
#: and, with stdin at EOF, exits 0 printing nothing on stdout.
OTHER_PROJECT_PROMPT = "Session found in different project"

#: A bash tool call that exits non-zero: tool_execution_end "isError": true, its result text is the
#: command's output (stdout and stderr) followed by this.
BASH_EXIT_SUFFIX = "\n\nCommand exited with code {code}"

# ---------------------------------------------------------------------------------------------
# Finding a pinned agent binary (shared with tests/support/codex.py)

# tests/conftest.py's autouse fixture drops CORRAL_* variables and moves HOME for every test, so
# the locations are read from the environment as it was when this module was first imported.
_ENV_AT_IMPORT = dict(os.environ)
INSTALL_HINT = "run .ci/install-agents (it installs the pinned agent CLIs into $CORRAL_AGENTS_DIR)"


class AgentNotInstalled(RuntimeError):
    pass


def _env(name: str) -> str | None:
    return os.environ.get(name) or _ENV_AT_IMPORT.get(name)


def _real_home() -> Path:
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return Path(_ENV_AT_IMPORT.get("HOME", "~")).expanduser()


def _candidates(name: str, env_var: str) -> list[Path]:
    explicit = _env(env_var)
    if explicit:
        return [Path(explicit)]
    found = [
        base / "node_modules" / ".bin" / name
        for base in dict.fromkeys([agents_dir(), _real_home() / ".cache" / "corral-agents"])
    ]
    on_path = shutil.which(name)
    if on_path:
        found.append(Path(on_path))
    return found


_versions: dict[Path, str | None] = {}


def version_output(path: Path) -> str | None:
    """What ``<path> --version`` printed: its stdout, else its stderr (where Pi prints its version).

    Asked once per path in a process (finding the binary asks it, and so does its version): each ask
    starts the CLI, about a second of CPU for Pi's."""
    if path not in _versions:
        _versions[path] = _ask_version(path)
    return _versions[path]


def _ask_version(path: Path) -> str | None:
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or out.stderr.strip()


_found: dict[str, Path] = {}


def find_agent_bin(name: str, env_var: str, looks_right: Callable[[str], bool]) -> Path:
    """``$env_var``, else the install-agents dir, else PATH: the first ``name`` whose ``--version``
    output passes ``looks_right``. Raises :class:`AgentNotInstalled` with the fix otherwise."""
    if name in _found:
        return _found[name]
    tried = _candidates(name, env_var)
    for path in tried:
        if path.is_file() and os.access(path, os.X_OK):
            out = version_output(path)
            if out is not None and looks_right(out):
                _found[name] = path
                return path
    listed = "\n  ".join(str(p) for p in tried) or "(nothing)"
    raise AgentNotInstalled(f"{name} CLI not found or not runnable; {INSTALL_HINT}. Tried:\n  {listed}")


def bin_or_skip(find: Callable[[], Path]) -> Path:
    """For tests: the binary; without one, fail under CI (CI set) and skip, with the reason, locally."""
    try:
        return find()
    except AgentNotInstalled as exc:
        if _env("CI"):
            raise
        import pytest

        pytest.skip(reason=str(exc))


def pi_bin() -> Path:
    """The Pi binary: $CORRAL_PI_BIN, else the install-agents dir, else PATH."""
    return find_agent_bin("pi", "CORRAL_PI_BIN", lambda out: re.fullmatch(r"\d+\.\d+\.\d+\S*", out) is not None)


def pi_bin_or_skip() -> Path:
    return bin_or_skip(pi_bin)


def pi_version(path: Path | None = None) -> str:
    return version_output(path or pi_bin()) or ""


# ---------------------------------------------------------------------------------------------
# Configuration and environment

PROVIDER = "scripted"
MODEL = "scripted-model"
TEST_API_KEY = "sk-ant-test-0000000000000000"

#: Pi's retry settings for tests: the agent-level retry keeps its default count (3) but waits
#: 50 ms, 100 ms, 200 ms instead of 2 s, 4 s, 8 s, and the SDK's own retries are off, so a call
#: that always fails costs exactly 1 + 3 requests.
FAST_RETRY_SETTINGS: dict[str, Any] = {
    "retry": {"enabled": True, "maxRetries": DEFAULT_MAX_ATTEMPTS, "baseDelayMs": 50, "provider": {"maxRetries": 0}}
}


def write_pi_config(
    home: Path | str,
    server: Any,
    *,
    provider: str = PROVIDER,
    model: str = MODEL,
    api_key: str = TEST_API_KEY,
    settings: Mapping[str, Any] | None = FAST_RETRY_SETTINGS,
) -> Path:
    """Write ``$HOME/.pi/agent/models.json`` (and ``settings.json``) pointing ``provider`` at
    ``server`` (a ScriptedServer or a base URL); returns the agent directory."""
    agent = Path(home) / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    url = server if isinstance(server, str) else server.url
    models = {
        "providers": {
            provider: {"baseUrl": url, "api": "anthropic-messages", "apiKey": api_key, "models": [{"id": model}]}
        }
    }
    (agent / "models.json").write_text(json.dumps(models, indent=2))
    if settings is not None:
        (agent / "settings.json").write_text(json.dumps(settings, indent=2))
    return agent


#: The variable a user's provider reads its key from (``"apiKey": "SCRIPTED_API_KEY"`` in models.json).
KEY_VARIABLE = "SCRIPTED_API_KEY"


def write_user_provider(agent_dir: Path | str, server: Any, *, provider: str = PROVIDER, model: str = MODEL) -> Path:
    """Pi configured as its users configure a custom provider: ``<agent_dir>/models.json`` (the
    directory ``PI_CODING_AGENT_DIR`` names) with a provider pointing at ``server``, its API key
    read from :data:`KEY_VARIABLE`, and no ``settings.json`` — Pi's own retry settings at their
    defaults. Returns the agent directory."""
    agent = Path(agent_dir)
    agent.mkdir(parents=True, exist_ok=True)
    url = server if isinstance(server, str) else server.url
    models = {
        "providers": {
            provider: {"baseUrl": url, "api": "anthropic-messages", "apiKey": KEY_VARIABLE, "models": [{"id": model}]}
        }
    }
    (agent / "models.json").write_text(json.dumps(models, indent=2))
    return agent


#: Variables never passed through: they would point Pi at a real account, another config dir or
#: change how it starts.
_DROPPED_PREFIXES = ("ANTHROPIC_", "PI_", "OPENAI_", "GEMINI_", "GOOGLE_", "AWS_", "AZURE_", "OPENROUTER_")


def pi_env(home: Path | str, extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """A hermetic environment for Pi with ``home`` as HOME (created if missing)."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(_DROPPED_PREFIXES)}
    env.update({"HOME": str(home), "PI_OFFLINE": "1", "PI_TELEMETRY": "0", "NO_COLOR": "1"})
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# ---------------------------------------------------------------------------------------------
# Running a harness launch


@dataclass
class HarnessRun:
    """One run of a harness's launch, with its output parsed by that harness."""

    harness: Harness
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    events: list[Event] = field(default_factory=list)

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    @property
    def session_id(self) -> str | None:
        found = self.of("session")
        return found[0].session_id if found else None

    @property
    def lines(self) -> list[dict[str, Any]]:
        """The raw JSON objects of stdout."""
        return json_lines(self.stdout)

    def facts(self, signal: int | None = None) -> AttemptFacts:
        return AttemptFacts(self.returncode, signal, self.events, self.stderr)

    def verdict(self) -> Verdict:
        return self.harness.classify(self.facts())

    def describe(self) -> str:
        return f"argv={self.argv}\nexit={self.returncode}\nstderr={self.stderr[-2000:]}\nstdout={self.stdout[-4000:]}"


def parse_all(harness: Harness, data: bytes | str | Sequence[bytes]) -> list[Event]:
    """Every event ``harness.parse`` makes of the lines of ``data``."""
    if isinstance(data, str):
        data = data.encode()
    lines = data.splitlines() if isinstance(data, bytes) else list(data)
    return [event for line in lines for event in harness.parse(line)]


def json_lines(stdout: str) -> list[dict[str, Any]]:
    found = []
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def run_launch(
    harness: Harness, launch: Launch, *, cwd: Path | str, env: Mapping[str, str], timeout: float = 30
) -> HarnessRun:
    """Run ``launch`` as corral's supervisor would (stdin the launch's data, else /dev/null)."""
    full_env = {**env, **launch.env}
    proc = subprocess.run(
        launch.argv,
        cwd=cwd,
        env=full_env,
        input=launch.stdin,
        stdin=None if launch.stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
    )
    stdout = proc.stdout.decode("utf-8", "replace")
    stderr = proc.stderr.decode("utf-8", "replace")
    return HarnessRun(harness, list(launch.argv), proc.returncode, stdout, stderr, parse_all(harness, proc.stdout))


def run_turn(harness: Harness, req: TurnRequest, *, env: Mapping[str, str], timeout: float = 30) -> HarnessRun:
    """``harness.work(req)`` run in ``req.cwd``."""
    return run_launch(harness, harness.work(req), cwd=req.cwd, env=env, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# Recorded fixtures

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
#: Set CORRAL_RECORD_FIXTURES=1 to have the real-binary tests rewrite tests/fixtures/<agent>/*.jsonl.
RECORD_VARIABLE = "CORRAL_RECORD_FIXTURES"


def fixture_path(agent: str, name: str) -> Path:
    return FIXTURES / agent / name


def fixture_lines(agent: str, name: str) -> list[bytes]:
    return fixture_path(agent, name).read_bytes().splitlines()


def record_fixture(agent: str, name: str, stdout: str) -> None:
    """Save a real run's raw stdout as a fixture, only when CORRAL_RECORD_FIXTURES is set."""
    if not _env(RECORD_VARIABLE):
        return
    path = fixture_path(agent, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(stdout)
