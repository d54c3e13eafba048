"""A confined turn's new git objects arrive through a quarantine, as git's own receive-pack does.

Inside the sandbox the repository's object directory is a private one: the turn's quarantine
(``<common dir>/corral-quarantine/<command id>/``) is bound over ``<common dir>/objects``, and
the shared store is mounted read-only beside it (``corral.adapters.sandbox.SHARED_OBJECTS``, named to the agent's git
by ``GIT_ALTERNATE_OBJECT_DIRECTORIES``). So every object the agent's git writes lands in the
quarantine, and no existing object can be deleted or rewritten from inside.

During the turn the quarantine is also a line of the shared store's ``objects/info/alternates``
(:func:`open_`): unconfined readers — ``corral diff``, the person's ``git log``, ``git gc`` —
reach the branch's new objects as a read-only, not yet trusted alternate and never read "bad
object". The quarantines live under the common git directory, which every sandbox sees
read-only, so another turn's sandbox never meets an alternate it cannot see.

After the turn (:func:`settle`, from the supervisor; again from the reconciler for a turn
whose supervisor died), unconfined:

1. every loose object is read without following a link or blocking on a FIFO, inflated and
   hashed: its name must be the hash of its content, its header a known type with the right
   size; every pack is indexed anew by ``git index-pack`` from its content (the agent's own
   ``.idx`` is never used);
2. what passed is moved into the shared store (an object already there is never replaced);
3. the alternates line goes, then the quarantine.

An object that fails is never moved: the whole quarantine is kept aside
(``corral-quarantine/rejected-<command id>``) as evidence, and the report says what failed —
the branch check (:mod:`corral.engine.runtime.branch_check`) then puts the branch back.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corral.adapters.git import Git
from corral.domain.record import record
from corral.errors import GitError

DIR = "corral-quarantine"
_LOCK = ".lock"
_REJECTED = "rejected-"
_LOOSE = re.compile(r"^[0-9a-f]{2}$")
_NAME = {40: re.compile(r"^[0-9a-f]{38}$"), 64: re.compile(r"^[0-9a-f]{62}$")}
_TYPES = frozenset({b"commit", b"tree", b"blob", b"tag"})
#: The largest loose object (compressed) a quarantine may hold; git writes big files as loose too.
MAX_LOOSE_BYTES = 2 * 1024**3
#: How many problems a report names (its count is whole).
PROBLEMS_KEPT = 20


@record
class ObjectsReport:
    """What the quarantine held after a turn and what became of it."""

    loose: int = 0  # loose objects that passed and were moved
    packs: int = 0  # packs that passed and were moved
    commits: tuple[str, ...] = ()  # the commits among them: new in this turn, and verified
    rejected: int = 0  # objects (or packs) that failed the check
    problems: tuple[str, ...] = ()  # what failed, a line each (bounded)
    kept: str | None = None  # where a quarantine with rejected objects is kept

    @property
    def ok(self) -> bool:
        return self.rejected == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "loose": self.loose,
            "packs": self.packs,
            "commits": len(self.commits),
            "rejected": self.rejected,
            "problems": list(self.problems),
            "kept": self.kept,
        }


def root(common_dir: str | Path) -> Path:
    return Path(common_dir) / DIR


def path_for(common_dir: str | Path, command_id: str) -> Path:
    """The quarantine of one turn (one command): under the common git directory, beside ``objects``."""
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", command_id) or command_id.startswith("."):
        raise GitError(f"A command id that cannot name a directory: {command_id[:80]!r}.")
    return root(common_dir) / command_id


def _alternates(common_dir: str | Path) -> Path:
    return Path(common_dir) / "objects" / "info" / "alternates"


class _Locked:
    """The quarantines' lock: held while the shared store's alternates file is rewritten."""

    def __init__(self, common_dir: str | Path) -> None:
        self.path = root(common_dir) / _LOCK

    def __enter__(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _rewrite_alternates(common_dir: str | Path, add: str | None = None, drop: str | None = None) -> None:
    path = _alternates(common_dir)
    try:
        lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except FileNotFoundError:
        lines = []
    wanted = [line for line in lines if line != drop]
    if add is not None and add not in wanted:
        wanted.append(add)
    if wanted == lines:
        return
    if not wanted and not path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".alternates.{os.getpid()}.tmp")
    tmp.write_text("".join(f"{line}\n" for line in wanted), encoding="utf-8", errors="surrogateescape")
    os.replace(tmp, path)


def open_(common_dir: str | Path, command_id: str) -> Path:
    """Make the turn's quarantine (idempotent) and name it to unconfined readers; its path.

    Saved first: the alternates line exists before the agent can write an object, so the
    reconciler finds and settles a quarantine whatever point a crash came at.
    """
    q = path_for(common_dir, command_id)
    for sub in (q, q / "pack", q / "info"):
        sub.mkdir(mode=0o755, parents=True, exist_ok=True)
    with _Locked(common_dir):
        _rewrite_alternates(common_dir, add=str(q))
    return q


def _object_format(git: Git, repo: str | Path) -> str:
    found = git.run("rev-parse", "--show-object-format", cwd=repo, check=False).stdout.strip()
    return found or "sha1"


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file, never through a link, never blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{info.st_size} bytes, over the bound")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def check_loose(data: bytes, name: str, algorithm: str) -> str:
    """The object's type when ``data`` (a loose object's file) hashes to ``name``; else ValueError."""
    inflate = zlib.decompressobj()
    digest = hashlib.new(algorithm)
    header = b""
    size = None
    got = 0
    view = memoryview(data)
    step = 1 << 20
    for start in range(0, len(data), step):
        out = inflate.decompress(view[start : start + step])
        if size is None:
            header += out
            if b"\0" not in header:
                if len(header) > 64:
                    raise ValueError("no object header")
                continue
            head, _, rest = header.partition(b"\0")
            kind, _, length = head.partition(b" ")
            if kind not in _TYPES or not length.isdigit():
                raise ValueError("not a git object header")
            size = int(length)
            digest.update(head + b"\0")
            out = rest
        digest.update(out)
        got += len(out)
    tail = inflate.flush()
    digest.update(tail)
    got += len(tail)
    if size is None or not inflate.eof or inflate.unused_data:
        raise ValueError("not a whole zlib stream")
    if got != size:
        raise ValueError(f"header says {size} bytes, content has {got}")
    if digest.hexdigest() != name:
        raise ValueError("its content hashes to another name")
    return kind.decode()


def _loose_files(q: Path) -> Iterator[tuple[str, Path]]:
    for sub in sorted(os.listdir(q)):
        if not _LOOSE.match(sub):
            continue
        where = q / sub
        if not stat.S_ISDIR(os.lstat(where).st_mode):
            yield sub, where  # reported: a fan-out entry that is no directory
            continue
        for name in sorted(os.listdir(where)):
            if name.startswith("tmp_obj_"):
                continue  # a write the agent's git did not finish: never an object
            yield sub + name, where / name


def _put(data: bytes, final: Path) -> None:
    """Write a verified loose object into the shared store; one already there is never replaced."""
    if os.path.lexists(final):
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f"tmp_obj_corral_{os.getpid()}_{final.name[:8]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o444)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, final)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def _pack_objects(git: Git, repo: str | Path, idx: Path) -> list[str]:
    """The commits a pack holds, read from the index corral made of it."""
    out = git.run("verify-pack", "-v", str(idx), cwd=repo, check=False).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "commit" and len(parts[0]) in (40, 64):
            found.append(parts[0])
    return found


def settle(git: Git, repo: str | Path, common_dir: str | Path, command_id: str) -> ObjectsReport | None:
    """Verify and move a turn's quarantined objects into the shared store; None when it had none.

    Idempotent: what a crash left half done is finished by the next call (moved objects are
    skipped, the alternates line and the quarantine removed last).
    """
    q = path_for(common_dir, command_id)
    if not q.is_dir() or q.is_symlink():
        with _Locked(common_dir):
            _rewrite_alternates(common_dir, drop=str(q))
        return None
    algorithm = _object_format(git, repo)
    width = 64 if algorithm == "sha256" else 40
    shared = Path(common_dir) / "objects"
    passed: list[tuple[str, bytes]] = []
    commits: list[str] = []
    problems: list[str] = []
    rejected = 0
    for name, path in _loose_files(q):
        try:
            if len(name) != width or not _NAME[width].match(name[2:]):
                raise ValueError("not an object name")
            data = _read_regular(path, MAX_LOOSE_BYTES)
            kind = check_loose(data, name, algorithm)
        except (OSError, ValueError, zlib.error) as exc:
            rejected += 1
            problems.append(f"{name[:2]}/{name[2:]}: {exc}")
            continue
        passed.append((name, data))
        if kind == "commit":
            commits.append(name)
    packs: list[tuple[Path, Path]] = []
    pack_dir = q / "pack"
    scratch = root(common_dir) / f".index-{command_id}"
    if pack_dir.is_dir() and not pack_dir.is_symlink():
        for entry in sorted(os.listdir(pack_dir)):
            if not entry.endswith(".pack"):
                continue
            pack = pack_dir / entry
            try:
                info = os.lstat(pack)
                if not stat.S_ISREG(info.st_mode):
                    raise ValueError("not a regular file")
                scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
                idx = scratch / (entry[: -len(".pack")] + ".idx")
                copy = scratch / entry
                shutil.copyfile(pack, copy, follow_symlinks=False)
                made = git.run("index-pack", "--fsck-objects", "-o", str(idx), str(copy), cwd=repo, check=False)
                if made.returncode != 0:
                    said = (made.stderr or made.stdout).strip().splitlines()
                    raise ValueError(said[-1] if said else f"index-pack exit {made.returncode}")
                name = made.stdout.strip().split()[-1] if made.stdout.strip() else ""
                final = f"pack-{name}" if name else entry[: -len(".pack")]
                os.replace(copy, scratch / f"{final}.pack")
                os.replace(idx, scratch / f"{final}.idx")
                packs.append((scratch / f"{final}.pack", scratch / f"{final}.idx"))
                commits += _pack_objects(git, repo, scratch / f"{final}.idx")
            except (OSError, ValueError, GitError) as exc:
                rejected += 1
                problems.append(f"pack/{entry}: {exc}")
    kept = None
    if rejected:
        kept_at = root(common_dir) / f"{_REJECTED}{command_id}"
        with _Locked(common_dir):
            _rewrite_alternates(common_dir, drop=str(q))
            if not kept_at.exists():
                os.replace(q, kept_at)
            else:
                shutil.rmtree(q, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
        kept = str(kept_at)
        return ObjectsReport(
            commits=tuple(commits),
            rejected=rejected,
            problems=tuple(problems[:PROBLEMS_KEPT]),
            kept=kept,
        )
    for name, data in passed:
        _put(data, shared / name[:2] / name[2:])
    for pack, idx in packs:
        target = shared / "pack"
        target.mkdir(parents=True, exist_ok=True)
        if not (target / idx.name).exists():
            os.replace(pack, target / pack.name)  # the pack first: git sees a pack once its index is there
            os.replace(idx, target / idx.name)
    with _Locked(common_dir):
        _rewrite_alternates(common_dir, drop=str(q))
    shutil.rmtree(q, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return ObjectsReport(loose=len(passed), packs=len(packs), commits=tuple(commits))


def leftovers(common_dir: str | Path) -> list[str]:
    """The command ids of quarantines still open under ``common_dir`` (a crash's, for the reconciler)."""
    try:
        names = os.listdir(root(common_dir))
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return []
        raise
    return sorted(n for n in names if not n.startswith((".", _REJECTED)))
