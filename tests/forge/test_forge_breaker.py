"""Forge feedback delivered by itself (``forge_auto_deliver``) runs within corral's circuit breaker: the delivered
turn is an automatic relaunch as the breaker counts them, and a tripped breaker stops the delivery, said in its
own words."""

from __future__ import annotations

from corral.domain.actors import Actor
from corral.domain.breaker import Breaker, Counters
from corral.domain.explain import breaker_line
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations import control, forge_sync
from corral.engine.read.projection import show
from tests.forge.test_forge_accept import blocked_with, task_of, work


def test_the_breakers_event_counts_a_delivery_and_trips_at_the_threshold():
    breaker = Breaker(threshold=2)
    first = breaker.on_auto_deliver(Counters())
    assert first.fields() == {"consecutive_interruptions": 1, "auto_resumed": True} and not first.tripped
    assert not breaker.on_auto_deliver(Counters(1, True)).tripped
    assert breaker.on_auto_deliver(Counters(2, True)).tripped and breaker.tripped(Counters(2, True))
    assert breaker.on_person_launch(Counters(2, True)).fields() == {"consecutive_interruptions": 0}  # a person looked


def session_of(proj, ref: str):
    with proj.store.read() as tx:
        task = tx.task_by_ref(ref)
        return tx.get_session(task.session_id)


def test_an_auto_delivered_turn_is_counted_as_an_automatic_relaunch(fproj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_FORGE_AUTO_DELIVER", "true")
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "bd", work("bd.py", "b = 1\n"))
    assert session_of(proj, "bd").auto_resumed is False
    accepting.accept(proj, "bd", actor=Actor.HUMAN)
    agent.script([{"result": "looked at it"}])
    forge.add_review(forge.pull().number, "CHANGES_REQUESTED", "Rename b.", author="alice")
    forge_sync.sync(proj, force=True)
    assert control.wait(proj, "bd", timeout=30).task.status is Status.BLOCKED
    assert session_of(proj, "bd").auto_resumed  # the system relaunched it, as the breaker records it
    assert "auto_delivered" not in task_of(proj, "bd").metadata["forge"]  # no counter of its own


def test_a_tripped_breaker_stops_auto_delivery_and_show_says_so(fproj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_FORGE_AUTO_DELIVER", "true")
    monkeypatch.setenv("CORRAL_BREAKER_THRESHOLD", "2")
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "bt", work("bt.py", "t = 1\n"))
    accepting.accept(proj, "bt", actor=Actor.HUMAN)
    session_id = session_of(proj, "bt").id
    with proj.store.write() as tx:  # the session was interrupted twice in a row, nobody looked since
        tx.update_session(session_id, consecutive_interruptions=2)
    calls = len(agent.calls())
    forge.add_review(forge.pull().number, "CHANGES_REQUESTED", "Rename t.", author="alice")
    forge_sync.sync(proj, force=True)
    task = task_of(proj, "bt")
    assert task.status is Status.BLOCKED
    assert len(agent.calls()) == calls  # nothing delivered by itself
    assert task.metadata["forge"]["feedback"]  # it waits for a person's unblock
    with proj.store.read() as tx:
        shown = show(tx, task)
    assert breaker_line(2) in shown["forge"]["text"]
