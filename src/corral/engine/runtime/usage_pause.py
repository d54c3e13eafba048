"""The shared usage-limit pause: one record per harness account, in one file under ``CORRAL_HOME``.

When a harness reports its account's usage limit, every task on that account waits for the
reset together (docs/harnesses.md#usage-limits). The file is shared by every project and
process through a lock, so no daemon is needed. At the reset one task goes first — the
*first* — and the rest wait until it gets through (its first model response), so nobody
stampedes into a limit that has not really cleared. A first that ends without getting
through gives its place up; one that died, or took longer than ``FIRST_THROUGH_SECONDS``,
loses it to the next task that asks.

Record (``accounts[account]``): ``harness``, ``resets_at`` and ``noted_at`` (RFC 3339),
``reason`` (the harness's words, masked), ``first`` (``task_id``, ``pid``, ``pid_start``,
``since``) or null.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from corral.adapters.files import read_bounded, write_atomic
from corral.adapters.locks import lock
from corral.adapters.pid_identity import proc_info
from corral.domain.clock import parse_time, rfc3339, utcnow
from corral.domain.failures import RETRY_REASON_BYTES
from corral.domain.usage_limit import FIRST_THROUGH_SECONDS

if TYPE_CHECKING:  # the supervisor reads the file without loading the project
    from corral.engine.project import Project

MAX_BYTES = 1 << 20
#: No reset a supervisor notes is further away than its overload budget (whose default is 6 h and
#: whose user may raise it); a record further than this was not written by one.
MAX_PAUSE = timedelta(days=31)
SKEW = timedelta(seconds=5)
#: The longest account key (``<harness>:<16 hex digits>``) and harness name a shared pause may name.
ACCOUNT_MAX = 200
HARNESS_MAX = 64
#: The most pauses taken from the store in one exchange: a team has a few accounts per person, and this many
#: at their bounds (escaped in the worst way) keep this file well under :data:`MAX_BYTES`.
SHARED_MAX = 100
LOCK_TIMEOUT_SECONDS = 10.0


class Turn(Struct, frozen=True):
    """What :meth:`UsagePauses.turn` answers: go now, or wait (until ``until`` at most, then ask again)."""

    go: bool
    until: datetime | None = None
    resets_at: datetime | None = None
    first: bool = False  # this task goes first after the reset


class UsagePauses:
    """The pause file of one ``CORRAL_HOME``; ``clock`` and ``pid`` are injectable for tests."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], datetime] = utcnow,
        pid: int | None = None,
        pid_start: int | None = None,
    ) -> None:
        self.path = path
        self.lock_path = path.with_suffix(".lock")
        self.clock = clock
        self.pid = os.getpid() if pid is None else pid
        self.pid_start = pid_start

    # -- what a supervisor does ---------------------------------------------------------
    def note(self, account: str, harness: str, resets_at: datetime, reason: str, task_id: str) -> datetime:
        """The account hit its limit until ``resets_at`` (a later reset already noted wins); returns the reset."""
        with self._accounts() as accounts:
            entry = accounts.get(account)
            known = _time(entry.get("resets_at")) if entry else None
            at = max(resets_at, known) if known else resets_at
            first = entry.get("first") if entry else None
            accounts[account] = {
                "harness": harness,
                "resets_at": rfc3339(at),
                "noted_at": rfc3339(self.clock()),
                "reason": reason,
                # the first one hitting the limit again means it has not cleared: nobody is first now
                "first": None if first is None or first.get("task_id") == task_id else first,
            }
        return at

    def turn(self, account: str, task_id: str) -> Turn:
        """Whether ``task_id`` may call its harness now, taking the first place when it is free."""
        with self._accounts() as accounts:
            now = self.clock()  # read under the lock: a first place taken while we waited for it is not ahead of now
            entry = accounts.get(account)
            if entry is None:
                return Turn(True)
            resets_at = _time(entry.get("resets_at"))
            if resets_at is None or resets_at - now > MAX_PAUSE:
                # A record no supervisor writes (unreadable, or past any budget: a limit that far
                # parks its task instead): it must not hold every task of the account. Dropped.
                del accounts[account]
                return Turn(True)
            if now < resets_at:
                return Turn(False, until=resets_at, resets_at=resets_at)
            first = entry.get("first")
            if first is not None and first.get("task_id") == task_id:
                return Turn(True, resets_at=resets_at, first=True)
            if first is None or not self._holds(first, now):
                entry["first"] = {
                    "task_id": task_id,
                    "pid": self.pid,
                    "pid_start": self.pid_start,
                    "since": rfc3339(now),
                }
                return Turn(True, resets_at=resets_at, first=True)
            return Turn(False, until=None, resets_at=resets_at)

    def got_through(self, account: str, task_id: str) -> bool:
        """A model response after the reset: the limit cleared, everyone goes. True if this ended a pause."""
        with self._accounts() as accounts:
            entry = accounts.get(account)
            if entry is None:
                return False
            resets_at = _time(entry.get("resets_at"))
            if resets_at is not None and self.clock() < resets_at:
                return False  # a response before the reset it waits for is no proof it cleared
            del accounts[account]
            return True

    def give_up(self, account: str, task_id: str) -> None:
        """The first one's turn ended without getting through: the next one may go first."""
        with self._accounts() as accounts:
            entry = accounts.get(account)
            if entry is not None and (entry.get("first") or {}).get("task_id") == task_id:
                entry["first"] = None

    def exchange(self, shared: object) -> dict[str, Any]:
        """Share pauses with the other hosts (docs/workers.md#usage-limits): the store's pauses that still
        hold are taken into this file (a later reset wins), and what the store should hold is returned —
        every pause here or there that still holds. Who goes first after a reset stays each host's own."""
        with self._accounts() as accounts:
            now = self.clock()
            # Any host writes the store's document: one not shaped as pauses, or a pause no supervisor would
            # have noted (:func:`_shareable`), is ignored here and never copied into this file.
            taken = list(shared.items())[:SHARED_MAX] if isinstance(shared, dict) else []
            for account, raw in taken:
                found = _shareable(account, raw, now)
                if found is None:
                    continue
                theirs, resets_at = found
                mine = accounts.get(account)
                known = _time(mine.get("resets_at")) if mine else None
                if known is None or known < resets_at:
                    accounts[account] = {**theirs, "first": None}
            out = {}
            for account, entry in accounts.items():
                found = _shareable(account, entry, now)
                if found is not None:
                    out[account] = found[0]
            return out

    def read(self) -> dict[str, Any]:
        """Every account's record, as stored (for ``doctor`` and tests)."""
        return self._load()

    # -- the file ---------------------------------------------------------------------------
    def _holds(self, first: dict[str, Any], now: datetime) -> bool:
        """Whether the first one still holds its place: alive, and not past its time to get through."""
        since = _time(first.get("since"))
        # no time it took its place, one well ahead of now (a clock is read to the millisecond, in
        # another process), or too long ago: it holds nothing
        if since is None or not -SKEW <= now - since <= timedelta(seconds=FIRST_THROUGH_SECONDS):
            return False
        pid = first.get("pid")
        if not isinstance(pid, int):
            return False
        info = proc_info(pid)
        return info is not None and (first.get("pid_start") is None or info.start == first.get("pid_start"))

    def _load(self) -> dict[str, Any]:
        raw, _problem, _size = read_bounded(self.path, MAX_BYTES)
        if not raw:
            return {}
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            return {}  # a torn or foreign file is no pause: tasks go, and a new limit writes it anew
        accounts = doc.get("accounts") if isinstance(doc, dict) else None
        if not isinstance(accounts, dict):
            return {}
        kept = {}
        for key, entry in accounts.items():
            if isinstance(entry, dict):
                if not isinstance(entry.get("first"), dict):
                    entry["first"] = None  # anything else there names no task
                kept[str(key)] = entry
        return kept

    @contextmanager
    def _accounts(self) -> Iterator[dict[str, Any]]:
        """The accounts, changed in place under the lock and written back if they changed.

        The pause is bookkeeping beside the turn, never the turn's failure: a lock that cannot be
        taken or a file that cannot be written is said on stderr (the supervisor's log), and the
        turn goes on as if no account were paused.
        """
        try:
            fd = lock(self.lock_path, LOCK_TIMEOUT_SECONDS)
        except OSError as exc:
            print(f"corral: the usage-limit pause cannot be read: {exc}", file=sys.stderr)
            yield {}
            return
        try:
            accounts = self._load()
            before = json.dumps(accounts, sort_keys=True)
            yield accounts
            if json.dumps(accounts, sort_keys=True) != before:
                payload = json.dumps({"version": 1, "accounts": accounts}, indent=2, sort_keys=True) + "\n"
                try:
                    write_atomic(self.path, payload.encode("utf-8"))
                except OSError as exc:
                    print(f"corral: the usage-limit pause cannot be written: {exc}", file=sys.stderr)
        finally:
            if fd is not None:
                os.close(fd)


def _time(value: Any) -> datetime | None:
    """A stored time, or None for one that is missing or not a time (a foreign or broken record)."""
    if not isinstance(value, str):
        return None
    try:
        at = parse_time(value)
    except ValueError:
        return None
    return at if at is not None and at.tzinfo is not None else None  # a time with no zone is no time here


def _shareable(account: object, entry: object, now: datetime) -> tuple[dict[str, Any], datetime] | None:
    """A pause as the hosts share it, with its reset: its known fields only (``harness``, ``resets_at``,
    ``noted_at``, ``reason``), each of its type and within its bound (the reason cut to :data:`RETRY_REASON_BYTES`),
    its reset one that still holds and no further than :data:`MAX_PAUSE`; None for one no supervisor would
    have noted."""
    if not isinstance(account, str) or not 0 < len(account) <= ACCOUNT_MAX or not isinstance(entry, dict):
        return None
    resets_at = _time(entry.get("resets_at"))
    if resets_at is None or resets_at <= now or resets_at - now > MAX_PAUSE:
        return None
    harness, reason, noted_at = entry.get("harness"), entry.get("reason", ""), entry.get("noted_at")
    if not isinstance(harness, str) or len(harness) > HARNESS_MAX or not isinstance(reason, str):
        return None
    kept: dict[str, Any] = {"harness": harness, "resets_at": entry["resets_at"], "reason": reason[:RETRY_REASON_BYTES]}
    if _time(noted_at) is not None:
        kept["noted_at"] = noted_at
    return kept, resets_at


#: The name of the usage-limit pause among the documents the hosts of a shared store share.
SHARED_DOC = "usage-limits"


def share(project: Project) -> None:
    """Exchange this ``CORRAL_HOME``'s pauses with the project's shared store (a worker's every heartbeat)."""
    from corral.engine.paths import usage_limits_file

    with project.store.read() as tx:
        shared = tx.get_doc(SHARED_DOC) or {}
    merged = UsagePauses(usage_limits_file(project.paths.home)).exchange(shared)
    if merged != shared:
        with project.store.write() as tx:
            tx.put_doc(SHARED_DOC, merged)
