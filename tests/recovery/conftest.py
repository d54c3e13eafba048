"""Fixtures for crash recovery: auto-resume on, a short grace period, invariant checks."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.process import pid_alive
from corral.domain.actors import Role
from corral.domain.records import FeedbackDelivery
from corral.domain.status import Status, is_allowed
from corral.engine.runtime import protocol as proto
from tests.conftest import FakeAgent


@pytest.fixture
def rproj(agent: FakeAgent, repo: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A project with auto-resume on and a one-second grace period."""
    from corral.engine.project import Project

    monkeypatch.setenv("CORRAL_AUTO_RESUME", "1")
    monkeypatch.setenv("CORRAL_GRACE_PERIOD", "1")
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "30")
    p = Project.open(repo)
    yield p
    p.close()


def check_invariants(project: Any, agent: FakeAgent, submitted: list[str], *, settled: bool = True) -> None:
    """DESIGN.md's recovery invariants over every task of the project."""
    with project.store.read() as tx:
        for task in tx.tasks():
            changes = tx.status_changes(task.id)
            # every status has its status-change record, each with its actor, each legal
            assert changes and changes[0].from_status is None and changes[0].to_status is Status.BACKLOG
            for prev, change in itertools.pairwise(changes):
                assert change.from_status is prev.to_status, (prev, change)
                assert is_allowed(change.from_status, change.to_status, change.actor), change
            assert changes[-1].to_status is task.status
            history = tx.turns(task.id)
            for turn in history:
                assert (turn.actor is None) == (turn.role is Role.AGENT)
            # no completed agent response lost: every filed receipt became its agent turn
            answered = {t.command_id for t in history if t.role is Role.AGENT}
            for receipt in project.paths.task_dir(task.id).glob("turns/*/response.json"):
                data = json.loads(receipt.read_text())
                assert data.get("command_id") in answered, receipt
            if settled:
                live_receipt = proto.read_document(project.paths.protocol_dir(task.id) / proto.RESPONSE)
                if live_receipt.data is not None:  # claimed already, only not yet filed away
                    assert live_receipt.data.get("command_id") in answered, "a receipt was left unprocessed"
                if task.status is Status.WORKING:
                    status = proto.read_raw(project.paths.protocol_dir(task.id) / proto.STATUS) or {}
                    assert isinstance(status.get("pid"), int) and pid_alive(status["pid"]), "working without owner"
        # no human feedback lost: each one submitted is stored, pending or consumed
        stored = [t for task in tx.tasks() for t in tx.turns(task.id) if t.kind == "unblock"]
        for text in submitted:
            matches = [t for t in stored if t.content == text]
            assert matches, f"feedback lost: {text!r}"
            assert matches[0].feedback_delivery in (FeedbackDelivery.PENDING, FeedbackDelivery.CONSUMED)
    # never two live agents for one task
    alive_by_cwd: dict[str, int] = {}
    for call in agent.calls():
        if pid_alive(call["pid"]):
            alive_by_cwd[call["cwd"]] = alive_by_cwd.get(call["cwd"], 0) + 1
    assert all(n <= 1 for n in alive_by_cwd.values()), alive_by_cwd


def kill_leftovers(agent: FakeAgent) -> None:
    for call in agent.calls():
        try:
            os.kill(call["pid"], 9)
        except ProcessLookupError:
            pass
