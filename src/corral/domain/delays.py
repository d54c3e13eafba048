"""Every wait a turn makes, as data: the retry ladder's steps, the crash-loop window, the grace
periods, the heartbeat's period and the output's drain.

A turn's supervisor is a detached process: it cannot be given a module constant, only its
``command.json``. So each wait it makes is a setting (``corral.domain.settings``, the defaults'
and the ranges' one home), resolved once when the command is built (:meth:`Delays.of`) and
carried in the command, where the supervisor reads it for every wait. Each is a user-only
setting: a repository's ``corral.toml`` could otherwise shorten them (its turns killed at once,
a provider retried without pause) or lengthen them (a crash loop never seen); a person sets
them in their own file or the environment, and the tests set them to milliseconds that way.
The watchdog's grace between SIGTERM and SIGKILL (the ``term_grace`` setting, user-only too) rides
in the command's ``watchdog`` record beside its timeout, where a supervisor has always read it.

What a reader outside the turn judges by them (a heartbeat gone stale) it reads from its own
settings: the same person's, so the same values.

A command's own waits (:class:`HostWaits`: how long a write waits on a busy store, how long
``corral stop`` waits for the turn to end) are user-only settings too, resolved once when a
project opens rather than module constants, so a test sets them short the same way.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from msgspec import Struct

from corral.domain.settings import BY_NAME, default

#: A heartbeat missed this many times over says the supervisor is frozen, stopped or gone: ten,
#: so a loaded machine's late beat is never taken for one.
STALE_BEATS = 10

#: The first wait after an unclassified failure that came fast, in seconds (then doubled): a deterministic
#: failure shows as a crash loop within seconds. A shorter ``retry_delay_unknown`` shortens it too.
FAST_RETRY_FIRST = 1.0


class Settings(Protocol):
    """Whatever holds the resolved settings by name (the engine's ``Config``)."""

    def __getitem__(self, name: str, /) -> Any: ...


class Delays(Struct, frozen=True):
    """The waits of one turn, in seconds; each field is the setting of its name."""

    #: The transient ladder's first step (overload, network, unreachable); each next step doubles.
    retry_delay_first: float = default("retry_delay_first", float)
    #: The unclassified failure's ladder's first step; each next step doubles.
    retry_delay_unknown: float = default("retry_delay_unknown", float)
    #: The longest step of either ladder.
    retry_delay_longest: float = default("retry_delay_longest", float)
    #: An unclassified failure's attempt shorter than this is fast: three in a row are a crash loop.
    crash_loop_window: float = default("crash_loop_window", float)
    #: What the agent's leftover processes get between SIGTERM and SIGKILL at an attempt's end.
    reap_grace: float = default("reap_grace", float)
    #: The supervisor's heartbeat period (``status.json``); :attr:`stale_heartbeat` is ten of them.
    heartbeat_interval: float = default("heartbeat_interval", float)
    #: Once the agent exited, its streams are read until they are quiet this long...
    drain_quiet: float = default("drain_quiet", float)
    #: ...or this long at most (a background child that never stops writing does not hold the turn).
    drain_longest: float = default("drain_longest", float)
    #: How often a turn waiting behind its account's first task through looks again.
    usage_limit_poll: float = default("usage_limit_poll", float)
    #: The longest a turn waiting for its account's usage-limit reset sleeps before it looks again.
    usage_limit_nap: float = default("usage_limit_nap", float)

    @classmethod
    def of(cls, settings: Settings) -> Delays:
        """The delays the resolved ``settings`` give (the engine's ``Config``), once per command."""
        return cls(**{name: float(settings[name]) for name in NAMES})

    @property
    def stale_heartbeat(self) -> float:
        """A heartbeat older than this says its supervisor is frozen, stopped or gone."""
        return STALE_BEATS * self.heartbeat_interval

    def transient_step(self, attempt: int) -> float:
        """The wait after the ``attempt``-th transient failure in a row: 5, 10, 20, 40, then 60 by default."""
        return _step(self.retry_delay_first, self.retry_delay_longest, attempt)

    def fast_step(self, fast: int) -> float:
        """The wait after the ``fast``-th unclassified failure in a row that came within the crash-loop
        window: 1 s, then 2 s by default (never longer than the unknown ladder's first step)."""
        return _step(min(FAST_RETRY_FIRST, self.retry_delay_unknown), self.retry_delay_longest, fast)

    def unknown_step(self, attempt: int) -> float:
        """The wait after the ``attempt``-th unclassified failure in a row: 15, 30, then 60 by default."""
        return _step(self.retry_delay_unknown, self.retry_delay_longest, attempt)

    def __post_init__(self) -> None:
        """Run when the record is made and when a command is read: a value that is no number in its
        setting's range was not resolved from the settings, and a command carrying one is refused for
        its shape (msgspec's decode turns the error into a validation error naming the field)."""
        for name in NAMES:
            value = getattr(self, name)
            why = BY_NAME[name].refusal(value)
            if why is not None:
                raise ValueError(f"delays.{name} is {value!r}, but it {why}")


def _step(first: float, longest: float, attempt: int) -> float:
    """``first`` doubled for each attempt after the first, never past ``longest``."""
    if attempt <= 1:
        return min(first, longest)
    doubled = first * math.pow(2.0, min(attempt - 1, 64))
    return min(doubled, longest)


#: The settings a turn's delays are made of, in :class:`Delays`' order.
NAMES: tuple[str, ...] = (
    "retry_delay_first",
    "retry_delay_unknown",
    "retry_delay_longest",
    "crash_loop_window",
    "reap_grace",
    "heartbeat_interval",
    "drain_quiet",
    "drain_longest",
    "usage_limit_poll",
    "usage_limit_nap",
)


class HostWaits(Struct, frozen=True):
    """The waits of the process that opened a project (a command, the daemon, a worker), in seconds."""

    #: How long a write waits for another process's hold on the records (SQLite's busy timeout,
    #: PostgreSQL's lock timeout) before it is refused with ``store-busy``.
    store_busy_timeout: float = default("store_busy_timeout", float)
    #: How long ``corral stop`` waits for the supervisor, or the host that runs the turn, to end it.
    stop_wait: float = default("stop_wait", float)

    @classmethod
    def of(cls, settings: Settings) -> HostWaits:
        """The waits the resolved ``settings`` give, once per opened project."""
        return cls(**{name: float(settings[name]) for name in HOST_NAMES})

    def __post_init__(self) -> None:
        """A value out of its setting's range was not resolved from the settings: refused."""
        for name in HOST_NAMES:
            value = getattr(self, name)
            why = BY_NAME[name].refusal(value)
            if why is not None:
                raise ValueError(f"waits.{name} is {value!r}, but it {why}")


#: The settings a process's own waits are made of, in :class:`HostWaits`' order.
HOST_NAMES: tuple[str, ...] = ("store_busy_timeout", "stop_wait")
