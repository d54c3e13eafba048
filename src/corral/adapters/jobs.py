"""The job queue: procrastinate's, in PostgreSQL, carrying queued turns to workers (docs/workers.md).

corral keeps its own lease and fencing epoch per task in its store; a job here only says
"this command of this task of this project waits for a worker". One job per waiting command:
the job's queueing lock is the task, so a second enqueue of a task still waiting is refused
by the queue, not by a race. The queue's tables live in their own schema (``corral_dispatch``)
of the user's database, beside every project's own schema. procrastinate and psycopg are
imported only here, and only when a turn is queued or a worker runs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from corral.errors import CorralError, StoreError

SCHEMA = "corral_dispatch"
TASK_NAME = "corral.run_turn"
#: The advisory lock that serializes applying the engine's schema (two workers starting at once).
_SCHEMA_LOCK = 0x636F7272616C  # "corral"

#: The engine's unique index on a waiting job's queueing lock: a second job of a task still waiting breaks it.
_QUEUEING_LOCK = "procrastinate_jobs_queueing_lock_idx_v1"
#: One job deferred as the engine's own ``defer`` does (its ``defer_jobs`` query): priority 0, no lock, due now.
_DEFER = (
    "SELECT unnest(procrastinate_defer_jobs_v1("
    "ARRAY[ROW(%s, %s, 0, NULL, %s, %s, NULL)::procrastinate_job_to_defer_v1]))"
)

#: What a job handler gets: the job's arguments (``project``, ``task_id``, ``command_id``).
Handler = Callable[[dict[str, Any]], None]


def queue_of(project: str) -> str:
    """Each project's jobs wait in a queue of their own: a worker listens to those of the projects it serves."""
    return f"turns.{project}"


def _no_schema(exc: BaseException) -> bool:
    """Whether the engine's tables are missing (no worker has started on this database yet)."""
    import psycopg

    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(
            cause, (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedObject)
        ):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _connect_kwargs() -> dict[str, Any]:
    return {"options": f"-c search_path={SCHEMA}"}


class JobQueue:
    """The queue at ``url`` (a PostgreSQL URL): enqueue from any host, run a worker's loop on one."""

    def __init__(self, url: str) -> None:
        self.url = url

    def ensure_schema(self) -> None:
        """Create the engine's schema once per database (idempotent; concurrent callers wait on a lock)."""
        import psycopg
        from procrastinate.schema import SchemaManager

        try:
            with psycopg.connect(self.url, autocommit=True) as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                present = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.procrastinate_jobs",)).fetchone()
                if present is None or present[0] is None:
                    conn.execute(f"SET LOCAL search_path = {SCHEMA}")
                    conn.execute(SchemaManager.get_schema().encode())
        except psycopg.Error as exc:
            raise StoreError(
                f"corral could not prepare the job queue in {SCHEMA}: {exc}".strip(),
                hint="Check database_url and that its user may create a schema (corral doctor).",
            ) from exc

    def _app(self) -> Any:
        import procrastinate

        connector = procrastinate.PsycopgConnector(conninfo=self.url, min_size=1, max_size=4, kwargs=_connect_kwargs())
        return procrastinate.App(connector=connector)

    def defer(self, project: str, task_id: str, command_id: str) -> int | None:
        """Enqueue one waiting command; its job id, or None when the task already has a job waiting.

        One connection and one statement: the engine's own SQL function (``procrastinate_defer_jobs_v1``, what
        its ``defer`` runs) called with psycopg, without building the engine's app and its connection pool and
        their threads, and without importing the engine at all: a ``start`` on a reviewer's host queues its turn
        and exits. The queueing lock is the engine's (its unique index on a waiting job's ``queueing_lock``).
        """
        import psycopg
        from psycopg.types.json import Jsonb

        job = (
            queue_of(project),
            TASK_NAME,
            f"{project}:{task_id}",
            Jsonb({"project": project, "task_id": task_id, "command_id": command_id}),
        )
        for first in (True, False):
            try:
                with psycopg.connect(self.url, autocommit=True, **_connect_kwargs()) as conn:
                    row = conn.execute(_DEFER, job).fetchone()
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.constraint_name == _QUEUEING_LOCK:
                    return None
                raise StoreError(f"corral could not queue the turn: {exc}", hint="corral doctor") from exc
            except psycopg.Error as exc:
                if not (first and _no_schema(exc)):
                    raise StoreError(f"corral could not queue the turn: {exc}", hint="corral doctor") from exc
            else:
                if row is None or row[0] is None:
                    raise StoreError("corral could not queue the turn: the queue made no job.", hint="corral doctor")
                return int(row[0])
            self.ensure_schema()  # the first turn ever queued in this database: the engine's tables first
        raise AssertionError("unreachable")

    def finish(self, job_ids: list[int]) -> None:
        """Mark a lost worker's jobs failed, so the engine never hands them out again (corral resumes the turn)."""
        import psycopg

        if not job_ids:
            return
        with psycopg.connect(self.url, autocommit=True, **_connect_kwargs()) as conn:
            for job_id in job_ids:
                conn.execute(
                    "UPDATE procrastinate_jobs SET status = 'failed' WHERE id = %s AND status = 'doing'", (job_id,)
                )

    def run(
        self,
        handler: Handler,
        *,
        projects: list[str],
        name: str,
        concurrency: int,
        stop: threading.Event,
        poll_seconds: float = 1.0,
        heartbeat_seconds: float = 10.0,
        grace_seconds: float | None = None,
    ) -> None:
        """Run jobs with ``handler`` (in threads, ``concurrency`` at once) until ``stop`` is set.

        On ``stop`` the engine claims nothing more and waits up to ``grace_seconds`` (None:
        as long as it takes) for the jobs that run.
        """
        self.ensure_schema()
        queues = [queue_of(p) for p in projects]
        asyncio.run(self._run(handler, queues, name, concurrency, stop, poll_seconds, heartbeat_seconds, grace_seconds))

    async def _run(
        self,
        handler: Handler,
        queues: list[str],
        name: str,
        concurrency: int,
        stop: threading.Event,
        poll_seconds: float,
        heartbeat_seconds: float,
        grace_seconds: float | None,
    ) -> None:
        app = self._app()

        def run_turn(project: str, task_id: str, command_id: str) -> None:
            handler({"project": project, "task_id": task_id, "command_id": command_id})

        app.task(name=TASK_NAME, retry=False)(run_turn)
        async with app.open_async():
            worker = asyncio.create_task(
                app.run_worker_async(
                    queues=queues,
                    name=name,
                    concurrency=concurrency,
                    wait=True,
                    install_signal_handlers=False,
                    fetch_job_polling_interval=poll_seconds,
                    listen_notify=True,
                    delete_jobs="successful",
                    update_heartbeat_interval=heartbeat_seconds,
                    stalled_worker_timeout=heartbeat_seconds * 3,
                    shutdown_graceful_timeout=grace_seconds,
                )
            )
            while not stop.is_set() and not worker.done():
                await asyncio.sleep(0.1)
            if not worker.done():
                worker.cancel()
            try:
                await worker
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # the engine's own failure: the worker reports it and exits
                raise CorralError(f"the job queue stopped: {type(exc).__name__}: {exc}") from exc
