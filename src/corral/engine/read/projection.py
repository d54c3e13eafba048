"""The one read model of a task that every surface renders (``show``, ``list``, ``--json``).

Built from the store and the live supervisor facts; no surface derives a status,
a substate, a reason or a next step on its own.

Two things a surface hands in beside the store when it has them: the task's persisted wait
intervals (``wait_intervals.intervals``), so each agent turn reports its waited time apart from
the agent's own (``agent_s``, ``waited_s``), and the live facts of the task's children, so
each child's substate shows beside its status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from corral.domain import exchanges
from corral.domain.actors import Role
from corral.domain.breaker import breaker_tripped
from corral.domain.clock import rfc3339
from corral.domain.explain import (
    SAME_CAUSE_BREAKER,
    attempt_line,
    breaker_line,
    explain_failure,
    failure_line,
    interruptions_line,
    next_step,
    stopped_because,
)
from corral.domain.needs import need_of
from corral.domain.records import (
    AGENT_TOOLS,
    INCIDENTS,
    RESTORE_CONFLICT,
    SCHEMA_VERSION,
    Attempt,
    AttemptOutcome,
    FailureEvidence,
    Note,
    RestingCause,
    Session,
    StatusChange,
    Task,
    Turn,
    Violation,
)
from corral.domain.settings import default
from corral.domain.status import Status, meaning
from corral.domain.substate import QUEUED, Live, substate
from corral.engine.read.forge_view import forge_view, pull_request_row
from corral.store import Tx

if TYPE_CHECKING:
    from corral.engine.runtime.wait_intervals import WaitInterval

#: The live facts of a task, for those the read shows beside another (a task's children).
LiveOf = Callable[[Task], Live | None]

#: The breaker's threshold when a caller has no settings at hand (the schema's default).
BREAKER_THRESHOLD = default("breaker_threshold", int)


class _Failures:
    """Renders failure evidence for one task: its JSON, its plain reason, where its diagnostic is.

    The diagnostics directory is listed once per task, so resolving a thousand references
    costs one ``listdir``; without a directory the diagnostic's state is not reported.
    Evidence the store decoded once (a turn's failure is often its last attempt's too) is
    rendered once: the JSON and the wording are kept per evidence object for this read.
    """

    def __init__(
        self,
        task: Task,
        diagnostics_dir: Path | None,
        intervals: Sequence[WaitInterval] | None = None,
        exchanges: dict[int, int] | None = None,
    ) -> None:
        self.task = task
        self.exchanges = exchanges or {}  # each shown turn's exchange number, by its sequence
        self.intervals = intervals
        self.dir = str(diagnostics_dir) if diagnostics_dir is not None else None
        self._kept: set[str] | None = None
        self._json: dict[int, tuple[FailureEvidence, dict[str, Any]]] = {}
        self._lines: dict[tuple[Any, ...], str] = {}

    def kept(self) -> set[str]:
        if self._kept is None:
            from corral.engine.read.diagnostics import present  # only a read that shows evidence lists them

            self._kept = present(Path(self.dir), self.task.id) if self.dir is not None else set()
        return self._kept

    def json(self, evidence: FailureEvidence | None) -> dict[str, Any] | None:
        if evidence is None:
            return None
        seen = self._json.get(id(evidence))
        if seen is not None:
            return seen[1]
        doc = evidence.to_json()
        if self.dir is not None and evidence.diagnostic:
            from corral.engine.read.diagnostic_retention import EXPIRED

            kept = evidence.diagnostic in self.kept()
            doc["diagnostic_path"] = f"{self.dir}/{evidence.diagnostic}" if kept else None
            doc["diagnostic_status"] = "kept" if kept else "expired"
            doc["diagnostic_note"] = None if kept else EXPIRED
        self._json[id(evidence)] = (evidence, doc)
        return doc

    def line(self, evidence: FailureEvidence | None, *, with_effects: bool) -> str:
        # The wording depends on these fields only (never on the diagnostic reference), so
        # a hundred turns that failed alike are worded once.
        key: tuple[Any, ...] = (with_effects,)
        if evidence is not None:
            d = evidence.details
            key = (
                with_effects,
                evidence.code,
                evidence.category,
                evidence.phase,
                evidence.possible_effects,
                d.get("summary"),
                d.get("reason"),
                d.get("problem"),
                d.get("timeout_seconds"),
            )
        text = self._lines.get(key)
        if text is None:
            harness, ref = self.task.harness, self.task.ref
            text = (
                failure_line(evidence, harness, ref) if with_effects else explain_failure(evidence, harness, ref).line
            )
            self._lines[key] = text
        return text

    def attempts(self, attempts: tuple[Attempt, ...]) -> list[dict[str, Any]]:
        total = len(attempts)
        out = []
        for i, a in enumerate(attempts):
            doc = attempt_json(a, self.json(a.failure))
            if a.outcome is AttemptOutcome.FAILED:
                reason = self.line(a.failure, with_effects=False)
                doc["reason"] = reason
                if total > 1:  # a lone failed attempt is the turn's own failure: its reason is on the turn
                    doc["summary"] = attempt_line(a.number, total, reason, retried=i + 1 < total)
            out.append(doc)
        return out

    def turn(self, t: Turn) -> dict[str, Any]:
        failed = t.failure is not None
        return {
            "sequence": t.sequence,
            # The turn as a person counts it: a message and its answer are one exchange (domain/exchanges.py).
            "exchange": self.exchanges.get(t.sequence),
            "role": t.role.value,
            "actor": t.actor.value if t.actor else None,
            "kind": t.kind,
            "content": t.content,
            "feedback_delivery": t.feedback_delivery.value,
            "started_at": rfc3339(t.started_at),
            "ended_at": rfc3339(t.ended_at),
            "usage": t.usage,
            "attempts": self.attempts(t.attempts) if t.attempts else [],
            "failure": self.json(t.failure),
            "reason": self.line(t.failure, with_effects=True) if failed else None,
            # What the turn kept of its receipt or session (git facts, the check, how a pair's
            # agent ended, what a read-only turn kept aside), as stored: masked when it was written.
            "details": t.details,
            **self.times(t),
        }

    def times(self, t: Turn) -> dict[str, float | None]:
        """An agent turn's time, split: ``waited_s`` the agent spent blocked in ``wait`` calls on
        its subtasks (the persisted intervals inside the turn's window), ``agent_s`` the rest.
        None where it cannot be told: a person's turn, a turn without both ends, or waits not
        read (``waited_s``)."""
        if t.role is not Role.AGENT or t.started_at is None or t.ended_at is None:
            return {"agent_s": None, "waited_s": None}
        total = max(0.0, (t.ended_at - t.started_at).total_seconds())
        if self.intervals is None:
            return {"agent_s": round(total, 1), "waited_s": None}
        from corral.engine.runtime.wait_intervals import waited_seconds  # only a read that has intervals

        waited = min(total, waited_seconds(self.intervals, t.started_at, t.ended_at)) if self.intervals else 0.0
        return {"agent_s": round(total - waited, 1), "waited_s": round(waited, 1)}

    def cause(self, cause: RestingCause | None) -> dict[str, Any] | None:
        if cause is None:
            return None
        doc = cause.to_json()
        doc["evidence"] = self.json(cause.evidence)
        return doc


def _failure(evidence: FailureEvidence | None) -> dict[str, Any] | None:
    return evidence.to_json() if evidence is not None else None


def attempt_json(a: Attempt, failure: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "number": a.number,
        "outcome": a.outcome.value,
        "failure_class": a.failure_class,
        "failure": failure if failure is not None else _failure(a.failure),
        "started_at": rfc3339(a.started_at),
        "ended_at": rfc3339(a.ended_at),
        "reason": None,
        "summary": None,
    }


def change_json(c: StatusChange) -> dict[str, Any]:
    return {
        "from": c.from_status.value if c.from_status else None,
        "to": c.to_status.value,
        "actor": c.actor.value,
        "reason": c.reason,
        "at": rfc3339(c.at),
    }


def note_json(n: Note) -> dict[str, Any]:
    return {"id": n.id, "actor": n.actor.value, "body": n.body, "at": rfc3339(n.at)}


def session_json(s: Session | None) -> dict[str, Any] | None:
    if s is None:
        return None
    interrupt = None
    if s.interrupt_reason or s.interrupt_at:
        interrupt = {
            "reason": s.interrupt_reason,
            "exit_code": s.interrupt_exit_code,
            "at": rfc3339(s.interrupt_at),
            "logs": s.interrupt_logs,
        }
    return {
        "id": s.id,
        "harness_session_id": s.harness_session_id,
        "consecutive_interruptions": s.consecutive_interruptions,
        "auto_resumed": s.auto_resumed,
        "interrupt": interrupt,
        "base_commit": s.base_commit,
        "outcome": s.outcome,
    }


def violation_json(v: Violation) -> dict[str, Any]:
    return {
        "path": v.path,
        "decision": v.decision.value,
        "decided_by": v.decided_by.value if v.decided_by else None,
        "decided_at": rfc3339(v.decided_at),
    }


class TaskView(Struct, frozen=True):
    """A task with what every surface shows beside it."""

    task: Task
    parent_ref: str | None
    substate: str | None
    session: Session | None
    pending: int
    stopped_because: str | None
    next: str | None

    def task_json(self) -> dict[str, Any]:
        t = self.task
        return {
            "id": t.id,
            "ref": t.ref,
            "goal": t.goal,
            "prompt": t.prompt,
            "status": t.status.value,
            "status_meaning": meaning(t.status),  # what the status means, in plain words (domain/status.py)
            "substate": self.substate,
            "needs": _need(t),
            "parent": self.parent_ref,
            "harness": t.harness,
            "model": t.model,
            "branch": t.branch if self.session else None,
            "worktree": self.session.worktree if self.session else None,
            "target": t.target_branch,
            "protected": list(t.protected),
            # The settings the task keeps as its own (corral edit --set, or a launch's environment).
            "settings": {
                k: {"value": v.get("value"), "source": v.get("source"), "origin": v.get("origin")}
                for k, v in sorted(t.settings.items())
            },
            "created_at": rfc3339(t.created_at),
            "updated_at": rfc3339(t.updated_at),
        }


def _because(task: Task, consecutive: int | None, breaker_threshold: int) -> tuple[str | None, bool]:
    """Why the task rests (the breaker's line added once it tripped), and whether it tripped.

    ``consecutive``: the consecutive interruptions of the task's session (None without one).
    """
    if task.resting_cause is None and consecutive is None:
        return None, False  # most rows of a list: no cause to word, no breaker to judge
    tripped = (
        task.status is Status.INTERRUPTED
        and consecutive is not None
        and breaker_tripped(consecutive, breaker_threshold)
    )
    because = stopped_because(task.resting_cause, task)
    if tripped and consecutive is not None:
        breaker = breaker_line(consecutive)
        because = f"{because} {breaker}" if because else breaker
    elif task.status is Status.INTERRUPTED and consecutive and not _counted(task):  # the count beside the reason
        count = interruptions_line(consecutive)
        because = f"{because} {count}" if because else count
    return because, tripped


def _counted(task: Task) -> bool:
    """Whether the reason already says how many times in a row (the same-cause breaker's line)."""
    return task.resting_cause is not None and SAME_CAUSE_BREAKER in task.resting_cause.details


def view(tx: Tx, task: Task, live: Live | None = None, *, breaker_threshold: int = BREAKER_THRESHOLD) -> TaskView:
    session = tx.get_session(task.session_id) if task.session_id else None
    paths = tx.pending_paths(task.id) if task.status in (Status.CONFLICT, Status.INTERRUPTED) else []
    pending = len(paths)
    parent = tx.get_task(task.parent_id) if task.parent_id else None
    because, tripped = _because(task, session.consecutive_interruptions if session else None, breaker_threshold)
    return TaskView(
        task=task,
        parent_ref=parent.ref if parent else None,
        substate=substate(task.status, live),
        session=session,
        pending=pending,
        stopped_because=because,
        next=next_step(task, pending_violations=pending, breaker=tripped, pending_paths=paths),
    )


def show(
    tx: Tx,
    task: Task,
    live: Live | None = None,
    *,
    breaker_threshold: int = BREAKER_THRESHOLD,
    diagnostics: Path | None = None,
    intervals: Sequence[WaitInterval] | None = None,
    live_of: LiveOf | None = None,
) -> dict[str, Any]:
    """The whole read model of one task. With ``diagnostics`` (the state's diagnostics
    directory), each failure's diagnostic reference is resolved: its path, or
    "Expired after 90 days" once pruned. With ``intervals`` (the task's persisted waits),
    each agent turn's ``waited_s`` is counted; with ``live_of``, each working child's substate."""
    return _show(tx, task, live, tx.turns(task.id), None, breaker_threshold, diagnostics, intervals, live_of)


def show_latest(
    tx: Tx,
    task: Task,
    live: Live | None = None,
    *,
    turns: int,
    breaker_threshold: int = BREAKER_THRESHOLD,
    diagnostics: Path | None = None,
    intervals: Sequence[WaitInterval] | None = None,
    live_of: LiveOf | None = None,
) -> tuple[dict[str, Any], int]:
    """:func:`show` with only the latest ``turns`` turns (at least one), and how many were left out.

    The history is cut where the first kept turn started: the status changes and comments
    from before it are left out with the turns they belong to. Only the kept turns are
    read from the store, so a history of ten thousand turns costs what fifty do.
    """
    keep = max(turns, 1)
    total = tx.turn_count(task.id)
    if total <= keep:
        shown = show(
            tx,
            task,
            live,
            breaker_threshold=breaker_threshold,
            diagnostics=diagnostics,
            intervals=intervals,
            live_of=live_of,
        )
        return shown, 0
    kept = tx.turns(task.id, last=keep)
    since = kept[0].started_at if kept else None
    before = tx.exchanges_before(task.id, kept[0].sequence) if kept else 0
    doc = _show(tx, task, live, kept, since, breaker_threshold, diagnostics, intervals, live_of, before)
    return doc, total - len(kept)


def _show(
    tx: Tx,
    task: Task,
    live: Live | None,
    turns: list[Turn],
    since: datetime | None,
    breaker_threshold: int,
    diagnostics: Path | None,
    intervals: Sequence[WaitInterval] | None = None,
    live_of: LiveOf | None = None,
    before: int = 0,
) -> dict[str, Any]:
    v = view(tx, task, live, breaker_threshold=breaker_threshold)
    failures = _Failures(task, diagnostics, intervals, exchanges.number(turns, before=before))
    comments = tx.comments(task.id)
    if since is not None:
        comments = [n for n in comments if n.at >= since]
    return {
        "schema_version": SCHEMA_VERSION,
        "task": v.task_json(),
        "session": session_json(v.session),
        "turns": [failures.turn(t) for t in turns],
        "status_changes": [change_json(c) for c in tx.status_changes(task.id, since=since)],
        "violations": [violation_json(x) for x in tx.violations(task.id)],
        "comments": [note_json(n) for n in comments],
        "journal": [note_json(n) for n in tx.journal(task.id)],
        "children": [child_json(c, live_of) for c in tx.children(task.id)],
        "resting_cause": failures.cause(task.resting_cause),
        "destination_restore_conflict": _restore_conflict(task),
        "refs_put_back": refs_put_back(turns, failures.exchanges),
        "agent_tools": agent_tools_json(task),
        "sandbox": sandbox_json(task),
        "post_turn_check": check_json(turns, failures.exchanges),
        "failure_rule": failure_rule_json(task),
        # Which worker runs (or last ran) the task's turn, under which epoch (docs/workers.md).
        "lease": lease.as_view() if (lease := tx.lease(task.id)) is not None else None,
        "session_carry": session_carry_json(task),
        "forge": forge_view(task),  # its pull request (docs/forge.md)
        "stopped_because": v.stopped_because,
        "next": v.next,
    }


def child_json(child: Task, live_of: LiveOf | None = None) -> dict[str, Any]:
    """A subtask as its parent's read shows it: ref, status and substate (a working child's
    substate is None when its live facts were not read)."""
    working = child.status is Status.WORKING
    sub = substate(child.status, live_of(child)) if working and live_of is not None else None
    return {"ref": child.ref, "status": child.status.value, "substate": sub}


def agent_tools_json(task: Task) -> dict[str, Any] | None:
    """What the agent of the task's latest turn had of corral's tools (None: it never ran a turn):
    ``mcp`` whether it had the MCP endpoint, ``absent`` why not."""
    note = task.metadata.get(AGENT_TOOLS)
    if not isinstance(note, dict):
        return None
    absent = note.get("absent")
    return {"mcp": note.get("mcp") is True, "absent": absent if isinstance(absent, str) else None}


def check_json(turns: Sequence[Turn], numbers: dict[int, int] | None = None) -> dict[str, Any] | None:
    """The newest post-turn check among the shown turns: its command, exit and where it ran."""
    for t in reversed(turns):
        check = t.details.get("check") if t.role is Role.AGENT and t.details else None
        if isinstance(check, dict):
            where = check.get("confinement")
            return {
                "turn": t.sequence,
                "exchange": (numbers or {}).get(t.sequence),
                "command": check.get("command"),
                "exit_code": check.get("exit_code"),
                "timed_out": check.get("timed_out") is True,
                "confinement": where if where in ("bwrap", "unconfined") else None,
            }
    return None


def sandbox_json(task: Task) -> dict[str, Any] | None:
    """Which sandbox the agent of the task's latest turn ran in (None: it never ran a turn, or an
    older corral launched it): ``mode`` bwrap or off, and ``reason`` why."""
    note = task.metadata.get(AGENT_TOOLS)
    sandbox = note.get("sandbox") if isinstance(note, dict) else None
    if not isinstance(sandbox, dict) or sandbox.get("mode") not in ("bwrap", "off"):
        return None
    reason = sandbox.get("reason")
    return {"mode": sandbox["mode"], "reason": reason if isinstance(reason, str) else None}


def session_carry_json(task: Task) -> dict[str, Any] | None:
    """Whether the latest turn that took the harness session over from another host's worker resumed it (its
    transcript carried through the store) or started fresh, and why (docs/workers.md); None: no takeover."""
    from corral.domain.team import SessionCarry  # a worker's takeover: loaded only where a task is shown

    carry = SessionCarry.of(task.metadata)
    return None if carry is None else carry.to_json()


def failure_rule_json(task: Task) -> dict[str, Any] | None:
    """How the tool failures of the task's latest turn are judged (None: it never ran a turn, or an
    older corral launched it): ``intents`` — a confined turn whose agent had corral's tools, so its
    shell's intents and its dispositions are honoured — or ``exact``, the exact-retry rule, with
    ``why`` (docs/incidents.md, "Confined runs")."""
    note = task.metadata.get(AGENT_TOOLS)
    sandbox = sandbox_json(task)
    if not isinstance(note, dict) or sandbox is None:
        return None
    if sandbox["mode"] != "bwrap":
        return {"rule": "exact", "why": "the agent ran unconfined"}
    if note.get("mcp") is not True:
        absent = note.get("absent")
        why = f"the agent had no corral tools: {absent}" if isinstance(absent, str) else "the agent had no corral tools"
        return {"rule": "exact", "why": why}
    return {"rule": "intents", "why": None}


def refs_put_back(turns: Sequence[Turn], numbers: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """Each shown agent turn that moved refs other than its branch: the moves and one plain line."""
    out = []
    for t in turns:
        refs = t.details.get("refs") if t.role is Role.AGENT and t.details else None
        if isinstance(refs, dict) and any(refs.get(k) for k in ("moves", "error", "objects", "strays")):
            from corral.engine.runtime.ref_wording import summary  # only a task whose agent moved refs

            try:
                line = summary(refs)
            except ValueError:
                continue
            if line is None and refs.get("error"):
                line = f"corral could not check the refs after the turn ({refs.get('error')})."
            if line is None:
                continue
            moves = refs.get("moves") or []
            out.append({"turn": t.sequence, "exchange": (numbers or {}).get(t.sequence), "moves": moves, "line": line})
    return out


def _restore_conflict(task: Task) -> dict[str, Any] | None:
    """An accept's merge stands but the person's local changes wait in a stash: what and how to restore."""
    note = task.metadata.get(RESTORE_CONFLICT)
    if not isinstance(note, dict):
        return None
    return {k: note.get(k) for k in ("message", "worktree", "stash", "command", "at")}


def _row(task: Task, parent_ref: str | None, sub: str | None, because: str | None) -> dict[str, Any]:
    return {
        "id": task.id,
        "ref": task.ref,
        "status": task.status.value,
        "status_meaning": meaning(task.status),
        "substate": sub,
        "needs": _need(task),
        "goal": task.goal,
        "parent": parent_ref,
        "reason": because,
        "updated_at": rfc3339(task.updated_at),
        "needs_action": needs_action(task),
        "pull_request": pull_request_row(task) if "forge" in task.metadata else None,  # docs/forge.md
    }


def _need(task: Task) -> str | None:
    need = need_of(task)
    return need.value if need is not None else None


def needs_action(task: Task) -> int:
    """Incidents of the task's current session that need action, as its last recorded turn left them."""
    known = task.metadata.get(INCIDENTS)
    if not isinstance(known, dict) or known.get("session_id") != task.session_id:
        return 0
    count = known.get("needs_action")
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def list_row(v: TaskView) -> dict[str, Any]:
    return _row(v.task, v.parent_ref, v.substate, v.stopped_because)


def list_rows(
    tx: Tx,
    tasks: Sequence[Task],
    live_of: Callable[[Task], Live | None],
    *,
    breaker_threshold: Callable[[Task], int] = lambda _t: BREAKER_THRESHOLD,
) -> list[dict[str, Any]]:
    """``list_row(view(tx, t, live_of(t)))`` for each task, in order, from two batch reads.

    A row needs of a session only its count of consecutive interruptions, to tell whether an
    interrupted task's breaker tripped, and of a parent only its ref: both are read for the
    whole list at once, never per task. ``live_of`` (the live facts of a running turn) is
    asked only for working tasks, the only ones whose substate it decides;
    ``breaker_threshold`` (a task's own, where it keeps one) only for interrupted ones.
    """
    counts = tx.interruption_counts(t.session_id for t in tasks if t.status is Status.INTERRUPTED and t.session_id)
    parents = tx.refs_by_id(t.parent_id for t in tasks if t.parent_id)
    working = Status.WORKING
    away = hosts_of(tx) if any(t.status is working for t in tasks) else {}
    rows = []
    for t in tasks:
        n = counts.get(t.session_id) if t.session_id else None
        because, _tripped = _because(t, n, breaker_threshold(t) if n is not None else BREAKER_THRESHOLD)
        sub = substate(working, live_of(t)) if t.status is working else None
        row = _row(t, parents.get(t.parent_id) if t.parent_id else None, sub, because)
        if t.id in away and t.status is working:
            row["host"] = away[t.id]
        rows.append(row)
    return rows


def hosts_of(tx: Tx) -> dict[str, str]:
    """Where each task's turn runs: its worker's host or, on the shared store, the host it was launched on
    (docs/workers.md); "queued" while no worker has claimed it."""
    from corral.domain.team import LeaseState  # a lease's states: only where a list has a working task

    return {
        lease.task_id: lease.host if lease.held and lease.host else QUEUED
        for lease in tx.leases([LeaseState.QUEUED, LeaseState.CLAIMED, LeaseState.LOCAL])
    }


def as_tree(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (``list_rows``) in tree order, each with its ``depth``: a subtask directly under
    its parent (depth one more), siblings in their given order. A row whose parent is not
    listed is a root (depth 0); no row is ever left out, a loop of parents included."""
    listed = {r["ref"] for r in rows}
    kids: dict[str, list[dict[str, Any]]] = {}
    roots: list[dict[str, Any]] = []
    for r in rows:
        parent = r.get("parent")
        if parent is not None and parent in listed and parent != r["ref"]:
            kids.setdefault(parent, []).append(r)
        else:
            roots.append(r)
    if not kids and len(listed) == len(rows):  # a flat list (no subtask under a listed parent): as given
        return [{**r, "depth": 0} for r in rows]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def walk(stack: list[tuple[dict[str, Any], int]]) -> None:
        # depth first, the top of the stack first: every root's subtree before the next root
        while stack:
            row, depth = stack.pop()
            ref = row["ref"]
            if ref in seen:
                continue
            seen.add(ref)
            out.append({**row, "depth": depth})
            below = kids.get(ref)
            if below:
                stack.extend((k, depth + 1) for k in reversed(below))

    walk([(root, 0) for root in reversed(roots)])
    for r in rows:  # parents in a loop: none of them is a root
        if r["ref"] not in seen:
            walk([(r, 0)])
    return out
