"""``corral doctor``: checks of the machine, the state directory and the tasks, with repairs.

Each check says what it found and, when something is wrong, what to do.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from dataclasses import dataclass

from corral.domain.actors import Actor
from corral.domain.status import PAUSED, Status
from corral.engine.config import proposals
from corral.engine.project import Project
from corral.engine.resolve import resolve_task
from corral.errors import CorralError

MIN_GIT = (2, 38)  # merge-tree --write-tree


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail | fixed
    message: str
    hint: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"name": self.name, "status": self.status, "message": self.message, "hint": self.hint}


def check_git(project: Project) -> Check:
    if shutil.which(project.git.executable) is None:
        return Check("git", "fail", "git is not on PATH.", "Install git 2.38 or newer.")
    version = project.git.version()
    found = re.search(r"(\d+)\.(\d+)", version)
    numbers = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    if numbers < MIN_GIT:
        return Check("git", "fail", f"{version} is too old.", "corral needs git 2.38 or newer.")
    return Check("git", "ok", version)


def check_state_dir(project: Project) -> Check:
    root = project.paths.root
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".doctor-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return Check(
            "state",
            "fail",
            f"{root} is not writable: {exc.strerror}.",
            "Point CORRAL_HOME at a writable local directory.",
        )
    return Check("state", "ok", str(root))


def check_store(project: Project) -> list[Check]:
    try:
        store = project.store
        problems = store.check()
        version = store.schema_version()
    except CorralError as exc:
        return [Check("database", "fail", exc.message, exc.hint)]
    checks = [Check("database", "ok", f"{store.location} (schema {version})")]
    if problems:
        checks = [
            Check(
                "database",
                "fail",
                f"{store.location}: {'; '.join(problems[:3])}",
                "Back the file up, then `sqlite3 FILE .recover` into a new one.",
            )
        ]
    with sqlite3.connect(project.paths.db) as raw:
        mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
    if str(mode).lower() != "wal":
        checks.append(
            Check(
                "journal",
                "warn",
                f"journal mode is {mode}, not wal.",
                "Reopen with a corral command; it switches to WAL.",
            )
        )
    return checks


def check_config(project: Project) -> list[Check]:
    out = []
    for item in project.config.unknown:
        out.append(Check("config", "warn", f"unknown setting {item}", "See `corral config show` for the names."))
    for item in project.config.ignored:
        out.append(Check("config", "warn", f"ignored {item}"))
    for proposal in proposals(project.config):
        if not proposal.adopted:
            out.append(Check("config", "warn", proposal.message(), f"Adopt it: {proposal.adopt_command}"))
    return out or [Check("config", "ok", "settings are valid")]


def check_tasks(project: Project) -> list[Check]:
    out = []
    with project.store.read() as tx:
        merging = tx.tasks([Status.MERGING])
        paused = tx.tasks(sorted(PAUSED))
        mislabelled = [t for t in paused if (t.status is Status.CONFLICT) != bool(tx.pending_paths(t.id))]
    for task in merging:
        out.append(
            Check(
                "merging",
                "warn",
                f"{task.ref} is merging.",
                f"If no accept is running, the reconciler restores it; see corral show {task.ref}",
            )
        )
    for task in mislabelled:
        out.append(repark(project, task.ref))
    return out


def repark(project: Project, given: str) -> Check:
    """Re-derive a paused task's label from its pending violations (blocked ⇄ conflict)."""
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        if task.status not in PAUSED:
            return Check("park", "ok", f"{task.ref} is {task.status.value}; nothing to re-derive.")
        change = tx.park(task.id, Actor.SYSTEM, "doctor re-derived the label", expected_from=task.status)
    if change is None:
        return Check("park", "ok", f"{task.ref} is {task.status.value}, as its violations say.")
    return Check("park", "fixed", f"{task.ref} was {change.from_status}, now {change.to_status.value}.")


def run(project: Project, task: str | None = None) -> list[Check]:
    if task is not None:
        return [repark(project, task)]
    checks = [check_git(project), check_state_dir(project), *check_config(project)]
    store_checks = check_store(project)
    checks += store_checks
    if all(c.status != "fail" for c in store_checks):
        checks += check_tasks(project)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    checks.append(
        Check(
            "editor",
            "ok" if editor else "warn",
            editor or "no $EDITOR set",
            None if editor else "Set $EDITOR, or always pass -m, to write feedback.",
        )
    )
    return checks
