"""``corral`` run inside the test process, as ``python -m corral`` would run as a process of its own.

A process costs a test about 150 ms of interpreter start-up and imports per call; most CLI tests
are about what a command answers, not about the process it runs in. :func:`run` calls the real
entry point (:func:`corral.cli.main`, what ``python -m corral`` runs) with what a process would
be given, and hands back what a process would give:

- the arguments (``sys.argv`` as ``-m`` sets it too), the working directory (changed for the call
  and back) and the environment (applied for the call, then restored whole, whatever the command
  set in it; a changed ``TZ`` is re-read, as a process reads it at start);
- file descriptors 0, 1 and 2 are pipes for the call, as ``subprocess.run`` makes them: the stdin
  bytes are fed and closed, stdout and stderr are drained apart, and a program the command runs
  writes to the same pipes (a real process's child would), so nothing of the call's output is
  lost or mixed in with the test's own. ``sys.stdin``/``stdout``/``stderr`` (and ``sys.__std*__``)
  are new text streams on them, configured as a fresh interpreter configures them here (asked once
  of a real one: encoding, error handler, buffering);
- the exit code is the one the interpreter would exit with: ``main``'s return value or a
  ``SystemExit``'s code, as ``sys.exit`` turns it into a status (a message printed, 1; modulo 256),
  after stdout and stderr are flushed as at exit.

What a process would take with it when it ends is undone after the call: signal handlers, the
signal mask and wake-up descriptor, the umask, logging's handlers, warnings filters, and what
corral keeps per process (memoized look-ups, a reader's cached listing, a turn's ref watches):
each call begins as a fresh process would, with none of the test's or an earlier call's. What
cannot be undone is refused loudly instead of leaking into the next test: a thread the command
left running, a change of process group or session.

A call that cannot be made exactly in-process is named by :func:`unfit` (the test gets a process
for it, or an error saying so); a test about a process boundary (signals, a terminal, a broken
pipe, a process killed mid-command, start-up cost) asks for a process outright.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TextIO

#: Variables corral reads once, when a module is imported (:mod:`corral.crashpoints`): a process
#: started with them behaves differently from one that imported corral without them.
READ_AT_IMPORT = ("CORRAL_CRASH_AT", "CORRAL_CRASH_TRACE")

#: Per-process state corral keeps in module globals, emptied for each call as a new process has it
#: empty: (module, attribute, what a process's exit does to an entry the call left). Named, not
#: searched for, so a module that moves fails here at once.
PROCESS_STATE: tuple[tuple[str, str, Callable[[Any], None] | None], ...] = (
    ("corral.engine.runtime.marked", "_listed", None),  # a reader's listing of the marked directory, 0.5 s
    ("corral.engine.runtime.ref_snapshot", "_watches", lambda held: held[1].close()),  # a turn's inotify watch
    ("corral.crashpoints", "_seen", None),  # how often this process reached each crash point
)


class CallTimeout(subprocess.TimeoutExpired):
    """The call ran past its ``timeout``, as ``subprocess.run`` raises for a process."""


class LeftBehind(AssertionError):
    """The command left something in the test process that a process's exit would have ended."""


@dataclass(frozen=True)
class Stdio:
    """How a fresh interpreter sets up one standard stream on a pipe."""

    encoding: str
    errors: str
    line_buffering: bool
    write_through: bool
    buffered: bool  # a buffered binary layer (False: PYTHONUNBUFFERED's raw file)


@dataclass(frozen=True)
class StartUp:
    """What an interpreter fixes at start-up from its environment and keeps."""

    stdin: Stdio
    stdout: Stdio
    stderr: Stdio
    ctype: str  # the LC_CTYPE locale it runs in
    preferred: str  # locale.getpreferredencoding(False): subprocess's text mode decodes with it
    filesystem: tuple[str, str]
    utf8_mode: int


_PROBE = """
import json, locale, sys
def of(s):
    return [s.encoding, s.errors, s.line_buffering, s.write_through, type(s.buffer).__name__ != "FileIO"]
print(json.dumps([of(sys.stdin), of(sys.stdout), of(sys.stderr), locale.setlocale(locale.LC_CTYPE),
    locale.getpreferredencoding(False), [sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()],
    sys.flags.utf8_mode]))
"""


def _start_up_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(("PYTHON", "LC_")) or k == "LANG"))


@cache
def _start_up(key: tuple[tuple[str, str], ...]) -> StartUp:
    """Asked of a real interpreter started with these variables, on pipes, as a spawned ``corral`` is."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith(("PYTHON", "LC_")) or k == "LANG")}
    env.update(key)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, input=b"", capture_output=True, check=True, timeout=60
    ).stdout
    stdin, stdout, stderr, ctype, preferred, filesystem, utf8_mode = json.loads(out)
    return StartUp(Stdio(*stdin), Stdio(*stdout), Stdio(*stderr), ctype, preferred, tuple(filesystem), utf8_mode)


def _this_interpreter() -> tuple[str, str, tuple[str, str], int]:
    import locale

    filesystem = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
    return locale.setlocale(locale.LC_CTYPE), locale.getpreferredencoding(False), filesystem, sys.flags.utf8_mode


def unfit(env: Mapping[str, str]) -> str | None:
    """Why a process with environment ``env`` would behave differently from this one, or None."""
    read = [name for name in READ_AT_IMPORT if env.get(name)]
    if read:
        return f"corral reads {', '.join(read)} when it starts"
    if threading.current_thread() is not threading.main_thread():
        return "only the main thread can lend the call its working directory, descriptors and signals"
    fresh = _start_up(_start_up_key(env))
    if (fresh.ctype, fresh.preferred, fresh.filesystem, fresh.utf8_mode) != _this_interpreter():
        return "its locale or Python start-up settings differ from this interpreter's"
    return None


def run(
    args: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdin: bytes, timeout: float | None
) -> tuple[int, bytes, bytes]:
    """``corral ARGS`` in ``cwd`` with exactly ``env``: (exit code, stdout, stderr), as a process.

    Raises :class:`CallTimeout` past ``timeout`` seconds, and :class:`LeftBehind` when the command
    left state in this process that cannot be undone. The caller checks :func:`unfit` first.
    """
    started = time.monotonic()
    fresh = _start_up(_start_up_key(env))
    saved = _Saved.take()
    held = _forget_process_state()
    pipes = _Pipes.open(stdin)
    code: int | None = None
    try:
        os.chdir(cwd)
        _set_environ(env)
        sys.argv = [_MAIN, *args]
        with pipes.as_stdio(fresh), _deadline(timeout, args):
            code = _exit_status(_entry(), list(args))
            code = _flush_at_exit(code)
    finally:
        pipes.close_ours()
        saved.restore()
        _restore_process_state(held)
    out, err = pipes.drained(_left(started, timeout), args)
    saved.check_left_behind(args)
    return code, out, err


# -- the entry point -------------------------------------------------------------------------

_MAIN = str(Path(importlib.util.find_spec("corral.__main__").origin))  # type: ignore[union-attr]


def _entry() -> Callable[[list[str]], int]:
    from corral.cli import main

    return main


def _exit_status(main: Callable[[list[str]], int], args: list[str]) -> int:
    """What ``sys.exit(main())`` ends the interpreter with (Python's handling of SystemExit)."""
    try:
        value: object = main(args)
    except SystemExit as exc:
        value = exc.code
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _flush_at_exit(code: int) -> int:
    """The interpreter flushes stdout and stderr at exit; one that cannot makes the status 120."""
    failed = False
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            failed = True
    return 120 if failed and code == 0 else code


# -- descriptors 0, 1, 2 -----------------------------------------------------------------------


class _Pipes:
    def __init__(self, stdin: bytes) -> None:
        self.data = stdin
        self.saved: dict[int, tuple[int, bool]] = {}  # descriptor -> (a copy of it, whether inheritable)
        self.threads: list[threading.Thread] = []
        self.chunks: dict[int, list[bytes]] = {1: [], 2: []}
        self.ends: dict[int, int] = {}  # descriptor -> the end that becomes it (ours to close)
        self.streams: list[TextIO] = []

    @classmethod
    def open(cls, stdin: bytes) -> _Pipes:
        pipes = cls(stdin)
        read_in, write_in = map(_high, os.pipe())
        read_out, write_out = map(_high, os.pipe())
        read_err, write_err = map(_high, os.pipe())
        pipes.ends = {0: read_in, 1: write_out, 2: write_err}
        pipes.threads = [
            threading.Thread(target=_feed, args=(write_in, stdin), name="corral-stdin", daemon=True),
            threading.Thread(target=_drain, args=(read_out, pipes.chunks[1]), name="corral-stdout", daemon=True),
            threading.Thread(target=_drain, args=(read_err, pipes.chunks[2]), name="corral-stderr", daemon=True),
        ]
        for thread in pipes.threads:
            thread.start()
        return pipes

    @contextlib.contextmanager
    def as_stdio(self, fresh: StartUp) -> Iterator[None]:
        for fd in (0, 1, 2):
            self.saved[fd] = (os.dup(fd), os.get_inheritable(fd))
        for fd, end in self.ends.items():
            os.dup2(end, fd)  # inheritable, as a process's 0, 1 and 2 are
            os.close(end)
        self.ends = {}
        self.streams = [_stream(0, "<stdin>", fresh.stdin), _stream(1, "<stdout>", fresh.stdout)]
        self.streams.append(_stream(2, "<stderr>", fresh.stderr))
        sys.stdin, sys.stdout, sys.stderr = self.streams  # type: ignore[assignment]
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = self.streams  # type: ignore[misc]
        yield

    def close_ours(self) -> None:
        """Descriptors 0, 1, 2 back as they were: this process holds no end of the call's pipes."""
        for stream in self.streams:
            with contextlib.suppress(OSError, ValueError):
                stream.close()  # closefd=False: only the wrappers
        for fd, (old, inheritable) in self.saved.items():
            os.dup2(old, fd, inheritable=inheritable)
            os.close(old)
        self.saved = {}
        for end in self.ends.values():
            os.close(end)
        self.ends = {}

    def drained(self, left: float | None, args: Sequence[str]) -> tuple[bytes, bytes]:
        """The call's stdout and stderr, once every writer (a program it left running too) closed them."""
        deadline = None if left is None else time.monotonic() + left
        for thread in self.threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out, err = b"".join(self.chunks[1]), b"".join(self.chunks[2])
        if any(t.is_alive() for t in self.threads):
            raise CallTimeout(["corral", *args], left or 0, out, err)
        return out, err


def _high(fd: int) -> int:
    """``fd`` moved above 2 (this process's 0, 1 or 2 may have been closed and a pipe taken its number)."""
    if fd > 2:
        return fd
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _stream(fd: int, name: str, how: Stdio) -> TextIO:
    raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
    raw.name = name  # type: ignore[misc]  # as the interpreter names its own
    binary: Any = raw
    if how.buffered:
        binary = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        binary,
        encoding=how.encoding,
        errors=how.errors,
        line_buffering=how.line_buffering,
        write_through=how.write_through,
    )


def _feed(fd: int, data: bytes) -> None:
    """Write the call's stdin, then close it (end of file), as ``communicate`` does."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 1 << 16]) :]
    except BrokenPipeError:  # the command did not read it all, and its end is gone
        pass
    finally:
        os.close(fd)


def _drain(fd: int, into: list[bytes]) -> None:
    try:
        while chunk := os.read(fd, 1 << 16):
            into.append(chunk)
    finally:
        os.close(fd)


def _left(started: float, timeout: float | None) -> float | None:
    return None if timeout is None else max(0.0, timeout - (time.monotonic() - started))


@contextlib.contextmanager
def _deadline(timeout: float | None, args: Sequence[str]) -> Iterator[None]:
    """``timeout`` seconds for the call (SIGALRM), then :class:`CallTimeout`; an alarm already set
    (pytest-timeout's) is kept, and fires in its place when it comes first."""
    if timeout is None:
        yield
        return
    outer = signal.getsignal(signal.SIGALRM)
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if outer_delay and outer_delay <= timeout:
        yield  # the outer alarm comes first, and is the one that fires
        return
    began = time.monotonic()

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise _Expired

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    except _Expired:
        raise CallTimeout(["corral", *args], timeout) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer)
        if outer_delay:
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer_delay - (time.monotonic() - began)), outer_interval)


class _Expired(BaseException):
    """Raised by the call's alarm: a BaseException, so the entry's last line of defence lets it by."""


# -- the environment -----------------------------------------------------------------------


def _set_environ(env: Mapping[str, str]) -> None:
    """``os.environ`` becomes exactly ``env`` (a change of ``TZ`` is re-read, as a process reads it)."""
    tz = os.environ.get("TZ")
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    if os.environ.get("TZ") != tz:
        time.tzset()


# -- what a process takes with it when it ends ----------------------------------------------------

_SIGNALS = sorted(set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP})


@dataclass
class _Saved:
    cwd: str
    environ: dict[str, str]
    umask: int
    handlers: dict[int, Any]
    mask: set[signal.Signals]
    wakeup_fd: int
    stdio: tuple[Any, ...]
    argv: list[str]
    loggers: dict[str, tuple[list[logging.Handler], int, bool, bool]]
    disabled: int
    warning_filters: list[Any]
    threads: set[threading.Thread]
    exits: int
    modules: int
    group: tuple[int, int]

    @classmethod
    def take(cls) -> _Saved:
        umask = os.umask(0o022)
        os.umask(umask)
        wakeup_fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(wakeup_fd)
        return cls(
            cwd=os.getcwd(),
            environ=dict(os.environ),
            umask=umask,
            handlers={s: signal.getsignal(s) for s in _SIGNALS},
            mask=signal.pthread_sigmask(signal.SIG_BLOCK, []),
            wakeup_fd=wakeup_fd,
            stdio=(sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__),
            argv=list(sys.argv),
            loggers={name: _logger_state(logger) for name, logger in _loggers()},
            disabled=logging.root.manager.disable,
            warning_filters=list(warnings.filters),
            threads=set(threading.enumerate()),
            exits=atexit._ncallbacks(),
            modules=len(sys.modules),
            group=(os.getpgrp(), os.getsid(0)),
        )

    def restore(self) -> None:
        (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__) = self.stdio
        sys.argv = self.argv
        os.chdir(self.cwd)
        _set_environ(self.environ)
        os.umask(self.umask)
        for signum, handler in self.handlers.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        signal.set_wakeup_fd(self.wakeup_fd)
        for name, logger in _loggers():
            handlers, level, propagate, disabled = self.loggers.get(name, ([], logging.NOTSET, True, False))
            for handler in logger.handlers:
                if handler not in handlers:
                    handler.close()  # as logging.shutdown closes it when a process exits
            logger.handlers[:] = handlers
            logger.level, logger.propagate, logger.disabled = level, propagate, disabled
        logging.disable(self.disabled)
        warnings.filters[:] = self.warning_filters
        warnings._filters_mutated()  # type: ignore[attr-defined]

    def check_left_behind(self, args: Sequence[str]) -> None:
        """What a process's exit would end and this one cannot: refused, naming the command."""
        said = f"`corral {' '.join(args)}` run in the test process"
        if (os.getpgrp(), os.getsid(0)) != self.group:
            raise LeftBehind(f"{said} moved it to another process group or session: run it as a process")
        new = [t for t in threading.enumerate() if t not in self.threads and not t.name.startswith("corral-std")]
        deadline = time.monotonic() + 2.0
        for thread in new:
            while True:
                try:
                    thread.join(max(0.0, deadline - time.monotonic()))
                    break
                except RuntimeError:  # started a moment ago by another thread (a test's server), not yet running
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.001)
        running = [t.name for t in new if t.is_alive()]
        if running:
            raise LeftBehind(f"{said} left threads running ({', '.join(running)}): run it as a process")
        # A module may register an exit handler when it is first imported, once per process as in a
        # spawned one (``weakref.finalize`` does on first use: done below); a handler registered by a
        # command that imported nothing new is the command's, and would have run when it exited.
        if atexit._ncallbacks() > self.exits and len(sys.modules) == self.modules:
            raise LeftBehind(f"{said} registered an exit handler a process would have run at exit: run it as a process")


def _warm_finalize() -> None:
    """``weakref.finalize`` registers its one exit handler on first use (a ``TemporaryDirectory``'s):
    once per process, made here so a command's first use is not taken for one of its own."""

    class Probe:
        pass

    probe = Probe()
    weakref.finalize(probe, lambda: None).detach()


_warm_finalize()


def _loggers() -> list[tuple[str, logging.Logger]]:
    found: list[tuple[str, logging.Logger]] = [("", logging.root)]
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            found.append((name, logger))
    return found


def _logger_state(logger: logging.Logger) -> tuple[list[logging.Handler], int, bool, bool]:
    return list(logger.handlers), logger.level, logger.propagate, logger.disabled


# -- corral's own per-process state ------------------------------------------------------------


@cache
def _checked() -> list[tuple[dict[Any, Any], Callable[[Any], None] | None]]:
    found = []
    for module_name, name, end in PROCESS_STATE:
        module = importlib.import_module(module_name)
        value = getattr(module, name, None)
        if not isinstance(value, dict):
            raise AssertionError(f"{module_name}.{name} is gone: update PROCESS_STATE in {__name__}")
        found.append((value, end))
    return found


def _forget_process_state() -> list[tuple[dict[Any, Any], dict[Any, Any], Callable[[Any], None] | None]]:
    """Every memo in corral's modules emptied, and the named globals set aside (the test's own,
    kept for it) and emptied: the call starts with what a fresh process has."""
    _clear_memos()
    held = []
    for value, end in _checked():
        held.append((value, dict(value), end))
        value.clear()
    return held


def _restore_process_state(held: list[tuple[dict[Any, Any], dict[Any, Any], Callable[[Any], None] | None]]) -> None:
    """The call's own state ends with it (as a process's exit ends it: a ref watch is closed); the
    test's comes back."""
    for value, before, end in held:
        if end is not None:
            for entry in value.values():
                end(entry)
        value.clear()
        value.update(before)
    _clear_memos()


def _clear_memos() -> None:
    """``functools.cache``/``lru_cache`` memos in corral's modules: a process starts without them."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "corral" or name.startswith("corral.")):
            continue
        for value in _memos_of(name, module):
            value.cache_clear()


#: Each corral module's memos as last found: (the module, how many globals it had, the memos by name).
_found_memos: dict[str, tuple[ModuleType, int, tuple[tuple[str, Any], ...]]] = {}


def _memos_of(name: str, module: ModuleType) -> list[Any]:
    """The memos among ``module``'s globals (made in it: an imported one is its own module's).

    Looking at every global of every corral module takes milliseconds, twice per call; the answer is
    kept per module and looked for again when the module was imported anew, gained or lost a global, or
    one of its memos was rebound (a test's monkeypatch)."""
    namespace = vars(module)
    kept = _found_memos.get(name)
    if (
        kept is not None
        and kept[0] is module
        and kept[1] == len(namespace)
        and all(namespace.get(key) is value for key, value in kept[2])
    ):
        return [value for _, value in kept[2]]
    found = tuple(
        (key, value)
        for key, value in list(namespace.items())
        if getattr(value, "cache_clear", None) is not None and getattr(value, "__module__", None) == name
    )
    _found_memos[name] = (module, len(namespace), found)
    return [value for _, value in found]
