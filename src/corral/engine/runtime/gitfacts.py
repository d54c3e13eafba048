"""What a turn did in git, as the supervisor reports it: the head, the new commits, the changed paths.

Changed paths are counted from the commit the session last checked up to the upstream
merge, then from the merge's result to the end of the work phase (committed or not), so
target changes brought in by the merge are never counted as the agent's, and the commits of
a crashed turn are checked by the next one.

Every list is bounded, so a turn that commits a vendored ``node_modules`` (150,000 paths)
still writes a receipt corral can read: the receipt keeps the first
:data:`PATHS_KEPT` changed paths (and commits) with their whole count. Protected-path
patterns are matched against every path before that cut, and the protected changes are
kept up to their own bound, so no violation hides behind the truncation.

A turn's end scans the worktree once (:meth:`GitProbe.scan`, one ``git status``): the dirty flag,
the uncommitted part of the changed paths, the object ``HEAD`` resolves to and the index's staged
objects, which the confined turn's index check reads (:meth:`GitProbe.staged_against`), all come from
it, and the committed part from comparing commits' trees, which reads no file of the worktree.

Every path is read with ``-z``, exactly as git stores it: without it git prints a name that
holds a tab, a quote, a backslash, a line feed or a byte outside printable ASCII quoted
(``".github/workflows/d\\303\\251ploy.yml"``), and the quoted text matches no pattern the
real name matches. A name is escaped only where it is shown.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path

from msgspec import Struct

from corral.adapters.git import Git
from corral.engine.runtime import protocol as proto
from corral.errors import GitError

#: How many changed paths, protected changes and commits a receipt lists (their counts are whole).
PATHS_KEPT = 1000
PROTECTED_KEPT = 1000
COMMITS_KEPT = 1000


class Bounded(Struct, frozen=True):
    """The first items of a list, and how many there were in all."""

    kept: tuple[str, ...]
    count: int

    @property
    def truncated(self) -> bool:
        return self.count > len(self.kept)


def bound(items: Sequence[str], keep: int) -> Bounded:
    return Bounded(tuple(items[:keep]), len(items))


def protected_matcher(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """One compiled matcher for all of a task's protected patterns (fnmatch rules), or None."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


#: A byte of a name that is not UTF-8, as Python's ``surrogateescape`` hands it over.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def storable(path: str) -> str:
    """``path`` as text a store and a receipt can hold: the exact name, except that each byte that
    is not UTF-8 becomes ``\\xNN`` (no text column holds it, and a turn that changed such a file
    must still be recorded, its protected ones asked about, rather than fail)."""
    return _UNDECODABLE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", path)


class Scan(Struct, frozen=True):
    """What one ``git status`` of the worktree saw: every changed path, ``HEAD``'s object, the staged objects."""

    paths: list[str]
    head: str | None
    staged: list[str]


class GitProbe:
    """Reads one worktree's state for the supervisor; never raises for a git it cannot read."""

    def __init__(self, git: Git, worktree: Path) -> None:
        self.git = git
        self.worktree = worktree
        self._known_head: str | None = None
        #: A scan made for the index's check (:meth:`staged_against`), kept for the facts' next :meth:`scan`
        #: while the index is the file it saw (its identity and times): one scan serves both.
        self._kept: tuple[tuple[int, ...] | None, Scan] | None = None

    def head(self) -> str | None:
        if self._known_head is not None:  # read a moment ago, and nothing could have moved it since
            known, self._known_head = self._known_head, None
            return known
        try:
            return self.git.rev_parse("HEAD", cwd=self.worktree)
        except (GitError, OSError):
            return None

    def known_head(self, head: str | None) -> None:
        """The HEAD just read, for the next :meth:`head` to answer without asking git again (once:
        after that an agent runs, and may commit)."""
        self._known_head = head

    def worktree_changes(self) -> list[str]:
        """Every path with an uncommitted change (staged, unstaged or untracked; both sides of a rename),
        as stored: the one scan of the worktree a turn's end makes."""
        return self.scan()[0]

    def scan(self) -> tuple[list[str], str | None]:
        """(:meth:`worktree_changes`, the object ``HEAD`` resolves to as the same ``git status`` saw it,
        unpeeled: None when unborn)."""
        kept, self._kept = self._kept, None
        if kept is not None and kept[0] is not None and kept[0] == self._index_identity():
            return kept[1].paths, kept[1].head
        found = self._scan()
        return found.paths, found.head

    def staged_against(self, tip: str) -> set[str] | None:
        """The objects of the index's entries that differ from ``HEAD``, when the scan finds ``HEAD`` at ``tip``
        (what ``git diff-index --cached tip`` names, from the turn's one scan, which the facts then reuse);
        None when it does not (the caller asks git)."""
        found = self._scan()
        self._kept = (self._index_identity(), found)
        return set(found.staged) if found.head == tip else None

    def _index_identity(self) -> tuple[int, ...] | None:
        from corral.engine.runtime.branch_check import _own_git_dir

        own = _own_git_dir(self.worktree)
        try:
            info = (own / "index" if own is not None else self.worktree / ".git" / "index").stat()
        except OSError:
            return None
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def _scan(self) -> Scan:
        """One ``git status --porcelain=v2 -z``. Its entries end with the path, after a fixed number of fields
        (``1``: 8, ``u``: 10; ``?``: 1; no ``2`` entries without renames); a ``1`` entry's index side
        (``X`` of ``XY``) other than ``.`` is staged, its object the eighth field."""
        out = self.git.run(
            "status", "--porcelain=v2", "-z", "--branch", "--no-ahead-behind", "--untracked-files=all", "--no-renames",
            cwd=self.worktree,
        )  # fmt: skip
        paths: list[str] = []
        staged: list[str] = []
        head: str | None = None
        for entry in out.stdout.split("\0"):
            kind = entry[:2]
            if kind in ("1 ", "u "):
                fields = entry.split(" ", 8 if kind == "1 " else 10)
                if len(fields) == (9 if kind == "1 " else 11):
                    paths.append(fields[-1])
                    if kind == "1 " and fields[1][:1] != ".":
                        staged.append(fields[7])
            elif kind == "? ":
                paths.append(entry[2:])
            elif entry.startswith("# branch.oid "):
                oid = entry.removeprefix("# branch.oid ")
                head = oid if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", oid) else None
        return Scan(paths, head, staged)

    def unmerged(self) -> list[str]:
        return self.git.unmerged_paths(self.worktree)

    def merge_in_progress(self) -> bool:
        result = self.git.run("rev-parse", "-q", "--verify", "MERGE_HEAD", cwd=self.worktree, check=False)
        return result.returncode == 0 or bool(self.unmerged())

    def work_captured(self, head_before: str | None) -> bool:
        """A new commit or a dirty worktree since ``head_before``; False when git cannot be read
        (the watchdog's rule fails toward retrying)."""
        try:
            head = self.head()
            return (head is not None and head != head_before) or bool(self.git.dirty_paths(self.worktree))
        except (GitError, OSError):
            return False

    def changed_paths(
        self,
        start: str | None,
        pre_sync: str | None,
        post_sync: str | None,
        head: str | None = None,
        uncommitted: Sequence[str] | None = None,
    ) -> list[str]:
        """Every path changed from ``start`` to the merge, then from its result on (committed or not), as stored.

        From the merge's result on: the commits' trees from ``post_sync`` to ``head``, and
        ``uncommitted`` (:meth:`worktree_changes`, read here when not given).
        """
        paths: set[str] = set()
        if start and pre_sync and start != pre_sync:
            paths.update(self._names("diff", "--name-only", "--no-renames", "-z", start, pre_sync))
        if post_sync:
            head = head or self.head()
            if head and head != post_sync:
                paths.update(self._names("diff", "--name-only", "--no-renames", "-z", post_sync, head))
        paths.update(self.worktree_changes() if uncommitted is None else uncommitted)
        return sorted(paths)

    def _names(self, *args: str) -> list[str]:
        """The NUL-separated names a ``-z`` git command prints; a git that fails is an error, never "no paths"."""
        return [p for p in self.git.run(*args, cwd=self.worktree).stdout.split("\0") if p]

    def facts(
        self,
        start: str | None,
        pre_sync: str | None,
        post_sync: str | None,
        protected: Sequence[str],
        branch_tip: str | None = None,
    ) -> proto.GitFacts:
        """The turn's facts, from one scan of the worktree. ``branch_tip``: the branch's commit as the
        check after this turn read it (a commit: its type was read with it); when the scan finds
        ``HEAD`` at that very object, ``HEAD``'s commit is it, and git is not asked again."""
        self._known_head = None  # read before the agent ran: never its answer after
        try:
            uncommitted, seen = self.scan()
            head = branch_tip if branch_tip is not None and seen == branch_tip else self.head()
            commits: list[str] = []
            if head and start and head != start:  # the same commit: none made, nothing to ask
                out = self.git.run("rev-list", "--reverse", f"{start}..{head}", cwd=self.worktree, check=False)
                commits = [c for c in out.stdout.split() if c]
            exact = self.changed_paths(start, pre_sync, post_sync, head, uncommitted)
            matcher = protected_matcher(protected)
            hits = [storable(p) for p in exact if matcher.match(p)] if matcher else []
            changed = [storable(p) for p in exact]
            paths, violations, made = (
                bound(changed, PATHS_KEPT),
                bound(hits, PROTECTED_KEPT),
                bound(commits, COMMITS_KEPT),
            )
            return proto.GitFacts(
                head=head,
                commits=made.kept,
                check_from=start,
                changed_paths=paths.kept,
                protected_changes=violations.kept,
                dirty=bool(uncommitted),
                changed_count=paths.count,
                protected_count=violations.count,
                commit_count=made.count,
            )
        except (GitError, OSError) as exc:
            return proto.GitFacts(error=str(exc))
