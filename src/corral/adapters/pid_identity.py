"""A pid and what proves it is still the process corral recorded; signals sent only to a process that matches.

A pid alone names whatever process holds the number now (pids wrap within minutes on a
busy machine), so nothing recorded is signalled by its pid alone: an :class:`Identity`
adds the process's start time (``/proc/<pid>/stat`` field 22, clock ticks since boot), an
entry of its environment, or a moment it cannot have started after, and
:func:`stop_identified` / :func:`send_identified` signal only a process that matches.
:func:`reap` ends a set of processes found in ``/proc`` (a group, a session, an environment
tag), each re-identified by its start time before every signal.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable, Sequence
from functools import partial

from msgspec import Struct

from corral.adapters.process import MAX_PID, send


class ProcInfo(Struct, frozen=True):
    """One live process as ``/proc/<pid>/stat`` tells it."""

    pid: int
    state: str
    pgrp: int
    session: int
    start: int  # field 22: clock ticks after boot


def proc_info(pid: int) -> ProcInfo | None:
    """The process ``pid`` now, or None when there is none (or it is a zombie)."""
    if pid <= 0 or pid > MAX_PID:
        return None
    try:  # unbuffered: the reconciler asks this of every running supervisor on every read
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) may hold spaces and parentheses: the fields follow its last ")".
    # Split only as far as the start time (field 22), the last one read.
    fields = raw[raw.rfind(b")") + 2 :].split(None, 20)
    try:
        info = ProcInfo(pid, fields[0].decode("ascii", "replace"), int(fields[2]), int(fields[3]), int(fields[19]))
    except (IndexError, ValueError):
        return None
    return None if info.state in ("Z", "X") else info


def start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` (ticks after boot), recorded beside the pid when corral learns it."""
    info = proc_info(pid)
    return info.start if info else None


def _boot_time() -> float:
    with open("/proc/stat", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def started_epoch(info: ProcInfo) -> float:
    """When the process started, in seconds since the epoch (to the second: boot time's precision)."""
    return _boot_time() + info.start / os.sysconf("SC_CLK_TCK")


def environ_has(pid: int, entry: str) -> bool:
    """Whether the process's environment (as it was started) holds ``entry`` (``NAME=value``)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return False
    return (b"\0" + entry.encode() + b"\0") in b"\0" + data + b"\0"


def command_line(pid: int) -> str:
    """The process's argv joined by spaces (what ``ps`` shows), or "" once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def all_processes(since: int | None = None) -> list[ProcInfo]:
    """Every live process; with ``since`` (a start time, ticks after boot), only those started then or later."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            info = proc_info(int(entry.name))
            if info is not None and (since is None or info.start >= since):
                found.append(info)
    return found


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` (every thread's), or None where the kernel does not list them."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids += [int(k) for k in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None  # no children file: a kernel without CONFIG_PROC_CHILDREN
        except (OSError, ValueError):
            continue
    return kids


def turn_processes(root: int, since: int | None) -> list[ProcInfo]:
    """The processes a turn can have left: the live descendants of ``root`` (the supervisor, the
    child subreaper every orphan of its turn is handed to, :func:`adopt_orphans`), never every
    process on the machine; where the kernel lists no children, the processes started since the
    turn's agent (``since``), the only ones that can be its."""
    found = descendants(root)
    return found if found is not None else [p for p in all_processes(since) if p.pid != root]


def descendants(root: int) -> list[ProcInfo] | None:
    """The live descendants of ``root``, each after its parent; None where the kernel lists no children."""
    found: list[ProcInfo] = []
    todo, seen = [root], {root}
    while todo:
        kids = _children(todo.pop())
        if kids is None:
            return None
        for kid in kids:
            if kid in seen:
                continue
            seen.add(kid)
            todo.append(kid)
            info = proc_info(kid)
            if info is not None:
                found.append(info)
    return found


#: ``prctl``'s option that makes a process the reaper of its descendants' orphans.
PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> bool:
    """Make this process its descendants' reaper: a process its child leaves behind (a ``setsid``
    grandchild whose parent exited) stays its descendant, so :func:`turn_processes` finds it.
    False where the kernel refuses (then orphans go to init and only the scan finds them)."""
    import ctypes  # only the supervisor asks this, once

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


#: How far a start time read through boot time (whole seconds) may sit after the moment it is
#: compared with.
START_SLACK_SECONDS = 2.0


class Identity(Struct, frozen=True):
    """A pid, and what proves that the process holding it is the one corral recorded.

    Each fact given must hold: ``start`` (its start time in ticks after boot), ``env`` (an
    entry of its environment, ``NAME=value``), ``not_after`` (seconds since the epoch it
    cannot have started after: it was recorded then). With no fact given nothing is proved,
    and the process is never signalled.
    """

    pid: int
    start: int | None = None
    env: str | None = None
    not_after: float | None = None

    @property
    def provable(self) -> bool:
        return self.start is not None or self.env is not None or self.not_after is not None

    def matches(self) -> bool:
        """True only for a live process holding the pid that every recorded fact still describes."""
        if not self.provable or self.pid <= 1 or self.pid == os.getpid():
            return False
        info = proc_info(self.pid)
        if info is None:
            return False
        if self.start is not None and info.start != self.start:
            return False
        if self.not_after is not None:
            try:
                if started_epoch(info) > self.not_after + START_SLACK_SECONDS:
                    return False
            except (OSError, ValueError):
                return False
        return self.env is None or environ_has(self.pid, self.env)


def send_identified(identity: Identity, signum: int) -> bool:
    """Signal one process if it is the one identified; False when it is gone or another process."""
    return identity.matches() and send(identity.pid, signum)


def stop_identified(identity: Identity, grace: float) -> bool:
    """End the identified process's group (SIGTERM, ``grace``, SIGKILL); False when it did not match.

    The group is signalled only while its leader (or, once the leader is gone, a member seen
    with it) is still the process identified, so a group id given to another process since is
    never signalled.
    """
    if not identity.matches():
        return False
    try:
        pgid = os.getpgid(identity.pid)
    except ProcessLookupError:
        return False
    alone = pgid == os.getpgrp() or pgid <= 1  # not in a group of its own: the process alone
    if alone:
        send(identity.pid, signal.SIGTERM)
        members = [proc_info(identity.pid)]
    else:
        members = [p for p in all_processes() if p.pgrp == pgid]
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return True
    with ExitWaits() as waits:
        waits.add(identity.pid, identity.matches)
        waits.until(time.monotonic() + grace, identity.matches)
        if identity.matches() or any(_same(m) for m in members if m is not None):
            if alone:
                send_identified(identity, signal.SIGKILL)
            else:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _settle(identity.matches, waits)
    return True


#: How long a SIGKILLed process may take to be gone (the kernel ends it asynchronously).
KILL_SETTLE_SECONDS = 1.0


def _settle(alive: Callable[[], bool], waits: ExitWaits) -> None:
    """After a SIGKILL: until what was killed is gone, at most :data:`KILL_SETTLE_SECONDS`."""
    waits.until(time.monotonic() + KILL_SETTLE_SECONDS, alive)


#: The longest nap between two looks where no pidfd tells of an exit (an older kernel).
NAP_SECONDS = 0.05


class ExitWaits:
    """Waits that end when processes exit: a pidfd per process (readable once it has exited), so a
    wait between a signal and its effect lasts as long as the process takes, not a nap's multiple.
    A process whose pidfd cannot be had (an older kernel) is looked at every :data:`NAP_SECONDS`."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}
        self._blind = False

    def __enter__(self) -> ExitWaits:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def add(self, pid: int, same: Callable[[], bool]) -> None:
        """Watch ``pid`` while ``same()`` says it is still the process meant (asked after the pidfd is
        open: the pidfd then names that very process, whatever the pid is given to later)."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        except (OSError, AttributeError):
            self._blind = True
            return
        if not same():
            os.close(fd)
            return
        self._fds[pid] = fd

    def until(self, deadline: float, alive: Callable[[], bool]) -> None:
        """Until ``alive()`` is false or ``deadline`` (monotonic) passes, woken by each exit."""
        while alive():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            fds = list(self._fds.values())
            if not fds:
                time.sleep(min(left, NAP_SECONDS))
                continue
            ready, _, _ = select.select(fds, [], [], min(left, NAP_SECONDS) if self._blind else left)
            for pid, fd in list(self._fds.items()):
                if fd in ready:  # exited: nothing more to wait for from it
                    os.close(fd)
                    del self._fds[pid]


def _same(info: ProcInfo) -> bool:
    now = proc_info(info.pid)
    return now is not None and now.start == info.start


def reap(found: Sequence[ProcInfo], grace: float) -> list[ProcInfo]:
    """End each process found (SIGTERM, ``grace``, SIGKILL), re-identified by its start time
    before every signal; returns those that were still there to signal."""
    own = {os.getpid(), os.getppid(), 0, 1}
    targets = [p for p in found if p.pid not in own]
    with ExitWaits() as waits:
        signalled = [p for p in targets if _same(p) and send(p.pid, signal.SIGTERM)]
        for p in signalled:
            waits.add(p.pid, partial(_same, p))
        waits.until(time.monotonic() + grace, lambda: any(_same(p) for p in signalled))
        for p in signalled:
            if _same(p):
                send(p.pid, signal.SIGKILL)
        _settle(lambda: any(_same(p) for p in signalled), waits)
    for p in signalled:  # an orphan handed to this process (its subreaper) is waited for: no zombie stays
        try:
            os.waitpid(p.pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return signalled
