"""Named durability points where tests make a process die, to prove recovery.

A test sets ``CORRAL_CRASH_AT=<name>`` (and optionally ``CORRAL_CRASH_HOW=kill``);
the process that reaches that point dies there at once, with no cleanup. Nothing
but tests sets the variable.
"""

from __future__ import annotations

import os
import signal

ENV = "CORRAL_CRASH_AT"


def hit(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted or wanted != name:
        return
    if os.environ.get("CORRAL_CRASH_HOW") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)
