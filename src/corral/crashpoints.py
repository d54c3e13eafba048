"""Named durability points where tests make a process die, to prove recovery.

A test sets ``CORRAL_CRASH_AT=<name>`` or ``<name>#<n>`` (the n-th time this process
reaches it), and optionally ``CORRAL_CRASH_HOW=kill`` (SIGKILL instead of
``os._exit``); the process dies there at once, with no cleanup. ``CORRAL_CRASH_HOW=raise``
makes only the thread that reaches it die, with :class:`CrashPoint` (a worker's job dying
with a fault of corral's own). Nothing but tests sets the variable.
``CORRAL_CRASH_TRACE=<file>`` appends every point reached, so a test can enumerate the
points an operation passes.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "CORRAL_CRASH_AT"
_seen: Counter[str] = Counter()


# Read once: a process's crash point is fixed when it starts (tests set it for a fresh process),
# and hit() sits on the hot path of every commit.
_WANTED = os.environ.get(ENV)
_TRACE = os.environ.get("CORRAL_CRASH_TRACE")


def hit(name: str) -> None:
    trace, wanted = _TRACE, _WANTED
    if not wanted and not trace:
        return
    _seen[name] += 1
    if trace:
        with open(trace, "a", encoding="utf-8") as fh:
            fh.write(f"{name}#{_seen[name]}\n")
    if not wanted:
        return
    point, _, nth = wanted.partition("#")
    if point != name or (nth and int(nth) != _seen[name]):
        return
    how = os.environ.get("CORRAL_CRASH_HOW")
    if how == "raise":
        raise CrashPoint(f"crash point {name} reached")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)


class CrashPoint(RuntimeError):
    """A test's crash point, reached under ``CORRAL_CRASH_HOW=raise``: a fault no code of corral expects."""
