"""Run the real Claude Code CLI in tests, against the scripted model server.

``claude_bin()`` finds the pinned binary that ``.ci/install-agents`` installs; ``claude_env()``
builds a hermetic environment pointing it at a :class:`~tests.support.model_server.ScriptedServer`;
``run_claude()`` / ``start_claude()`` run it and parse its ``stream-json`` output.

The constants below are what Claude Code ``CLAUDE_CODE_VERSION`` printed on this kind of machine
(Linux x64, as root) — the raw material from which corral's Claude adapter classifies failures.
``tests/seams/test_claude_real.py`` re-checks every one of them against the real binary, so a
version bump that changes them fails loudly there.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------
# Observed facts (Claude Code 2.1.332, `-p ... --output-format stream-json --verbose`)

#: The pinned version; keep in step with CLAUDE_CODE_VERSION in .ci/install-agents.
CLAUDE_CODE_VERSION = "2.1.332"
#: ``claude --version`` prints exactly this line.
VERSION_LINE = f"{CLAUDE_CODE_VERSION} (Claude Code)"

# Success: exit 0. First line {"type": "system", "subtype": "init", "session_id": <uuid>, "cwd",
# "model", "tools": [...], "permissionMode", "apiKeySource": "ANTHROPIC_API_KEY",
# "claude_code_version": "2.1.332", "mcp_servers", "slash_commands", "agents", "skills", "plugins",
# "uuid", ...}. Then {"type": "assistant", "message": {... "content": [text | tool_use]}} and,
# after each tool, {"type": "user", "message": {"content": [{"type": "tool_result",
# "tool_use_id", "content", "is_error"?}]}, "tool_use_result": {...}}. Last line:
# {"type": "result", "subtype": "success", "is_error": false, "api_error_status": null,
#  "result": <final text>, "session_id", "num_turns", "stop_reason": "end_turn",
#  "terminal_reason": "completed", "permission_denials": [], "usage", "total_cost_usd", ...}.
# `--resume <id>` keeps the same session_id in its init and result events.

#: Every retry of a failed model call is announced by an event of this shape (stdout):
#: {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 1, "retry_delay_ms": ~600,
#:  "error_status": 529, "error": "overloaded", "session_id", "uuid"}.
#: ``error`` is "authentication_failed" for 401, "rate_limit" for 429, "overloaded" for 529.
API_RETRY_SUBTYPE = "api_retry"

# An API failure that outlives the retries ends with a synthetic assistant message
# ({"model": "<synthetic>", "content": [{"type": "text", "text": <same text as result>}]},
# with top-level "error", "is_api_error_message": true, "api_error_status", "api_error_type") and
# {"type": "result", "subtype": "success" (sic), "is_error": true, "terminal_reason": "api_error",
#  "api_error_status": <HTTP status>, "api_error_type": <error.type>, "result": <text>}, exit 1,
# empty stderr. Note `subtype` stays "success": classify by is_error / api_error_status.

#: HTTP 401 (after CLAUDE_CODE_MAX_RETRIES retries — 401 is retried too): result text, exit 1;
#: api_error_status 401, api_error_type "authentication_error", message "error": "authentication_failed".
RESULT_INVALID_API_KEY = "Invalid API key · Fix external API key"
#: No ANTHROPIC_API_KEY and no login: no request is made; the init event is still printed (with
#: "apiKeySource": "none"), then this result text, exit 1, is_error true, api_error_status null,
#: terminal_reason "api_error", the assistant message's "error": "authentication_failed".
RESULT_NOT_LOGGED_IN = "Not logged in · Please run /login"
#: HTTP 529 on every try: result starts with this, then
#: " This is a server-side issue, usually temporary — try again in a moment. If it persists,
#: check your inference gateway (127.0.0.1:<port>)."; exit 1; api_error_type "overloaded_error";
#: the assistant message's "error": "server_error".
RESULT_529_PREFIX = "API Error: 529 Overloaded."
#: A 529 sent as an `event: error` inside a 200 stream, every try (2 streamed tries, then one
#: non-streaming fallback request): result starts with this; exit 1.
RESULT_529_REPEATED_PREFIX = "API Error: Repeated 529 Overloaded errors."
#: HTTP 429 on every try: "API Error: Request rejected (429) · <error.message from the body>",
#: exit 1, api_error_type "rate_limit_error", the assistant message's "error": "rate_limit".
RESULT_429_PREFIX = "API Error: Request rejected (429) · "
#: Exit code of a failed turn (API error, not logged in).
EXIT_API_ERROR = 1

#: `--permission-mode bypassPermissions` (or --dangerously-skip-permissions) as root without
#: IS_SANDBOX=1: this line on stderr, nothing on stdout, exit 1, no request made.
#: With IS_SANDBOX=1 it runs (init permissionMode "bypassPermissions").
BYPASS_AS_ROOT_STDERR = "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons"
EXIT_BYPASS_AS_ROOT = 1

#: A stalled stream (Hang): the CLI prints its init event and then waits; it had not given up
#: after 120 s (no retry, no idle timeout within that). SIGTERM ends it at once: it handles the
#: signal and exits with status 143 itself (Popen.returncode 143, not -15), with no result event
#: and nothing on stderr.
EXIT_ON_SIGTERM = 143

# ---------------------------------------------------------------------------------------------
# Finding the binary

# tests/conftest.py's autouse fixture drops CORRAL_* variables and moves HOME for every test, so
# the locations are read from the environment as it was when this module was first imported
# (at collection), with the account's real home as a fallback.
_ENV_AT_IMPORT = dict(os.environ)
_PLATFORM_PACKAGES = ("claude-code-linux-x64", "claude-code-linux-arm64", "claude-code-linux-x64-musl")
INSTALL_HINT = "run .ci/install-agents (it installs the pinned Claude Code into $CORRAL_AGENTS_DIR)"


class ClaudeNotInstalled(RuntimeError):
    pass


def _real_home() -> Path:
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return Path(_ENV_AT_IMPORT.get("HOME", "~")).expanduser()


def agents_dir() -> Path:
    """CORRAL_AGENTS_DIR, else ``$HOME/.cache/corral-agents`` — as .ci/install-agents decides."""
    configured = os.environ.get("CORRAL_AGENTS_DIR") or _ENV_AT_IMPORT.get("CORRAL_AGENTS_DIR")
    if configured:
        return Path(configured)
    home = _ENV_AT_IMPORT.get("HOME")
    return (Path(home) if home else _real_home()) / ".cache" / "corral-agents"


def _candidates() -> list[Path]:
    found: list[Path] = []
    explicit = os.environ.get("CORRAL_CLAUDE_BIN") or _ENV_AT_IMPORT.get("CORRAL_CLAUDE_BIN")
    if explicit:
        return [Path(explicit)]
    for base in dict.fromkeys([agents_dir(), _real_home() / ".cache" / "corral-agents"]):
        modules = base / "node_modules"
        found.append(modules / ".bin" / "claude")
        # The native binary itself, usable even when npm skipped the postinstall that copies it
        # over the placeholder bin/claude.exe.
        found.extend(modules / "@anthropic-ai" / pkg / "claude" for pkg in _PLATFORM_PACKAGES)
    on_path = shutil.which("claude")
    if on_path:
        found.append(Path(on_path))
    return found


def _runs(path: Path) -> bool:
    if not (path.is_file() and os.access(path, os.X_OK)):
        return False
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "Claude Code" in out.stdout


_found: Path | None = None


def claude_bin() -> Path:
    """The Claude Code binary: $CORRAL_CLAUDE_BIN, else the install-agents dir, else PATH.

    Raises :class:`ClaudeNotInstalled` with the fix when there is none that runs.
    """
    global _found
    if _found is not None:
        return _found
    tried = _candidates()
    for path in tried:
        if _runs(path):
            _found = path
            return path
    listed = "\n  ".join(str(p) for p in tried) or "(nothing)"
    raise ClaudeNotInstalled(f"Claude Code CLI not found or not runnable; {INSTALL_HINT}. Tried:\n  {listed}")


def claude_bin_or_skip() -> Path:
    """For tests: the binary; without one, fail under CI (CI set) and skip, with the reason, locally."""
    try:
        return claude_bin()
    except ClaudeNotInstalled as exc:
        if os.environ.get("CI") or _ENV_AT_IMPORT.get("CI"):
            raise
        import pytest

        pytest.skip(reason=str(exc))


def claude_version(path: Path | None = None) -> str:
    out = subprocess.run([str(path or claude_bin()), "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


# ---------------------------------------------------------------------------------------------
# Environment

TEST_API_KEY = "sk-ant-test-0000000000000000"

#: Variables never passed through from the outer environment: they would point the CLI at a real
#: account or endpoint, change its model, or mark it as nested inside another Claude Code.
_DROPPED_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "CLAUDECODE", "OTEL_", "AWS_BEARER_TOKEN_BEDROCK", "VERTEX_")
_DROPPED = ("IS_SANDBOX", "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "MCP_TIMEOUT")


def claude_env(
    server: Any,
    home: Path | str,
    *,
    api_key: str | None = TEST_API_KEY,
    max_retries: int | None = None,
    extra: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """The environment for running ``claude`` against ``server`` (a ScriptedServer or a URL).

    ``api_key=None`` leaves the key out (the "not logged in" case). ``extra`` adds variables, a
    ``None`` value removes one. ``home`` is created if missing; the CLI keeps its config
    (``.claude.json``) and sessions (``.claude/projects/<cwd>/<session>.jsonl``) there, so a
    ``--resume`` must reuse the same home and cwd.
    """
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    tmp_dir = home / "tmp"
    tmp_dir.mkdir(exist_ok=True)
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(_DROPPED_PREFIXES) and key not in _DROPPED
    }
    env.update(
        {
            "HOME": str(home),
            # Its scratch space (Bash tool state, the messaging socket cc-socks/<pid>.sock, which a
            # killed CLI leaves behind) goes here instead of /tmp.
            "CLAUDE_CODE_TMPDIR": str(tmp_dir),
            "ANTHROPIC_BASE_URL": server if isinstance(server, str) else server.url,
            # No HEAD /api/hello probe, no telemetry, no feature-flag fetches, no update checks.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "NO_COLOR": "1",
        }
    )
    if max_retries is not None:  # a user's setting is left alone unless a test is about it and says so
        env["CLAUDE_CODE_MAX_RETRIES"] = str(max_retries)
    if api_key is not None:
        env["ANTHROPIC_API_KEY"] = api_key
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# ---------------------------------------------------------------------------------------------
# Running it

DEFAULT_ALLOWED_TOOLS = "Bash Write Edit Read"


def claude_argv(
    prompt: str,
    *,
    resume: str | None = None,
    permission_mode: str = "acceptEdits",
    allowed_tools: str | None = DEFAULT_ALLOWED_TOOLS,
    extra: Sequence[str] = (),
) -> list[str]:
    argv = [str(claude_bin()), "-p", prompt, "--output-format", "stream-json", "--verbose"]
    argv += ["--permission-mode", permission_mode]
    if allowed_tools:
        argv += ["--allowedTools", allowed_tools]
    if resume:
        argv += ["--resume", resume]
    return argv + list(extra)


def parse_stream(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a stream-json output; non-JSON lines are skipped."""
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


@dataclass
class ClaudeRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def of(self, type_: str, subtype: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == type_ and (subtype is None or e.get("subtype") == subtype)]

    @property
    def init(self) -> dict[str, Any] | None:
        found = self.of("system", "init")
        return found[0] if found else None

    @property
    def result(self) -> dict[str, Any] | None:
        found = self.of("result")
        return found[-1] if found else None

    @property
    def session_id(self) -> str | None:
        event = self.init or self.result
        return event.get("session_id") if event else None

    def tool_results(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        for event in self.of("user"):
            content = event.get("message", {}).get("content") or []
            blocks.extend(b for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
        return blocks

    def describe(self) -> str:
        return f"argv={self.argv}\nexit={self.returncode}\nstderr={self.stderr[-2000:]}\nstdout={self.stdout[-4000:]}"


def run_claude(
    prompt: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = 30,
    **argv_options: Any,
) -> ClaudeRun:
    argv = claude_argv(prompt, **argv_options)
    proc = subprocess.run(
        argv, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    return ClaudeRun(argv, proc.returncode, proc.stdout, proc.stderr, parse_stream(proc.stdout))


def start_claude(prompt: str, *, cwd: Path, env: Mapping[str, str], **argv_options: Any) -> subprocess.Popen[str]:
    """Start it without waiting (for hang / signal tests); the caller must reap it."""
    argv = claude_argv(prompt, **argv_options)
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
