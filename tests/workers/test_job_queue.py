"""The job queue a reviewer's host sends turns to and a worker runs them from (``adapters/jobs``), on a real
PostgreSQL database and the real job engine."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import psycopg

from corral.adapters.jobs import SCHEMA, JobQueue, queue_of


def _jobs(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            f"SELECT queue_name, task_name, queueing_lock, args, status FROM {SCHEMA}.procrastinate_jobs ORDER BY id"
        ).fetchall()


def test_the_first_turn_queued_in_a_database_makes_the_queue_and_waits_there(pg_database: str) -> None:
    job = JobQueue(pg_database).defer("proj", "task-1", "cmd-1")  # no worker ever started here: no queue tables yet
    assert isinstance(job, int)
    assert _jobs(pg_database) == [
        (
            queue_of("proj"),
            "corral.run_turn",
            "proj:task-1",
            {"project": "proj", "task_id": "task-1", "command_id": "cmd-1"},
            "todo",
        )
    ]


def test_a_second_job_of_a_task_still_waiting_is_refused_by_the_queue(pg_database: str) -> None:
    queue = JobQueue(pg_database)
    first = queue.defer("proj", "task-1", "cmd-1")
    assert first is not None
    assert queue.defer("proj", "task-1", "cmd-2") is None  # the task's job waits still
    other = queue.defer("proj", "task-2", "cmd-3")
    assert other is not None and other != first
    assert queue.defer("other", "task-1", "cmd-4") is not None  # the lock is the project's task, not the id alone
    assert [r[2] for r in _jobs(pg_database)] == ["proj:task-1", "proj:task-2", "other:task-1"]


def test_a_queued_turn_runs_on_the_engine_with_its_arguments_and_its_task_may_queue_again(pg_database: str) -> None:
    queue = JobQueue(pg_database)
    queue.ensure_schema()
    job = queue.defer("proj", "task-1", "cmd-1")
    ran: list[dict[str, Any]] = []
    stop = threading.Event()

    def handler(args: dict[str, Any]) -> None:
        ran.append(args)
        stop.set()

    runner = threading.Thread(
        target=queue.run, args=(handler,), kwargs={"projects": ["proj"], "name": "w", "concurrency": 1, "stop": stop}
    )
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    assert ran == [{"project": "proj", "task_id": "task-1", "command_id": "cmd-1"}]
    assert job is not None
    assert queue.defer("proj", "task-1", "cmd-2") not in (None, job)  # its job ran: the next one waits


def test_queueing_a_turn_loads_no_job_engine(pg_database: str) -> None:
    # `corral start` on a reviewer's host queues the turn and exits: the engine (its app, its pool and their
    # threads) is the worker's, and a start pays neither its import nor its connection pool. (The queue's tables
    # are made once per database, by the first worker or turn.)
    JobQueue(pg_database).ensure_schema()
    code = (
        "import sys, threading; from corral.adapters.jobs import JobQueue; "
        f"assert JobQueue({pg_database!r}).defer('proj', 'task-1', 'cmd-1') is not None; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('procrastinate', 'psycopg_pool')), "
        "threading.active_count())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "1"]
