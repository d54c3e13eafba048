"""Any command as a harness, under one contract (docs/harnesses.md); each output line is the agent speaking.

The command's argv is exactly the ``command`` setting, split as a shell would — nothing is
ever appended, so no prompt or feedback can become an option or a program. The prompt
arrives twice, the same at every size: on stdin (UTF-8, then end of file) and in a file
named by ``CORRAL_PROMPT_FILE`` (0600). The turn's facts are environment variables:
``CORRAL_TURN_KIND`` (work, resume, ask, pre-accept, pair, chat), ``CORRAL_TURN_TRIGGER``
(the command that launched it: start, unblock, resume, auto-resume, ask, pre-accept, pair,
chat), ``CORRAL_TASK`` (the ref), ``CORRAL_TASK_ID``, ``CORRAL_WORKTREE`` (also the working
directory) and ``CORRAL_READ_ONLY`` (``1`` in an ask or a read-only chat: the command must
change nothing; corral reverts and keeps aside whatever it changes anyway). A turn given
corral's tools (``TurnRequest.tools``) also gets ``CORRAL_MCP_URL`` (the daemon's MCP endpoint,
streamable HTTP) and ``CORRAL_AGENT_TOKEN`` (the turn's bearer token for it).

Success is exit 0, and the last lines of output are the turn's result. A command has no
session to resume. A ``command`` unset or empty is refused before anything runs
(``corral.engine.operations.preflight``); should an adapter be made without one, every
launch is an argv error, never a program made of the prompt.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.adapters.harness.base import AttemptFacts, Event, Launch, TurnRequest, Verdict
from corral.adapters.harness.claude import code_for
from corral.domain.agent_tools import TOKEN_ENV, URL_ENV
from corral.domain.classifiers import classify_common
from corral.domain.collector import Fact
from corral.domain.failures import FailureClass
from corral.errors import ArgvError

if TYPE_CHECKING:
    from corral.adapters.harness.sessions import SessionFiles

#: The file name of the prompt in the turn's private directory.
PROMPT_FILE = "prompt.txt"

#: The command that launched a turn -> the kind of turn the command is told it is.
TURN_KINDS = {
    "start": "work",
    "unblock": "work",
    "work": "work",
    "resume": "resume",
    "auto-resume": "resume",
    "ask": "ask",
    "pre-accept": "pre-accept",
    "pair": "pair",
    "chat": "chat",
}


def turn_kind(trigger: str) -> str:
    return TURN_KINDS.get(trigger, "work")


def _git_dir(worktree: str) -> Path | None:
    """The worktree's own git directory (``.git``, or where its ``.git`` file points), if any."""
    dot = Path(worktree) / ".git"
    try:
        if dot.is_dir():
            return dot
        text = dot.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if text.startswith("gitdir:"):
        found = Path(text.removeprefix("gitdir:").strip())
        found = found if found.is_absolute() else Path(worktree) / found
        return found if found.is_dir() else None
    return None


def write_prompt(prompt: bytes, directory: str | None, worktree: str = "") -> str:
    """The prompt in a private file (0600): in the turn's directory; else in the worktree's git
    directory (outside the working tree, one file overwritten per turn); else a private temporary one."""
    if directory:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    elif worktree and (found := _git_dir(worktree)) is not None:
        folder = found / "corral"
        folder.mkdir(exist_ok=True, mode=0o700)
    else:
        folder = Path(tempfile.mkdtemp(prefix="corral-prompt-"))
    path = folder / PROMPT_FILE
    tmp = folder / f".{PROMPT_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(prompt)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return str(path)


#: Every variable of the contract (docs/harnesses.md): what a command may read, and what corral
#: itself never takes for a misspelt setting when it runs inside a turn.
CONTRACT_VARS = (
    "CORRAL_PROMPT_FILE",
    "CORRAL_TURN_KIND",
    "CORRAL_TURN_TRIGGER",
    "CORRAL_TASK",
    "CORRAL_TASK_ID",
    "CORRAL_WORKTREE",
    "CORRAL_READ_ONLY",
    URL_ENV,
    TOKEN_ENV,
)


class CommandHarness:
    name = "command"
    display = "The command"
    corral_owns_retries = False  # a command says nothing corral could read as a retry: its exit decides
    #: The endpoint and the token in its environment: the command brings its own MCP client.
    takes_agent_tools = True
    agent_tools_door = "as an MCP endpoint and token in its environment"
    agent_tools_absent: str | None = None
    install_hint = (
        'Set the command to run: corral config set command "my-agent --flag" (its contract: docs/harnesses.md).'
    )

    def __init__(self, command: str = "") -> None:
        try:
            self.argv0 = shlex.split(command) if command else []
        except ValueError:
            self.argv0 = []  # the preflight names the parse error; a launch never guesses
        self.executable = self.argv0[0] if self.argv0 else ""

    def _env(self, req: TurnRequest, trigger: str) -> dict[str, str]:
        env = {
            "CORRAL_TURN_KIND": turn_kind(trigger),
            "CORRAL_TURN_TRIGGER": trigger,
            "CORRAL_WORKTREE": req.cwd,
            "CORRAL_READ_ONLY": "1" if req.posture.read_only else "0",
        }
        if req.task_ref:
            env["CORRAL_TASK"] = req.task_ref
        if req.task_id:
            env["CORRAL_TASK_ID"] = req.task_id
        return env

    def _turn(self, req: TurnRequest, default: str) -> Launch:
        if not self.argv0:  # refused as an argv error (fatal_config), never filled from the prompt
            raise ArgvError(
                "The command harness has no command to run (the setting `command` is unset or empty).",
                hint=self.install_hint,
            )
        trigger = req.kind or default
        data = req.prompt.encode("utf-8", "surrogatepass")
        env = self._env(req, trigger)
        env["CORRAL_PROMPT_FILE"] = write_prompt(data, req.prompt_dir, req.cwd)
        if req.tools is not None:
            env[URL_ENV] = req.tools.url
            env[TOKEN_ENV] = req.tools.token
        return Launch(list(self.argv0), env, data)

    def work(self, req: TurnRequest) -> Launch:
        return self._turn(req, "ask" if req.posture.read_only else "work")

    def ask(self, req: TurnRequest) -> Launch:
        return self._turn(req, "ask")

    def interactive(self, req: TurnRequest) -> Launch:
        # The terminal is the command's stdin: no prompt, and no prompt file.
        if not self.argv0:
            raise ArgvError("The command harness has no command to run.", hint=self.install_hint)
        trigger = req.kind or ("chat" if req.posture.read_only else "pair")
        return Launch(list(self.argv0), self._env(req, trigger))

    def parse(self, line: bytes) -> list[Event]:
        text = line.decode("utf-8", "replace").rstrip("\n")
        return [Event("text", text=text)] if text.strip() else [Event("keepalive")]

    def account(self) -> str | None:
        return None  # a command says nothing of an account: no usage limit is shared

    def session_files(self, env: Mapping[str, str], worktree: Path, session_id: str) -> SessionFiles | None:
        return None  # a command keeps no session corral knows of: nothing travels, a resume starts it again

    def carried(self, name: str, data: bytes, worktree: Path, session_id: str) -> bytes | None:
        return None

    incident_markers: tuple[bytes, ...] = ()  # a command's output is its own: corral reads no facts in it

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Fact]:
        return []

    def classify(self, facts: AttemptFacts) -> Verdict:
        if facts.spawn_error:
            return Verdict(False, FailureClass.FATAL_CONFIG, "harness-missing", facts.spawn_error)
        texts = [e.text for e in facts.events if e.kind == "text" and e.text]
        if facts.exit_code == 0 and facts.signal is None:
            return Verdict.ok("\n".join(texts[-20:]))
        cls = classify_common(facts.stderr_tail, facts.exit_code)
        reason = (
            facts.stderr_tail.strip().splitlines()[-1]
            if facts.stderr_tail.strip()
            else (f"exited with code {facts.exit_code}")
        )
        return Verdict(False, cls, code_for(cls) if cls is not FailureClass.UNKNOWN else "harness-exited", reason)
