"""The board's day chart counts tasks per status in each hour, not the moves between statuses: a task that went
in and out of a status three times in an hour is one task there, a task resting in a status all day is counted in
every hour, and a finished task only in the hour it finished."""

from __future__ import annotations

from typing import Any

from tests.conftest import FakeClock

from corral.domain.actors import Actor
from corral.engine.api import activity, tasks


def test_the_chart_counts_tasks_per_status_not_transitions(project: Any, clock: FakeClock) -> None:
    clock.now = clock.now.replace(hour=9, minute=0)
    resting = tasks.create(project, "Stays in backlog", actor=Actor.HUMAN, ref="resting")
    clock.advance(3 * 3600)  # 12:00
    moving = tasks.create(project, "Goes back and forth", actor=Actor.HUMAN, ref="moving")
    for _ in range(3):  # backlog → abandoned → backlog, three times within the hour
        clock.advance(60)
        tasks.abandon(project, moving.id, reason="not now", actor=Actor.HUMAN, how="close")
        clock.advance(60)
        tasks.reopen(project, moving.id, reason=None, actor=Actor.HUMAN)
    clock.advance(60)
    tasks.abandon(project, moving.id, reason="for good", actor=Actor.HUMAN, how="close")
    clock.advance(2 * 3600 + 600)  # 14:17: the chart's last hour is 14:00-15:00

    act = activity([("app", project)])
    hours = [h[11:16] for h in act["hours"]]
    at = {h: i for i, h in enumerate(hours)}
    backlog, abandoned = act["counts"]["backlog"], act["counts"]["abandoned"]
    assert backlog[at["12:00"]] == 2  # two tasks in backlog that hour, however often one re-entered it
    assert abandoned[at["12:00"]] == 1  # one task, closed four times
    assert abandoned[at["13:00"]] == 0 and abandoned[at["14:00"]] == 0  # finished: counted where it finished
    assert backlog[at["13:00"]] == 1 and backlog[at["14:00"]] == 1  # the resting one, every hour since
    assert backlog[at["10:00"]] == 1 and backlog[at["08:00"]] == 0  # since it was made, not before
    assert act["tasks"] == {"backlog": 2, "abandoned": 1}
    assert resting.status.value == "backlog"
