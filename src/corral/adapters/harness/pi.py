"""Pi (``@mariozechner/pi-coding-agent``): ``pi -p --mode json … <prompt>``.

Its JSON lines (docs/architecture.md#harnesses): ``session`` (``id``),
``message_end`` (an assistant message with ``stopReason: "error"`` and
``errorMessage`` is a model failure), ``tool_execution_start`` / ``_end``
(``isError``), ``auto_retry_start`` / ``auto_retry_end`` (``success``,
``finalError``). Pi exits 0 even when every model call failed, so an attempt is
judged by its events, never by the exit code alone.

Retries: at its defaults Pi retries a failed model call itself — the provider SDK twice,
silently (about 1.5 s), then up to three agent-level retries 2 s, 4 s, 8 s apart, each announced
with ``auto_retry_start`` (``attempt``, ``maxAttempts``, ``delayMs``, ``errorMessage``: the HTTP
status and the raw error body, e.g. ``529 {"type":"error","error":{"type":"overloaded_error",…}}``,
or ``Connection error.`` when the server cannot be reached). A 401 is not retried. corral owns
the cadence (:attr:`PiHarness.corral_owns_retries`): the supervisor ends Pi at its first
``auto_retry_start``, :meth:`PiHarness.classify` reads the class from that line, and corral's
ladder decides — a fatal class stops at once (the reason says how to log in), a transient one
is relaunched with ``--session`` of the same session (docs/harnesses.md, "Who owns the retry
cadence"). Pi offers no command-line switch for its retry settings, so corral changes none.

Agent tools (docs/harnesses.md, "Pi's trusted path"): Pi has no MCP client, so a work turn given
``TurnRequest.tools`` gets corral's Pi extension (:mod:`corral.pi_extension`), loaded by path (``-e``) from corral's own
package with Pi's extension discovery off (``--no-extensions``: nothing in the worktree, the
agent directory or a settings file is loaded), and jiti's transpile cache off
(``JITI_FS_CACHE=false``: no file a turn could have written is run as the extension). The extension
registers ``failure_disposition`` and, in a confined turn (``AgentTools.shell``), corral's ``bash``
with intents, each calling the daemon's MCP endpoint with the turn's token from the environment
(:data:`~corral.domain.agent_tools.TOKEN_ENV`, never argv). A confined turn's ``--tools``
(:data:`CONFINED_TOOLS`) lists the other built-in tools and corral's two: the extension's ``bash``
stands in for Pi's own, which no longer exists for the turn, and a Pi that cannot load the
extension exits at once ("Failed to load extension") rather than run with its own shell. An
unconfined turn keeps Pi's ``bash`` (judged by the exact-retry rule, as every unconfined turn).

Tool calls of corral's ``bash`` and ``failure_disposition`` are read as the MCP tools' are
(:func:`~corral.adapters.harness.base.corral_tool_start`, the exit code from corral's structured
result) where the turn's command says it had them (``pi_corral_shell``, set by the launch: Pi's own
shell has the same name); their intents and dispositions count only in a run whose provenance says
it was confined.

An ask (and a read-only chat) gets Pi's read-only tool set,
``--tools read,grep,find,ls`` (its ``--help``: "Read-only mode (no file modifications possible)"); corral's before/after
comparison stands behind it (``corral.engine.readonly``).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.adapters.harness.base import (
    DISPOSITION_TOOL,
    SHELL_TOOL,
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
from corral.domain.agent_tools import TOKEN_ENV, URL_ENV
from corral.domain.bounded_json import Decoded, decode
from corral.domain.classifiers import classify_common, classify_http_status
from corral.domain.collector import Fact, Gap, ModelFailure, ModelOk, ToolEnd
from corral.domain.failures import FailureClass

if TYPE_CHECKING:
    from corral.adapters.harness.sessions import SessionFiles

#: Pi's read-only tool set: no bash, edit or write tool is enabled.
READ_ONLY_TOOLS = "read,grep,find,ls"
#: A confined turn's tools: Pi's built-in tools that are on by default but its ``bash``, and corral's two
#: from the extension (its ``bash`` takes the built-in's name; Pi's own is not there to fall back on).
CONFINED_TOOLS = f"read,edit,write,{SHELL_TOOL},{DISPOSITION_TOOL}"
#: The variables the extension reads beside the token and the endpoint (corral/pi_extension/mcp_door.mjs).
SHELL_ENV = "CORRAL_PI_SHELL"
TIMEOUT_ENV = "CORRAL_TOOL_TIMEOUT_MS"
#: How a Pi user logs in, added to a ``fatal_auth`` reason (Pi's /login writes ~/.pi/agent/auth.json;
#: a custom provider's key is the variable its ``apiKey`` in models.json names).
LOGIN_HINT = (
    "Log in: run `pi` and type /login, or set the API key variable the provider's `apiKey` in models.json names."
)
#: Pi's word for a server it cannot reach (its ``errorMessage`` then has no HTTP status).
CONNECTION_ERROR = "Connection error"
#: Characters of the error's own words kept in a readable line.
WORDS_CHARS = 80
_STATUS = re.compile(r"\s*(\d{3})\b\s*(.*)", re.S)


#: A session file's name, as Pi makes it: its creation time (``:`` and ``.`` as ``-``), ``_``, its id.
_SESSION_FILE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z_[0-9A-Za-z_-]+\.jsonl")


def agent_dir(env: Mapping[str, str]) -> Path:
    """Pi's agent directory (its logins, settings and sessions): ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``."""
    if env.get("PI_CODING_AGENT_DIR"):
        return Path(os.path.expanduser(env["PI_CODING_AGENT_DIR"]))
    return Path(env.get("HOME") or Path.home()) / ".pi" / "agent"


def session_dir(env: Mapping[str, str]) -> tuple[Path, bool]:
    """Where Pi keeps sessions, and whether under a directory per working directory: the user's
    ``PI_CODING_AGENT_SESSION_DIR`` or settings.json ``sessionDir`` (one directory for all), else
    ``<agent dir>/sessions`` (one per working directory)."""
    chosen = env.get("PI_CODING_AGENT_SESSION_DIR")
    if not chosen:
        try:  # a turn's harness can write its own settings: read as untrusted, bounded
            decoded = decode((agent_dir(env) / "settings.json").read_bytes())
        except OSError:
            decoded = None
        settings = decoded.value if isinstance(decoded, Decoded) else None
        value = settings.get("sessionDir") if isinstance(settings, dict) else None
        chosen = value if isinstance(value, str) and value else None
    if chosen and (chosen.startswith("~") or os.path.isabs(chosen)):
        home = env.get("HOME") or str(Path.home())
        return Path(home + chosen[1:] if chosen.startswith("~") else chosen), False
    return agent_dir(env) / "sessions", True


def session_key(worktree: Path) -> str:
    """The directory under ``sessions`` of a run in ``worktree``: ``--<its real path without the leading
    /, each / \\ : as ->--``."""
    path = os.path.realpath(worktree)
    return "--" + re.sub(r"[/\\:]", "-", re.sub(r"^[/\\]", "", path)) + "--"


def _regular(path: Path) -> bool:
    from corral.adapters.harness.sessions import is_regular

    return is_regular(path)


def tools_env(tools: AgentTools) -> dict[str, str]:
    """What the extension reads: the endpoint, the token (the environment only, never argv), the tool
    timeout, whether the turn is confined (corral's ``bash`` then), and jiti's file cache off."""
    env = {TOKEN_ENV: tools.token, URL_ENV: tools.url, TIMEOUT_ENV: str(max(1, round(tools.timeout_seconds * 1000)))}
    if tools.shell:
        env[SHELL_ENV] = "1"
    env["JITI_FS_CACHE"] = "false"
    return env


def describe_error(message: str) -> tuple[int | None, str]:
    """Pi's ``errorMessage`` as (its HTTP status, one readable phrase): ``529 {"type":"error",
    "error":{"type":"overloaded_error",…}}`` is (529, "HTTP 529 overloaded"); ``Connection
    error.`` is (None, "no HTTP answer: Connection error.")."""
    found = _STATUS.fullmatch(message)
    if found is None:
        words = " ".join(message.split())[:WORDS_CHARS] or "no error text"
        return None, f"no HTTP answer: {words}"
    status, rest = int(found.group(1)), found.group(2).strip()
    decoded = decode(rest) if rest else None  # the model server's words, through the agent's harness: bounded
    body = decoded.value if isinstance(decoded, Decoded) else None
    if isinstance(body, dict):
        error = obj(body.get("error"))
        kind = str(error.get("type") or "").removesuffix("_error")
        words = {"api": "server error", "authentication": "authentication failed"}.get(kind, kind.replace("_", " "))
        detail = str(error.get("message") or "")
        if detail and detail.lower() != words.lower():
            words = f"{words}: {detail}" if words else detail
    else:
        words = rest
    words = " ".join(words.split())[:WORDS_CHARS]
    return status, f"HTTP {status}" + (f" {words}" if words else "")


def retry_event(data: dict[str, Any]) -> Event:
    """An ``auto_retry_start`` line as a ``retry`` event: ``status`` the HTTP status, ``name`` Pi's
    raw ``errorMessage`` (cut), ``text`` one readable line ("HTTP 529 overloaded (Pi's retry 1 of 3,
    due in 2.0 s)")."""
    message = str(data.get("errorMessage") or "")
    status, what = describe_error(message)
    attempt, most, delay = _int(data.get("attempt")), _int(data.get("maxAttempts")), _int(data.get("delayMs"))
    plan = "Pi's retry"
    if attempt is not None:
        plan += f" {attempt}" + (f" of {most}" if most is not None else "")
    if delay is not None:
        plan += f", due in {delay / 1000:.1f} s"
    return Event("retry", text=f"{what} ({plan})", status=status, name=message[:300] or None)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _class_of(status: int | None, message: str, exit_code: int | None = None) -> FailureClass:
    cls = classify_http_status(status) or classify_common(message, exit_code)
    if cls is FailureClass.UNKNOWN and CONNECTION_ERROR in message:
        cls = FailureClass.TRANSIENT_UNREACHABLE  # Pi's word for a server it cannot reach
    return cls


def _refused(what: str) -> str:
    return f"the model server refused Pi's credentials ({what}). {LOGIN_HINT}"


def _code_for(cls: FailureClass) -> str:
    # Claude's adapter holds the codes; loaded only for a verdict, so a log scan does not pay its import
    from corral.adapters.harness.claude import code_for

    return code_for(cls)


def retry_verdict(event: Event) -> Verdict:
    """The verdict of an attempt corral ended at Pi's ``auto_retry_start`` line ``event``."""
    message = event.name or ""
    if words := usage_limit_in([message]):  # the provider's words for its account's limit
        return Verdict(False, FailureClass.TRANSIENT_OVERLOAD, "usage-limit", message, usage_limit=words)
    cls = _class_of(event.status, message)
    _, what = describe_error(message)
    reason = _refused(what) if cls is FailureClass.FATAL_AUTH else f"Pi's model call failed: {what}"
    return Verdict(False, cls, _code_for(cls), reason)


# A tool call's start and its successful end on the next line, in a shape whose parse is certain
# (PiHarness.incident_pair): only ASCII, only the separators ``,``/``:`` with at most one space,
# the keys in Pi's order, each once; the arguments flat, the result at most two levels deep.
_CHARS = rb"[\x20\x21\x23-\x5b\x5d-\x7f]"  # printable ASCII but '"' and '\'
_PLAIN = rb'"' + _CHARS + rb'*+"'  # a string without escapes: its bytes are its value
_STRING = rb'"' + _CHARS + rb'*+(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})' + _CHARS + rb'*+)*+"'
_WORD = rb"true|false|null|-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?"  # a scalar but a string
_SCALAR = rb"(?:" + _STRING + rb"|" + _WORD + rb")"


def _members(key: bytes, value: bytes) -> bytes:
    """An object of ``key: value`` members: the first right after its brace, each other after a comma (one
    copy of ``value`` in the pattern, not two: a smaller pattern compiles in less of a command's start)."""
    return rb"\{(?:(?:(?<=\{)|(?<!\{), ?)" + key + rb": ?" + value + rb")*+\}"


_FLAT = _members(_STRING, _SCALAR)
_ITEM = rb"(?:" + _SCALAR + rb"|" + _FLAT + rb")"
_VALUE = rb"(?:" + _ITEM + rb"|\[(?:(?:(?<=\[)|(?<!\[), ?)" + _ITEM + rb")*+\])"
# (a result with an ``exitCode`` of its own is never such a pair: its code decides, parsed; so its keys are
# written without an escape, or ``"exit\u0043ode"`` would be an exit code the pattern does not see)
_RKEY = rb'(?!"exitCode")' + _PLAIN
#: Pi's usual result, its text (and empty details): tried first, it costs a fraction of the general shape,
#: which holds it (so the group is atomic: what it matched, the general shape would match alike).
_TEXT_RESULT = rb'\{"content": ?\[\{"type": ?"text", ?"text": ?' + _STRING + rb'\}\](?:, ?"details": ?\{\})?\}'
_RESULT = rb"(?>" + _TEXT_RESULT + rb"|" + _SCALAR + rb"|" + _members(_RKEY, _VALUE) + rb")"


def _start(args: bytes) -> bytes:
    """A tool call's start line whose arguments match ``args``."""
    return (
        rb'\{"type": ?"tool_execution_start", ?"toolCallId": ?"(?P<id>'
        + _CHARS
        + rb'*+)", ?"toolName": ?"(?P<name>'
        + _CHARS
        + rb'*+)", ?"args": ?(?P<args>'
        + args
        + rb")\}\n"
    )


def _pair(args: bytes, end_type: bytes = rb'\{"type": ?"tool_execution_end"') -> bytes:
    """A start whose arguments match ``args`` and its successful end (beginning ``end_type``) on the next line."""
    return (
        _start(args)
        + end_type
        + rb', ?"toolCallId": ?"(?P=id)", ?"toolName": ?'
        + _PLAIN
        + rb', ?"result": ?'
        + _RESULT
        + rb', ?"isError": ?false\}\n'
    )


_PAIR_PATTERN = _pair(_FLAT)


@functools.cache
def _pair_re() -> re.Pattern[bytes]:
    """One such pair alone, in either spelling: what :meth:`PiHarness.incident_pair` matches in the spelling
    of the start line there (it matches with :func:`_call_re`, which a scan compiles anyway)."""
    return re.compile(_PAIR_PATTERN)


#: How such a pair's start line begins, in each spelling (``_pair``'s first bytes).
_START_LINES = (b'{"type":"tool_execution_start"', b'{"type": "tool_execution_start"')
#: A text delta (``message_update``): a record of no fact, whatever its text holds (PiHarness.incident_unread).
_UPDATE = rb'\{"type": ?"message_update"[^\n]*+\n'
#: How a text delta's line begins, in each spelling: the scan never parses such a line.
_UPDATE_LINES = (b'{"type":"message_update"', b'{"type": "message_update"')
#: A run whose calls' arguments are written without an escape (PiHarness.incident_plain_run): each
#: string argument's bytes, between its quotes, are its value.
_PLAIN_SCALAR = rb"(?:" + _PLAIN + rb"|" + _WORD + rb")"
_PLAIN_FLAT = _members(_PLAIN, _PLAIN_SCALAR)
#: How many calls a block of a run holds: a run is passed block by block, then call by call, so its calls are
#: counted by the matches (exactly, and without another pass over its bytes).
BLOCK = 16
#: The same for a run of plain calls passed while failures are open: such runs are short (they end at the next
#: line holding a failure's mark), and the calls left over after the blocks are each checked on their own.
PLAIN_BLOCK = 4


def _spelling(data: bytes, start: int) -> bytes:
    """How the record at ``data[start]`` separates its keys from their values: ``b""`` (Pi's own, as
    ``JSON.stringify`` writes) or ``b" "`` (``json.dumps``'s). The patterns below are compiled for one
    spelling at a time (a pattern where each separator may have its space or not costs a sixth more to match);
    a line of another spelling, or of both, is no pair for them: it is parsed."""
    return b" " if data.startswith(b'{"type": ', start) else b""


def _spelled(pattern: bytes, spelling: bytes) -> re.Pattern[bytes]:
    """``pattern`` compiled with each separator's optional space (``" ?"``, only ever after ``:`` or ``,``) as
    ``spelling`` has it."""
    return re.compile(pattern.replace(b" ?", spelling))


@functools.cache
def _call_re(spelling: bytes) -> re.Pattern[bytes]:
    """One call of a run: such a pair, maybe after text deltas (compiled on first use, as each pattern here:
    each costs milliseconds of a command's start)."""
    return _spelled(rb"(?:" + _UPDATE + rb")*+" + _PAIR_PATTERN, spelling)


@functools.cache
def _start_re(spelling: bytes) -> re.Pattern[bytes]:
    """A start line alone, its arguments flat (the start of a call that failed, or that a scan cannot pair)."""
    return _spelled(_start(_FLAT), spelling)


@functools.cache
def _block_re(plain: bool, spelling: bytes) -> re.Pattern[bytes]:
    """:data:`BLOCK` calls of a run in a row; with ``plain``, :data:`PLAIN_BLOCK` calls each with its arguments
    written without an escape."""
    call = rb"(?:" + _UPDATE + rb")*+" + (_pair(_PLAIN_FLAT) if plain else _PAIR_PATTERN)
    return _spelled(rb"(?:" + call + rb"){%d}+" % (PLAIN_BLOCK if plain else BLOCK), spelling)


#: A value a plain run spells between quotes as it is.
_PLAIN_TEXT = re.compile(_CHARS.decode("ascii") + "*")


def _result_text(result: Any) -> str:
    """A tool result's text: its text blocks, else the result itself (never parsed for meaning)."""
    content = result.get("content") if isinstance(result, dict) else None
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "" if result is None else str(result)[:2000]


def _assistant_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


class PiHarness:
    name = "pi"
    display = "Pi"
    install_hint = "Install Pi: npm install -g @mariozechner/pi-coding-agent (or set pi_bin)."
    login_hint = LOGIN_HINT
    #: The supervisor ends Pi at its first ``auto_retry_start`` line: corral's ladder owns the cadence.
    corral_owns_retries = True
    agent_tools_door = "through corral's Pi extension (its bash with intents, and failure_disposition)"
    # takes_agent_tools / agent_tools_absent: properties below (an install may lack the extension's files)

    def __init__(
        self,
        executable: str = "pi",
        provider: str | None = None,
        extensions: tuple[str, ...] = (),
        corral_shell: bool = False,
    ) -> None:
        self.executable = executable
        self.provider = provider
        #: The turn whose log is read had corral's ``bash`` (a confined turn with corral's endpoint, as its
        #: command says): only then are a ``bash`` call's arguments an intent. Pi's own shell has the same
        #: name, and a confined turn without corral's endpoint has it.
        self.corral_shell = corral_shell
        #: The person's own Pi extensions (``pi_extensions``, a user-only setting): loaded by path, as corral's.
        self.extensions = tuple(os.path.expanduser(e) for e in extensions)

    @property
    def agent_tools_absent(self) -> str | None:
        """Why a turn gets no corral tools: corral's package lacks its Pi extension (Pi has no MCP client;
        the extension is its door: docs/harnesses.md, "Pi's trusted path")."""
        from corral.pi_extension import missing

        gone = missing()
        if gone:
            return f"corral's Pi extension is not installed ({', '.join(gone)} missing): reinstall corral"
        return None

    @property
    def takes_agent_tools(self) -> bool:
        return self.agent_tools_absent is None

    def _argv(
        self, req: TurnRequest, *, read_only: bool = False, tools: AgentTools | None = None
    ) -> tuple[list[str], bytes | None]:
        prompt, stdin = prompt_arg(req.prompt)
        argv = [self.executable, "-p", "--mode", "json"]
        if read_only:
            argv += ["--tools", READ_ONLY_TOOLS]
        elif tools is not None:
            from corral.pi_extension import EXTENSION

            argv += ["-e", str(EXTENSION)]
            if tools.shell:
                argv += ["--tools", CONFINED_TOOLS]
        for extension in self.extensions:
            argv += ["-e", extension]
        provider, model = self.provider, req.model
        if model and "/" in model and not provider:
            provider, model = model.split("/", 1)
        if provider:
            argv += ["--provider", provider]
        if model:
            argv += ["--model", model]
        if req.resume_id:
            argv += ["--session", req.resume_id]
        if req.system:
            argv += ["--append-system-prompt", req.system]
        argv += ["--no-extensions", *prompt]
        return argv, stdin

    def work(self, req: TurnRequest) -> Launch:
        read_only = req.posture.read_only
        tools = None if read_only else req.tools
        argv, stdin = self._argv(req, read_only=read_only, tools=tools)
        return Launch(argv, tools_env(tools) if tools is not None else {}, stdin, self._reads(tools))

    def ask(self, req: TurnRequest) -> Launch:
        argv, stdin = self._argv(req, read_only=True)
        return Launch(argv, {}, stdin, self._reads(None))

    def _reads(self, tools: AgentTools | None) -> list[str]:
        """The extensions' files, for the sandbox to show (read-only) where it hides their place (a home)."""
        from corral.pi_extension import EXTENSION

        return ([str(EXTENSION.parent)] if tools is not None else []) + list(self.extensions)

    def interactive(self, req: TurnRequest) -> Launch:
        argv = [self.executable]
        if req.resume_id:
            argv += ["--session", req.resume_id]
        if req.posture.read_only:
            argv += ["--tools", READ_ONLY_TOOLS]
        return Launch(argv)

    def parse(self, line: bytes) -> list[Event]:
        data = json_line(line)
        if not isinstance(data, dict):
            return unread(data)
        kind = data.get("type")
        if kind == "session" and isinstance(data.get("id"), str):
            return [Event("session", session_id=data["id"])]
        if kind == "message_end":
            message = obj(data.get("message"))
            if message.get("role") != "assistant":
                return [Event("keepalive")]
            if message.get("stopReason") == "error" or isinstance(message.get("errorMessage"), str):
                return [Event("model_error", text=str(message.get("errorMessage") or "model call failed"))]
            usage = obj(message.get("usage")) or None
            text = _assistant_text(message)
            events = [Event("text", text=text)] if text else []
            if message.get("stopReason") in ("stop", "end_turn", "endTurn"):
                events.append(Event("result", text=text, usage=usage))
            elif usage:
                events.append(Event("usage", usage=usage))
            return events or [Event("keepalive")]
        if kind == "tool_execution_start":
            return [Event("tool_start", tool_id=data.get("toolCallId"), name=data.get("toolName"))]
        if kind == "tool_execution_end":
            return [Event("tool_end", tool_id=data.get("toolCallId"), is_error=data.get("isError") is True)]
        if kind == "auto_retry_start":
            return [retry_event(data)]
        if kind == "auto_retry_end" and data.get("success") is False:
            return [Event("model_error", text=str(data.get("finalError") or "model retry exhausted"))]
        return [Event("keepalive")]

    def account(self) -> str | None:
        """The provider and its agent directory (where Pi keeps its logins), hashed."""
        import os

        return account_digest(self.name, [self.provider, str(agent_dir(os.environ))])

    def session_files(self, env: Mapping[str, str], worktree: Path, session_id: str) -> SessionFiles | None:
        """``<agent dir>/sessions/--<the worktree's path, / as ->--/<time>_<id>.jsonl`` — or, where the user
        set one (``PI_CODING_AGENT_SESSION_DIR``, ``sessionDir`` in its settings.json), that directory."""
        from corral.adapters.harness.sessions import SessionFiles, plain_id

        if not plain_id(session_id):
            return None
        root, keyed = session_dir(env)
        place = root / session_key(worktree) if keyed else root
        try:
            listed = sorted(os.listdir(place))
        except OSError:
            listed = []
        names = [n for n in listed if n.endswith(f"_{session_id}.jsonl") and _SESSION_FILE.fullmatch(n)]
        return SessionFiles(root, place, tuple(n for n in names if _regular(place / n)))

    def carried(self, name: str, data: bytes, worktree: Path, session_id: str) -> bytes | None:
        """The session's file with its header's ``cwd`` made this worktree: Pi runs a resumed session in
        the directory its header names (and refuses one that does not exist here), and looks for it
        among the sessions kept for the directory it is started in."""
        from corral.adapters.harness.sessions import plain_id

        if not (plain_id(session_id) and _SESSION_FILE.fullmatch(name) and name.endswith(f"_{session_id}.jsonl")):
            return None
        first, newline, rest = data.partition(b"\n")
        decoded = decode(first)
        header = decoded.value if isinstance(decoded, Decoded) else None
        if not isinstance(header, dict) or header.get("type") != "session" or header.get("id") != session_id:
            return None
        header["cwd"] = os.path.realpath(worktree)
        line = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        return line + newline + rest

    #: The lines that can hold an incident fact (the collector parses no other).
    incident_markers: tuple[bytes, ...] = (b'"tool_execution_', b'"message_end"', b'"auto_retry_')
    #: How the lines begin that hold no fact whatever their text says: a text delta's record is read by its
    #: type as written first (a key repeated further on, or a marker's bytes in its text, change nothing).
    incident_unread: tuple[bytes, ...] = _UPDATE_LINES

    def incident_pair(self, data: bytes, start: int, end: int) -> tuple[str, str, bytes, int] | None:
        """A ``tool_execution_start`` at ``data[start]`` and, on the next line, its successful end.

        Only a plain shape is recognised (ASCII, the keys in Pi's order, flat arguments), where
        the two lines' facts are certain without parsing them: ``ToolStart(id, tool, args)`` and
        ``ToolEnd(id, is_error=False)``. The call id, the tool's name (as :meth:`incident_facts`
        gives it), the arguments' JSON and where the line after the pair begins; else None.
        """
        if not data.startswith(_START_LINES, start, end):
            return None  # no start there (an end, a record of another type): the pattern is not even needed
        # a start line: no text delta before it, the pair alone
        found = _call_re(_spelling(data, start)).match(data, start, end)
        if found is None:
            return None
        return found["id"].decode("ascii"), found["name"].decode("ascii") or "tool", found["args"], found.end()

    def incident_start(self, data: bytes, start: int, end: int) -> tuple[str, str, bytes] | None:
        """A ``tool_execution_start`` line at ``data[start]`` in the plain shape of :meth:`incident_pair`'s
        (its facts certain without parsing it: ``ToolStart(id, tool, args)``): the call id, the tool's
        name and the arguments' JSON; else None."""
        if not data.startswith(_START_LINES, start, end):
            return None
        found = _start_re(_spelling(data, start)).match(data, start, end)
        if found is None:
            return None
        return found["id"].decode("ascii"), found["name"].decode("ascii") or "tool", found["args"]

    def incident_run(self, data: bytes, start: int, limit: int) -> tuple[int, int] | None:
        """Where a run of plain pairs (see :meth:`incident_pair`) beginning at ``data[start]`` ends and
        how many calls it holds, ``message_update`` lines between them included; None when no pair begins there."""
        spelling = _spelling(data, start)
        block, call = _block_re(False, spelling).match, _call_re(spelling).match
        at, calls = start, 0
        while (found := block(data, at, limit)) is not None:
            at, calls = found.end(), calls + BLOCK
        while (found := call(data, at, limit)) is not None:  # fewer than a block is left
            at, calls = found.end(), calls + 1
        return (at, calls) if calls else None

    def incident_run_calls(self, data: bytes, start: int, end: int) -> Iterator[tuple[str, bytes, int, int, str]]:
        """The calls of a run found by :meth:`incident_run`: (tool name, arguments' JSON, where the
        call begins (its text deltas first), where it ends, its call id), in order."""
        at = start
        while (call := self.incident_next_call(data, at, end)) is not None:
            yield call
            at = call[3]
        # none: not a run after all, the caller reads on from there line by line

    def incident_next_call(self, data: bytes, start: int, end: int) -> tuple[str, bytes, int, int, str] | None:
        """The first call :meth:`incident_run_calls` gives from ``data[start]`` (None when it gives none):
        what a scan checking a run call by call asks for, without a generator for each call."""
        found = _call_re(_spelling(data, start)).match(data, start, end)
        if found is None:
            return None
        return found["name"].decode("ascii") or "tool", found["args"], start, found.end(), found["id"].decode("ascii")

    def incident_plain_run(self, data: bytes, start: int, limit: int) -> tuple[int, int] | None:
        """Where a run of plain pairs beginning at ``data[start]`` ends and how many calls it holds,
        when each call's arguments are written without an escape (a flat object of strings, numbers,
        booleans and nulls): whole blocks of :data:`PLAIN_BLOCK` calls (the caller checks what is left call
        by call); None when no block begins there.

        In such a run a call's bytes are its facts: the start line of a call of tool ``N`` with a
        string argument ``S`` holds ``"S"``, and ``"N"`` (or ``""``, Pi's empty name, for ``tool``)
        — what :meth:`incident_call_marks` rests on.
        """
        block = _block_re(True, _spelling(data, start)).match
        at, calls = start, 0
        while (found := block(data, at, limit)) is not None:
            at, calls = found.end(), calls + PLAIN_BLOCK
        return (at, calls) if calls else None

    def incident_call_marks(self, name: str, args: Any = None) -> tuple[bytes, ...]:
        """Bytes of which the start line of a call of ``name`` with arguments canonically equal to
        ``args`` (None: not known) holds one, if the call is in a run :meth:`incident_plain_run`
        found: its longest string argument between quotes, else its name between quotes; () when
        no call in such a run can be that call."""
        if isinstance(args, dict):
            texts = [v for v in args.values() if isinstance(v, str) and _PLAIN_TEXT.fullmatch(v)]
            if texts:
                return (b'"' + max(texts, key=len).encode("ascii") + b'"',)
        if _PLAIN_TEXT.fullmatch(name) is None:
            return ()  # a plain run spells each tool name as it is: no call of this one is in one
        quoted = b'"' + name.encode("ascii") + b'"'
        return (quoted, b'""') if name == "tool" else (quoted,)

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Fact]:
        """Pi JSON's structured failure fields: ``tool_execution_start`` / ``_end`` with ``isError``,
        ``message_end`` with ``stopReason: "error"``, ``auto_retry_start`` / ``_end``."""
        kind = data.get("type")
        if kind == "tool_execution_start":
            name = str(data.get("toolName") or "tool")
            # corral's own tools (the extension's, in a turn that had them): their intent or request,
            # honoured only by a trusted collector
            tool = name if self.corral_shell else ""
            return [corral_tool_start(str(data.get("toolCallId")), tool, data.get("args"), cwd, name)]
        if kind == "tool_execution_end":
            outcome, result = data.get("isError"), data.get("result")
            if not isinstance(outcome, bool):  # no structured outcome: neither a success nor a failure
                return [Gap(f"no-outcome:{offset}", f"a tool's end without its outcome (isError) at byte {offset}")]
            code = result.get("exitCode") if isinstance(result, dict) else None
            text = _result_text(result)
            return [
                ToolEnd(
                    str(data.get("toolCallId")),
                    outcome or (type(code) is int and code != 0),  # a non-zero exit code fails, whatever isError says
                    text,
                    offset,
                    name=str(data.get("toolName") or "tool"),
                    exit_code=shell_exit_code(text)
                    if self.corral_shell and data.get("toolName") == SHELL_TOOL
                    else None,
                )
            ]
        if kind == "message_end":
            message = obj(data.get("message"))
            if message.get("role") != "assistant":
                return []
            if message.get("stopReason") == "error" or isinstance(message.get("errorMessage"), str):
                return [ModelFailure(str(message.get("errorMessage") or "model call failed"), offset)]
            return [ModelOk()]
        if kind == "auto_retry_start":
            return []  # the failed call it retries was its message_end error: one failure, not two
        if kind == "auto_retry_end":
            if data.get("success") is True:
                return [ModelOk()]
            # the last failed call's ``message_end`` already told it: the same failure, not another
            return [ModelFailure(str(data.get("finalError") or "model retry exhausted"), offset, restates=True)]
        return []

    def classify(self, facts: AttemptFacts) -> Verdict:
        if facts.spawn_error:
            return Verdict(False, FailureClass.FATAL_CONFIG, "harness-missing", facts.spawn_error)
        # The outcome is the last word: a model error after the final result, or no result at all,
        # fails; an attempt corral ended at Pi's retry line is judged from that line.
        last = None
        for event in facts.events:
            if event.kind in ("result", "model_error", "retry"):
                last = event
        if last is not None and last.kind == "result" and facts.signal is None:
            return Verdict.ok(last.text)
        if last is not None and last.kind == "retry":
            return retry_verdict(last)
        text = "\n".join([last.text or "" if last else "", facts.stderr_tail])
        reason = (last.text if last else None) or facts.stderr_tail.strip()[-300:] or "Pi ended without a result"
        if words := usage_limit_in([last.text or "" if last else "", facts.stderr_tail]):
            return Verdict(False, FailureClass.TRANSIENT_OVERLOAD, "usage-limit", reason, usage_limit=words)
        status, what = describe_error(last.text or "") if last is not None else (None, reason)
        cls = _class_of(status, text, facts.exit_code)
        if last is None and cls is FailureClass.UNKNOWN:
            return Verdict(False, cls, "harness-exited", reason)
        if cls is FailureClass.FATAL_AUTH:
            reason = _refused(what) if last is not None else f"{reason} — {LOGIN_HINT}"
        return Verdict(False, cls, _code_for(cls), reason)
