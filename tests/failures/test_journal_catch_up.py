"""A journal that refuses the supervisor's last writes loses nothing: the reconciler that records the
turn reads the log again from where the journal's cursor stands, once storage takes writes again."""

from __future__ import annotations

import shutil
from pathlib import Path

from corral.domain.actors import Actor
from corral.domain.incidents import Label
from corral.domain.status import Status
from corral.engine.operations import tasks, turns
from corral.engine.operations.refresh import settle
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.journal import JOURNAL, Journal
from tests.conftest import FakeAgent
from tests.support.polling import until


def test_events_the_journal_refused_as_the_turn_ended_are_written_when_the_turn_is_recorded(
    fproj: Project, agent: FakeAgent
) -> None:
    agent.script(
        [
            {"init": True},
            {"sleep": 1.5},  # the journal breaks here
            {"tool": "Bash", "input": {"command": "pytest -q"}, "is_error": True, "output": "FAILED 1"},
            {"result": "done"},
        ]
    )
    task = tasks.create(fproj, "Journal trouble", actor=Actor.HUMAN)
    turns.start(fproj, task.ref, actor=Actor.HUMAN)  # launches; nothing in this process reconciles yet
    protocol = fproj.paths.protocol_dir(task.id)
    command = until(lambda: proto.read_record(protocol / proto.COMMAND, proto.Command), what="the command")
    journal = Path(command.journal_dir)
    broken = journal / JOURNAL
    if broken.exists():
        broken.unlink()
    broken.mkdir(parents=True)  # a directory where the journal belongs: every append is refused
    until(lambda: (protocol / proto.RESPONSE).exists(), what="the turn's receipt")
    seen = Journal(journal).read().incidents.values()
    assert [i.label for i in seen] == [Label.INCOMPLETE]  # the supervisor saw the failure; the journal took none

    broken.rmdir()  # storage takes writes again
    settle(fproj)  # the reconciler records the turn
    with fproj.store.read() as tx:
        assert tx.get_task(task.id).status is Status.BLOCKED
    [incident] = Journal(journal).read().incidents.values()
    assert (incident.label, incident.summary) == (Label.UNCLASSIFIED, "Bash failed: FAILED 1")
    settle(fproj)  # read again later: once, never twice
    assert [i.failures for i in Journal(journal).read().incidents.values()] == [1]
    shutil.rmtree(journal, ignore_errors=True)
