"""Run the real Codex CLI (``@openai/codex``) in tests, against the scripted Responses API server.

Codex is pointed at a :class:`~tests.support.responses_server.ResponsesServer` with ``-c`` options
naming a custom model provider (:func:`codex_config_args`; they go into
``CodexHarness(extra=...)``), with ``CODEX_HOME`` and ``HOME`` at temporary directories
(:func:`codex_env`). The tests run the argv corral's :class:`~corral.adapters.harness.codex.CodexHarness`
builds and read its stdout with ``CodexHarness.parse`` / ``classify``; binary lookup, running and
fixtures are shared with ``tests/support/pi.py``.

The constants below are what Codex ``CODEX_VERSION`` printed on this kind of machine (Linux x64,
as root); ``tests/seams/test_codex_real.py`` re-checks them against the real binary.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.pi import bin_or_skip, find_agent_bin, version_output

# ---------------------------------------------------------------------------------------------
# Observed facts (Codex 0.171.0, `codex exec --json -s workspace-write --skip-git-repo-check ...`)

#: The pinned version; keep in step with CODEX_VERSION in .ci/install-agents.
CODEX_VERSION = "0.171.0"
#: ``codex --version`` prints exactly this line (stdout).
VERSION_LINE = f"codex-cli {CODEX_VERSION}"

# stdout is JSON lines only; stderr always has "Reading additional input from stdin..." (even with
# stdin at /dev/null) and, with CODEX_HOME under /tmp, "WARNING: proceeding, even though we could not
# create PATH aliases: ...". A successful turn, exit 0:
#   {"type": "thread.started", "thread_id": <uuid v7>}
#   {"type": "item.completed", "item": {"id": "item_0", "type": "error", "message": MODEL_METADATA_WARNING}}
#       (only for a model slug Codex has no metadata for, e.g. any scripted one — a warning, not a failure)
#   {"type": "turn.started"}
#   {"type": "item.started", "item": {"id": "item_1", "type": "command_execution",
#       "command": "/bin/bash -lc '<cmd>'", "aggregated_output": "", "exit_code": null, "status": "in_progress"}}
#   {"type": "item.completed", "item": {... same id, "aggregated_output": <output>, "exit_code": 0,
#       "status": "completed"}}            (non-zero exit: "exit_code": n, "status": "failed")
#   {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": <final message>}}
#   {"type": "turn.completed", "usage": {"input_tokens", "cached_input_tokens", "cache_write_input_tokens",
#       "output_tokens", "reasoning_output_tokens"}}     (summed over the turn's model calls)
MODEL_METADATA_WARNING = (
    "Model metadata for `{model}` not found. Defaulting to fallback metadata; this can degrade performance "
    "and cause issues."
)
#: The shell tool's argv as shown in command_execution items.
COMMAND_FORMAT = "/bin/bash -lc '{cmd}'"

# A failed turn, exit 1: after turn.started come {"type": "error", "message": M} and
# {"type": "turn.failed", "error": {"message": M}} with the same M:
#: HTTP 401 (not retried).
ERROR_401 = "unexpected status 401 Unauthorized: {message}, url: {base_url}/responses, request id: {request_id}"
#: HTTP 503 (after the provider's request retries).
ERROR_503 = "unexpected status 503 Service Unavailable: {message}, url: {base_url}/responses, request id: {request_id}"
#: HTTP 429 (after the provider's request retries).
ERROR_429 = "exceeded retry limit, last status: 429 Too Many Requests, request id: {request_id}"
#: HTTP 500 — no status and not the body's message: Codex prints its own text.
ERROR_500 = "We’re currently experiencing high demand, which may cause temporary errors."
#: HTTP 429 with code insufficient_quota.
ERROR_QUOTA = "Quota exceeded. Check your plan and billing details."
#: The provider's env_key variable unset: no request is made, the turn fails with this (exit 1).
ERROR_MISSING_KEY = "Missing environment variable: `{variable}`."
#: A 200 stream that ends in `response.failed` (any code but the special ones): prefix + error.message.
ERROR_STREAM_PREFIX = "stream disconnected before completion: "
# With retries on, every failed stream attempt prints {"type": "error", "message": "Reconnecting... <n>/<max>
# (<M>)"} (max = the provider's stream_max_retries, default 5), and an HTTP error is first retried
# silently request_max_retries times (default 4): with the defaults, a server answering 500 to 20
# requests in a row printed Reconnecting 1/5..4/5 and the 21st request still rescued the turn after
# ~16 s. An unreachable base_url prints "Reconnecting... waiting for network (Connection failed: error
# sending request)" again and again and never ends by itself (seen for 60 s).
RECONNECTING_PREFIX = "Reconnecting... "

# Resume: `codex exec resume <thread_id> <prompt>` keeps the thread id (thread.started repeats it) and
# sends the earlier items again (x-codex-turn-metadata "history_initialization": "cold_resume").
# `exec resume` has no -s/--sandbox option: `codex exec resume <id> --json -s workspace-write ...`
# exits 2 with RESUME_SANDBOX_ERROR on stderr. Options of `exec` given before the subcommand do
# apply: `codex exec --json -s workspace-write ... resume <id> <prompt>` resumes in workspace-write
# (a resume with no sandbox option at all runs read-only).
RESUME_SANDBOX_ERROR = "error: unexpected argument '-s' found"
EXIT_USAGE = 2

# ---------------------------------------------------------------------------------------------
# Finding the binary


def codex_bin() -> Path:
    """The Codex binary: $CORRAL_CODEX_BIN, else the install-agents dir, else PATH."""
    return find_agent_bin("codex", "CORRAL_CODEX_BIN", lambda out: out.startswith("codex-cli "))


def codex_bin_or_skip() -> Path:
    return bin_or_skip(codex_bin)


def codex_version(path: Path | None = None) -> str:
    return version_output(path or codex_bin()) or ""


# ---------------------------------------------------------------------------------------------
# Configuration and environment

PROVIDER = "scripted"
MODEL = "scripted-model"
KEY_VARIABLE = "SCRIPTED_API_KEY"
TEST_API_KEY = "sk-test-0000000000000000"


def codex_config_args(
    server: Any,
    *,
    provider: str = PROVIDER,
    model: str | None = None,
    env_key: str = KEY_VARIABLE,
    request_max_retries: int | None = None,
    stream_max_retries: int | None = None,
    stream_idle_timeout_ms: int | None = None,
) -> tuple[str, ...]:
    """The ``-c`` options that point Codex at ``server`` (a ResponsesServer or a ``…/v1`` base URL).

    Retry settings are left as a user has them (Codex's own defaults: 4 request and 5 stream
    retries): the Codex adapter turns them off for the provider itself, which these tests then
    exercise. A number sets one, for a test about how corral meets a changed setting.
    ``model`` adds ``-c model="…"``;
    by default the model comes from ``-m`` (``TurnRequest.model``). Analytics and update checks are off.
    """
    base_url = server if isinstance(server, str) else server.base_url
    fields = [f'name="{provider}"', f'base_url="{base_url}"', 'wire_api="responses"', f'env_key="{env_key}"']
    for key, value in (
        ("request_max_retries", request_max_retries),
        ("stream_max_retries", stream_max_retries),
        ("stream_idle_timeout_ms", stream_idle_timeout_ms),
    ):
        if value is not None:
            fields.append(f"{key}={value}")
    args = ["-c", f"model_provider={provider}", "-c", f"model_providers.{provider}={{{', '.join(fields)}}}"]
    if model is not None:
        args += ["-c", f'model="{model}"']
    args += ["-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false"]
    return tuple(args)


#: Variables never passed through: they would point Codex at a real account or config.
_DROPPED_PREFIXES = ("OPENAI_", "CODEX_", "AZURE_OPENAI_")


def codex_env(
    home: Path | str,
    codex_home: Path | str,
    *,
    api_key: str | None = TEST_API_KEY,
    extra: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """A hermetic environment: HOME and CODEX_HOME (created if missing), the provider's key."""
    home, codex_home = Path(home), Path(codex_home)
    home.mkdir(parents=True, exist_ok=True)
    codex_home.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(_DROPPED_PREFIXES)}
    env.pop(KEY_VARIABLE, None)
    env.update({"HOME": str(home), "CODEX_HOME": str(codex_home), "NO_COLOR": "1"})
    if api_key is not None:
        env[KEY_VARIABLE] = api_key
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# ---------------------------------------------------------------------------------------------
# Configured as users configure it, at a home Codex accepts

#: Where tests put a CODEX_HOME: Codex 0.171.0 refuses to create its ``codex-linux-sandbox``
#: helper under the temporary directory ("Refusing to create helper binaries under temporary
#: dir"), and with bubblewrap installed every sandboxed command then fails; a user's ~/.codex
#: is never there, so neither is a test's.
CODEX_HOME_PARENT = Path.home() / ".cache"


@contextmanager
def codex_home_outside_tmp(prefix: str = "corral-test-codex-home-") -> Iterator[Path]:
    """A fresh CODEX_HOME under ``~/.cache/corral-test-codex-home-<random>``, removed afterwards.

    Also a place for a repository outside the temporary directory (``prefix`` names it), which
    Codex's workspace-write sandbox leaves writable as a whole."""
    CODEX_HOME_PARENT.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=CODEX_HOME_PARENT))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_provider_config(
    codex_home: Path, server: Any, *, provider: str = PROVIDER, model: str = MODEL, env_key: str = KEY_VARIABLE
) -> Path:
    """``$CODEX_HOME/config.toml`` as a user writes it for a custom provider (``server`` a
    ResponsesServer or a ``…/v1`` base URL): no retry settings, so Codex's defaults apply
    unless corral turns them off."""
    base_url = server if isinstance(server, str) else server.base_url
    codex_home.mkdir(parents=True, exist_ok=True)
    path = codex_home / "config.toml"
    path.write_text(
        f'model_provider = "{provider}"\nmodel = "{model}"\n'
        "check_for_update_on_startup = false\n\n"
        "[analytics]\nenabled = false\n\n"
        f'[model_providers.{provider}]\nname = "{provider}"\nbase_url = "{base_url}"\n'
        f'wire_api = "responses"\nenv_key = "{env_key}"\n'
    )
    return path


def closed_port_url() -> str:
    """A loopback ``…/v1`` URL nothing listens on (the port was bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def path_without_bwrap(bin_dir: Path, path: str | None = None) -> str:
    """A PATH like ``path`` (default: this process's) on which there is no ``bwrap``: ``bin_dir``
    gets a link to every other program of its directories. Codex looks bwrap up on PATH, so this
    is a machine without bubblewrap, for Codex."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for directory in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if not directory or not Path(directory).is_dir():
            continue
        for program in Path(directory).iterdir():
            link = bin_dir / program.name
            if program.name != "bwrap" and not link.exists() and os.access(program, os.X_OK):
                link.symlink_to(program)
    return str(bin_dir)
