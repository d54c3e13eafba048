"""A spare supervisor: the daemon keeps one supervisor started ahead, its imports done, for the next turn it resumes.

A supervisor is a fresh interpreter: its start and imports were most of the time between a crash's
auto-resume and the resumed agent's start. The daemon, which resumes crashed turns, keeps one supervisor
started ahead (``python -m corral.engine.runtime.supervisor --spare``) that waits on a pipe for the protocol
directory of its command.

Its identity is sound from its start, as a supervisor spawned for its command is: it carries the command tag
(``CORRAL_COMMAND_ID``, which a process cannot change in ``/proc/<pid>/environ``) of the one command it may run,
minted when it is started. The resume that takes it records its turn under that very id
(:func:`take`, then ``turns.resume(command_id=…)``), so a spare is never handed any other command, and the
pid it is registered by carries the tag and a start before the registration, as :mod:`~corral.engine.runtime.processes`
requires. Once handed its command it is a supervisor like any other: it writes its ``status.json`` (pid and
start time) and is watched and reconciled as one. A spare whose daemon ends reads end-of-file and exits; one
taken and not handed its command (the launch failed before) is let go the same way (:func:`release`), and its
id is never used again.

Only a process that called :func:`enable` (the daemon) keeps one; everywhere else :func:`take` gives None and a
launch spawns its supervisor as it always did.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from corral.adapters.pid_identity import start_ticks
from corral.adapters.process import spawn_fed
from corral.domain.clock import new_id
from corral.engine.runtime.processes import COMMAND_TAG
from corral.engine.runtime.wire import SPARE_ARG


class Spare:
    """One supervisor started ahead: its process, the command id it carries, its start time."""

    def __init__(self, proc: subprocess.Popen[bytes], command_id: str) -> None:
        self.proc = proc
        self.command_id = command_id
        self.start = start_ticks(proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None and self.start is not None and start_ticks(self.pid) == self.start

    def hand(self, protocol_dir: Path, log: Path, token: str | None) -> bool:
        """Give it its command (one line on its pipe); False when it is no longer there to take it."""
        line = json.dumps({"protocol_dir": str(protocol_dir), "log": str(log), "token": token}) + "\n"
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.close()
        except OSError:  # it died before its command (a broken pipe)
            return False
        return True

    def let_go(self) -> None:
        """End a spare no command will be handed: its pipe closes, it reads end-of-file and exits."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


class _Keeper:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: Path | None = None  # where a spare writes before it has a command (None: no spares kept)
        self.ready: Spare | None = None
        self.taken: dict[str, Spare] = {}  # command id -> a spare taken for it, not yet handed
        self.running: list[Spare] = []  # handed spares, reaped once they exit


_keeper = _Keeper()


def enable(log: Path) -> None:
    """Keep a spare from now on (the daemon); ``log`` takes what a spare says before it has a command."""
    with _keeper.lock:
        _keeper.log = log


#: How long a spare let go has to exit (it may be loading still) before it is ended: it is this process's own
#: child, not yet reaped, so its pid is still its own.
EXIT_GRACE = 5.0


def disable() -> None:
    """Keep none: the spare kept and any taken are let go, and waited for (each exits at end-of-file), so a
    daemon that stops leaves none behind."""
    with _keeper.lock:
        _keeper.log = None
        idle = [*([_keeper.ready] if _keeper.ready else []), *_keeper.taken.values()]
        _keeper.ready = None
        _keeper.taken.clear()
        for spare in idle:
            spare.let_go()
        for spare in idle:
            try:
                spare.proc.wait(EXIT_GRACE)
            except subprocess.TimeoutExpired:
                spare.proc.kill()
                spare.proc.wait()
        _reap_locked()


def _reap_locked() -> None:
    _keeper.running = [s for s in _keeper.running if s.proc.poll() is None]


def replenish() -> int | None:
    """Start a spare when none is kept (nor alive); its pid when one was started. Called off a resume's path."""
    with _keeper.lock:
        _reap_locked()
        if _keeper.log is None:
            return None
        if _keeper.ready is not None:
            if _keeper.ready.alive():
                return None
            _keeper.ready.let_go()
            _keeper.ready.proc.poll()
            _keeper.ready = None
        command_id = new_id()
        argv = [sys.executable, "-m", "corral.engine.runtime.supervisor", SPARE_ARG]
        proc = spawn_fed(argv, log=_keeper.log, env={COMMAND_TAG: command_id})
        _keeper.ready = Spare(proc, command_id)
        return proc.pid


def kept() -> bool:
    """Whether a spare is kept and alive, ready to be taken."""
    with _keeper.lock:
        return _keeper.ready is not None and _keeper.ready.alive()


def take() -> str | None:
    """The command id of the spare kept, now taken for the turn about to be recorded under that id; None when
    no spare is kept or alive. The taker hands it its command (:func:`hand`) or lets it go (:func:`release`)."""
    with _keeper.lock:
        spare, _keeper.ready = _keeper.ready, None
        if spare is None:
            return None
        if not spare.alive():
            spare.let_go()
            return None
        _keeper.taken[spare.command_id] = spare
        return spare.command_id


def hand(command_id: str, protocol_dir: Path, log: Path, token: str | None) -> int | None:
    """The pid of the spare taken for ``command_id``, now handed its command; None when none was taken for it
    (the launch spawns its supervisor) or it died before it could be handed."""
    with _keeper.lock:
        spare = _keeper.taken.pop(command_id, None)
    if spare is None:
        return None
    if not spare.alive() or not spare.hand(protocol_dir, log, token):
        spare.let_go()
        return None
    with _keeper.lock:
        _keeper.running.append(spare)
    return spare.pid


def release(command_id: str | None) -> None:
    """Let go the spare taken for ``command_id`` if it was not handed its command (the launch failed before)."""
    if command_id is None:
        return
    with _keeper.lock:
        spare = _keeper.taken.pop(command_id, None)
    if spare is not None:
        spare.let_go()
