"""The daemon of a ``CORRAL_HOME``: one for every project kept there, found, started and stopped here.

The daemon itself is a surface (``corral daemon run``, :mod:`corral.daemon.daemon_service`); this module
is what the rest of corral needs of it without loading it: whether it runs and what it serves
(:func:`state`), starting it in the background (:func:`start_detached`, and :func:`ensure_running`
for a launch that needs its MCP endpoint) and stopping it (:func:`stop_running`).

A daemon is never a surprise: a start that :func:`ensure_running` makes on a command's behalf is
told to whoever listens in this process (:func:`announcing`: the CLI says it once on stderr, and
its ``--json`` answer carries it as ``daemon_started``), in the words of :func:`started_line`.

Its files live in ``$CORRAL_HOME/daemon/``: ``daemon.lock`` (an flock the running daemon holds
for its whole life; the kernel drops it when the process dies, so a killed daemon leaves
nothing that blocks the next one), ``daemon.json`` (its pid, start time, last tick, MCP
endpoint and the repositories it serves), ``daemon.log`` (its log, rotated) and ``daemon.out``
(what it prints before its log is set up). ``start.lock`` orders starters: two launches that
both find no daemon start one, and the second joins it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from corral.adapters.locks import is_locked, lock
from corral.adapters.pid_identity import Identity, environ_has, send_identified
from corral.adapters.process import pid_alive, spawn_detached
from corral.domain.clock import parse_time
from corral.engine.paths import DAEMON_DIR, DAEMON_LOG, corral_home
from corral.engine.private_state import make_private_dir
from corral.errors import CorralError

#: How long a stopped daemon has to exit after SIGTERM before it gets SIGKILL.
STOP_GRACE = 10.0

#: Who is told, in this process, of a daemon started on a command's behalf (:func:`announcing`).
_listeners: list[Callable[[DaemonState], None]] = []


def started_line(pid: int | None) -> str:
    """What a command that started the daemon says of it, once."""
    return (
        f"started the corral daemon (pid {pid}): it serves the agents' tools and resumes crashed turns; "
        "`corral daemon stop` stops it"
    )


@contextmanager
def announcing(tell: Callable[[DaemonState], None]) -> Iterator[None]:
    """While inside, ``tell`` hears of every daemon this process starts on a command's behalf."""
    _listeners.append(tell)
    try:
        yield
    finally:
        _listeners.remove(tell)


def daemon_dir(home: Path | None = None) -> Path:
    return (home or corral_home()) / DAEMON_DIR


def lock_file(home: Path | None = None) -> Path:
    """Held by the running daemon for its whole life."""
    return daemon_dir(home) / "daemon.lock"


def start_lock_file(home: Path | None = None) -> Path:
    """Held by whoever is starting a daemon, until it runs (or failed to)."""
    return daemon_dir(home) / "start.lock"


def state_file(home: Path | None = None) -> Path:
    return daemon_dir(home) / "daemon.json"


def log_file(home: Path | None = None) -> Path:
    return daemon_dir(home) / DAEMON_LOG


def out_file(home: Path | None = None) -> Path:
    """The daemon's own stdout and stderr (what it prints before its log is set up)."""
    return daemon_dir(home) / "daemon.out"


class DaemonState(Struct, frozen=True):
    """Whether the home's daemon runs, and what it last wrote of itself."""

    running: bool
    pid: int | None
    started_at: str | None
    last_tick: str | None
    mcp_url: str | None = None
    projects: tuple[str, ...] = ()  # the repositories it serves
    dashboard_url: str | None = None  # the web dashboard (without its token: docs/dashboard.md)

    def to_json(self) -> dict[str, Any]:
        """The daemon's state as --json gives it: its fields by name (the tuple as JSON's list)."""
        doc: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return doc


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = f.read(1_000_000)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def state(home: Path | None = None) -> DaemonState:
    """Whether a daemon holds the home's lock, and what it last wrote (a stopped one serves nothing)."""
    home = home or corral_home()
    info = _read(state_file(home))
    running = is_locked(lock_file(home))
    pid = info.get("pid")
    projects = info.get("projects")
    served = tuple(p for p in projects if isinstance(p, str)) if isinstance(projects, list) else ()
    return DaemonState(
        running,
        pid if running and isinstance(pid, int) and not isinstance(pid, bool) else None,
        _text(info.get("started_at")),
        _text(info.get("last_tick")),
        _text(info.get("mcp_url")) if running else None,
        served if running else (),
        _text(info.get("dashboard_url")) if running else None,
    )


def dashboard_wanted_file(home: Path | None = None) -> Path:
    """The mark that this home's person uses the web dashboard: written by ``corral dashboard``, kept."""
    return daemon_dir(home) / "dashboard-wanted"


def want_dashboard(home: Path | None = None) -> None:
    """Have the home's daemon serve its web dashboard: the running one starts it at once (woken by its
    doorbell), and every daemon after it serves it from its start. A daemon whose home never asked for it
    serves none (starting it is the daemon's largest cost after the MCP endpoint's: a web server, the
    templates and a first read of the board, in every daemon a launch starts for its agent's tools)."""
    from corral.adapters import doorbell
    from corral.adapters.files import write_atomic

    make_private_dir(daemon_dir(home))
    path = dashboard_wanted_file(home)
    if not path.exists():
        write_atomic(path, b"asked by corral dashboard\n")
    doorbell.ring(daemon_dir(home) / doorbell.NAME)


def dashboard_wanted(home: Path | None = None) -> bool:
    """Whether the home's daemon is to serve its web dashboard (:func:`want_dashboard`)."""
    return dashboard_wanted_file(home).exists()


def dashboard_host_file(home: Path | None = None) -> Path:
    """The address ``corral dashboard --host`` asked the next daemon to serve its dashboard on."""
    return daemon_dir(home) / "dashboard-host"


def ask_dashboard_host(host: str, home: Path | None = None) -> None:
    """Ask the next daemon that starts to serve its dashboard on ``host`` (once: the one after it
    serves loopback again unless asked again)."""
    from corral.adapters.files import write_atomic

    make_private_dir(daemon_dir(home))
    write_atomic(dashboard_host_file(home), host.encode() + b"\n")


def take_dashboard_host(home: Path | None = None) -> str | None:
    """The address asked for, consumed (None: loopback)."""
    path = dashboard_host_file(home)
    try:
        host = path.read_text(encoding="utf-8").strip()
        path.unlink()
    except OSError:
        return None
    return host or None


#: What may follow ``daemon run`` on the daemon's command line: its options (``corral daemon run --help``).
_RUN_FLAGS = frozenset({"--json"})
_RUN_OPTIONS = frozenset({"--tick"})


def is_daemon_command(argv: list[str]) -> bool:
    """Whether ``argv`` runs corral's daemon: ``python -m corral daemon run`` (as :func:`start_detached`
    starts it) or the ``corral`` script (run directly, or by its interpreter), then ``daemon run`` and its
    own options only.

    Word by word, not a search of the joined line: a shell whose script says ``corral daemon run``, or a
    program given those words as arguments, is not the daemon.
    """
    for at in range(1, min(len(argv), 4)):
        if argv[at : at + 2] != ["daemon", "run"]:
            continue
        head = argv[:at]
        script = Path(head[-1]).name == "corral"
        by_module = len(head) == 3 and head[1:] == ["-m", "corral"] and Path(head[0]).name.startswith("python")
        by_script = script and (len(head) == 1 or (len(head) == 2 and Path(head[0]).name.startswith("python")))
        return (by_module or by_script) and _only_run_options(argv[at + 2 :])
    return False


def _only_run_options(rest: list[str]) -> bool:
    words = iter(rest)
    for word in words:
        if word in _RUN_OPTIONS:
            if next(words, None) is None:
                return False
        elif word not in _RUN_FLAGS and not any(word.startswith(f"{o}=") for o in _RUN_OPTIONS):
            return False
    return True


def runs_daemon_of(pid: int, home: Path) -> bool:
    """Whether ``pid`` is corral's daemon of ``home``: its command line (:func:`is_daemon_command`) and the
    ``CORRAL_HOME`` it was started with (what :func:`start_detached` gives it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    argv = [os.fsdecode(word) for word in raw.rstrip(b"\0").split(b"\0")]
    return is_daemon_command(argv) and environ_has(pid, f"CORRAL_HOME={home}")


def signal_recorded(pid: int, started_at: str | None, signum: int) -> bool:
    """Signal the daemon a state file names (``pid``, ``started_at`` as it wrote them), only if that
    pid is still a process that started no later than the daemon wrote it; False otherwise.

    The same proof as :func:`corral.engine.runtime.processes.signal_daemon` (this module sits
    below the runtime, so it asks the adapter directly).
    """
    try:
        when = parse_time(started_at)
    except ValueError:
        return False
    return when is not None and send_identified(Identity(pid, not_after=when.timestamp()), signum)


def _spawn(home: Path, timeout: float, *, announce: bool) -> DaemonState:
    make_private_dir(daemon_dir(home))
    pid = spawn_detached(
        [sys.executable, "-m", "corral", "daemon", "run"],
        log=out_file(home),
        cwd=str(daemon_dir(home)),  # no repository needed, and none held open
        env={"CORRAL_HOME": str(home)},
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = state(home)
        if current.running and current.pid == pid:
            if announce:
                for tell in list(_listeners):
                    tell(current)
            return current
        if not pid_alive(pid):
            break
        time.sleep(0.05)
    raise CorralError(
        "The daemon did not start.",
        code="daemon-failed",
        hint=f"See {out_file(home)} and {log_file(home)}.",
    )


def _starting(home: Path, timeout: float) -> int:
    make_private_dir(daemon_dir(home))
    fd = lock(start_lock_file(home), timeout + 5.0)
    if fd is None:
        raise CorralError(
            "Another corral is starting the daemon and has not finished.",
            code="daemon-failed",
            hint=f"See {out_file(home)} and {log_file(home)}; `corral daemon status` tells whether it runs.",
        )
    return fd


def _named(home: Path, timeout: float) -> DaemonState:
    """The running daemon's state once its file names it: a daemon takes its lock at its start and writes its
    state a moment later, and a look in between (another launch's, under load) would read "running, pid
    unknown". Waited for up to ``timeout``; a daemon that never names itself is answered as it is."""
    deadline = time.monotonic() + timeout
    current = state(home)
    while current.running and current.pid is None and time.monotonic() < deadline:
        time.sleep(0.02)
        current = state(home)
    return current


def start_detached(home: Path | None = None, timeout: float = 10.0) -> tuple[DaemonState, bool]:
    """Start the home's daemon in the background: (its state, whether this call started it).

    One that runs already is the answer, not a failure: ``corral daemon start`` asks for a
    running daemon, and a launch may have started it a moment before.
    """
    home = home or corral_home()
    fd = _starting(home, timeout)
    try:
        current = state(home)
        if current.running:
            return _named(home, timeout), False
        return _spawn(home, timeout, announce=False), True  # the command's own answer says so
    finally:
        os.close(fd)


def ensure_running(home: Path | None = None, timeout: float = 10.0) -> DaemonState:
    """The home's daemon, started when none runs; never two (a concurrent start is joined).

    A start made here is told to this process's listeners (:func:`announcing`).
    """
    home = home or corral_home()
    current = state(home)
    if current.running and current.pid is not None:
        return current
    fd = _starting(home, timeout)  # one being started by another launch has its start lock held until it runs
    try:
        current = state(home)
        if current.running:
            return _named(home, timeout)
        return _spawn(home, timeout, announce=True)
    finally:
        os.close(fd)


def stop_running(home: Path | None = None, timeout: float = STOP_GRACE) -> DaemonState:
    """Stop the home's daemon: SIGTERM, then SIGKILL after ``timeout`` s (each only to the process recorded)."""
    home = home or corral_home()
    current = state(home)
    if not current.running or current.pid is None:
        return current
    signal_recorded(current.pid, current.started_at, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and state(home).running:
        time.sleep(0.05)
    if state(home).running:
        signal_recorded(current.pid, current.started_at, signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and state(home).running:
            time.sleep(0.05)
    return state(home)
