"""What both accepts share — the local squash (engine/operations/accept.py) and the forge's
(engine/operations/forge_accept.py): the narrated phases, their narrator, the answer an accept gives, and the
steps of a local accept the forge's borrows (:class:`Steps`), which the local accept hands it as an argument.

It imports neither accept, so the forge's accept depends on the local one only through what it is given: no
import cycle between the two.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct

from corral.adapters.ref_files import common_dir
from corral.domain.records import Task
from corral.engine.operations import reviewed
from corral.engine.project import Project
from corral.errors import DestinationRestoreConflict


class Phase(Struct, frozen=True):
    id: str
    label: str
    optional: bool = False


PREFLIGHT = Phase("preflight", "Pre-flight checks")
PHASES: tuple[Phase, ...] = (
    Phase("pre-accept", "Pre-accept turn", optional=True),
    Phase("merge", "Squash-merge into the target"),
    Phase("verify", "Verify the merge"),
    Phase("destination", "Bring the target's worktree up to date", optional=True),
    Phase("cleanup", "Archive the branch, remove the worktree"),
)


def plan(*, pre_accept: bool, destination: bool) -> list[Phase]:
    """The phases this accept will run, from the one table."""
    wanted = {"pre-accept": pre_accept, "destination": destination}
    return [p for p in PHASES if not p.optional or wanted.get(p.id, True)]


Reporter = Callable[[dict[str, Any]], None]
#: Asked when the branch is not at the tip a person saw: True merges the commits named.
Confirm = Callable[[reviewed.Moved], bool]


class Narrator:
    """Announces phases as they run; a failing listener never changes the accept's outcome."""

    def __init__(self, report: Reporter | None) -> None:
        self.report = report
        self.plan: list[Phase] = []

    def emit(self, doc: dict[str, Any]) -> None:
        if self.report is None:
            return
        try:
            self.report(doc)
        except Exception:
            self.report = None  # narration is observational; a broken listener is dropped

    def announce(self, phases: list[Phase]) -> None:
        self.plan = phases
        self.emit({"event": "plan", "phases": [{"id": p.id, "label": p.label} for p in phases]})

    def phase(self, phase: Phase, state: str, detail: str | None = None) -> None:
        position = self.plan.index(phase) + 1 if phase in self.plan else None
        self.emit(
            {
                "event": "phase",
                "id": phase.id,
                "label": phase.label,
                "state": state,
                "position": position,
                "of": len(self.plan) if position else None,
                "detail": detail,
            }
        )


class Accepted(Struct, frozen=True):
    task: Task
    commit: str | None
    already: bool = False
    warning: str | None = None
    #: The merge stands but the person's local changes could not all be put back (exit non-zero).
    conflict: DestinationRestoreConflict | None = None


class Steps(Struct, frozen=True):
    """The local accept's steps the forge's accept runs too, handed over by the local accept (whose private
    ``_Ready`` they pass between them): pre-flight (an :class:`Accepted` when already accepted), the tip the
    person agreed to, the pre-accept turn and the agreement its commits need, and the squash's message."""

    preflight: Callable[..., Any]
    agreed_tip: Callable[..., str | None]
    pre_accept: Callable[..., Any]
    after_pre_accept: Callable[..., None]
    message: Callable[..., str]
    #: The phase table the local steps narrate against (its ``pre-accept`` phase is announced by the forge's).
    phases: tuple[Phase, ...] = PHASES


def forge_applies(project: Project, task: Task) -> bool:
    """Whether ``task`` accepts through the forge: a root task of a project whose own settings name one (the
    forge's accept, ``forge_accept.applies``, asks the same, and is loaded only then)."""
    return project.config["forge"] == "gh" and task.parent_id is None


def worktree_on(project: Project, branch: str) -> Path | None:
    """The worktree that has ``branch`` checked out, if any: read from the HEAD files git keeps, as ``git worktree
    list`` reads them (no git process), where the repository is plainly laid out (its main checkout a ``.git``
    directory); any other layout is asked of git."""
    heads = checkouts(project)
    if heads is None:
        for wt in project.git.worktrees(cwd=project.repo):
            if wt.get("branch") == f"refs/heads/{branch}" and "bare" not in wt:
                return Path(wt["worktree"])
        return None
    wanted = f"ref: refs/heads/{branch}"
    for path, head in heads:
        if head == wanted:
            return path
    return None


def checkouts(project: Project) -> list[tuple[Path, str]] | None:
    """Each checkout of the repository and what its HEAD file says (stripped), the main one first, as ``git
    worktree list`` finds them: a linked worktree's path is its administrative directory's ``gitdir`` less
    ``/.git``; one whose ``gitdir`` or ``HEAD`` cannot be read is left out, as git leaves it out. None where the
    files are not the whole story (no ``.git`` directory as the main checkout's: a bare or unusual layout)."""
    common = common_dir(Path(project.repo))
    if common is None or common.name != ".git":
        return None
    found: list[tuple[Path, str]] = []
    admin = [(Path(os.path.realpath(common)).parent, common)]
    try:
        linked = sorted(os.scandir(common / "worktrees"), key=lambda e: e.name)
    except OSError:
        linked = []
    for entry in linked:
        here = Path(entry.path)
        try:
            gitdir = (here / "gitdir").read_text(errors="surrogateescape").strip()
        except OSError:
            continue
        if not gitdir:
            continue
        path = Path(gitdir) if os.path.isabs(gitdir) else Path(os.path.normpath(here / gitdir))
        admin.append((path.parent if path.name == ".git" else path, here))
    for path, own in admin:
        try:
            found.append((path, (own / "HEAD").read_text(errors="replace").strip()))
        except OSError:
            continue
    return found
