"""What was reviewed is what lands: the review diff read from objects, the tip each surface showed, and
the tip ``accept`` merges.

A task's branch, its worktree and every object its agent wrote are the agent's: the review never
reads the worktree's files, and never lets the task's own ``.gitattributes`` choose how the patch
is drawn. :func:`review_diff` compares two commits in the main checkout (the person's: git reads
attributes from the working tree it runs in, and git 2.39 has no ``--attr-source``), with
``--text --no-textconv --no-ext-diff``, so no attribute, diff driver or textconv — not even one
the person configured — runs or hides a file as binary.

Every surface that shows a task's diff records the tip it showed (:func:`record_shown`), in the
task's metadata under :data:`REVIEWED`, one entry per viewer: a person's review is not
overwritten by an agent reading the same diff. ``accept`` reads the branch's tip once
(:func:`branch_tip`, the one place that reads it, so a verified tip can take its place) and
merges exactly that commit; when it is not the tip the same viewer was shown, :func:`moved`
names the commits that came since, to be confirmed or refused (docs/cli.md#accepting-what-was-reviewed-is-what-lands).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import Struct

from corral.domain.actors import Actor
from corral.domain.clock import rfc3339
from corral.domain.records import Task
from corral.domain.sanitize import one_line
from corral.engine.project import Project
from corral.errors import TipMoved, UsageError

#: The task metadata key holding, per viewer, the tip a diff showed: ``{viewer: {tip, at, surface}}``.
REVIEWED = "reviewed_tips"
#: Flags every review diff carries: each file as text, no textconv, no external diff driver.
REVIEW_FLAGS = ("--text", "--no-textconv", "--no-ext-diff")
#: The most new commits a refusal or a question names (the count is whole).
NAMED_COMMITS = 20
#: A subject is cut to this many characters where a commit is named.
SUBJECT_CHARS = 100
#: How many viewers' entries a task keeps (the newest): an agent per parent, a person, a builder.
KEPT_VIEWERS = 16

_FULL_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_GIVEN_SHA = re.compile(r"[0-9a-fA-F]{4,64}")


def branch_tip(project: Project, branch: str) -> str | None:
    """The commit ``refs/heads/<branch>`` names now, or None: a branch name only, never HEAD, and
    never through a symbolic ref (one an agent left is put back at the verified tip first)."""
    from corral.engine.runtime.branch_check import ensure

    ensure(project.git, project.repo, branch)
    tip = project.git.branch_value(f"refs/heads/{branch}", cwd=project.repo)
    return tip if tip is not None and _FULL_SHA.fullmatch(tip) else None


def review_diff(project: Project, base: str, tip: str, *, stat: bool = False) -> str:
    """The patch from ``base`` to ``tip``, read from their objects in the main checkout (its attributes are
    the person's; the task's are not read), with :data:`REVIEW_FLAGS`: no driver, textconv or binary
    attribute chooses what is shown. Colour follows git's own settings (``corral diff`` turns it on)."""
    fmt = ["--stat"] if stat else []
    return project.git.run(
        "-c", "core.fsmonitor=false", "diff", *REVIEW_FLAGS, *fmt, base, tip, "--", cwd=project.repo
    ).stdout


def viewer(actor: Actor, caller_task_id: str | None = None) -> str:
    """Whose review an entry is: the actor, and for a task's agent the task it works on (so one agent
    reading a diff never stands for another's review, nor for a person's)."""
    return f"{actor.value}:{caller_task_id}" if caller_task_id else actor.value


def _entries(task: Task) -> dict[str, Any]:
    kept = task.metadata.get(REVIEWED)
    return dict(kept) if isinstance(kept, dict) else {}


def shown_tip(task: Task, who: str) -> str | None:
    """The tip the last diff shown to ``who`` was at; None when none was shown (or the entry is not one
    corral wrote: a row read from a shared store is taken only when well formed)."""
    entry = _entries(task).get(who)
    tip = entry.get("tip") if isinstance(entry, dict) else None
    return tip if isinstance(tip, str) and _FULL_SHA.fullmatch(tip) else None


def record_shown(project: Project, task_id: str, tip: str, who: str, surface: str) -> None:
    """Remember that ``who`` was shown the diff at ``tip`` through ``surface``; nothing is written when
    that is already the entry's tip (a page re-rendered does not make a commit each time)."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None or shown_tip(task, who) == tip:
            return
        entries = {k: v for k, v in _entries(task).items() if k != who and isinstance(v, dict)}
        entries[who] = {"tip": tip, "at": rfc3339(tx.now()), "surface": surface}
        kept = dict(list(entries.items())[-KEPT_VIEWERS:])
        tx.update_task(task_id, metadata={**task.metadata, REVIEWED: kept}, touch=False)


def given_tip(project: Project, given: str) -> str:
    """``--tip SHA`` as a full commit id; anything that is not a commit's (abbreviated) id is refused."""
    text = given.strip()
    found = None
    if _GIVEN_SHA.fullmatch(text):
        result = project.git.run(
            "rev-parse", "--verify", "--quiet", f"{text.lower()}^{{commit}}", cwd=project.repo, check=False
        )
        found = result.stdout.strip() if result.returncode == 0 else None
    if not found or not _FULL_SHA.fullmatch(found):
        raise UsageError(
            f"--tip {one_line(given, 80)} names no commit of this repository.",
            code="bad-tip",
            hint="Give the commit id the task's diff showed (its tip), in full or its first 7 or more digits.",
        )
    return found


class Moved(Struct, frozen=True):
    """The branch is not at the tip a person saw (or pinned): what came since."""

    branch: str
    since: str
    tip: str
    #: ``<short sha> <subject>`` of each commit in ``since..tip`` (newest first, subjects made safe), at most
    #: :data:`NAMED_COMMITS`.
    commits: list[str]
    count: int
    #: ``since`` is no ancestor of ``tip``: the reviewed history was replaced, not only added to.
    rewritten: bool

    def lines(self) -> list[str]:
        out = [f"  {c}" for c in self.commits]
        if self.count > len(self.commits):
            out.append(f"  … and {self.count - len(self.commits)} more")
        return out

    def summary(self) -> str:
        """One line: how many, then each (a refusal's message is one line)."""
        named = "; ".join(self.commits)
        if self.count > len(self.commits):
            named += f"; … and {self.count - len(self.commits)} more"
        what = f"{self.count} new commit(s)" if self.count else "no new commit"
        if self.rewritten:
            what += f", and {self.since[:12]} is no longer on it (its history was rewritten)"
        return f"{what}: {named}" if named else what

    def to_json(self) -> dict[str, Any]:
        """What came since, as --json and a refusal's details give it: its fields by name."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return doc


def moved(project: Project, branch: str, since: str, tip: str, target: str | None = None) -> Moved:
    """The commits on ``tip`` that neither ``since`` nor the ``target`` branch holds (the target's own commits,
    brought in by a sync, are not the task's work), each as short sha and subject (the agent's words: made
    one safe line). A ``since`` no longer in the repository leaves the target as the only bound."""
    git, repo = project.git, project.repo
    bounds = [f"^{c}" for c in (since, git.rev_parse(f"refs/heads/{target}", cwd=repo) if target else None) if c]
    if git.rev_parse(since, cwd=repo) is None:
        bounds = bounds[1:]
    log = git.run(
        "log", "--no-decorate", "--no-show-signature", "-z", "--format=%h %s", tip, *bounds, "--", cwd=repo
    ).stdout
    entries = [e for e in log.split("\0") if e.strip()]
    named = [one_line(e, SUBJECT_CHARS) for e in entries[:NAMED_COMMITS]]
    rewritten = not git.is_ancestor(since, tip, cwd=repo)
    return Moved(branch, since, tip, named, len(entries), rewritten)


def refusal(task: Task, moved_: Moved, *, pinned: bool) -> TipMoved:
    """accept's refusal to merge a tip nobody confirmed: what came since, and how to merge it."""
    ref, since, now = task.ref, moved_.since[:12], moved_.tip[:12]
    if pinned:
        head = f"Not accepting {ref}: its branch {moved_.branch} is at {now}, not at {since} (the --tip given)"
    else:
        head = f"Not accepting {ref}: its branch {moved_.branch} moved since its diff was shown at {since}"
    return TipMoved(
        f"{head}; {moved_.summary()}. Nothing was merged.",
        hint=f"Look at them (corral diff {ref}), then: corral accept {ref} --tip {now} (or --yes to take "
        "whatever the branch holds).",
        since=moved_.since,
        tip=moved_.tip,
        commits=moved_.commits,
    )
