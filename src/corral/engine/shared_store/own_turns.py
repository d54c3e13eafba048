"""A host's own local turns on the shared store: what its reconcile passes do for them.

See docs/workers.md#turns-run-on-your-own-host.

A turn launched on a person's own host holds the task's lease ``local`` under that host's identity. Only
that host can see its supervisor, so only its passes (any corral command run there, its daemon's ticks)
judge it, and they do for it what a worker does for a turn it claims: a stop asked on another host,
written on the lease, is relayed to the supervisor as a local ``corral stop`` asks it
(:func:`relay_stops`); the turn's live facts and files are shipped for the hosts that read it
(:func:`ship`); and once the turn has ended, its files are shipped one last time and its lease let go.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.domain.substate import Live
from corral.domain.team import Lease
from corral.engine.operations.control import record_stopped
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.liveness import Observed, live_to_json, with_marks
from corral.engine.runtime.processes import reap_turn, request_stop
from corral.engine.shared_store import shipping
from corral.errors import LeaseLost
from corral.store import Tx

#: How often a pass ships a running local turn's files and live facts again when nothing it shows changed.
#: Readers elsewhere take facts as current for ``liveness.REPORT_FRESH``; the daemon ticks every 2 s.
SHIP_EVERY = timedelta(seconds=5)


def _running(lease: Lease, working: Mapping[str, str | None]) -> bool:
    return lease.task_id in working and lease.holds_turn(working[lease.task_id])


def relay_stops(project: Project, mine: list[Lease], working: Mapping[str, str | None], grace: timedelta) -> list[str]:
    """Stops asked on other hosts of this host's running local turns, relayed: the supervisor asked exactly
    as a local ``corral stop`` asks it (once: the ``stop.json`` that asking writes says it was), or, with
    no live supervisor left to ask, the turn recorded stopped here as a local stop records it. A turn whose
    supervisor has not been seen yet (just launched) is asked on a later pass. The tasks parked here."""
    parked = []
    for lease in mine:
        if not lease.stop_by or not _running(lease, working):
            continue
        protocol_dir = project.paths.protocol_dir(lease.task_id)
        if (protocol_dir / proto.STOP).exists():
            continue  # asked already (relayed, or a stop on this host is under way)
        status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
        since = lease.claimed_at or lease.queued_at
        if (status is None or status.command_id != lease.command_id) and (
            since is not None and project.clock() - since < grace
        ):
            continue
        actor = Actor(lease.stop_by) if lease.stop_by in Actor._value2member_map_ else Actor.HUMAN
        if request_stop(project, lease.task_id, actor.value):
            continue  # its supervisor ends the turn and writes the receipt a pass records
        record_stopped(project, lease.task_id, actor)
        reap_turn(project, lease.task_id, command_id=lease.command_id)
        parked.append(lease.task_id)
    return parked


def _gist(live: Live | None) -> object:
    """What a reader elsewhere shows of ``live``: a wait's seconds grow on every read and are not a change."""
    if live is None:
        return None
    doc = live_to_json(live)
    doc["waits"] = [w.ref for w in live.waits]
    return doc


def ship(project: Project, mine: list[Lease], working: Mapping[str, str | None], observed: Observed | None) -> None:
    """This host's local turns, for the hosts that read them: each running one's live facts (as this pass
    judged them) and files, when they changed or every :data:`SHIP_EVERY`; each ended one's files one last
    time, then its lease let go. Every write is fenced by the lease's epoch: a task launched again since
    (here or elsewhere) is never written over."""
    running = [lease for lease in mine if _running(lease, working)]
    if running:
        with project.store.read() as tx:
            shipped = tx.live(lease.task_id for lease in running)
            now = tx.now()
        for lease in running:
            seen = (observed or {}).get(lease.task_id)
            if seen is None or not seen.alive:
                continue  # not seen running yet (or found gone: its end is recorded first)
            live = with_marks(project, lease.task_id, seen)
            prior = shipped.get(lease.task_id)
            if (
                prior is not None
                and prior[0] == lease.command_id
                and now - prior[2] < SHIP_EVERY
                and _gist(live) == _gist(_shipped_live(prior[1]))
            ):
                continue
            try:
                shipping.ship(project, lease.task_id, lease.epoch, live=(lease.command_id, live))  # one write
            except LeaseLost:
                continue  # launched again since: that turn's host ships it
    for lease in mine:
        if not _running(lease, working):
            finish(project, lease)


def _shipped_live(doc: dict[str, object]) -> Live | None:
    from corral.engine.runtime.liveness import live_from_json

    live = doc.get("live")
    return live_from_json(live, alive=True) if isinstance(live, dict) else None


def _runs(tx: Tx, lease: Lease) -> bool:
    """Whether the task still works on the lease's command (read in ``tx``)."""
    task = tx.get_task(lease.task_id)
    current = tx.current_command(lease.task_id)
    return (
        task is not None
        and task.status is Status.WORKING
        and current is not None
        and current.command_id == lease.command_id
    )


def finish(project: Project, lease: Lease) -> bool:
    """A local turn of this host that ended: its files shipped one last time, then its lease let go (as a
    worker lets a turn go once its work is pushed), so other hosts fill their copy once more and no longer
    read it as running. False when the turn still runs (launched since this pass read it) or another
    launch holds the lease now."""
    with project.store.read() as tx:
        if _runs(tx, lease):
            return False
        gone = tx.get_task(lease.task_id) is None
    try:
        if not gone:
            shipping.ship(project, lease.task_id, lease.epoch)
            shipping.put_live(project, lease.task_id, lease.command_id, lease.epoch, None)
        with project.store.write() as tx:
            return not _runs(tx, lease) and tx.release_turn(lease.task_id, lease.epoch)
    except LeaseLost:
        return False
