"""corral's shell and dispositions for a confined turn's agent: run where the agent runs, checked as the log is.

The ``bash`` and ``failure_disposition`` tools (docs/incidents.md, "Confined runs") call here.
The shell runs ``sh -c`` inside the caller's own sandbox and worktree, never in the calling
process; an ``attemptId`` is on record (``shell-attempts.jsonl`` in the session's journal
directory, where the agent cannot write) before its command runs, so a reused one is refused.

A disposition is checked against the caller's log scanned to now, by the same pure check the
replay applies; the replay, not this, writes the journal event.

What the shell starts belongs to the caller's turn and ends with it, however it escapes:

- it runs only while the agent that asked is running (:func:`processes.running_agent`): a call
  whose agent has exited — the supervisor settling the turn, a leftover of the agent's holding its
  token — is refused before anything starts, and the turn's quarantine, once settled, is never
  opened again;
- it carries the turn's tag (``CORRAL_COMMAND_ID``), so ``stop`` and the reconciler end it with
  the agent's own leftovers; its sandbox is written down in the turn's log directory before it
  runs anything, so the supervisor's sweep at the end of each attempt ends it too (and names it in
  the receipt's ``reaped``) before the turn is recorded, whatever the daemon is doing then;
- it lives in a PID namespace of its own (bwrap's ``--unshare-pid``) whose init dies with the
  bwrap process (``--die-with-parent``): ending that one process ends everything inside, a
  ``setsid`` escape and a double fork with a cleared environment included (and a daemon that dies
  takes its calls' sandboxes with it). The call watches the agent while its command runs and ends
  the command the moment the agent is gone (a supervisor killed outright included); bwrap, started
  held (``--block-fd``), runs nothing until the agent is seen alive after the spawn, so no sweep
  can miss a command that starts as the agent exits.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct

from corral.adapters.harness.base import ARGV_PROMPT_LIMIT, SHELL_RESULT_KEY
from corral.adapters.process import Started
from corral.domain.records import Task
from corral.engine.operations.gates import Caller, require_agent
from corral.engine.project import Project
from corral.engine.runtime import processes
from corral.engine.runtime import protocol as proto
from corral.errors import AgentTokenInvalid, DispositionRefused, TextTooLarge, UsageError

#: corral's shell: its default and longest run, what it keeps of each stream, and its record of
#: the attempt ids a session used.
SHELL_SECONDS = 120.0
SHELL_MAX_SECONDS = 540.0
OUTPUT_BYTES = 200_000
SHELL_ATTEMPTS = "shell-attempts.jsonl"
#: The most of a command its result repeats (what a failure's row shows of it).
COMMAND_SHOWN = 200
#: How often a running command checks that the agent that asked for it is still running.
WATCH_SECONDS = 0.1


class OwnTurn(Struct, frozen=True):
    """The caller's running turn, as its command says (the sandbox, the worktree, the logs)."""

    project: Project
    task: Task
    command: proto.Command

    @property
    def confined(self) -> bool:
        return self.command.sandbox is not None and self.command.sandbox.confined


def own_turn(project: Project, caller: Caller, tool: str) -> OwnTurn:
    """The agent caller's current turn (refused for a person, a builder, or a turn that ended)."""
    own = require_agent(caller, tool)
    command = proto.read_record(project.paths.protocol_dir(own) / proto.COMMAND, proto.Command)
    if command is None or command.command_id != caller.command_id:
        raise AgentTokenInvalid(
            "This token's turn is no longer the task's current one.", hint="A new turn gets a new token."
        )
    if processes.running_agent(project.paths.protocol_dir(own), command.command_id) is None:
        raise turn_ended()
    with project.store.read() as tx:
        task = tx.get_task(own)
    assert task is not None
    return OwnTurn(project, task, command)


def turn_ended() -> AgentTokenInvalid:
    """The refusal of a call whose turn's agent is no longer running: nothing starts for a turn that ended."""
    return AgentTokenInvalid(
        "This token's turn has ended (its agent is no longer running), so nothing was run for it.",
        hint="Everything a turn starts ends with it; the next turn of the task gets a new token.",
    )


def _ledger(turn: OwnTurn) -> Path:
    return Path(turn.command.journal_dir or turn.project.paths.root) / SHELL_ATTEMPTS


def _reused(turn: OwnTurn, attempt_id: str) -> bool:
    """Whether ``attempt_id`` was used before in the session (corral's own record of its shell's calls)."""
    try:
        lines = _ledger(turn).read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    for line in lines:
        try:
            if json.loads(line).get("attempt_id") == attempt_id:
                return True
        except ValueError:
            continue
    return False


def _note_attempt(turn: OwnTurn, attempt_id: str) -> None:
    """Save first, run second: the attempt id is on record before its command runs."""
    path = _ledger(turn)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"attempt_id": attempt_id, "command_id": turn.command.command_id}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def run(turn: OwnTurn, command: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``command`` with the intent ``args`` declare, in the turn's sandbox: its structured result."""
    from corral.domain.intents import Rejected, parse_intent

    if not turn.confined:
        raise UsageError(
            "corral's shell runs only in a confined turn (sandbox bwrap); this turn is not confined.",
            code="shell-needs-sandbox",
            hint="Use your harness's own shell tool: its failures are recovered by an exact retry.",
        )
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > ARGV_PROMPT_LIMIT:
        raise TextTooLarge("command", size, ARGV_PROMPT_LIMIT)
    intent = parse_intent(args)
    if isinstance(intent, Rejected):
        raise UsageError(
            "The intent was rejected, so the command did not run: " + "; ".join(intent.reasons),
            code="intent-rejected",
            hint="operationId and attemptId match ^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$; expectedExitCodes "
            "are up to 16 whole numbers 1-255.",
        )
    if intent.attempt_id is not None:
        if _reused(turn, intent.attempt_id):
            raise UsageError(
                f"attemptId '{intent.attempt_id}' was used before in this session, so the command did not run.",
                code="intent-rejected",
                hint="Give every execution an attemptId of its own; operationId is what names the operation.",
            )
        _note_attempt(turn, intent.attempt_id)
    ran = _run_confined(turn, command, timeout)
    return {
        SHELL_RESULT_KEY: 1,
        "exit_code": ran.exit_code,
        "timed_out": ran.timed_out,
        "expected": ran.exit_code is not None and ran.exit_code in intent.expected,
        # what ran, before its output: a row of a failure reads as the command, its exit and its stderr
        "command": ran.command,
        "stderr": ran.stderr,
        "stdout": ran.stdout,
        "intent": {
            "operationId": intent.operation_id,
            "attemptId": intent.attempt_id,
            "expectedExitCodes": list(intent.expected),
        },
        "ended_with_turn": ran.ended_with_turn,  # last: what a harness shows of a result is its head
    }


class Ran(Struct, frozen=True):
    """How one command of the shell ended: its exit code (None when corral ended it), and why corral did."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    ended_with_turn: bool = False
    command: str = ""  # its head, masked as its output is


def _run_confined(turn: OwnTurn, command: str, timeout: float) -> Ran:
    """``sh -c command`` in the turn's sandbox and worktree (never in this process), as a process of the
    turn (module docstring); output capped and masked."""
    from corral.adapters import sandbox
    from corral.domain.redact import redact
    from corral.engine.runtime import ref_guard, ref_snapshot

    spec = turn.command.sandbox
    assert spec is not None
    command_id = turn.command.command_id
    protocol_dir = turn.project.paths.protocol_dir(turn.task.id)
    log_dir, worktree = Path(turn.command.log_dir), turn.command.worktree
    read_only = turn.command.posture.read_only
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    # its git moves refs as the agent's own would: through the turn's ref-guard hook
    env.update(ref_snapshot.hook_env(log_dir, Path(worktree), command_id, env))
    env[processes.COMMAND_TAG] = command_id  # a process of the turn: every sweep of the turn's finds it
    sandbox.prepare(spec, turn.command.harness, env)
    guard = ref_guard.guard_dir(log_dir)
    held = None
    if spec.git_common_dir and not read_only:  # its objects go where the turn's agent's go: the turn's quarantine
        from corral.engine.runtime import quarantine

        if not quarantine.path_for(spec.git_common_dir, command_id).is_dir():
            raise turn_ended()  # settled: the turn is over, and its quarantine is never opened again
        held = str(quarantine.open_(spec.git_common_dir, command_id))
    prefix, inside = sandbox.bwrap_argv(
        spec,
        worktree=worktree,
        program="/bin/sh",
        harness=turn.command.harness,
        read_only=read_only,
        env=env,
        read_paths=[str(guard / ref_guard.HOOKS)],
        write_paths=[str(guard / ref_guard.MOVES)],
        quarantine=held,
    )
    assert prefix[-1] == "--"
    gate, go = os.pipe()  # bwrap runs nothing before a byte arrives on ``gate``
    try:
        proc = turn.project.runner.start(
            [*prefix[:-1], "--block-fd", str(gate), "--", "/bin/sh", "-c", command],
            cwd=worktree,
            environ={**env, **inside},
            pass_fds=(gate,),
        )
    except BaseException:
        os.close(go)
        raise
    finally:
        os.close(gate)
    # Written down, then seen alive after the spawn, the agent exits after it: the supervisor's sweep
    # then finds this command's sandbox in the log directory. Not seen: it is ended before it could
    # run anything (ended first, the gate closed after: bwrap takes a closed gate for an open one).
    agent = None
    try:
        processes.note_shell_sandbox(log_dir, proc.pid)
        agent = processes.running_agent(protocol_dir, command_id)
        if agent is not None:
            os.write(go, b"g")
    finally:
        if agent is None:
            _end(proc)
        os.close(go)
    if agent is None:
        raise turn_ended()
    # Each stream is read as it comes and only its head is kept: a flood costs the daemon, which
    # serves every project, no memory.
    kept: dict[str, bytes] = {}
    readers = [
        threading.Thread(target=keep_head, args=(pipe, kept, name), daemon=True)
        for name, pipe in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for reader in readers:
        reader.start()
    secrets = agent_secrets(agent.pid)  # read while the agent is surely the process recorded
    timed_out, ended = watch(proc, agent.matches, timeout)
    for reader in readers:
        reader.join(5)

    def shown(data: bytes) -> str:
        return redact(data[:OUTPUT_BYTES].decode("utf-8", "replace"), secrets)

    out, err = kept.get("out", b""), kept.get("err", b"")
    code = None if timed_out or ended else proc.returncode
    head = command if len(command) <= COMMAND_SHOWN else command[: COMMAND_SHOWN - 1] + "…"
    return Ran(code, shown(out), shown(err), timed_out=timed_out, ended_with_turn=ended, command=redact(head, secrets))


def agent_secrets(pid: int) -> list[str]:
    """The secrets to mask in what the shell returns: the values of the secret-named variables of the
    agent's own environment (read from the live process, never stored), and of this process's.

    The shell runs in the daemon, whose environment is not the agent's: the turn was launched by
    whichever process started it (a person's shell, an auto-resume by the daemon), and a secret only
    the agent's environment holds is masked all the same.
    """
    from corral.domain.redact import secret_values

    own = set(secret_values(os.environ))
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return sorted(own, key=len, reverse=True)  # the agent is gone, or its environment unreadable
    env = {}
    for entry in data.decode("utf-8", "surrogateescape").split("\0"):
        name, sep, value = entry.partition("=")
        if sep:
            env[name] = value
    return sorted(own | set(secret_values(env)), key=len, reverse=True)


def watch(proc: Started, agent_alive: Callable[[], bool], timeout: float) -> tuple[bool, bool]:
    """Wait for the command while the agent that asked runs, at most ``timeout`` seconds; end it the
    moment either fails. Returns (timed out, ended with the turn)."""
    timed_out = ended = False
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if not agent_alive():
            ended = True
        elif time.monotonic() >= deadline:
            timed_out = True
        else:
            proc.wait(timeout=min(WATCH_SECONDS, max(deadline - time.monotonic(), 0.0)))
            continue
        _end(proc)
    code = proc.returncode
    if not (ended or timed_out) and code is not None and code < 0 and not agent_alive():
        ended = True  # the turn's own sweep (the supervisor's, a stop's) ended it
    return timed_out, ended


def _end(proc: Started) -> None:
    """End the command's sandbox: its process group at once, and with bwrap the PID namespace's init,
    so everything inside goes, whatever group, session or environment it gave itself."""
    proc.kill_group()
    proc.wait()


def keep_head(pipe: Any, kept: dict[str, bytes], name: str) -> None:
    """Read ``pipe`` to its end, keeping its first :data:`OUTPUT_BYTES` (and one more, to tell a cut)."""
    head = bytearray()
    while chunk := pipe.read(65536):
        if len(head) <= OUTPUT_BYTES:
            head += chunk[: OUTPUT_BYTES + 1 - len(head)]
    kept[name] = bytes(head)


def dispose(turn: OwnTurn, args: dict[str, Any]) -> dict[str, Any]:
    """Check a disposition of the caller's own incidents against its log scanned to now; the scan of
    the log records it (once). Ignored, and said so, for a turn that is not confined."""
    from corral.adapters.harness import make_harness
    from corral.domain.dispositions import Refused, check_disposition, open_incidents
    from corral.engine.paths import OUTPUT_LOG
    from corral.engine.runtime.journal_scan import Cursors, scan

    if not turn.confined or not turn.command.journal_dir:
        return {
            "recorded": False,
            "ignored": True,
            "why": "Dispositions are honoured only in a confined turn (sandbox bwrap): this one is not, so "
            "nothing was recorded. Your failures are recovered by an exact retry of the same command.",
        }
    cursors = Cursors(Path(turn.command.journal_dir))  # read, never saved: the observer owns the cursor
    harness = make_harness(turn.command.harness, turn.command.harness_settings.as_mapping())
    scan(Path(turn.command.log_dir) / OUTPUT_LOG, harness, turn.command.worktree, cursors)
    verdict = check_disposition(cursors.collector, None, args, call_id="pending")
    if isinstance(verdict, Refused):
        listed = ", ".join(f"{i.id} ({i.summary})" for i in verdict.open_incidents) or "none"
        raise DispositionRefused(
            "The disposition was refused whole, and nothing was recorded: " + "; ".join(verdict.reasons),
            hint=f"Open incidents: {listed}",
        )
    still_open = [i.id for i in open_incidents(cursors.collector)]
    return {"recorded": True, "disposition": args.get("disposition"), "open_incidents": still_open}
