"""Numbered, forward-only schema migrations for the SQLite store.

Each migration is a plain function of a connection, applied in order inside the
caller's write transaction and recorded in ``schema_migrations``. Never edit a
migration that has shipped; add the next number. PostgreSQL's migrations
(:mod:`corral.store.pg_migrations`) are numbered the same and share the SQL written in
standard words here (the value lists, the team's tables, the later columns and index).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from corral.errors import StoreTooNew

Migration = Callable[[sqlite3.Connection], None]

#: The values a status and an actor column may hold, as SQL lists (both dialects' CHECKs).
STATUS_VALUES = (
    "'backlog','working','blocked','conflict','pairing','interrupted',"
    "'merging','submitted','zombie','complete','abandoned'"
)
ACTOR_VALUES = "'human','builder','agent','system','supervisor'"


def run_script(db: sqlite3.Connection, script: str) -> None:
    """Execute statements one by one: ``executescript`` would commit the open transaction."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            db.execute(pending)
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement in migration: {pending.strip()[:80]}")


def m001_initial(db: sqlite3.Connection) -> None:
    run_script(
        db,
        f"""
        CREATE TABLE tasks (
            id TEXT PRIMARY KEY,
            ref TEXT NOT NULL UNIQUE,
            goal TEXT NOT NULL,
            prompt TEXT NOT NULL DEFAULT '',
            parent_id TEXT REFERENCES tasks(id),
            status TEXT NOT NULL CHECK (status IN ({STATUS_VALUES})),
            harness TEXT,
            model TEXT,
            target_branch TEXT,
            protected TEXT NOT NULL DEFAULT '[]',
            metadata TEXT NOT NULL DEFAULT '{{}}',
            resting_cause TEXT,
            session_id TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            last_interaction_at TEXT NOT NULL
        ) STRICT;
        CREATE INDEX tasks_status ON tasks(status);
        CREATE INDEX tasks_parent ON tasks(parent_id);

        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            task_id TEXT NOT NULL REFERENCES tasks(id),
            worktree TEXT,
            branch TEXT,
            base_commit TEXT,
            git_start_sha TEXT,
            harness_session_id TEXT,
            interrupt_reason TEXT,
            interrupt_exit_code INTEGER,
            interrupt_at TEXT,
            interrupt_logs TEXT,
            consecutive_interruptions INTEGER NOT NULL DEFAULT 0,
            auto_resumed INTEGER NOT NULL DEFAULT 0 CHECK (auto_resumed IN (0, 1)),
            outcome TEXT,
            created_at TEXT NOT NULL,
            ended_at TEXT
        ) STRICT;
        CREATE INDEX sessions_task ON sessions(task_id);

        CREATE TABLE turns (
            id TEXT PRIMARY KEY,
            task_id TEXT NOT NULL REFERENCES tasks(id),
            session_id TEXT REFERENCES sessions(id),
            sequence INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('human', 'agent')),
            actor TEXT CHECK (actor IN ({ACTOR_VALUES})),
            kind TEXT NOT NULL,
            content TEXT NOT NULL,
            feedback_delivery TEXT NOT NULL DEFAULT 'none'
                CHECK (feedback_delivery IN ('none', 'pending', 'consumed')),
            delivered TEXT NOT NULL DEFAULT '[]',
            started_at TEXT NOT NULL,
            ended_at TEXT,
            usage TEXT,
            failure TEXT,
            details TEXT NOT NULL DEFAULT '{{}}',
            command_id TEXT,
            UNIQUE (task_id, sequence),
            CHECK ((role = 'agent' AND actor IS NULL) OR (role = 'human' AND actor IS NOT NULL))
        ) STRICT;
        CREATE INDEX turns_pending ON turns(session_id) WHERE feedback_delivery = 'pending';
        -- One human turn launches a command and one agent turn answers it: a receipt is claimed once.
        CREATE UNIQUE INDEX turns_command ON turns(command_id, role) WHERE command_id IS NOT NULL;

        CREATE TABLE attempts (
            turn_id TEXT NOT NULL REFERENCES turns(id),
            number INTEGER NOT NULL CHECK (number >= 1),
            started_at TEXT NOT NULL,
            ended_at TEXT,
            outcome TEXT NOT NULL
                CHECK (outcome IN ('succeeded', 'failed', 'indeterminate', 'cancelled')),
            failure_class TEXT,
            failure TEXT,
            PRIMARY KEY (turn_id, number)
        ) STRICT;

        CREATE TABLE status_changes (
            id INTEGER PRIMARY KEY,
            task_id TEXT NOT NULL REFERENCES tasks(id),
            from_status TEXT CHECK (from_status IN ({STATUS_VALUES})),
            to_status TEXT NOT NULL CHECK (to_status IN ({STATUS_VALUES})),
            actor TEXT NOT NULL CHECK (actor IN ({ACTOR_VALUES})),
            reason TEXT,
            at TEXT NOT NULL
        ) STRICT;
        CREATE INDEX status_changes_task ON status_changes(task_id, id);

        CREATE TABLE violations (
            task_id TEXT NOT NULL REFERENCES tasks(id),
            session_id TEXT NOT NULL REFERENCES sessions(id),
            path TEXT NOT NULL,
            turn_id TEXT REFERENCES turns(id),
            decision TEXT NOT NULL CHECK (decision IN ('pending', 'approved', 'reverted')),
            decided_by TEXT CHECK (decided_by IN ({ACTOR_VALUES})),
            decided_at TEXT,
            created_at TEXT NOT NULL,
            check_from TEXT,
            PRIMARY KEY (session_id, path)
        ) STRICT;

        CREATE TABLE notes (
            id TEXT PRIMARY KEY,
            task_id TEXT NOT NULL REFERENCES tasks(id),
            kind TEXT NOT NULL CHECK (kind IN ('comment', 'journal')),
            actor TEXT NOT NULL CHECK (actor IN ({ACTOR_VALUES})),
            body TEXT NOT NULL,
            at TEXT NOT NULL
        ) STRICT;
        CREATE INDEX notes_task ON notes(task_id, kind, at);

        -- Processes corral started for a task (supervisors, pair sessions): what the terminal
        -- sweep must stop, found without scanning every finished task.
        CREATE TABLE processes (
            task_id TEXT NOT NULL REFERENCES tasks(id),
            kind TEXT NOT NULL CHECK (kind IN ('supervisor', 'pair', 'chat', 'accept')),
            pid INTEGER NOT NULL CHECK (pid > 0),
            command_id TEXT,
            started_at TEXT NOT NULL,
            PRIMARY KEY (task_id, kind)
        ) STRICT;

        -- The journal and the timeline are append-only: history is never rewritten.
        CREATE TRIGGER notes_append_only_update BEFORE UPDATE ON notes
        BEGIN SELECT RAISE(ABORT, 'notes are append-only'); END;
        CREATE TRIGGER status_changes_append_only BEFORE UPDATE ON status_changes
        BEGIN SELECT RAISE(ABORT, 'status changes are append-only'); END;
        """,
    )


#: Turns queued for workers on other hosts (docs/workers.md): one lease per task, whose epoch
#: fences off a worker that lost it, the workers' heartbeats, and what a reviewer on another
#: host reads of a turn: its files, shipped in chunks as they grow, and its live status. Written in standard SQL, so
#: the same text serves both dialects (SQLite's tables are STRICT, as every other).
TEAM_TABLES = """
    CREATE TABLE workers (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'draining', 'stopped')),
        lease_seconds REAL NOT NULL CHECK (lease_seconds > 0),
        started_at TEXT NOT NULL,
        heartbeat_at TEXT NOT NULL
    ){strict};
    CREATE TABLE leases (
        task_id TEXT PRIMARY KEY REFERENCES tasks(id),
        command_id TEXT NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch >= 1),
        state TEXT NOT NULL CHECK (state IN ('queued', 'claimed', 'released')),
        plan TEXT NOT NULL DEFAULT '{{}}',
        worker_id TEXT,
        host TEXT,
        worktree TEXT,
        job_id INTEGER,
        queued_at TEXT,
        claimed_at TEXT
    ){strict};
    CREATE INDEX leases_state ON leases(state);
    CREATE TABLE shipped_files (
        task_id TEXT NOT NULL REFERENCES tasks(id),
        path TEXT NOT NULL,
        offset_bytes INTEGER NOT NULL CHECK (offset_bytes >= 0),
        data BLOB NOT NULL,
        PRIMARY KEY (task_id, path, offset_bytes)
    ){strict};
    CREATE TABLE shared_docs (
        name TEXT PRIMARY KEY,
        doc TEXT NOT NULL,
        at TEXT NOT NULL
    ){strict};
    CREATE TABLE live_turns (
        task_id TEXT PRIMARY KEY REFERENCES tasks(id),
        command_id TEXT NOT NULL,
        doc TEXT NOT NULL,
        at TEXT NOT NULL
    ){strict};
"""


def m002_team(db: sqlite3.Connection) -> None:
    run_script(db, TEAM_TABLES.format(strict=" STRICT"))


#: What a lease carries besides its claim (docs/workers.md): a stop a person asked for on another host,
#: for the worker that holds it to relay to its supervisor, and why a turn's end has not reached the
#: remote yet (its worker keeps trying; ``accept`` and ``diff`` wait for it).
LEASE_NOTES = """
    ALTER TABLE leases ADD COLUMN stop_by TEXT;
    ALTER TABLE leases ADD COLUMN unpushed TEXT;
"""


def m003_lease_notes(db: sqlite3.Connection) -> None:
    run_script(db, LEASE_NOTES)


#: Which host owns what (docs/workers.md#turns-run-on-your-own-host): a process record names the host
#: identity it runs on, and a lease may be ``local``, held by the host that launched its turn there.
OWNER_COLUMN = "ALTER TABLE processes ADD COLUMN owner TEXT;"
LEASE_STATES = "'queued', 'claimed', 'released', 'local'"
_LEASE_COLUMNS = (
    "task_id, command_id, epoch, state, plan, worker_id, host, worktree, job_id, queued_at, claimed_at, "
    "stop_by, unpushed"
)


def m004_owners(db: sqlite3.Connection) -> None:
    # SQLite cannot change a CHECK constraint: the leases table is made again with the new state, its
    # rows copied as they are (nothing refers to a lease).
    run_script(
        db,
        f"""
        {OWNER_COLUMN}
        CREATE TABLE leases_new (
            task_id TEXT PRIMARY KEY REFERENCES tasks(id),
            command_id TEXT NOT NULL,
            epoch INTEGER NOT NULL CHECK (epoch >= 1),
            state TEXT NOT NULL CHECK (state IN ({LEASE_STATES})),
            plan TEXT NOT NULL DEFAULT '{{}}',
            worker_id TEXT,
            host TEXT,
            worktree TEXT,
            job_id INTEGER,
            queued_at TEXT,
            claimed_at TEXT,
            stop_by TEXT,
            unpushed TEXT
        ) STRICT;
        INSERT INTO leases_new ({_LEASE_COLUMNS}) SELECT {_LEASE_COLUMNS} FROM leases;
        DROP TABLE leases;
        ALTER TABLE leases_new RENAME TO leases;
        CREATE INDEX leases_state ON leases(state);
        """,
    )


#: A task's current command (``sqltx._CURRENT_COMMAND_ID``: its last human turn with a command) read
#: from the index alone. Every read of ``list`` asks it of each working task; without the index each
#: look steps through the task's turn rows, scattered over a large database (~8 µs each at 3,500).
CURRENT_COMMAND_INDEX = """
    CREATE INDEX turns_current_command ON turns(task_id, sequence, command_id, role)
        WHERE role = 'human' AND command_id IS NOT NULL;
"""


def m005_current_command(db: sqlite3.Connection) -> None:
    run_script(db, CURRENT_COMMAND_INDEX)


#: PostgreSQL's ``tasks_status`` and ``tasks_updated`` become one index (the status, then the last change):
#: a status change, which changes both columns, touches one index instead of two, and the reads that
#: used either (the tasks of some statuses; the latest finished ones, newest first) use this one.
ONE_STATUS_INDEX_PG = """
    DROP INDEX IF EXISTS tasks_status;
    DROP INDEX IF EXISTS tasks_updated;
    CREATE INDEX tasks_status_updated ON tasks(status, updated_at);
"""


def m006_one_status_index(db: sqlite3.Connection) -> None:
    """SQLite never had ``tasks_updated``: ``tasks_status`` is already the one index a status change touches
    (an index on the status and the last change would be touched by every other update of a task too)."""


#: The status index becomes two partial indexes keyed by columns a status change among unfinished statuses
#: leaves alone: the unfinished tasks by creation (what ``list`` and the sweeps read) and the finished ones by
#: their last change (the latest finished, newest first). A status change between two unfinished statuses
#: (working → blocked, blocked → working: nearly all of them) rewrites one entry in place on one page, where
#: an index of the status moved it between two pages; the index a status change touches holds the unfinished
#: tasks only, not every task ever made. Measured on a 10,000-task store: 4.2 WAL frames per transition, from
#: 5.4. The queries name the index's condition (``sqltx._status_clause``) so that either store uses it.
UNFINISHED = "status NOT IN ('complete', 'abandoned')"
FINISHED = "status IN ('complete', 'abandoned')"
PARTIAL_STATUS_INDEXES = f"""
    CREATE INDEX tasks_unfinished ON tasks(created_at) WHERE {UNFINISHED};
    CREATE INDEX tasks_finished ON tasks(updated_at) WHERE {FINISHED};
"""


def m007_partial_status_indexes(db: sqlite3.Connection) -> None:
    run_script(db, "DROP INDEX IF EXISTS tasks_status;" + PARTIAL_STATUS_INDEXES)


#: Schema 8: a status change between two unfinished statuses touches no index of ``tasks`` and one b-tree of
#: ``status_changes``. Measured on a 10,000-task store: 2.2-2.7 WAL frames (pages) per transition (2 and a leaf
#: split now and then), from 4.4.
#:
#: * ``tasks.finished_at``: when the task entered a finished status (NULL while it is unfinished; a migrated
#:   finished task's is its last change). The two partial indexes are keyed by it instead of by the status:
#:   SQLite rewrites an index entry whenever a column its condition names is set, even to an entry that stays
#:   where it was, and nearly every status change (working ⇄ blocked, …) sets the status but not ``finished_at``.
#:   A CHECK holds it to the status; the store sets and clears it in the same UPDATE that crosses between the two
#:   (``sqltx._finished``).
#: * ``status_changes`` is keyed by its task, then a number counting up within that task (existing rows keep
#:   theirs): the row is its own index entry, so a change writes one page of it where the row and the task
#:   index were two b-trees. SQLite stores it WITHOUT ROWID, so the key is the table.
#: * SQLite's CHECKs of a value list on the tables a status change writes are chains of ``=`` (:func:`one_of`).
#:
#: The partial indexes' conditions from schema 8 on, which the reads by status state (``sqltx._status_clause``).
UNFINISHED_ROWS = "finished_at IS NULL"
FINISHED_ROWS = "finished_at IS NOT NULL"
FINISHED_AT = f"""
    UPDATE tasks SET finished_at = updated_at WHERE {FINISHED};
    DROP INDEX IF EXISTS tasks_unfinished;
    DROP INDEX IF EXISTS tasks_finished;
    CREATE INDEX tasks_unfinished ON tasks(created_at) WHERE {UNFINISHED_ROWS};
    CREATE INDEX tasks_finished ON tasks(updated_at) WHERE {FINISHED_ROWS};
"""
#: A task has a finished time exactly while its status is finished: a finished time on an unfinished task would
#: hide it from every listing of unfinished tasks, a finished task without one from the latest finished.
FINISHED_AT_CHECK = f"CHECK ((finished_at IS NOT NULL) = ({FINISHED}))"


def one_of(column: str, values: str) -> str:
    """``column IN (values)`` as a CHECK that SQLite evaluates without building a table: it codes a constant
    ``IN`` list of more than two values as a temporary index filled anew at each row it checks (~5 µs for the
    eleven statuses, more than the rest of a status change's INSERT), and a chain of ``=`` as comparisons.
    NULL passes both alike."""
    return "(" + " OR ".join(f"{column} = {value}" for value in values.split(",")) + ")"


#: ``tasks`` of schema 8 in SQLite: schema 1's columns, then ``finished_at``, each CHECK a chain of ``=``.
_TASK_COLUMNS_7 = (
    "id, ref, goal, prompt, parent_id, status, harness, model, target_branch, protected, metadata, resting_cause, "
    "session_id, created_at, updated_at, last_interaction_at"
)


def m008_finished_at(db: sqlite3.Connection) -> None:
    # ``tasks`` is made again (SQLite adds no CHECK to a table, and its status CHECK was an IN list, a temporary
    # index filled at every status change): its rows are set aside, the table dropped and made anew under its
    # own name, and the rows put back. The rows that refer to a task (sessions, turns, …) are not touched: with
    # the foreign keys deferred to the commit, each is orphaned by the drop and matched again by the re-insert,
    # and the commit checks that every one was (nothing is renamed, so no reference is rewritten).
    db.execute("PRAGMA defer_foreign_keys = ON")
    run_script(
        db,
        f"""
        CREATE TEMP TABLE tasks_7 AS SELECT {_TASK_COLUMNS_7} FROM main.tasks;
        DROP TABLE main.tasks;
        CREATE TABLE main.tasks (
            id TEXT PRIMARY KEY,
            ref TEXT NOT NULL UNIQUE,
            goal TEXT NOT NULL,
            prompt TEXT NOT NULL DEFAULT '',
            parent_id TEXT REFERENCES tasks(id),
            status TEXT NOT NULL CHECK {one_of("status", STATUS_VALUES)},
            harness TEXT,
            model TEXT,
            target_branch TEXT,
            protected TEXT NOT NULL DEFAULT '[]',
            metadata TEXT NOT NULL DEFAULT '{{}}',
            resting_cause TEXT,
            session_id TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            last_interaction_at TEXT NOT NULL,
            finished_at TEXT,
            CHECK ((finished_at IS NOT NULL) = ({one_of("status", "'complete','abandoned'")}))
        ) STRICT;
        INSERT INTO main.tasks ({_TASK_COLUMNS_7}, finished_at)
            SELECT {_TASK_COLUMNS_7}, CASE WHEN {FINISHED} THEN updated_at END FROM tasks_7 ORDER BY rowid;
        DROP TABLE tasks_7;
        CREATE INDEX tasks_parent ON tasks(parent_id);
        CREATE INDEX tasks_unfinished ON tasks(created_at) WHERE {UNFINISHED_ROWS};
        CREATE INDEX tasks_finished ON tasks(updated_at) WHERE {FINISHED_ROWS};
        CREATE TABLE status_changes_new (
            id INTEGER NOT NULL CHECK (id >= 1),
            task_id TEXT NOT NULL REFERENCES tasks(id),
            from_status TEXT CHECK {one_of("from_status", STATUS_VALUES)},
            to_status TEXT NOT NULL CHECK {one_of("to_status", STATUS_VALUES)},
            actor TEXT NOT NULL CHECK {one_of("actor", ACTOR_VALUES)},
            reason TEXT,
            at TEXT NOT NULL,
            PRIMARY KEY (task_id, id)
        ) STRICT, WITHOUT ROWID;
        INSERT INTO status_changes_new (id, task_id, from_status, to_status, actor, reason, at)
            SELECT id, task_id, from_status, to_status, actor, reason, at FROM status_changes;
        DROP TABLE status_changes;
        ALTER TABLE status_changes_new RENAME TO status_changes;
        CREATE TRIGGER status_changes_append_only BEFORE UPDATE ON status_changes
        BEGIN SELECT RAISE(ABORT, 'status changes are append-only'); END;
        """,
    )


MIGRATIONS: list[tuple[int, str, Migration]] = [
    (1, "initial", m001_initial),
    (2, "team", m002_team),
    (3, "lease notes", m003_lease_notes),
    (4, "owners", m004_owners),
    (5, "current command index", m005_current_command),
    (6, "one status index", m006_one_status_index),
    (7, "partial status indexes", m007_partial_status_indexes),
    (8, "finished time and keyed status changes", m008_finished_at),
]

LATEST = MIGRATIONS[-1][0]


def too_new(where: str, version: int, latest: int = LATEST) -> StoreTooNew:
    """The refusal of a database whose schema is newer than this corral's (SQLite and PostgreSQL alike)."""
    return StoreTooNew(
        f"The corral database {where} has schema version {version}, newer than this corral "
        f"understands (up to {latest}).",
        hint="Upgrade corral (pip install -U corral) to the version that wrote it; nothing was changed.",
    )
