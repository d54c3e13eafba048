"""A branch's commit, a worktree's ``HEAD``, whether a branch is in another: from the files where git reads them so.

A crashed turn's auto-resume asks two such questions on its way to the next agent — the task branch's
tip (the same-cause breaker's "no progress since") and the worktree's ``HEAD`` (is it still the one the
crashed turn's receipt recorded?) — and each ``git rev-parse`` is a process. In a plain layout each is a
file or two: a loose ref (or a line of ``packed-refs``), and the loose object it names, to make sure it
is a commit as ``rev-parse <rev>^{commit}`` does. The resumed turn's supervisor asks two more: the branch and
its verified tip before the agent (:func:`commits_of`), and whether the target is in the branch already
(:func:`reaches`, down the branch's loose commits: only a "yes" is taken from them).

Only the plain layout is read. Anything else goes to git, which answers it as before: reftable, a
symbolic link anywhere on the way (each directory is opened without following one), a ref file that
holds no object name (a symbolic ref, garbage), a name git would refuse, a ref found nowhere, an object
that is not loose (packed, in an alternate) or not a commit, a ``HEAD`` that names anything but a branch.
What an agent could have written (its branch, its worktree's ``.git``) is thus read only where git would
read the very same bytes, and the answer is the one ``git rev-parse`` would give.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from corral.adapters.git import Git
from corral.adapters.loose_objects import read_loose
from corral.adapters.ref_files import _BAD_COMPONENT, _oid, git_dirs, read_packed

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
#: How much of a ref or ``HEAD`` file is read (an object name or ``ref: <name>`` fits).
_REF_BYTES = 512
#: The namespaces read from the files: the branches, the tips corral verified, and the remote-tracking refs a
#: worker's turn follows (:func:`ref_commit`), the remote's WIP refs fetched included.
_READABLE = ("refs/heads/", "refs/corral/verified/", "refs/remotes/", "refs/corral/remote-wip/")


class _Ask(Exception):
    """Not the plain layout: git is asked."""


def _regular(dir_fd: int, name: str) -> bytes | None:
    """The start of the regular file ``name`` beside ``dir_fd``; None when there is none (_Ask: something else)."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise _Ask  # a directory, a symbolic link, a device: git's to read
    fd = os.open(name, _READ, dir_fd=dir_fd)
    try:
        return os.read(fd, _REF_BYTES)
    finally:
        os.close(fd)


def _loose(common: Path, ref: str) -> str | None:
    """The object name the loose file of ``ref`` holds; None when there is no such file."""
    parts = ref.split("/")
    fd = os.open(common, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                return None
            os.close(fd)
            fd = inner
        data = _regular(fd, parts[-1])
    finally:
        os.close(fd)
    if data is None:
        return None
    found = _oid(data)
    if found is None:
        raise _Ask  # a symbolic ref, garbage: git says what it names
    return found


def _ref_commit(common: Path, ref: str) -> str:
    """The commit ``ref`` (a full name) names, read from the files; _Ask wherever that is not plain."""
    oid = _lookup(common, ref)
    if oid is None:
        raise _Ask  # found nowhere: git says so itself
    return oid


def _lookup(common: Path, ref: str) -> str | None:
    """The commit ``ref`` (a full name) names, read from the files; None when neither its loose file nor a line
    of ``packed-refs`` is there, where git finds nothing either; _Ask wherever that is not plain."""
    if not ref.startswith(_READABLE) or any(_BAD_COMPONENT.search(c) or not c for c in ref.split("/")):
        raise _Ask
    if (common / "reftable").exists() or (common / "packed-refs").is_symlink():
        raise _Ask
    oid = _loose(common, ref)  # the loose file first, as git reads: a concurrent pack-refs hides nothing
    if oid is None:
        oid = read_packed(common, ()).get(ref)
    if oid is None:
        return None
    found = read_loose(common, oid)
    if found is None or found[0] != "commit":
        raise _Ask  # packed, elsewhere, or not a commit (``^{commit}`` peels or refuses): git's to say
    return oid


def _dirs(worktree: Path) -> tuple[Path, Path]:
    """(the worktree's own git directory, the repository's common one), from its ``.git``; _Ask if unusual."""
    found = git_dirs(worktree)
    if found is None:
        raise _Ask
    return found


def branch_commit(git: Git, repo: Path | str, branch: str) -> str | None:
    """What ``git.rev_parse(f"refs/heads/{branch}", cwd=repo)`` answers, from the files where they are plain."""
    ref = f"refs/heads/{branch}"
    try:
        _, common = _dirs(Path(repo))
        return _ref_commit(common, ref)
    except (_Ask, OSError, UnicodeDecodeError, ValueError):
        return git.rev_parse(ref, cwd=repo)


def ref_commit(git: Git, repo: Path | str, ref: str) -> str | None:
    """What ``git.rev_parse(ref, cwd=repo)`` answers for the full name ``ref`` (a branch, a verified tip, a
    remote-tracking ref), from the files where they are plain, a ref that is not there at all included (None,
    as git says): a worker's turn asks after refs its host has never fetched yet."""
    try:
        _, common = _dirs(Path(repo))
        return _lookup(common, ref)
    except (_Ask, OSError, UnicodeDecodeError, ValueError):
        return git.rev_parse(ref, cwd=repo)


def ref_absent(repo: Path | str, ref: str) -> bool:
    """Whether the full name ``ref`` is surely not there: no loose file, no line of ``packed-refs``, in a plain
    layout (False for anything else, a ref there but odd included: git is asked then)."""
    try:
        _, common = _dirs(Path(repo))
        return _lookup(common, ref) is None
    except (_Ask, OSError, UnicodeDecodeError, ValueError):
        return False


def commits_of(worktree: Path | str, refs: list[str]) -> dict[str, str] | None:
    """Each of ``refs``'s commit (branches, verified tips), from the files; None when any is not plain (not
    there at all included): the caller asks git about them all, as ``for-each-ref`` would list them."""
    try:
        _, common = _dirs(Path(worktree))
        return {ref: _ref_commit(common, ref) for ref in refs}
    except (_Ask, OSError, UnicodeDecodeError, ValueError):
        return None


def head_commit(git: Git, worktree: Path | str) -> str | None:
    """What ``git.rev_parse("HEAD", cwd=worktree)`` answers, from the files where they are plain: a ``HEAD``
    naming a branch (or holding a commit's name), read from the worktree's own git directory."""
    try:
        own, common = _dirs(Path(worktree))
        fd = os.open(own, os.O_RDONLY | os.O_DIRECTORY)
        try:
            data = _regular(fd, "HEAD")
        finally:
            os.close(fd)
        if data is None:
            raise _Ask
        text = data.decode()
        if text.startswith("ref:") and text.endswith("\n") and text.count("\n") == 1:
            return _ref_commit(common, text.removeprefix("ref:").strip())
        oid = _oid(data)
        if oid is None or text.strip() != oid:
            raise _Ask
        found = read_loose(common, oid)
        if found is None or found[0] != "commit":
            raise _Ask
        return oid
    except (_Ask, OSError, UnicodeDecodeError, ValueError):
        return git.rev_parse("HEAD", cwd=worktree)


#: How many commits a walk from the files reads before it leaves the question to git.
WALK_COMMITS = 256


def _rewritten(common: Path) -> bool:
    """Whether git could see other parents than the commits' own: replace refs, grafts, a shallow history."""
    if (common / "info" / "grafts").exists() or (common / "shallow").exists() or (common / "refs" / "replace").exists():
        return True
    try:
        return b"refs/replace/" in (common / "packed-refs").read_bytes()
    except FileNotFoundError:
        return False


def _parents(common: Path, oid: str) -> list[str]:
    """The parents a loose commit names; _Ask when ``oid`` is not a loose, well-formed commit."""
    found = read_loose(common, oid, whole=True)
    if found is None or found[0] != "commit":
        raise _Ask
    lines = found[1].split(b"\n")
    if not lines[0].startswith(b"tree "):
        raise _Ask
    parents = []
    for line in lines[1:]:
        if not line.startswith(b"parent "):
            break
        parent = line[7:].decode("ascii", "replace")
        if _oid(parent.encode()) != parent:
            raise _Ask
        parents.append(parent)
    return parents


def reaches(git: Git, worktree: Path | str, ancestor_ref: str, descendant: str) -> bool:
    """What ``git.is_ancestor(ancestor_ref, descendant, cwd=worktree)`` answers, for a branch ``ancestor_ref``
    (``refs/heads/…``): True from the files when the walk down ``descendant``'s loose commits meets the branch's
    commit within :data:`WALK_COMMITS` commits. Every other answer is git's (a "no" is never taken from a walk
    that could have missed a way), and so is any history git could see otherwise (replace refs, grafts, shallow)."""
    try:
        _, common = _dirs(Path(worktree))
        if not _rewritten(common):
            base = _ref_commit(common, ancestor_ref)
            todo, seen = [descendant], {descendant}
            while todo and len(seen) <= WALK_COMMITS:
                commit = todo.pop()
                if commit == base:
                    return True
                for parent in _parents(common, commit):
                    if parent not in seen:
                        seen.add(parent)
                        todo.append(parent)
    except (_Ask, OSError, UnicodeDecodeError, ValueError):
        pass
    return git.is_ancestor(ancestor_ref, descendant, cwd=worktree)
