"""The files that cross the process boundary between corral and a turn's supervisor, typed: one face.

A turn's protocol directory holds ``command.json`` (:class:`Command`: what to do, with
every setting already resolved), ``status.json`` (:class:`SupervisorStatus`: pid, phase,
heartbeat, live retry state), ``progress.json`` (:class:`Progress`: an agent's ephemeral
progress line), ``stop.json`` (:class:`StopRequest`) and finally ``response.json``
(:class:`Receipt`: the turn's outcome, attempts, evidence and git facts). Each is a frozen
msgspec record, validated when read, in a module of its own:

* ``runtime/turn_command.py``: ``command.json`` and the settings it carries;
* ``runtime/turn_status.py``: ``status.json``, ``progress.json``, ``stop.json``;
* ``runtime/turn_outcome.py``: ``response.json``, its attempts, evidence and git facts;
* ``runtime/wire.py``: the protocol's version and bound, the one writer and the one reader, and
  why a file could not be used (:class:`Problem`, :class:`Unreadable`).

Callers use this face (``from corral.engine.runtime import protocol as proto``; ``proto.Command``,
``proto.read``): it names every record and function of the four. The writer, the reader and the
live reports load with it; the command's and the receipt's modules load on their first use here,
since they bring the sandbox's, the read-only turn's and the ref guard's records with them, which
``list`` (reading only the running turns' ``status.json``) never needs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from corral.engine.runtime.turn_status import AccountWait, Progress, RetryState, StopRequest, SupervisorStatus
from corral.engine.runtime.wire import (
    COMMAND,
    JSON,
    MAX_BYTES,
    PROGRESS,
    PROTOCOL_VERSION,
    RESPONSE,
    STATUS,
    STOP,
    Document,
    Problem,
    ShapeError,
    TooLarge,
    Unreadable,
    Wire,
    read,
    read_document,
    read_raw,
    read_record,
    remove,
    write,
    write_command,
    write_json,
)

if TYPE_CHECKING:
    from corral.engine.runtime.turn_command import (
        AgentToolsSpec as AgentToolsSpec,
    )
    from corral.engine.runtime.turn_command import (
        CheckSpec as CheckSpec,
    )
    from corral.engine.runtime.turn_command import (
        Command as Command,
    )
    from corral.engine.runtime.turn_command import (
        Fence as Fence,
    )
    from corral.engine.runtime.turn_command import (
        HarnessSettings as HarnessSettings,
    )
    from corral.engine.runtime.turn_command import (
        Watchdog as Watchdog,
    )
    from corral.engine.runtime.turn_outcome import (
        REAPED_KEPT as REAPED_KEPT,
    )
    from corral.engine.runtime.turn_outcome import (
        AttemptRecord as AttemptRecord,
    )
    from corral.engine.runtime.turn_outcome import (
        CheckResult as CheckResult,
    )
    from corral.engine.runtime.turn_outcome import (
        ErrorKind as ErrorKind,
    )
    from corral.engine.runtime.turn_outcome import (
        GitFacts as GitFacts,
    )
    from corral.engine.runtime.turn_outcome import (
        Reaped as Reaped,
    )
    from corral.engine.runtime.turn_outcome import (
        Receipt as Receipt,
    )
    from corral.engine.runtime.turn_outcome import (
        ReceiptStatus as ReceiptStatus,
    )
    from corral.engine.runtime.turn_outcome import (
        SyncReport as SyncReport,
    )
    from corral.engine.runtime.turn_outcome import (
        TurnError as TurnError,
    )

#: The names this face gives on their first use, and the module each lives in.
_LATER = {
    **dict.fromkeys(
        ("AgentToolsSpec", "CheckSpec", "Command", "Fence", "HarnessSettings", "Watchdog"),
        "corral.engine.runtime.turn_command",
    ),
    **dict.fromkeys(
        (
            "REAPED_KEPT",
            "AttemptRecord",
            "CheckResult",
            "ErrorKind",
            "GitFacts",
            "Reaped",
            "Receipt",
            "ReceiptStatus",
            "SyncReport",
            "TurnError",
        ),
        "corral.engine.runtime.turn_outcome",
    ),
}

__all__ = [
    "COMMAND",
    "JSON",
    "MAX_BYTES",
    "PROGRESS",
    "PROTOCOL_VERSION",
    "RESPONSE",
    "STATUS",
    "STOP",
    "AccountWait",
    "Document",
    "Problem",
    "Progress",
    "RetryState",
    "ShapeError",
    "StopRequest",
    "SupervisorStatus",
    "TooLarge",
    "Unreadable",
    "Wire",
    "read",
    "read_document",
    "read_raw",
    "read_record",
    "remove",
    "write",
    "write_command",
    "write_json",
    *_LATER,
]


def __getattr__(name: str) -> object:
    """A record of ``command.json`` or ``response.json``, its module loaded now (PEP 562)."""
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # the next look-up is a plain one
    return value
