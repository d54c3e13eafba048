"""One attempt: launch the harness once, copy its output, and end it when it is done, stopped or silent.

The agent runs in its own session and process group, with the command's tag in its
environment (``CORRAL_COMMAND_ID``) so a reaper finds it even if the supervisor dies before
it could write the agent's pid down. A stop request or an expired watchdog ends the whole
group: SIGTERM, then SIGKILL after the command's grace.

The attempt ends when the agent process exits, not when its streams close: a background
child (``cmd &``) holding stdout does not keep the turn. Whatever the agent left running —
its group, its session, and processes that called ``setsid`` but carry the command's tag —
is reaped then and named in :attr:`AttemptRun.reaped`. The agent's zombie is kept until
that is done, so its pid (the group's and session's id) cannot be given to another process.

A harness's own retry line is acted on as it is read. When corral owns that harness's retry
cadence (``corral_owns_retries``), the first one ends the group at once and is kept as
:attr:`AttemptRun.harness_retry`: the harness classifies the attempt from it and corral's
ladder decides (a fatal class stops in seconds, not after the harness's own retries). A
harness that keeps its retries has them shown live instead: ``status.json``'s ``retry`` with
``by: "harness"``, cleared at its next completed step.
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from msgspec import Struct, field

from corral import crashpoints
from corral.adapters.harness.base import AttemptFacts, Event, Harness, Launch, Verdict
from corral.adapters.pid_identity import (
    ProcInfo,
    adopt_orphans,
    command_line,
    environ_has,
    proc_info,
    reap,
    start_ticks,
    turn_processes,
)
from corral.adapters.process import check_argv, exited, spawn_piped, stop_child_group
from corral.adapters.sandbox import INSTALL_HINT, SandboxSpec, bwrap_argv, forget_probe, prepare
from corral.domain.classifiers import classify_common, classify_http_status
from corral.domain.delays import Delays
from corral.domain.redact import CUT_MARGIN, redact
from corral.engine.paths import OUTPUT_LOG, STDERR_LOG
from corral.engine.runtime import protocol as proto
from corral.engine.runtime import ref_guard, ref_snapshot
from corral.engine.runtime.heartbeat import StatusReporter, now
from corral.engine.runtime.output import EVENTS_KEPT, OutputCopier, OutputIndex
from corral.engine.runtime.processes import COMMAND_TAG, shell_sandboxes, tag
from corral.engine.runtime.stopping import StopFlag
from corral.engine.runtime.watchdog import ProgressClock
from corral.errors import ArgvError

#: Variables of the supervisor's own environment that never reach the agent.
PRIVATE_ENV = ("CORRAL_CRASH_AT", "CORRAL_CRASH_HOW")
#: What remains in the streams once the leftovers are gone is read until this quiet.
RESIDUE_QUIET_SECONDS = 0.2
#: A reaped process is named by this much of its command line (masked).
COMMAND_CHARS = 200
#: Characters of a harness's retry line kept in the live retry state.
RETRY_TEXT_BYTES = 300


class AttemptRun(Struct):
    """What one attempt did and how it ended."""

    number: int
    started_at: datetime
    ended_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    stderr_tail: str = ""
    spawn_error: str | None = None
    spawn_errno: int | None = None
    argv_error: bool = False  # the prompt could not be passed (e.g. a NUL byte): nothing was spawned
    watchdog: bool = False
    stopped: bool = False
    we_signalled: bool = False
    duration: float = 0.0
    log_start: int = 0
    log_end: int = 0
    verdict: Verdict | None = None
    reaped: list[proto.Reaped] = field(default_factory=list)
    harness_retry: Event | None = None  # the harness's retry line corral ended the attempt at

    def facts(self) -> AttemptFacts:
        return AttemptFacts(self.exit_code, self.signal, self.events, self.stderr_tail, self.spawn_error)

    def killed_by_exit(self) -> bool:
        """An agent that caught a signal corral did not send and exited 128+n with no result.

        Claude Code, for one, handles SIGTERM and exits 143 instead of dying by the signal.
        """
        code = self.exit_code
        signals = (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP)
        has_result = any(e.kind == "result" for e in self.events)
        return code is not None and code - 128 in signals and not has_result


#: ``AttemptRunner``'s ``sandbox`` when none is given: the one in the turn's ``command.json``.
_FROM_COMMAND: object = object()

#: How often a running attempt's output is scanned for incidents (docs/incidents.md).
OBSERVE_SECONDS = 2.0


class AttemptRunner:
    """Runs attempts of one turn's harness in the worktree, logging to the turn's log directory."""

    def __init__(
        self,
        harness: Harness,
        *,
        worktree: Path,
        log_dir: Path,
        command_id: str,
        secrets: list[str],
        status: StatusReporter,
        stop: StopFlag,
        term_grace: float,
        clock: Callable[[], float] = time.monotonic,
        sandbox: SandboxSpec | object | None = _FROM_COMMAND,
        read_only: bool | None = None,
        delays: Delays | None = None,
    ) -> None:
        self.harness = harness
        #: The turn's waits: the grace of the agent's leftovers, the drain of its output.
        self.delays = delays if delays is not None else Delays()
        self.worktree = worktree
        self.log_dir = log_dir
        self.command_id = command_id
        self.secrets = secrets
        self.status = status
        self.stop = stop
        self.term_grace = term_grace
        self.clock = clock  # attempt durations, for the crash-loop detector; tests pass a virtual one
        self.session_id: str | None = None
        self.reaped: list[proto.Reaped] = []  # every attempt's leftovers, for the receipt
        #: Called at an attempt's first completed step (the first model response got through).
        self.on_progress: Callable[[], None] | None = None
        #: Called once, as the turn's first agent starts (the supervisor loads its turn's end then).
        self.on_spawned: Callable[[], None] | None = None
        #: Called every ``OBSERVE_SECONDS`` while an attempt runs (the failure journal's scan).
        self.observe: Callable[[], None] | None = None
        self._observed = 0.0
        #: The turn's sandbox (docs/harnesses.md#sandbox) and whether its worktree is read-only: given,
        #: or read from the turn's ``command.json`` beside ``status.json`` (as the supervisor read it).
        self._sandbox = sandbox
        # What an agent leaves behind stays this process's descendant (the turn's process container):
        # an attempt's end looks there for it, never at every process on the machine. Asked beside the
        # git work before the first attempt (it loads ctypes), and waited for before any agent starts.
        self._adopting = threading.Thread(target=adopt_orphans, name="adopt-orphans", daemon=True)
        self._adopting.start()
        self._read_only = read_only

    def run(self, number: int, launch: Callable[[], Launch], watchdog_seconds: float) -> AttemptRun:
        run = AttemptRun(number, now())
        try:
            spec = launch()
            check_argv(spec.argv)
        except ArgvError as exc:
            run.spawn_error = exc.message
            run.argv_error = True
            run.ended_at = now()
            return run
        env = dict(os.environ)
        env.update(spec.env)
        for var in PRIVATE_ENV:
            env.pop(var, None)
        env[COMMAND_TAG] = self.command_id
        env.update(ref_snapshot.hook_env(self.log_dir, self.worktree, self.command_id, env))  # refs are guarded
        argv = spec.argv
        box = self.sandbox()
        if box is not None and box.confined:
            if box.error is not None:  # bwrap required and unable to run: nothing runs unconfined
                run.spawn_error = box.error
                run.ended_at = now()
                return run
            prompt_file = env.get("CORRAL_PROMPT_FILE")
            reads = [*([prompt_file] if prompt_file else []), *spec.reads]  # what the harness is handed to read
            argv = self._confined(box, argv, env, getattr(self.harness, "name", ""), reads)
        out_fd = os.open(self.log_dir / OUTPUT_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        err_fd = os.open(self.log_dir / STDERR_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        run.log_start = os.fstat(out_fd).st_size
        started = self.clock()
        try:
            try:
                self._adopting.join()
                proc = spawn_piped(argv, cwd=self.worktree, env=env, stdin=spec.stdin is not None)
            except OSError as exc:
                run.spawn_error = (
                    f"{self.harness.display} could not start: {exc.strerror or exc} ({argv[0]}). "
                    f"{self.harness.install_hint if argv is spec.argv else INSTALL_HINT}"
                )
                run.spawn_errno = exc.errno
                run.ended_at = now()
                return run
            self.status.update(agent_pid=proc.pid, agent_start=start_ticks(proc.pid))
            crashpoints.hit("supervisor.agent-spawned")
            if self.on_spawned is not None:  # once: the first agent of the turn is running
                spawned, self.on_spawned = self.on_spawned, None
                spawned()
            if spec.stdin is not None:
                threading.Thread(target=_feed, args=(proc, spec.stdin), daemon=True).start()
            self._watch(proc, run, out_fd, err_fd, ProgressClock(watchdog_seconds))
            if argv is not spec.argv and box is not None:
                _sandbox_failed(run, box)
        finally:
            run.log_end = os.fstat(out_fd).st_size
            os.close(out_fd)
            os.close(err_fd)
            retry = self.status.status.retry
            if retry is not None and retry.by == "harness":  # the harness's retries ended with it
                self.status.update(agent_pid=None, agent_start=None, retry=None)
            else:
                self.status.update(agent_pid=None, agent_start=None)
        run.duration = self.clock() - started
        run.ended_at = now()
        return run

    def _watch(
        self, proc: subprocess.Popen[bytes], run: AttemptRun, out_fd: int, err_fd: int, progress: ProgressClock
    ) -> None:
        """Copy the output until the agent exits (or its streams close), end what it left, then
        collect its exit, ending the group when asked or silent."""
        assert proc.stdout is not None and proc.stderr is not None
        on_event = self._retry_watch(proc, run)
        index = OutputIndex.in_dir(self.log_dir, out_fd, err_fd)
        copier = OutputCopier(self.harness, out_fd, err_fd, index, on_event=on_event)

        def tick(_elapsed: float) -> float:
            self._maybe_end(proc, run, progress)
            if self.observe is not None and time.monotonic() - self._observed >= OBSERVE_SECONDS:
                self._observed = time.monotonic()
                self.observe()
            return min(progress.remaining(), OBSERVE_SECONDS)

        delays = self.delays
        closed = copier.pump(
            proc.stdout,
            proc.stderr,
            tick,
            progress.progressed,
            lambda: exited(proc),
            quiet=delays.drain_quiet,
            longest=delays.drain_longest,
        )
        # The streams closed; the process may linger (a daemonized child): the watchdog still applies.
        # Its exit wakes the wait (a pidfd): a stream closes a moment before its writer is reapable,
        # and a fixed nap here was a nap between an agent's death and its turn's end.
        with ExitWatch(proc.pid) as ended:
            while not exited(proc):
                self._maybe_end(proc, run, progress)
                ended.wait(0.05)
        run.reaped = self._reap_leftovers(proc)
        self.reaped.extend(run.reaped)
        if not closed:  # what the leftovers had written and nobody read yet
            copier.pump(
                proc.stdout,
                proc.stderr,
                tick,
                progress.progressed,
                lambda: True,
                quiet=min(RESIDUE_QUIET_SECONDS, delays.drain_quiet),
                longest=delays.drain_longest,
            )
        if copier.flush():
            progress.progressed()
        proc.stdout.close()
        proc.stderr.close()
        run.events = copier.events
        if copier.session_id:
            self.session_id = copier.session_id
        code = proc.wait()
        if code < 0:
            run.signal = -code
            run.exit_code = 128 - code
        else:
            run.exit_code = code
        run.stderr_tail = redact(copier.stderr_tail.decode("utf-8", "replace"), self.secrets)

    def _retry_watch(self, proc: subprocess.Popen[bytes], run: AttemptRun) -> Callable[[Event], None]:
        """What a retry line does while the agent runs: end the attempt (corral owns the cadence)
        or show the harness's own retry in ``status.json`` until its next completed step."""
        owned = self.harness.corral_owns_retries
        seen = 0

        def on_event(event: Event) -> None:
            nonlocal seen
            if event.kind == "retry":
                seen += 1
                if owned:
                    if run.harness_retry is None and not run.we_signalled:
                        run.harness_retry = event
                        self._kill(proc, run)
                    return
                self.status.update(retry=harness_retry_state(event, seen, self.secrets))
            elif seen and event.is_progress and self.status.status.retry is not None:
                self.status.update(retry=None)
            if event.is_progress and self.on_progress is not None:
                through, self.on_progress = self.on_progress, None
                through()

        return on_event

    def _reap_leftovers(self, proc: subprocess.Popen[bytes]) -> list[proto.Reaped]:
        """End every process the exited agent left: its group, its session, and the command's
        tagged processes (a ``setsid`` grandchild leaves both), and what corral's shell runs for the
        turn (in the daemon's sandboxes, written down in the log directory); the supervisor is never one.
        All are ended and waited for here, before the turn is recorded."""
        entry = tag(self.command_id)
        agent = self.status.status.agent_start
        found: list[ProcInfo] = [
            p
            for p in turn_processes(os.getpid(), agent)
            if p.pid not in (proc.pid, os.getpid())
            and (p.pgrp == proc.pid or p.session == proc.pid or environ_has(p.pid, entry))
        ]
        seen = {p.pid for p in found}
        boxes = [box for box in shell_sandboxes(self.log_dir, self.command_id) if box[0].pid not in seen]
        shell = [p for box in boxes for p in box]
        names = {p.pid: command_line(p.pid) for p in (*found, *shell)}
        signalled = {p.pid for p in reap([*found, *shell], self.delays.reap_grace)}
        # a sandbox's end takes what it holds along: a sandbox ended names everything it held
        reaped = [p for p in found if p.pid in signalled]
        reaped += [p for box in boxes for p in box if box[0].pid in signalled or p.pid in signalled]
        return [proto.Reaped(p.pid, redact(names.get(p.pid, ""), self.secrets)[:COMMAND_CHARS]) for p in reaped]

    def _maybe_end(self, proc: subprocess.Popen[bytes], run: AttemptRun, progress: ProgressClock) -> None:
        if self.stop.is_set() and not run.stopped:
            run.stopped = True
            self._kill(proc, run)
        if progress.expired() and not run.watchdog and not run.stopped:
            run.watchdog = True
            self._kill(proc, run)

    def _kill(self, proc: subprocess.Popen[bytes], run: AttemptRun) -> None:
        """SIGTERM to the agent's process group, SIGKILL after the grace period (in the background)."""
        run.we_signalled = True
        box = self.sandbox()
        stop = stop_sandboxed_group if box is not None and box.confined else stop_child_group
        threading.Thread(target=stop, args=(proc, self.term_grace), daemon=True).start()

    def _confined(
        self, box: SandboxSpec, argv: list[str], env: dict[str, str], harness: str, reads: list[str]
    ) -> list[str]:
        """``argv`` inside the turn's sandbox: its objects through the turn's quarantine, its ref moves logged."""
        prepare(box, harness, env)
        guard = ref_guard.guard_dir(self.log_dir)
        held = None
        if box.git_common_dir and not self.read_only():  # its objects arrive through a quarantine
            from corral.engine.runtime import quarantine

            held = str(quarantine.open_(box.git_common_dir, self.command_id))
        prefix, _inside = bwrap_argv(
            box,
            worktree=str(self.worktree),
            program=argv[0],
            harness=harness,
            read_only=self.read_only(),
            env=env,
            read_paths=[*reads, *box.read_paths, str(guard / ref_guard.HOOKS)],
            write_paths=[str(guard / ref_guard.MOVES)],  # the ref guard's hook logs the agent's moves
            quarantine=held,
        )
        return [*prefix, *argv]

    def confine_check(self, argv: list[str]) -> tuple[list[str], dict[str, str]] | None:
        """The post-turn check's argv and environment in the turn's sandbox; None when the turn has none.

        Its environment is the agent's less the harness's: the turn's tag (reaped with the turn), the
        ref guard's hooks. A sandbox that cannot run (``error``) runs nothing: the check is refused.
        """
        box = self.sandbox()
        if box is None or not box.confined:
            return None
        env = dict(os.environ)
        for var in PRIVATE_ENV:
            env.pop(var, None)
        env[COMMAND_TAG] = self.command_id
        env.update(ref_snapshot.hook_env(self.log_dir, self.worktree, self.command_id, env))
        if box.error is not None:
            return ["/bin/sh", "-c", f"echo {shlex.quote(box.error)} >&2; exit 126"], env
        return self._confined(box, argv, env, "command", []), env

    def sandbox(self) -> SandboxSpec | None:
        if self._sandbox is _FROM_COMMAND:
            command = proto.read_record(self.status.dir / proto.COMMAND, proto.Command)
            self._sandbox = command.sandbox if command is not None else None
            if self._read_only is None:
                self._read_only = command is not None and command.posture.read_only
        assert self._sandbox is None or isinstance(self._sandbox, SandboxSpec)
        return self._sandbox

    def read_only(self) -> bool:
        self.sandbox()
        return bool(self._read_only)


def _sandbox_failed(run: AttemptRun, box: SandboxSpec) -> None:
    """bwrap's own error before the agent ran (exit 1, ``bwrap: …`` on stderr, not a word on stdout):
    the harness could not start in the sandbox, a ``fatal_config`` like a harness that is missing.
    The host's kept probe of bwrap is dropped then: the next launch probes again."""
    said = run.stderr_tail.strip()
    if run.exit_code == 1 and not run.events and said.startswith("bwrap: "):
        run.spawn_error = f"The sandbox could not start the agent: {said.splitlines()[-1]}. {INSTALL_HINT}"
        forget_probe(box)


class ExitWatch:
    """A wait that ends when a child (not yet reaped) exits: its pidfd, or a plain nap where there is none."""

    def __init__(self, pid: int) -> None:
        try:
            self.fd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):  # an older kernel: the nap remains
            self.fd = None

    def __enter__(self) -> ExitWatch:
        return self

    def __exit__(self, *_: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def wait(self, timeout: float) -> None:
        if self.fd is None:
            time.sleep(timeout)
            return
        select.select([self.fd], [], [], timeout)


def stop_sandboxed_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """End a sandboxed agent's group: SIGTERM to each process in it but bwrap itself, then SIGKILL
    to the whole group after ``grace`` seconds.

    bwrap dies at a SIGTERM, and with ``--die-with-parent`` takes the sandbox with it by SIGKILL at
    once; spared, it lives until the agent has ended in its own way, then exits with its status.
    """
    deadline = time.monotonic() + grace
    signalled = False
    for info in turn_processes(proc.pid, start_ticks(proc.pid)):
        if info.pgrp == proc.pid and info.pid != proc.pid:
            try:
                os.kill(info.pid, signal.SIGTERM)
                signalled = True
            except ProcessLookupError:
                pass
    if not signalled and proc_info(proc.pid) is None:
        return
    with ExitWatch(proc.pid) as ended:
        while time.monotonic() < deadline and not exited(proc):
            ended.wait(min(0.05, max(0.0, deadline - time.monotonic())))
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def harness_retry_state(event: Event, attempt: int, secrets: list[str]) -> proto.RetryState:
    """The live projection of a retry a harness announced and makes itself (its ``attempt``-th)."""
    text = event.text or ""
    cls = classify_http_status(event.status) or classify_common(text)
    return proto.RetryState(
        attempt=attempt,
        failure_class=cls.value,
        reason=redact(text[: RETRY_TEXT_BYTES + CUT_MARGIN], secrets)[:RETRY_TEXT_BYTES],
        next_delay_ms=0,
        by="harness",
    )


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except OSError:
        pass  # the agent exited before reading its prompt; its exit tells the story
