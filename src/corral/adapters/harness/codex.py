"""Codex: ``codex exec --json [-s workspace-write] <prompt>``; ``codex exec resume <id>`` later.

An ask (and a read-only chat) runs in Codex's read-only sandbox, ``-s read-only``.

corral owns the retry cadence (docs/harnesses.md, "Who owns the retry cadence"): a work turn or
an ask turns off the request and stream retries of the model provider the user defined in
``$CODEX_HOME/config.toml`` (``-c model_providers.<id>.request_max_retries=0`` and
``stream_max_retries=0``), so an error ends the attempt and corral's ladder retries it,
resuming the same thread. Codex's built-in providers cannot be overridden (Codex refuses the
whole config) and keep Codex's silent request retries. Whatever Codex still announces as
"Reconnecting..." ends the attempt at once (``corral_owns_retries``: the supervisor stops it
at the first such line) and is classified from it — against an unreachable provider Codex
prints "Reconnecting... waiting for network" for ever, whatever those settings say, which is
``transient_unreachable``, so the ladder's attempt cap applies.

A work turn's ``workspace-write`` sandbox keeps git metadata read-only, and a task worktree's
git metadata lives in the main repository's ``.git``: the turn gets, as extra writable roots,
exactly what ``git commit`` writes there — the worktree's git directory (index, HEAD, its
logs), the object store, and the directories holding the branch's ref and its reflog
(:func:`commit_roots`). A sandbox that cannot run a command (Codex's helper refused under a
temporary ``CODEX_HOME`` with bubblewrap installed, a namespace bwrap may not create) is
``fatal_config``, never a turn that succeeded while doing nothing.

Agent tools (docs/harnesses.md#agent-tools): a work turn or an ask given ``TurnRequest.tools``
gets corral's streamable-HTTP server as ``-c mcp_servers.corral.url=…``,
``…bearer_token_env_var="CORRAL_AGENT_TOKEN"`` (Codex reads the token from that variable of its
environment and sends it as ``Authorization: Bearer``; argv holds only the variable's name),
``…tool_timeout_sec=…`` and ``…default_tools_approval_mode=…`` (:func:`tools_options`). Codex's
``exec`` never asks for approval, so an MCP tool that needs one fails ("MCP tool call requires
approval, but approval policy is never"): a work turn says ``"approve"`` (every corral tool
runs), an ask ``"auto"`` (only the tools annotated ``readOnlyHint``, the read tools, run
without approval). Codex merges ``-c`` into the user's ``config.toml`` key by key, even a whole
inline table, so a ``[mcp_servers.corral]`` of the user's own with a ``command`` (the builder's
stdio server, ``corral mcp``) cannot be pointed at a URL ("url is not supported for stdio"):
such a turn gets no corral tools and :attr:`CodexHarness.agent_tools_absent` says why.

Its JSON lines: ``thread.started`` (``thread_id``), ``turn.started``,
``item.started`` / ``item.completed`` (``command_execution`` with ``exit_code`` and
``aggregated_output``, ``agent_message`` with ``text``, ``error`` with ``message``,
``mcp_tool_call`` with ``server``, ``tool``, ``status``, ``result.content`` and ``error.message``),
``turn.completed`` (usage), ``turn.failed`` (``error.message``) and ``error`` (``message``;
"Reconnecting... …" while Codex retries).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections.abc import Mapping, Sequence
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
    obj,
    prompt_arg,
    shell_exit_code,
    unread,
    usage_limit_in,
)
from corral.adapters.harness.claude import code_for
from corral.domain.agent_tools import SERVER_NAME, TOKEN_ENV, URL_ENV
from corral.domain.classifiers import classify_common
from corral.domain.collector import Fact, ModelFailure, ModelOk, ToolEnd, ToolStart
from corral.domain.failures import FailureClass

if TYPE_CHECKING:
    from corral.adapters.harness.sessions import SessionFiles

#: Providers Codex ships; it refuses a config that sets ``model_providers.<one of these>``.
BUILT_IN_PROVIDERS = frozenset({"openai", "oss", "ollama", "lmstudio", "amazon-bedrock"})
#: What the user reads on a refused key (Codex's own login step).
LOGIN_HINT = "Log in: run `codex login`, or set the API key variable (env_key) of the model provider."
#: The text Codex prints, over and over, while its provider cannot be reached.
WAITING_FOR_NETWORK = "Reconnecting... waiting for network"
#: Codex's sandbox inside a real one (corral's bubblewrap, ``Posture.is_sandbox``): its own bwrap
#: cannot nest there ("bwrap: setting up uid map: Operation not permitted" for every command) and
#: is not needed — the outer sandbox holds the worktree read-only in an ask and everything but
#: the worktree and git's own files read-only in a work turn.
INSIDE_SANDBOX = "danger-full-access"

#: A command's output that says the sandbox itself failed, not the command (bwrap's own errors,
#: Codex's sandbox helper missing or panicking).
_SANDBOX_FAILURE = re.compile(
    r"^bwrap: .*|.*codex-linux-sandbox.*(?:No such file|not found|Permission denied).*|.*panicked at linux-sandbox.*",
    re.M,
)
#: Codex's stderr line that explains a missing sandbox helper.
_HELPER_REFUSED = re.compile(r"^.*Refusing to create helper binaries.*$", re.M)
#: A command's output kept on its tool_end event.
OUTPUT_CHARS = 2000


class CodexHarness:
    name = "codex"
    display = "Codex"
    install_hint = "Install Codex: npm install -g @openai/codex (or set codex_bin)."
    #: The supervisor ends Codex at its first "Reconnecting..." line: whatever Codex still
    #: retries on its own (a built-in provider's stream, an unreachable provider) is corral's.
    corral_owns_retries = True
    agent_tools_door = "over MCP"
    # takes_agent_tools / agent_tools_absent: properties below (the user's config may forbid them)

    def __init__(
        self, executable: str = "codex", extra: tuple[str, ...] = (), env: Mapping[str, str] | None = None
    ) -> None:
        self.executable = executable
        self.extra = extra
        self.env = env  # where CODEX_HOME is read; None: this process's environment, at each launch

    @property
    def agent_tools_absent(self) -> str | None:
        """Why a turn gets no corral tools: the user's own stdio ``mcp_servers.corral`` (see above)."""
        env = os.environ if self.env is None else self.env
        if stdio_server_named(SERVER_NAME, env, self.extra):
            return (
                f"Codex's config.toml defines its own stdio MCP server `{SERVER_NAME}`, which corral "
                "cannot point at its endpoint: rename it there (e.g. corral-builder)"
            )
        return None

    @property
    def takes_agent_tools(self) -> bool:
        return self.agent_tools_absent is None

    def _argv(self, req: TurnRequest, sandbox: str) -> Launch:
        prompt, stdin = prompt_arg(req.prompt)
        read_only = sandbox == "read-only"
        if req.posture.is_sandbox:  # inside corral's sandbox, which confines it (docs/harnesses.md#sandbox)
            sandbox = INSIDE_SANDBOX
        # exec's options go before `resume`: the resume subcommand takes no -s of its own.
        argv = [self.executable, "exec", "--json", "-s", sandbox, "--skip-git-repo-check"]
        if sandbox == "workspace-write":
            argv += writable_roots(commit_roots(Path(req.cwd)))
        argv += self.extra
        # After the harness's own options: a provider they define as a whole table must not
        # replace the retry settings corral sets inside it.
        argv += retries_off(user_provider(os.environ if self.env is None else self.env, self.extra))
        env: dict[str, str] = {}
        if req.tools is not None and self.takes_agent_tools:
            argv += tools_options(req.tools, approve_all=not read_only)
            env.update({TOKEN_ENV: req.tools.token, URL_ENV: req.tools.url})
        if req.model:
            argv += ["-m", req.model]
        if req.resume_id:
            argv += ["resume", req.resume_id]
        argv += prompt if prompt else ["-"]
        return Launch(argv, env, stdin)

    def work(self, req: TurnRequest) -> Launch:
        return self._argv(req, "read-only" if req.posture.read_only else "workspace-write")

    def ask(self, req: TurnRequest) -> Launch:
        return self._argv(req, "read-only")

    def interactive(self, req: TurnRequest) -> Launch:
        argv = [self.executable]
        if req.resume_id:
            argv += ["resume", req.resume_id]
        if req.posture.read_only:
            argv += ["-s", "read-only"]
        return Launch(argv)

    def parse(self, line: bytes) -> list[Event]:
        data = json_line(line)
        if not isinstance(data, dict):
            return unread(data)
        kind = data.get("type")
        item = obj(data.get("item"))
        if kind == "thread.started" and isinstance(data.get("thread_id"), str):
            return [Event("session", session_id=data["thread_id"])]
        if kind == "item.started" and item.get("type") == "command_execution":
            return [Event("tool_start", tool_id=item.get("id"), name=str(item.get("command", "")))]
        if kind == "item.started" and item.get("type") == "mcp_tool_call":
            return [Event("tool_start", tool_id=item.get("id"), name=mcp_tool_name(item))]
        if kind == "item.completed":
            if item.get("type") == "mcp_tool_call":
                error = obj(item.get("error")).get("message")
                failed = item.get("status") == "failed" or error is not None or obj(item.get("result")).get("is_error")
                text = str(error) if error is not None else _content_text(obj(item.get("result")).get("content"))
                return [
                    Event("tool_end", tool_id=item.get("id"), is_error=bool(failed), text=text[-OUTPUT_CHARS:] or None)
                ]
            if item.get("type") == "command_execution":
                failed = item.get("status") == "failed" or item.get("exit_code") not in (0, None)
                output = str(item.get("aggregated_output") or "")[-OUTPUT_CHARS:]
                return [Event("tool_end", tool_id=item.get("id"), is_error=failed, text=output or None)]
            if item.get("type") == "agent_message":
                return [Event("text", text=str(item.get("text", "")))]
            if item.get("type") == "error":
                # An error *item* is a non-fatal warning (e.g. missing model metadata); turn.failed is the failure.
                return [Event("keepalive", text=str(item.get("message", "")))]
            return [Event("keepalive")]
        if kind == "turn.completed":
            usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
            return [Event("result", usage=usage)]
        if kind == "turn.failed":
            error = obj(data.get("error"))
            return [Event("model_error", text=str(error.get("message", "turn failed")))]
        if kind == "error":
            message = str(data.get("message", ""))
            if message.startswith("Reconnecting"):
                return [Event("retry", text=message)]
            return [Event("model_error", text=message)]
        return [Event("keepalive")]

    def stop_now(self, events: Sequence[Event], stderr_tail: str = "") -> Verdict | None:
        """The verdict of an attempt that cannot succeed, read from its events and stderr so far;
        None when nothing says so yet.

        A broken sandbox (every command fails, whatever the model says next) and the endless
        wait for an unreachable provider. :meth:`classify` puts this verdict first, so a turn
        Codex calls a success is not one; a supervisor may also call it while the attempt runs
        to end it early.
        """
        refused = _HELPER_REFUSED.search(stderr_tail)
        if refused and self._bubblewrap():
            # Codex then runs every command through bwrap without its helper, and each one fails
            # (often with no command item in the stream at all): nothing the agent does can work.
            reason = (
                f"Codex cannot run its sandbox: {refused.group(0).strip()} — with bubblewrap installed it "
                "needs that helper (bwrap: execvp codex-linux-sandbox: No such file or directory); "
                "set CODEX_HOME to a directory outside the temporary directory."
            )
            return Verdict(False, FailureClass.FATAL_CONFIG, code_for(FailureClass.FATAL_CONFIG), reason)
        for event in events:
            if event.kind == "tool_end" and event.text and (found := _SANDBOX_FAILURE.search(event.text)):
                reason = f"Codex's sandbox could not run a command: {found.group(0).strip()}"
                return Verdict(False, FailureClass.FATAL_CONFIG, code_for(FailureClass.FATAL_CONFIG), reason)
            if event.kind == "retry" and (event.text or "").startswith(WAITING_FOR_NETWORK):
                cls = FailureClass.TRANSIENT_UNREACHABLE
                return Verdict(False, cls, code_for(cls), event.text or WAITING_FOR_NETWORK)
        return None

    def _bubblewrap(self) -> bool:
        env = os.environ if self.env is None else self.env
        return shutil.which("bwrap", path=env.get("PATH", os.environ.get("PATH"))) is not None

    def account(self) -> str | None:
        """The provider and its API key (hashed), else Codex's login (its ``CODEX_HOME``)."""
        return _account(self)

    def session_files(self, env: Mapping[str, str], worktree: Path, session_id: str) -> SessionFiles | None:
        """The thread's rollout, ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`` (the newest
        if there are two); the working directory plays no part."""
        from corral.adapters.harness.sessions import SessionFiles, plain_id

        if not plain_id(session_id):
            return None
        root = codex_home(env) / "sessions"
        found = _rollout(root, session_id)
        return SessionFiles(root, root, (found,) if found else ())

    def carried(self, name: str, data: bytes, worktree: Path, session_id: str) -> bytes | None:
        """A rollout of the thread under its own name, as it is: ``exec resume`` finds it anywhere under
        ``sessions`` by that name and runs in the directory it is started in."""
        from corral.adapters.harness.sessions import plain_id

        own = plain_id(session_id) and _ROLLOUT.fullmatch(name) is not None and name.endswith(f"-{session_id}.jsonl")
        return data if own else None

    #: The lines that can hold an incident fact (the collector parses no other).
    incident_markers: tuple[bytes, ...] = (b'"command_execution"', b'"turn.failed"', b'"error"', b'"agent_message"')

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Fact]:
        """Codex JSON's structured failure fields: a ``command_execution`` item's ``exit_code`` and
        ``status``, ``turn.failed``, a top-level ``error``; an agent message is a model response."""
        kind = data.get("type")
        item = obj(data.get("item"))
        if item.get("type") == "command_execution":
            call = str(item.get("id"))
            if kind == "item.started":
                return [ToolStart(call, "shell", {"command": item.get("command")}, cwd)]
            if kind == "item.completed":
                code = item.get("exit_code")
                failed = item.get("status") == "failed" or (isinstance(code, int) and code != 0)
                text = f"exit {code}: " if isinstance(code, int) and code != 0 else ""
                return [ToolEnd(call, failed, text + str(item.get("aggregated_output") or "")[-400:], offset)]
        if item.get("type") == "mcp_tool_call":
            call = str(item.get("id"))
            if kind == "item.started":
                tool = str(item.get("tool") or "") if item.get("server") == SERVER_NAME else ""
                return [corral_tool_start(call, tool, item.get("arguments"), cwd, mcp_tool_name(item))]
            if kind == "item.completed":
                error = obj(item.get("error")).get("message")
                result = obj(item.get("result"))
                text = str(error) if error is not None else _content_text(result.get("content"))
                failed = item.get("status") == "failed" or error is not None or result.get("is_error") is True
                return [ToolEnd(call, failed, text[-400:], offset, exit_code=shell_exit_code(text))]
        if kind == "item.completed" and item.get("type") == "agent_message":
            return [ModelOk()]
        if kind == "turn.failed":  # after an ``error`` line it restates that failure
            message = str(obj(data.get("error")).get("message") or "the turn failed")
            return [ModelFailure(message, offset, restates=True)]
        if kind == "error":
            return [ModelFailure(str(data.get("message") or "model call failed"), offset)]
        return []

    def classify(self, facts: AttemptFacts) -> Verdict:
        if facts.spawn_error:
            return Verdict(False, FailureClass.FATAL_CONFIG, "harness-missing", facts.spawn_error)
        stopped = self.stop_now(facts.events, facts.stderr_tail)
        if stopped is not None:
            return stopped
        texts = [e.text for e in facts.events if e.kind == "text" and e.text]
        completed = any(e.kind == "result" for e in facts.events)
        if completed and facts.exit_code == 0:
            return Verdict.ok(texts[-1] if texts else "")
        errors = [e.text or "" for e in facts.events if e.kind == "model_error"]
        if not errors:  # ended at a retry line: the cause is the error Codex was about to retry
            errors = [_retried(e.text or "") for e in facts.events if e.kind == "retry"][:1]
        text = "\n".join([*errors, facts.stderr_tail])
        reason = (errors[-1] if errors else "") or facts.stderr_tail.strip()[-300:] or "Codex ended without a result"
        if words := usage_limit_in([*errors, facts.stderr_tail]):
            cls = FailureClass.TRANSIENT_OVERLOAD  # the account's window: waited for together, never fatal
            return Verdict(False, cls, "usage-limit", reason, usage_limit=words)
        cls = classify_common(text, facts.exit_code)
        if cls is FailureClass.UNKNOWN:
            cls = _codex_dialect(text)
        if not errors and cls is FailureClass.UNKNOWN:
            return Verdict(False, cls, "harness-exited", reason)
        if cls is FailureClass.FATAL_AUTH:
            reason = f"{reason} — {LOGIN_HINT}"
        return Verdict(False, cls, code_for(cls), reason)


def _account(harness: CodexHarness) -> str | None:
    env = os.environ if harness.env is None else harness.env
    provider = user_provider(env, harness.extra)
    key_var = "OPENAI_API_KEY"
    if provider is not None:
        try:
            config = tomllib.loads((codex_home(env) / "config.toml").read_text(encoding="utf-8"))
            key_var = str(obj(obj(config.get("model_providers")).get(provider)).get("env_key") or key_var)
        except (OSError, ValueError):
            pass
    key = env.get(key_var)
    return account_digest(harness.name, [provider, key, None if key else str(codex_home(env))])


def codex_home(env: Mapping[str, str]) -> Path:
    """Codex's configuration directory: ``$CODEX_HOME``, else ``~/.codex``."""
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"])
    return Path(env.get("HOME") or Path.home()) / ".codex"


#: A rollout's name under ``sessions``: Codex finds a thread only in a file named so ("does not have a
#: canonical rollout filename" otherwise), in its dated directory or anywhere else below.
_ROLLOUT = re.compile(r"(?:\d{4}/\d{2}/\d{2}/)?rollout-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-[0-9A-Za-z_-]+\.jsonl")


def _rollout(root: Path, thread: str) -> str | None:
    """The newest rollout of ``thread`` under ``root``, relative to it: first in the days its id (a UUID v7,
    whose first 48 bits are its creation time in ms) names, else anywhere (a walk of every session)."""
    from datetime import UTC, datetime, timedelta

    from corral.adapters.harness.sessions import regular_files

    suffix = f"-{thread}.jsonl"
    days: list[Path] = []
    digits = thread.replace("-", "")
    if len(digits) == 32 and digits[12:13] == "7":
        try:
            made = datetime.fromtimestamp(int(digits[:12], 16) / 1000, UTC)
        except (ValueError, OverflowError, OSError):
            made = None
        if made is not None:  # Codex dates its directories in local time: the day before and after too
            days = [root / (made + timedelta(days=d)).strftime("%Y/%m/%d") for d in (0, -1, 1)]
    for top in [*days, root]:
        found = [n for n in regular_files(top, root) if n.endswith(suffix) and _ROLLOUT.fullmatch(n)]
        if found:
            return max(found, key=lambda n: _mtime(root / n))
    return None


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def user_provider(env: Mapping[str, str], extra: Sequence[str] = ()) -> str | None:
    """The model provider a turn uses when the user defined it — in ``config.toml`` or by the
    harness's own ``-c model_providers.<id>=…`` options — and it is not one of Codex's built-ins;
    None otherwise, or when ``config.toml`` cannot be read (preflight says so)."""
    try:
        config = tomllib.loads((codex_home(env) / "config.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        config = {}
    except (OSError, ValueError):
        return None
    provider = config.get("model_provider")
    profile = obj(obj(config.get("profiles")).get(str(config.get("profile", ""))))
    provider = profile.get("model_provider", provider)
    for option in extra:  # a `-c model_provider=ID` of the harness's own options wins
        if option.startswith("model_provider="):
            provider = option.removeprefix("model_provider=").strip().strip('"')
    if not isinstance(provider, str) or provider in BUILT_IN_PROVIDERS:
        return None
    if any(option.startswith(f"model_providers.{provider}=") for option in extra):
        return provider
    return provider if isinstance(obj(config.get("model_providers")).get(provider), dict) else None


def retries_off(provider: str | None) -> list[str]:
    """The ``-c`` options that leave every retry of ``provider`` to corral's ladder."""
    if provider is None or not re.fullmatch(r"[A-Za-z0-9_-]+", provider):
        return []
    return [
        "-c",
        f"model_providers.{provider}.request_max_retries=0",
        "-c",
        f"model_providers.{provider}.stream_max_retries=0",
    ]


def mcp_tool_name(item: Mapping[str, Any]) -> str:
    """An ``mcp_tool_call`` item's tool as Claude Code names one: ``mcp__<server>__<tool>``."""
    return f"mcp__{item.get('server') or '?'}__{item.get('tool') or '?'}"


def _content_text(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def tools_options(tools: AgentTools, *, approve_all: bool) -> list[str]:
    """The ``-c`` options naming corral's MCP server for a turn (see the module docstring); the
    token stays in the environment, under :data:`TOKEN_ENV`."""
    key = f"mcp_servers.{SERVER_NAME}"
    timeout = tools.timeout_seconds
    seconds = str(int(timeout)) if float(timeout).is_integer() else repr(float(timeout))
    return [
        "-c",
        f"{key}.url={json.dumps(tools.url)}",
        "-c",
        f'{key}.bearer_token_env_var="{TOKEN_ENV}"',
        "-c",
        f"{key}.tool_timeout_sec={seconds}",
        "-c",
        f'{key}.default_tools_approval_mode="{"approve" if approve_all else "auto"}"',
    ]


def stdio_server_named(name: str, env: Mapping[str, str], extra: Sequence[str] = ()) -> bool:
    """Whether the user's Codex config (``config.toml`` or the harness's own ``-c`` options)
    defines an MCP server ``name`` run as a command: one corral cannot give a URL."""
    for option in extra:
        if option.startswith(f"mcp_servers.{name}.command=") or (
            option.startswith(f"mcp_servers.{name}=") and "command" in option
        ):
            return True
    try:
        config = tomllib.loads((codex_home(env) / "config.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # unreadable: the preflight says so; missing: no server of the user's
    return "command" in obj(obj(config.get("mcp_servers")).get(name))


def commit_roots(worktree: Path) -> list[Path]:
    """What ``git commit`` in a linked worktree writes outside it, so its sandbox lets it.

    The worktree's git directory (``index.lock``, ``HEAD``, ``logs/HEAD``, ``ORIG_HEAD``), the
    object store, and the directories of the branch's loose ref and its reflog (git writes
    ``<ref>.lock`` beside the ref and renames it). Created when missing (a packed ref's
    directory may be gone), since a writable root must exist. Empty when ``worktree`` is not a
    linked worktree on a branch.
    """
    gitdir = _linked_gitdir(worktree)
    if gitdir is None:
        return []
    try:
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
        head = (gitdir / "HEAD").read_text().strip()
    except OSError:
        return []
    if not head.startswith("ref: refs/heads/"):
        return []  # a detached HEAD moves no ref
    ref = head.removeprefix("ref: ")
    roots = [gitdir, common / "objects", (common / ref).parent, (common / "logs" / ref).parent]
    try:
        for root in roots:
            root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return []
    return roots


def _linked_gitdir(worktree: Path) -> Path | None:
    try:
        pointer = (worktree / ".git").read_text()
    except OSError:
        return None  # a directory (the main checkout) or nothing: not a linked worktree
    if not pointer.startswith("gitdir: "):
        return None
    gitdir = Path(pointer.removeprefix("gitdir: ").strip())
    return (gitdir if gitdir.is_absolute() else worktree / gitdir).resolve()


def writable_roots(roots: Sequence[Path]) -> list[str]:
    """The ``-c`` option adding ``roots`` to the workspace-write sandbox (a TOML array of strings)."""
    if not roots:
        return []
    return ["-c", f"sandbox_workspace_write.writable_roots={json.dumps([str(r) for r in roots])}"]


def _retried(line: str) -> str:
    """The error inside ``Reconnecting... 2/5 (<error>)``; the line itself when it has none."""
    found = re.fullmatch(r"Reconnecting\.\.\. \d+/\d+ \((.*)\)", line.strip(), re.S)
    return found.group(1) if found else line


def _codex_dialect(text: str) -> FailureClass:
    """Codex's own wording for failures the shared signals do not catch (seen with 0.171.0)."""
    if re.search(r"experiencing high demand", text, re.I):
        return FailureClass.TRANSIENT_OVERLOAD  # how Codex reports an HTTP 500 from its service
    if re.search(r"stream disconnected before completion", text, re.I):
        return FailureClass.TRANSIENT_NETWORK
    if re.search(r"Missing environment variable", text):
        return FailureClass.FATAL_CONFIG
    if re.search(r"Quota exceeded", text, re.I):
        return FailureClass.FATAL_AUTH
    if re.search(r"Connection failed", text):
        return FailureClass.TRANSIENT_UNREACHABLE
    return FailureClass.UNKNOWN
