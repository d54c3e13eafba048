"""A model-checked random walk over the lifecycle, against a real SQLiteStore on a temp file.

Random operations by random actors: create tasks, try any set_status, park, start
sessions, record and decide violations, add and consume feedback, and the engine
operations that need no agent (close/reject, reopen with no work, doctor's re-park,
the reconciler's blocked-without-session sweep). A plain-Python model predicts every
outcome from DESIGN.md's table (tests/domain/lifecycle_table.py, not the code's).

Invariants after every step:
* only legal transitions ever happen, each recorded exactly once with its actor
  (the stored history equals the model's, row for row, creation included);
* a paused task whose label was derived by a park since its pending set last
  changed wears conflict exactly when that set is non-empty;
* zombie is set only by the system;
* the resting cause and pending feedback are what the model expects.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as hs
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from corral.adapters.git import Git
from corral.domain.actors import Actor, Role
from corral.domain.clock import utcnow
from corral.domain.records import FeedbackDelivery, RestingCause
from corral.domain.status import Status
from corral.domain.violations import Decision
from corral.engine.config import load_config
from corral.engine.operations import doctor, tasks
from corral.engine.paths import ProjectPaths
from corral.engine.project import Project
from corral.engine.recovery import reconcile
from corral.errors import CorralError, IllegalTransition, RefusedError
from corral.store import NewTask, SQLiteStore
from tests.conftest import FakeClock
from tests.domain import lifecycle_table as design

ACTORS = [Actor(a) for a in design.ACTORS]
PATHS = ["migrations/001.sql", "secrets.env", "ci.yml"]
CAUSES = [None, "stopped", "internal-fault", "prepare-failed"]


@dataclass
class Model:
    ref: str
    status: str = "backlog"
    history: list[tuple[str | None, str, str]] = field(default_factory=list)
    session: str | None = None
    # path -> decision, for the current session only
    violations: dict[str, str] = field(default_factory=dict)
    # the label was derived by a park and the pending set has not changed since
    label_fresh: bool = False
    cause: str | None = None
    pending_feedback: list[str] = field(default_factory=list)  # turn ids, current session

    @property
    def pending(self) -> set[str]:
        return {p for p, d in self.violations.items() if d == "pending"}


_REPO: Path | None = None


def _shared_repo() -> Path:
    """One git repository for every example: the engine ops used here never create branches in it."""
    global _REPO
    if _REPO is None:
        path = Path(tempfile.mkdtemp(prefix="corral-sm-repo-"))
        subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "i"],
            cwd=path,
            check=True,
        )
        atexit.register(shutil.rmtree, path, True)
        _REPO = path
    return _REPO


class Lifecycle(RuleBasedStateMachine):
    tasks = Bundle("tasks")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="corral-sm-"))
        self.clock = FakeClock()
        self.store = SQLiteStore(self.dir / "corral.db", clock=self.clock)
        repo = _shared_repo()
        self.project = Project(
            paths=ProjectPaths(repo=repo, home=self.dir, root=self.dir),
            config=load_config(user_file=None, project_file=None, env={}),
            git=Git(),
            clock=self.clock,
            _store=self.store,
        )
        self.model: dict[str, Model] = {}
        self.counter = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------
    def _record(self, task_id: str, src: str, dst: str, actor: Actor) -> None:
        m = self.model[task_id]
        m.history.append((src, dst, actor.value))
        m.status = dst

    def _cause_after_set_status(self, m: Model, dst: str, given: Any) -> None:
        """set_status: UNSET keeps the cause while the task stays resting, clears it otherwise."""
        if given == "UNSET":
            if dst not in design.RESTING:
                m.cause = None
        else:
            m.cause = given

    @staticmethod
    def _cause(code: str | None) -> RestingCause | None:
        return RestingCause(code=code, at=utcnow(), actor=Actor.SYSTEM) if code else None

    # -- rules ---------------------------------------------------------------------------
    @initialize(target=tasks)
    def first_task(self) -> str:
        return self.create(Actor.HUMAN)

    @precondition(lambda self: len(self.model) < 3)
    @rule(target=tasks, actor=hs.sampled_from(ACTORS))
    def create(self, actor: Actor) -> str:
        self.counter += 1
        ref = f"task-{self.counter}"
        with self.store.write() as tx:
            task = tx.insert_task(NewTask(ref=ref, goal=f"goal {self.counter}"), actor)
        self.model[task.id] = Model(ref=ref, history=[(None, "backlog", actor.value)])
        return task.id

    @rule(
        task_id=tasks,
        to=hs.sampled_from(list(Status)),
        actor=hs.sampled_from(ACTORS),
        expect=hs.one_of(hs.none(), hs.just("current"), hs.sampled_from(list(Status))),
        cause=hs.sampled_from(["UNSET", *CAUSES]),
    )
    def set_status(self, task_id: str, to: Status, actor: Actor, expect: Any, cause: Any) -> None:
        m = self.model[task_id]
        self.clock.advance(1)
        expected_from = Status(m.status) if expect == "current" else expect
        kwargs: dict[str, Any] = {"expected_from": expected_from}
        if cause != "UNSET":
            kwargs["resting_cause"] = self._cause(cause)
        cas_fails = expected_from is not None and expected_from.value != m.status
        legal = design.allowed(m.status, to.value, actor.value)
        paused = to.value in design.BLOCKED
        try:
            with self.store.write() as tx:
                change = tx.set_status(task_id, to, actor, "random walk", **kwargs)
        except IllegalTransition:
            assert not paused and not cas_fails and not legal, (m.status, to, actor)
            return
        except RefusedError as exc:
            assert exc.code == "status-changed"
            assert cas_fails and not paused
            return
        except CorralError:
            assert paused, f"set_status({m.status} -> {to}) refused unexpectedly"
            return
        assert not paused and not cas_fails and legal, f"{m.status} -> {to} by {actor} was allowed"
        if to.value == m.status:  # the same status again: a no-op that records nothing
            assert change is None
            if cause != "UNSET":
                m.cause = cause
            return
        assert change is not None
        assert (change.from_status.value if change.from_status else None, change.to_status, change.actor) == (
            m.status,
            to,
            actor,
        )
        self._cause_after_set_status(m, to.value, cause)
        self._record(task_id, m.status, to.value, actor)
        m.label_fresh = False

    @rule(task_id=tasks, steps=hs.lists(hs.tuples(hs.sampled_from(ACTORS), hs.integers(0, 10)), max_size=4))
    def legal_steps(self, task_id: str, steps: list[tuple[Actor, int]]) -> None:
        """Moves the design allows (so the walk goes deep), which the store must then accept."""
        m = self.model[task_id]
        for actor, pick in steps:
            # abandoning has its own rule (the engine's close/reject); leave it out so the walk goes deep
            choices = sorted(design.targets(m.status, actor.value) - design.BLOCKED - {"abandoned"})
            if not choices:
                continue
            to = Status(choices[pick % len(choices)])
            self.clock.advance(1)
            with self.store.write() as tx:
                change = tx.set_status(task_id, to, actor, "legal step", expected_from=Status(m.status))
            assert change is not None and change.to_status is to
            self._cause_after_set_status(m, to.value, "UNSET")
            self._record(task_id, m.status, to.value, actor)
            m.label_fresh = False

    @rule(task_id=tasks, actor=hs.sampled_from(ACTORS), cause=hs.sampled_from(CAUSES))
    def park(self, task_id: str, actor: Actor, cause: str | None) -> None:
        m = self.model[task_id]
        self.clock.advance(1)
        target = "conflict" if m.pending else "blocked"
        try:
            with self.store.write() as tx:
                change = tx.park(task_id, actor, "park", resting_cause=self._cause(cause))
        except IllegalTransition:
            assert m.status != target and not design.allowed(m.status, target, actor.value)
            return
        if m.status == target:
            assert change is None
            if cause is not None:
                m.cause = cause
        else:
            assert design.allowed(m.status, target, actor.value), f"park {m.status} -> {target} happened"
            assert change is not None and change.to_status.value == target
            self._record(task_id, m.status, target, actor)
            m.cause = cause
        m.label_fresh = True

    @rule(task_id=tasks)
    def new_session(self, task_id: str) -> None:
        m = self.model[task_id]
        with self.store.write() as tx:
            session = tx.insert_session(task_id)
        m.session = session.id
        m.violations = {}
        m.pending_feedback = []
        m.label_fresh = False

    @rule(task_id=tasks, paths=hs.lists(hs.sampled_from(PATHS), max_size=3))
    def record_violations(self, task_id: str, paths: list[str]) -> None:
        m = self.model[task_id]
        if m.session is None:
            with pytest.raises(CorralError), self.store.write() as tx:
                tx.record_violations(task_id, paths)
            return
        with self.store.write() as tx:
            pending = tx.record_violations(task_id, paths)
        before = m.pending
        for p in paths:
            if m.violations.get(p) in (None, "reverted"):
                m.violations[p] = "pending"
        assert set(pending) == m.pending
        if m.pending != before:
            m.label_fresh = False

    @rule(
        task_id=tasks,
        decisions=hs.dictionaries(hs.sampled_from(PATHS), hs.sampled_from([Decision.APPROVED, Decision.REVERTED])),
        actor=hs.sampled_from(ACTORS),
    )
    def decide(self, task_id: str, decisions: dict[str, Decision], actor: Actor) -> None:
        m = self.model[task_id]
        with self.store.write() as tx:
            tx.decide_violations(task_id, decisions, actor)
        before = m.pending
        for p, d in decisions.items():
            if m.violations.get(p) == "pending":
                m.violations[p] = d.value
        if m.pending != before:
            m.label_fresh = False

    @rule(task_id=tasks, actor=hs.sampled_from([a for a in ACTORS if a is not Actor.AGENT]))
    def give_feedback(self, task_id: str, actor: Actor) -> None:
        m = self.model[task_id]
        with self.store.write() as tx:
            turn = tx.add_turn(
                task_id,
                role=Role.HUMAN,
                actor=actor,
                kind="unblock",
                content="feedback",
                session_id=m.session,
                feedback_delivery=FeedbackDelivery.PENDING,
            )
        if m.session is not None:
            m.pending_feedback.append(turn.id)

    @rule(task_id=tasks, data=hs.data())
    def consume_feedback(self, task_id: str, data: hs.DataObject) -> None:
        m = self.model[task_id]
        chosen = data.draw(hs.lists(hs.sampled_from(m.pending_feedback), unique=True)) if m.pending_feedback else []
        with self.store.write() as tx:
            assert tx.mark_feedback_consumed(chosen) == len(chosen)
        m.pending_feedback = [t for t in m.pending_feedback if t not in chosen]

    # -- engine operations that need no agent ------------------------------------------------
    @rule(task_id=tasks, actor=hs.sampled_from(ACTORS), how=hs.sampled_from(["close", "reject"]))
    def abandon(self, task_id: str, actor: Actor, how: str) -> None:
        m = self.model[task_id]
        self.clock.advance(1)
        try:
            tasks.abandon(self.project, task_id, reason=f"{how} it", actor=actor, how=how)
        except RefusedError as exc:
            if m.status == "abandoned":
                assert exc.code == "already-abandoned"
            else:
                assert isinstance(exc, IllegalTransition)
                assert not design.allowed(m.status, "abandoned", actor.value)
            return
        assert design.allowed(m.status, "abandoned", actor.value), f"{how} from {m.status}"
        self._record(task_id, m.status, "abandoned", actor)
        m.cause = None
        m.label_fresh = False

    @rule(task_id=tasks, actor=hs.sampled_from(ACTORS))
    def reopen_without_work(self, task_id: str, actor: Actor) -> None:
        m = self.model[task_id]
        if m.status == "complete":
            return  # reopening an accepted task restores git work; not modelled here
        self.clock.advance(1)
        try:
            tasks.reopen(self.project, task_id, reason=None, actor=actor)
        except RefusedError as exc:
            assert m.status != "abandoned"
            assert exc.code == "illegal-transition"
            return
        assert m.status == "abandoned"
        # no session here has a base commit, so there is no agent work: abandoned -> backlog
        self._record(task_id, "abandoned", "backlog", actor)
        self._cause_after_set_status(m, "backlog", "UNSET")
        m.label_fresh = False

    @rule(task_id=tasks)
    def doctor_repark(self, task_id: str) -> None:
        m = self.model[task_id]
        self.clock.advance(1)
        check = doctor.repark(self.project, task_id)
        if m.status not in design.BLOCKED:
            assert check.status == "ok"
            return
        target = "conflict" if m.pending else "blocked"
        if m.status == target:
            assert check.status == "ok"
        else:
            assert check.status == "fixed"
            self._record(task_id, m.status, target, Actor.SYSTEM)
            m.cause = None
        m.label_fresh = True

    @rule()
    def reconciler_sweep(self) -> None:
        self.clock.advance(1)
        moved = reconcile.sweep_blocked_without_session(self.project)
        stray = [tid for tid, m in self.model.items() if m.status == "blocked" and m.session is None]
        assert moved == len(stray)
        for tid in stray:
            self._record(tid, "blocked", "backlog", Actor.SYSTEM)
            self._cause_after_set_status(self.model[tid], "backlog", "UNSET")
            self.model[tid].label_fresh = False

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def history_is_exactly_the_legal_transitions_made(self) -> None:
        with self.store.read() as tx:
            for task_id, m in self.model.items():
                rows = [
                    (c.from_status.value if c.from_status else None, c.to_status.value, c.actor.value)
                    for c in tx.status_changes(task_id)
                ]
                assert rows == m.history
                assert rows[0][0] is None and rows[0][1] == "backlog"
                for (src, dst, actor), prev in zip(rows[1:], rows, strict=False):
                    assert src == prev[1], "a change starts where the last one ended"
                    assert src is not None and design.allowed(src, dst, actor), (src, dst, actor)
                    if dst == "zombie":
                        assert actor == "system"
                task = tx.get_task(task_id)
                assert task is not None and task.status.value == m.status == rows[-1][1]

    @invariant()
    def a_freshly_parked_task_is_conflict_exactly_when_violations_are_pending(self) -> None:
        with self.store.read() as tx:
            for task_id, m in self.model.items():
                pending = set(tx.pending_paths(task_id))
                assert pending == m.pending
                task = tx.get_task(task_id)
                assert task is not None
                if task.status.value in design.BLOCKED and m.label_fresh:
                    assert (task.status is Status.CONFLICT) == bool(pending), (task.status, pending)

    @invariant()
    def causes_sessions_and_feedback_match_the_model(self) -> None:
        with self.store.read() as tx:
            for task_id, m in self.model.items():
                task = tx.get_task(task_id)
                assert task is not None
                assert (task.resting_cause.code if task.resting_cause else None) == m.cause
                assert task.session_id == m.session
                if m.session is not None:
                    assert [t.id for t in tx.pending_feedback(m.session)] == m.pending_feedback


Lifecycle.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLifecycle = Lifecycle.TestCase
