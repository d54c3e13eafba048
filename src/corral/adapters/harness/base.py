"""The harness contract: how to launch an agent CLI, read its stream, classify its failures.

An adapter says how to launch a work turn (the prompt, the resume id), an ask (held to
read-only by the harness's own mode where it has one) and an interactive pair or chat;
how to turn each output line into :class:`Event` values; and how to map a failed attempt
onto the shared taxonomy. Unknown stays unknown. The ``command`` harness's contract (the
prompt on stdin and in a file, the turn's facts in ``CORRAL_*`` variables) is
docs/harnesses.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from msgspec import Struct, field

from corral.domain.bounded_json import Reason, Unparseable, decode, decode_first
from corral.domain.collector import Fact, ToolStart
from corral.domain.failures import FailureClass
from corral.domain.posture import Posture

if TYPE_CHECKING:
    from pathlib import Path

    from corral.adapters.harness.sessions import SessionFiles

#: Linux caps one argv element at 128 KiB; past this a prompt goes on stdin (for Claude Code, Pi
#: and Codex; the ``command`` harness always has it on stdin and in a file).
ARGV_PROMPT_LIMIT = 96 * 1024
#: The most of one stream line decoded: the supervisor's line reader keeps at most 1 MiB of a line.
MAX_LINE = 1024 * 1024


class AgentTools(Struct, frozen=True):
    """How a turn's agent reaches corral's tools (docs/harnesses.md#agent-tools): the daemon's
    MCP endpoint, the turn's bearer token and the tool timeout to set in the agent's client.

    The token goes in the harness's environment (:data:`~corral.domain.agent_tools.TOKEN_ENV`)
    and a config refers to that variable: never in argv, which any process on the machine can
    read in ``/proc``."""

    url: str
    token: str
    timeout_seconds: float
    #: The turn is confined: corral's own shell (with intents) stands in for the harness's shell tool.
    shell: bool = False

    def __repr__(self) -> str:
        """Without the token: a record's repr lands in logs and assertion messages."""
        return f"AgentTools(url={self.url!r}, timeout_seconds={self.timeout_seconds!r}, shell={self.shell!r})"


class TurnRequest(Struct, frozen=True):
    """One launch of a harness. ``kind`` is the command's kind (start, unblock, resume,
    auto-resume, ask, pre-accept; pair or chat for an interactive session), ``task_ref`` and
    ``task_id`` name the task, and ``prompt_dir`` is a private directory of the turn where a
    harness may write the prompt as a file (the ``command`` harness does). ``tools``, when
    given, is the agent's door to corral's tools: a work turn and an ask render it, an
    interactive session does not."""

    prompt: str
    cwd: str
    system: str | None = None
    resume_id: str | None = None
    model: str | None = None
    posture: Posture = field(default_factory=Posture)
    kind: str | None = None
    task_ref: str | None = None
    task_id: str | None = None
    prompt_dir: str | None = None
    tools: AgentTools | None = None


class Launch(Struct, frozen=True):
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    #: Paths the harness reads that corral hands it (Pi's extensions): shown read-only in the sandbox,
    #: also where it hides the rest (a home).
    reads: list[str] = field(default_factory=list)


class Event(Struct, frozen=True):
    """One thing the harness reported. ``kind`` is one of:

    session (session_id), text (text), tool_start (tool_id, name), tool_end (tool_id,
    is_error, text), model_error (text, status), retry (text), usage (usage),
    result (is_error, text, status, usage), keepalive, unparseable (text: why a line of the stream
    could not be read; the line stays in the log).
    """

    kind: str
    text: str | None = None
    session_id: str | None = None
    tool_id: str | None = None
    name: str | None = None
    is_error: bool = False
    status: int | None = None
    usage: dict[str, Any] | None = None

    @property
    def is_progress(self) -> bool:
        """A completed step of the agent: what resets the watchdog. Keep-alives are not progress."""
        return self.kind in ("text", "tool_end", "result")


class AttemptFacts(Struct, frozen=True):
    """What a supervisor saw of one attempt, for the harness to classify."""

    exit_code: int | None
    signal: int | None
    events: Sequence[Event]
    stderr_tail: str
    spawn_error: str | None = None


class Verdict(Struct, frozen=True):
    """An attempt's outcome as the harness reads it."""

    succeeded: bool
    failure_class: FailureClass | None = None
    code: str | None = None  # a typed evidence code, e.g. harness-not-authenticated
    reason: str = ""
    result_text: str | None = None
    #: The harness's words when it reported its account's usage limit (they may state the reset):
    #: every task on that account then waits for the reset together (docs/harnesses.md#usage-limits).
    usage_limit: str | None = None

    @classmethod
    def ok(cls, text: str | None) -> Verdict:
        return cls(True, result_text=text)


class Harness(Protocol):
    name: str
    display: str
    executable: str
    install_hint: str
    #: True when corral decides the harness's retries: the supervisor ends it at its first retry
    #: event and corral's ladder takes over (docs/harnesses.md#who-owns-the-retry-cadence).
    corral_owns_retries: bool

    @property
    def takes_agent_tools(self) -> bool:
        """True when a turn's agent can be given corral's MCP endpoint (``TurnRequest.tools``)."""
        ...

    #: How a turn's agent reaches corral's tools when it gets them, in a few words (doctor).
    agent_tools_door: str

    @property
    def agent_tools_absent(self) -> str | None:
        """One line saying why this harness's turns get no corral tools (doctor, show); None when they do."""
        ...

    def work(self, req: TurnRequest) -> Launch: ...
    def ask(self, req: TurnRequest) -> Launch: ...
    def interactive(self, req: TurnRequest) -> Launch: ...
    def parse(self, line: bytes) -> list[Event]: ...
    def classify(self, facts: AttemptFacts) -> Verdict: ...
    def account(self) -> str | None:
        """Who the model server bills: a digest of the harness's credential identity, or None."""
        ...

    def session_files(self, env: Mapping[str, str], worktree: Path, session_id: str) -> SessionFiles | None:
        """Where the harness keeps session ``session_id`` of a turn run in ``worktree``, in the homes ``env``
        names, and its files there (docs/harnesses.md#sessions-across-hosts); None when it keeps none."""
        ...

    def carried(self, name: str, data: bytes, worktree: Path, session_id: str) -> bytes | None:
        """The carried file ``name`` of session ``session_id`` as a resume in ``worktree`` needs it (rewritten
        where the harness keeps the working directory in it); None when ``name`` is not one of its files."""
        ...

    #: Byte strings one of which every line holding an incident fact contains (a prefilter).
    incident_markers: tuple[bytes, ...]

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Fact]:
        """The incident facts of one output line (``docs/incidents.md``): structured fields only."""
        ...


#: corral's own MCP tools whose calls the incident collector reads structurally (docs/incidents.md,
#: "Confined runs"): the shell with intents, and the disposition of the agent's own incidents.
SHELL_TOOL = "bash"
DISPOSITION_TOOL = "failure_disposition"
#: The key corral's shell puts in its structured result, beside the final exit code.
SHELL_RESULT_KEY = "corral_shell"


def corral_tool_start(call_id: str, tool: str, args: Any, cwd: str, display: str) -> ToolStart:
    """A tool call's start; for corral's own shell and disposition tools, with their intent or request
    (the collector honours them only in a trusted run)."""
    if tool == SHELL_TOOL and isinstance(args, dict):
        from corral.domain.intents import parse_intent

        return ToolStart(call_id, display, args, cwd, intent=parse_intent(args))
    if tool == DISPOSITION_TOOL and isinstance(args, dict):
        return ToolStart(call_id, display, args, cwd, disposition=args)
    return ToolStart(call_id, display, args, cwd)


def shell_exit_code(text: str) -> int | None:
    """The final exit code in corral's shell's structured result (its JSON), else None — never
    read from what the command printed."""
    if SHELL_RESULT_KEY not in text[:200]:
        return None
    decoded = decode_first(text)
    if isinstance(decoded, Unparseable):
        return None
    doc = decoded.value
    if not isinstance(doc, dict) or doc.get(SHELL_RESULT_KEY) != 1:
        return None
    code = doc.get("exit_code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def account_digest(harness: str, parts: Sequence[str | None]) -> str:
    """``<harness>:<digest>`` of the credential identity ``parts`` (key values are hashed, never kept)."""
    import hashlib

    digest = hashlib.sha256("\0".join(p or "" for p in (harness, *parts)).encode("utf-8", "surrogatepass"))
    return f"{harness}:{digest.hexdigest()[:16]}"


#: What an account's usage limit reads like in any harness's words (each adapter adds its dialect).
USAGE_LIMIT_WORDS = re.compile(
    r"usage limit|hit your (?:[\w-]+ )?limit|limit reached|usage_limit_reached|quota (?:will )?reset", re.I
)


def usage_limit_in(texts: Sequence[str], extra: re.Pattern[str] | None = None) -> str | None:
    """The first of ``texts`` that reports an account's usage limit, or None."""
    for text in texts:
        if text and (USAGE_LIMIT_WORDS.search(text) or (extra is not None and extra.search(text))):
            return text
    return None


def prompt_arg(prompt: str) -> tuple[list[str], bytes | None]:
    """The prompt as one argv element, or on stdin (argv empty) when it is too long for argv or
    would read as an option (feedback ``--version`` is a prompt, never a flag of the agent CLI)."""
    data = prompt.encode("utf-8", "surrogatepass")
    if len(data) > ARGV_PROMPT_LIMIT or prompt.startswith("-"):
        return [], data
    return [prompt], None


def last_result(events: Sequence[Event]) -> Event | None:
    for event in reversed(events):
        if event.kind == "result":
            return event
    return None


def json_line(line: bytes) -> dict[str, Any] | Unparseable | None:
    """One JSON-object line of a harness stream; None for text (or an array, a number); :class:`Unparseable`
    for a line no bounded reader takes whole — nested too deep, too large (a line its reader cut short
    says its whole size in ``length``), or one that opens an object and is not valid JSON."""
    decoded = decode(line, max_bytes=MAX_LINE, length=getattr(line, "length", None))
    if isinstance(decoded, Unparseable):
        if decoded.reason is Reason.MALFORMED and not line.lstrip().startswith(b"{"):
            return None
        return decoded
    return decoded.value if isinstance(decoded.value, dict) else None


def unread(line: Unparseable | None) -> list[Event]:
    """What a stream parser returns for a line :func:`json_line` did not give as an object: nothing for
    text, an ``unparseable`` event (the line stays in the log as text; the turn goes on) for the rest."""
    return [] if line is None else [Event("unparseable", text=line.detail)]


def parsed(harness: Harness, line: bytes) -> list[Event]:
    """``harness.parse(line)`` for a reader of a turn's output (the supervisor's copy, ``logs``): the line is
    the agent's, untrusted, so a parser that fails on it gives it as ``unparseable`` — said, never raised."""
    try:
        return harness.parse(line)
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError) as exc:
        return [Event("unparseable", text=f"the {harness.display} parser failed on it ({type(exc).__name__})")]


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one: stream lines are untrusted input."""
    return value if isinstance(value, dict) else {}


def tail(text: str, lines: int = 50) -> str:
    return "\n".join(text.splitlines()[-lines:])
