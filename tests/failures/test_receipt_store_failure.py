"""A store that fails while a receipt is being recorded: the receipt waits for the next pass.

The store turns its driver's faults into corral's own ``StoreError``; the working sweep lets that
error go (the store or the disk, not the receipt's content), so the turn is neither half-recorded
nor taken for an internal fault, and the next pass records it whole.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from msgspec.structs import replace

from corral.domain.actors import Actor, Role
from corral.domain.status import Status
from corral.engine.operations import turns
from corral.engine.operations.refresh import settle
from corral.engine.recovery import receipts, working
from corral.engine.runtime import protocol as proto
from corral.errors import StoreError
from corral.store.sqlite import SQLiteStore
from tests.failures.conftest import kill_supervisor, new_task


def test_a_store_failure_while_recording_a_receipt_leaves_it_for_the_next_pass(fproj, agent, monkeypatch) -> None:
    agent.script([{"init": True}, {"sleep": 60}])
    task = new_task(fproj)
    turns.start(fproj, task.ref, actor=Actor.HUMAN)
    kill_supervisor(fproj, task)
    protocol_dir = fproj.paths.protocol_dir(task.id)
    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command)
    assert command is not None
    proto.write_json(
        protocol_dir / proto.RESPONSE,
        {"command_id": command.command_id, "status": "completed", "kind": "start",
         "attempts": [{"number": 1, "outcome": "succeeded", "started_at": "2025-01-01T00:00:00Z"}]},
    )  # fmt: skip
    with fproj.store.read() as tx:
        working_task = tx.get_task(task.id)
    assert working_task is not None and working_task.status is Status.WORKING

    # Another connection holds the database's write lock, and this store will not wait for it. The
    # lock is let go as soon as the first write has failed: a store that fails for a moment only, so
    # a second write (the internal fault's, were the failure taken for one) would go through.
    impatient = replace(fproj, _store=SQLiteStore(fproj.paths.db, clock=fproj.clock, busy_timeout=0))
    holder = sqlite3.connect(fproj.paths.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    real_apply = receipts.apply

    def apply_then_unlock(*args: Any, **kwargs: Any) -> bool:
        try:
            return real_apply(*args, **kwargs)
        finally:
            if holder.in_transaction:
                holder.execute("ROLLBACK")

    monkeypatch.setattr(receipts, "apply", apply_then_unlock)
    try:
        with pytest.raises(StoreError) as caught:
            working.process_receipt(impatient, working_task)
    finally:
        monkeypatch.undo()
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        impatient.store.close()
    assert caught.value.code == "store-busy"
    assert (protocol_dir / proto.RESPONSE).is_file()  # kept where it was, for the next pass
    with fproj.store.read() as tx:
        unchanged = tx.get_task(task.id)
        assert tx.turn_by_command(command.command_id, Role.AGENT) is None  # nothing half-recorded
    assert unchanged is not None and unchanged.status is Status.WORKING

    settle(fproj)  # the database is usable again: the receipt is recorded, as the turn it is
    with fproj.store.read() as tx:
        after = tx.get_task(task.id)
        recorded = tx.turn_by_command(command.command_id, Role.AGENT)
    assert recorded is not None
    assert after is not None and after.status is not Status.WORKING
    assert after.resting_cause is None or after.resting_cause.code != "internal-fault"
    assert not (protocol_dir / proto.RESPONSE).exists()
