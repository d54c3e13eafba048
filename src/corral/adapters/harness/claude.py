"""Claude Code: ``claude -p <prompt> --output-format stream-json --verbose …``.

Its stream-json lines: ``system``/``init`` (session id), ``assistant`` and ``user``
messages carrying ``tool_use`` / ``tool_result`` (``is_error``), and a final
``result`` (``is_error``, ``api_error_status``, ``result``). Verdicts seen with the
real CLI: no credentials → "Not logged in · Please run /login"; HTTP 401 → "Invalid
API key · Fix external API key"; ``bypassPermissions`` as root → "cannot be used with
root/sudo privileges".

Retries: at its defaults the CLI retries a failed model call ten times with its own backoff
(a 401 too: about 170 s before it gives up), announcing each with a ``system``/``api_retry``
line (``attempt``, ``max_retries``, ``retry_delay_ms``, ``error_status``, ``error``: e.g.
``authentication_failed``, ``overloaded``, ``rate_limit``, ``server_error``, and ``unknown``
with no status when the connection itself failed). corral owns the cadence instead
(:attr:`ClaudeHarness.corral_owns_retries`): the supervisor ends the CLI at its first retry
line, :func:`classify_stream` reads the class from that line, and corral's ladder decides —
a fatal class stops at once, a transient one is relaunched with ``--resume`` of the same
session (docs/harnesses.md, "Who owns the retry cadence").

An ask (and a read-only chat) runs in plan mode with the tools that change files or run
commands disallowed (:data:`READ_ONLY_DENIED`).

Agent tools (docs/harnesses.md#agent-tools): a work turn or an ask given ``TurnRequest.tools``
gets ``--mcp-config`` with one streamable-HTTP server named ``corral`` (:func:`mcp_config`), whose
``Authorization`` header reads ``Bearer ${CORRAL_AGENT_TOKEN}`` — Claude Code expands the
variable from its environment, where the token is, so argv holds no secret —
``--strict-mcp-config`` (no other MCP server of the user's), ``mcp__corral__*`` added to the
allowed tools (in ``-p`` mode it refuses an MCP tool that is not allowed: "Claude requested
permissions to use mcp__corral__ping, but you haven't granted it yet"), and
``MCP_TOOL_TIMEOUT`` (milliseconds) from the request's timeout. In an ask's plan mode Claude
Code runs only the allowed MCP tools whose ``readOnlyHint`` annotation is true ("Cannot call
mcp__corral__… while in plan mode" otherwise): the read tools, nothing that changes a task.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.adapters.harness.base import (
    AgentTools,
    AttemptFacts,
    Event,
    Launch,
    TurnRequest,
    Verdict,
    account_digest,
    corral_tool_start,
    json_line,
    last_result,
    prompt_arg,
    shell_exit_code,
    unread,
    usage_limit_in,
)
from corral.domain.agent_tools import SERVER_NAME, TOKEN_ENV, URL_ENV
from corral.domain.classifiers import SERVER_ERROR_CODE, classify_common, classify_http_status, server_error
from corral.domain.collector import Fact, ModelFailure, ModelOk, ToolEnd, ToolStart
from corral.domain.failures import FailureClass

if TYPE_CHECKING:
    from corral.adapters.harness.sessions import SessionFiles

_SYSTEM = re.compile(rb'\s*\{\s*"type"\s*:\s*"system"')
KEEPALIVE = Event("keepalive")
#: How to log in, added to a ``fatal_auth`` reason that does not say it already.
LOGIN_HINT = "Log in: run `claude` and type /login (or set ANTHROPIC_API_KEY)."
#: The ``error`` of an ``api_retry`` line with no HTTP status -> its class. With no status the
#: request never got an answer: the connection failed (refused, unresolved, reset), so the
#: attempt cap of ``transient_unreachable`` applies rather than an hour of network retries.
_RETRY_ERRORS = {
    "authentication_failed": FailureClass.FATAL_AUTH,
    "billing_error": FailureClass.FATAL_AUTH,
    "overloaded": FailureClass.TRANSIENT_OVERLOAD,
    "rate_limit": FailureClass.TRANSIENT_OVERLOAD,
    "server_error": FailureClass.TRANSIENT_NETWORK,
    "unknown": FailureClass.TRANSIENT_UNREACHABLE,
}
READ_ONLY_DENIED = ("Bash", "Write", "Edit", "MultiEdit", "NotebookEdit")
#: The allowed-tools rule for every tool of corral's MCP server (``mcp__corral`` works too).
AGENT_TOOLS_RULE = f"mcp__{SERVER_NAME}__*"

_CODES = {
    FailureClass.FATAL_AUTH: "harness-not-authenticated",
    FailureClass.FATAL_CONFIG: "harness-config",
    FailureClass.TRANSIENT_OVERLOAD: "harness-overloaded",
    FailureClass.TRANSIENT_NETWORK: "harness-network",
    FailureClass.TRANSIENT_UNREACHABLE: "harness-unreachable",
    FailureClass.UNKNOWN: "harness-error",
}


def code_for(failure_class: FailureClass) -> str:
    return _CODES[failure_class]


def _blocks(message: Any) -> list[dict[str, Any]]:
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


class ClaudeHarness:
    name = "claude"
    display = "Claude Code"
    install_hint = "Install Claude Code: npm install -g @anthropic-ai/claude-code (or set claude_bin)."
    login_hint = LOGIN_HINT
    #: The supervisor ends the CLI at its first ``api_retry`` line: corral's ladder owns the cadence.
    corral_owns_retries = True
    #: corral's MCP endpoint through ``--mcp-config`` (docs/harnesses.md#agent-tools).
    takes_agent_tools = True
    agent_tools_door = "over MCP"
    agent_tools_absent: str | None = None

    def __init__(self, executable: str = "claude") -> None:
        self.executable = executable

    def _base(self, req: TurnRequest, mode: str) -> tuple[list[str], bytes | None]:
        prompt, stdin = prompt_arg(req.prompt)
        argv = [self.executable, "-p", *prompt, "--output-format", "stream-json", "--verbose"]
        if req.resume_id:
            argv += ["--resume", req.resume_id]
        if req.model:
            argv += ["--model", req.model]
        if req.system:
            argv += ["--append-system-prompt", req.system]
        argv += ["--permission-mode", mode]
        return argv, stdin

    def _env(self, req: TurnRequest) -> dict[str, str]:
        return {"IS_SANDBOX": "1"} if req.posture.is_sandbox else {}

    def _tools(self, req: TurnRequest, argv: list[str], env: dict[str, str]) -> None:
        """corral's MCP server for this turn, the token in ``env`` only (see the module docstring)."""
        if req.tools is None:
            return
        argv += ["--mcp-config", json.dumps(mcp_config(req.tools)), "--strict-mcp-config"]
        env.update(tools_env(req.tools))

    def work(self, req: TurnRequest) -> Launch:
        if req.posture.read_only:
            return self.ask(req)
        argv, stdin = self._base(req, req.posture.permission_mode)
        allowed = list(req.posture.allowed_tools)
        if req.tools is not None:
            allowed.append(AGENT_TOOLS_RULE)
        if allowed:
            argv += ["--allowedTools", " ".join(allowed)]
        if req.tools is not None and req.tools.shell:
            # Confined: corral's shell (mcp__corral__bash), whose calls may carry an intent, is the shell.
            argv += ["--disallowedTools", "Bash"]
        env = self._env(req)
        self._tools(req, argv, env)
        return Launch(argv, env, stdin)

    def ask(self, req: TurnRequest) -> Launch:
        argv, stdin = self._base(req, "plan")
        argv += ["--disallowedTools", " ".join(READ_ONLY_DENIED)]
        if req.tools is not None:  # plan mode then runs only the read tools (readOnlyHint)
            argv += ["--allowedTools", AGENT_TOOLS_RULE]
        env = self._env(req)
        self._tools(req, argv, env)
        return Launch(argv, env, stdin)

    def interactive(self, req: TurnRequest) -> Launch:
        argv = [self.executable]
        if req.resume_id:
            argv += ["--resume", req.resume_id]
        if req.model:
            argv += ["--model", req.model]
        if req.posture.read_only:
            argv += ["--permission-mode", "plan", "--disallowedTools", " ".join(READ_ONLY_DENIED)]
        else:
            argv += ["--permission-mode", req.posture.permission_mode]
        return Launch(argv, self._env(req))

    def parse(self, line: bytes) -> list[Event]:
        # Most bytes of a busy stream can be system keep-alives: skip decoding those (type comes first).
        if _SYSTEM.match(line) and b'"init"' not in line[:300] and b"retry" not in line[:300]:
            return [KEEPALIVE]
        data = json_line(line)
        if not isinstance(data, dict):
            return unread(data)
        kind = data.get("type")
        if kind == "rate_limit_event":
            info = data.get("rate_limit_info")
            if isinstance(info, dict) and info.get("status") == "rejected" and isinstance(info.get("resetsAt"), int):
                # The account's limit with its exact reset (a subscription's 5-hour or weekly window).
                what = str(info.get("rateLimitType") or "usage")
                return [Event("model_error", text=f"{what} usage limit reached|{info['resetsAt']}")]
            return [Event("keepalive")]
        if kind == "system":
            if data.get("subtype") == "init" and isinstance(data.get("session_id"), str):
                return [Event("session", session_id=data["session_id"])]
            if data.get("subtype") == "api_retry" or "retry" in str(data.get("subtype", "")):
                return [retry_event(data)]
            return [Event("keepalive")]
        if kind == "assistant":
            events = []
            message = data.get("message")
            for block in _blocks(message):
                if block.get("type") == "text" and block.get("text"):
                    events.append(Event("text", text=str(block["text"])))
                elif block.get("type") == "tool_use":
                    events.append(Event("tool_start", tool_id=block.get("id"), name=block.get("name")))
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                events.append(Event("usage", usage=message["usage"]))
            return events or [Event("keepalive")]
        if kind == "user":
            return [
                Event(
                    "tool_end",
                    tool_id=block.get("tool_use_id"),
                    is_error=block.get("is_error") is True,
                    text=_text_of(block.get("content"))[:2000],
                )
                for block in _blocks(data.get("message"))
                if block.get("type") == "tool_result"
            ] or [Event("keepalive")]
        if kind == "result":
            status = data.get("api_error_status")
            return [
                Event(
                    "result",
                    is_error=data.get("is_error") is True or data.get("subtype", "success") != "success",
                    text=str(data.get("result") or data.get("error") or ""),
                    status=status if isinstance(status, int) else None,
                    usage=_usage(data),
                    session_id=data.get("session_id") if isinstance(data.get("session_id"), str) else None,
                )
            ]
        return [Event("keepalive")]

    def classify(self, facts: AttemptFacts) -> Verdict:
        return classify_stream(self, facts)

    #: The lines that can hold an incident fact (the collector parses no other).
    incident_markers: tuple[bytes, ...] = (b'"tool_use"', b'"tool_result"', b'"result"', b'"api_retry"', b'"assistant"')

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Fact]:
        """stream-json's structured failure fields: tool_use / tool_result ``is_error``, ``result``
        ``is_error`` / ``api_error_status``, ``system/api_retry``; an assistant message is a model response."""
        kind = data.get("type")
        if kind == "assistant":
            message = data.get("message")
            facts: list[Fact] = [
                _tool_start(str(b.get("id")), str(b.get("name") or "tool"), b.get("input"), cwd)
                for b in _blocks(message)
                if b.get("type") == "tool_use"
            ]
            return [ModelOk(), *facts]
        if kind == "user":
            ends: list[Fact] = []
            for b in _blocks(data.get("message")):
                if b.get("type") == "tool_result":
                    text = _text_of(b.get("content"))
                    call = str(b.get("tool_use_id"))
                    ends.append(ToolEnd(call, b.get("is_error") is True, text, offset, exit_code=shell_exit_code(text)))
            return ends
        if kind == "system" and data.get("subtype") == "api_retry":
            # told as corral's verdict on it, never with the CLI's own "retry 1 of 10, due in 0.6 s":
            # corral ends the CLI at this line, and its own ladder decides the next attempt
            return [ModelFailure(retry_verdict(self, retry_event(data)).reason, offset)]
        if kind == "result" and (data.get("is_error") is True or data.get("subtype", "success") != "success"):
            # after the CLI's own ``api_retry`` lines it restates the failure they told
            status = data.get("api_error_status")
            text = str(data.get("result") or data.get("error") or "the turn ended in an error")
            return [ModelFailure(f"HTTP {status}: {text}" if isinstance(status, int) else text, offset, restates=True)]
        return []

    def account(self) -> str | None:
        """The API key or token in use (hashed), its server, else the CLI's login (its config directory)."""
        env = os.environ
        home = str(config_dir(env))
        key = env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN")
        return account_digest(self.name, [key, env.get("ANTHROPIC_BASE_URL"), None if key else home])

    def session_files(self, env: Mapping[str, str], worktree: Path, session_id: str) -> SessionFiles | None:
        """``<config>/projects/<the worktree's key>/<id>.jsonl`` and the files of ``<id>/`` beside it
        (its subagents' transcripts, the tool outputs it kept aside)."""
        from corral.adapters.harness.sessions import SessionFiles, is_regular, plain_id, regular_files

        if not plain_id(session_id):
            return None
        root = config_dir(env) / "projects"
        place = root / project_key(worktree)
        names = [f"{session_id}.jsonl"] if is_regular(place / f"{session_id}.jsonl") else []
        names += regular_files(place / session_id, place)
        return SessionFiles(root, place, tuple(names))

    def carried(self, name: str, data: bytes, worktree: Path, session_id: str) -> bytes | None:
        """Its own files as they are: ``--resume`` finds the id in any project directory (this worktree's
        first) and takes up the working directory it runs in, whatever the transcript's entries say."""
        from corral.adapters.harness.sessions import plain_id, safe_name

        own = name == f"{session_id}.jsonl" or name.startswith(f"{session_id}/")
        return data if plain_id(session_id) and own and safe_name(name) else None


def config_dir(env: Mapping[str, str]) -> Path:
    """Claude Code's configuration directory (its logins and sessions): ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"])
    return Path(env.get("HOME") or Path.home()) / ".claude"


#: Past this many characters Claude Code cuts a project key and adds a hash of the whole path.
_KEY_MAX = 200


def project_key(worktree: Path) -> str:
    """The directory under ``projects`` where Claude Code keeps the sessions of a run in ``worktree``:
    the real path (NFC), each UTF-16 unit that is not an ASCII letter or digit as ``-``; a longer key
    is cut at 200 and followed by ``-`` and the base-36 of its 32-bit Java-style string hash (what
    Claude Code 2.1.332 computes; docs/harnesses.md#sessions-across-hosts)."""
    import unicodedata

    path = unicodedata.normalize("NFC", os.path.realpath(worktree))
    key = "".join(c if c.isascii() and c.isalnum() else "-" * (2 if ord(c) > 0xFFFF else 1) for c in path)
    if len(key) <= _KEY_MAX:
        return key
    units = path.encode("utf-16-le", "surrogatepass")
    digest = 0
    for i in range(0, len(units), 2):
        digest = (digest * 31 + int.from_bytes(units[i : i + 2], "little")) & 0xFFFFFFFF
    if digest >= 0x80000000:
        digest -= 0x100000000
    return f"{key[:_KEY_MAX]}-{_base36(abs(digest))}"


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


#: How Claude Code names corral's tools: ``mcp__corral__<tool>``.
CORRAL_TOOL_PREFIX = f"mcp__{SERVER_NAME}__"


def _tool_start(call_id: str, name: str, args: Any, cwd: str) -> ToolStart:
    tool = name.removeprefix(CORRAL_TOOL_PREFIX) if name.startswith(CORRAL_TOOL_PREFIX) else ""
    return corral_tool_start(call_id, tool, args, cwd, name)


def mcp_config(tools: AgentTools) -> dict[str, Any]:
    """The ``--mcp-config`` of a turn: corral's server over streamable HTTP, the bearer token a
    reference to :data:`TOKEN_ENV` that Claude Code expands from its environment."""
    headers = {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}
    return {"mcpServers": {SERVER_NAME: {"type": "http", "url": tools.url, "headers": headers}}}


def tools_env(tools: AgentTools) -> dict[str, str]:
    """The token, the endpoint, and Claude Code's MCP tool timeout (``MCP_TOOL_TIMEOUT``, in ms)."""
    timeout_ms = max(1, round(tools.timeout_seconds * 1000))
    return {TOKEN_ENV: tools.token, URL_ENV: tools.url, "MCP_TOOL_TIMEOUT": str(timeout_ms)}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def retry_event(data: dict[str, Any]) -> Event:
    """An ``api_retry`` line as a ``retry`` event: ``status`` the HTTP status, ``name`` the CLI's
    error word, ``text`` one readable line ("HTTP 529 overloaded (Claude Code's retry 1 of 10, due in 0.5 s)")."""
    status = _int(data.get("error_status"))
    error = str(data.get("error") or "")[:80]
    what = f"HTTP {status}" if status is not None else "no HTTP answer (the connection failed)"
    if error and error != "unknown":
        what += f" {error}"
    attempt, most, delay = _int(data.get("attempt")), _int(data.get("max_retries")), _int(data.get("retry_delay_ms"))
    plan = "Claude Code's retry"
    if attempt is not None:
        plan += f" {attempt}" + (f" of {most}" if most is not None else "")
    if delay is not None:
        plan += f", due in {delay / 1000:.1f} s"
    return Event("retry", text=f"{what} ({plan})", status=status, name=error or None)


def retry_verdict(harness: Any, event: Event) -> Verdict:
    """The verdict of an attempt corral ended at the CLI's retry line ``event`` (no result yet)."""
    cls = classify_http_status(event.status) or _RETRY_ERRORS.get(event.name or "") or FailureClass.UNKNOWN
    what = f"HTTP {event.status}" if event.status is not None else "no HTTP answer: the connection failed"
    if event.name and event.name != "unknown":
        what += f" {event.name}"
    if cls is FailureClass.FATAL_AUTH:
        reason = f"the model server refused {harness.display}'s credentials ({what}). {harness.login_hint}"
    elif server_error(event.status):
        return Verdict(False, cls, SERVER_ERROR_CODE, f"{harness.display}'s model provider had a server error: {what}")
    else:
        reason = f"{harness.display}'s model call failed: {what}"
    return Verdict(False, cls, code_for(cls), reason)


def _usage(data: dict[str, Any]) -> dict[str, Any] | None:
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
    if usage is None and "total_cost_usd" not in data:
        return None
    out = dict(usage or {})
    if "total_cost_usd" in data:
        out["total_cost_usd"] = data["total_cost_usd"]
    if "num_turns" in data:
        out["num_turns"] = data["num_turns"]
    return out


def classify_stream(harness: Any, facts: AttemptFacts) -> Verdict:
    """Claude-style verdicts: the result event first, then known dialects, then shared signals."""
    if facts.spawn_error:
        return Verdict(False, FailureClass.FATAL_CONFIG, "harness-missing", facts.spawn_error)
    result = last_result(facts.events)
    if result is not None and not result.is_error and facts.exit_code == 0 and facts.signal is None:
        return Verdict.ok(result.text)
    errors = [e.text or "" for e in facts.events if e.kind == "model_error"]
    text = "\n".join([result.text or "" if result else "", *errors, facts.stderr_tail])
    reason = (
        (result.text if result and result.text else "")
        or (errors[-1] if errors else "")
        or (facts.stderr_tail.strip().splitlines()[-1] if facts.stderr_tail.strip() else "")
    )
    if "root/sudo" in text or "cannot be used with root" in text:
        return Verdict(
            False,
            FailureClass.FATAL_CONFIG,
            "harness-permission-refused",
            reason or "bypassPermissions cannot be used as root",
        )
    if "Not logged in" in text or "/login" in text or "Invalid API key" in text:
        hint = getattr(harness, "login_hint", "")
        if hint and "/login" not in reason:
            reason = f"{reason}. {hint}" if reason else hint
        return Verdict(False, FailureClass.FATAL_AUTH, "harness-not-authenticated", reason)
    # The rate_limit_event's exact reset (``…|<epoch>``) before the result's words, whose clock time
    # ("resets 2:13pm") is exact only to the minute.
    exact = [e for e in errors if e.rpartition("|")[2].isdigit()]
    if words := usage_limit_in([*exact, result.text or "" if result else "", *errors, facts.stderr_tail]):
        cls = FailureClass.TRANSIENT_OVERLOAD  # a self-healing window: waited for, never fatal
        return Verdict(False, cls, "usage-limit", reason or words, usage_limit=words)
    retries = [e for e in facts.events if e.kind == "retry"]
    if result is None and retries:  # ended by corral at the CLI's retry line: that line is the verdict
        return retry_verdict(harness, retries[-1])
    status = result.status if result else None
    cls = classify_http_status(status) or classify_common(text, facts.exit_code)
    if server_error(status):  # the provider answered with its own failure: told as such, on the network ladder
        said = reason or f"{harness.display}'s model provider had a server error"
        return Verdict(False, cls, SERVER_ERROR_CODE, said)
    if result is None and cls is FailureClass.UNKNOWN:
        return Verdict(False, cls, "harness-exited", reason or f"{harness.display} exited without a result")
    return Verdict(False, cls, code_for(cls), reason or f"{harness.display} reported an error")
