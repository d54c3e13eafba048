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

import contextlib
import errno
import fcntl
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgspec import Struct

from corral.adapters.git import Git
from corral.errors import GitError

DIR = "corral-quarantine"
_LOCK = ".lock"
_REJECTED = "rejected-"
_TRASH = ".settled-"
_LOOSE = re.compile(r"^[0-9a-f]{2}$")
_NAME = {40: re.compile(r"^[0-9a-f]{38}$"), 64: re.compile(r"^[0-9a-f]{62}$")}
_TYPES = frozenset({b"commit", b"tree", b"blob", b"tag"})
#: The largest loose object (compressed) a quarantine may hold; git writes big files as loose too.
MAX_LOOSE_BYTES = 2 * 1024**3
#: How many problems a report names (its count is whole).
PROBLEMS_KEPT = 20


class ObjectsReport(Struct, frozen=True):
    """What the quarantine held after a turn and what became of it."""

    loose: int = 0  # loose objects that passed and were moved
    packs: int = 0  # packs that passed and were moved
    commits: tuple[str, ...] = ()  # the commits among them: new in this turn, and verified
    rejected: int = 0  # objects (or packs) that failed the check
    problems: tuple[str, ...] = ()  # what failed, a line each (bounded)
    kept: str | None = None  # where a quarantine with rejected objects is kept
    #: Every object the new ones name is there (None: not known here, a pack came in: git is asked).
    complete: bool | None = None
    missing: tuple[str, ...] = ()  # what the new objects name and the store lacks (bounded)
    parents: tuple[tuple[str, tuple[str, ...]], ...] = ()  # each new loose commit's parents

    @property
    def ok(self) -> bool:
        return self.rejected == 0

    def as_summary(self) -> dict[str, Any]:
        """The report as a turn's ref guard keeps it: a summary (the commits counted, their parents left out)."""
        return {
            "loose": self.loose,
            "packs": self.packs,
            "commits": len(self.commits),
            "rejected": self.rejected,
            "problems": list(self.problems),
            "kept": self.kept,
            "complete": self.complete,
            "missing": list(self.missing),
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


def _object_format(git: Git, repo: str | Path, q: Path, known: str | None = None) -> tuple[str, int]:
    """The hash and the width of an object's name: read off the quarantine's first loose object (a
    git process less at every turn's end), else ``known`` (the caller's, of a name corral itself
    holds), else asked of git. A name of the other width then fails its check, or names an object
    the store is asked for and does not hold: never trusted either way."""
    for sub in sorted(os.listdir(q)):
        if _LOOSE.match(sub) and os.path.isdir(q / sub) and not os.path.islink(q / sub):
            for name in os.listdir(q / sub):
                if len(name) in (38, 62) and not name.startswith("tmp_obj_"):
                    return ("sha256", 64) if len(name) == 62 else ("sha1", 40)
    found = known or git.run("rev-parse", "--show-object-format", cwd=repo, check=False).stdout.strip()
    return ("sha256", 64) if found == "sha256" else ("sha1", 40)


#: The inflated content kept of commits, trees and tags, for the connectivity check (in all).
LINKS_BYTES = 64 * 1024 * 1024


def _open_regular(path: Path, limit: int) -> int:
    """A descriptor on a regular file, never through a link, never blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        raise ValueError("not a regular file" if not stat.S_ISREG(info.st_mode) else f"{info.st_size} bytes")
    return fd


#: The largest object a quarantine may hold, inflated (a blob); a commit, tree or tag is kept whole to be
#: read, so it is bounded by :data:`LINKS_BYTES`.
MAX_OBJECT_BYTES = 2 * 1024**3
#: How much inflated data one step may make: a small compressed read never becomes a huge allocation.
INFLATE_STEP = 1 << 20


def copy_verified(fd: int, name: str, algorithm: str, out: int | None, keep: bool) -> tuple[str, bytes | None]:
    """Read a loose object from ``fd``, writing its bytes as read to ``out``, and check it: the type,
    and (``keep``: a commit, tree or tag) its content, when it hashes to ``name``; else ValueError.

    Streamed, so a large blob costs no memory; what is written is what was hashed, so a writer that
    still held the file could change nothing after the check. Inflated a bounded step at a time (a
    zlib bomb never becomes one allocation), the header's size in git's own form and within bounds
    before any content is read on.
    """
    import hashlib  # where objects are checked only: a supervisor does not pay for it before its agent starts

    inflate = zlib.decompressobj()
    digest = hashlib.new(algorithm)
    header = b""
    kind = b""
    size: int | None = None
    got = 0
    kept: list[bytes] = []

    def take(data: bytes) -> None:
        nonlocal header, kind, size, got
        if size is None:
            header += data
            if b"\0" not in header:
                if len(header) > 64:
                    raise ValueError("no object header")
                return
            head, _, data = header.partition(b"\0")
            kind, _, length = head.partition(b" ")
            if kind not in _TYPES or not length.isdigit() or str(int(length)).encode() != length:
                raise ValueError("not a git object header")  # git's own form: no sign, no leading zero
            size = int(length)
            bound = MAX_OBJECT_BYTES if kind == b"blob" else LINKS_BYTES
            if size > bound:
                raise ValueError(f"a {kind.decode()} of {size} bytes, over the bound of {bound}")
            digest.update(head + b"\0")
        got += len(data)
        if got > size:
            raise ValueError(f"header says {size} bytes, content runs past it")
        digest.update(data)
        if keep and kind != b"blob":
            kept.append(data)

    while chunk := os.read(fd, 1 << 20):
        if out is not None:
            os.write(out, chunk)
        pending = chunk
        while pending:
            take(inflate.decompress(pending, INFLATE_STEP))
            pending = inflate.unconsumed_tail
    while not inflate.eof and (tail := inflate.decompress(b"", INFLATE_STEP)):
        take(tail)
    take(inflate.flush())
    if size is None or not inflate.eof or inflate.unused_data:
        raise ValueError("not a whole zlib stream")
    if got != size:
        raise ValueError(f"header says {size} bytes, content has {got}")
    if digest.hexdigest() != name:
        raise ValueError("its content hashes to another name")
    content = b"".join(kept) if keep and kind != b"blob" else None
    if content is not None:
        well_formed(kind.decode(), content, len(name))
    return kind.decode(), content


#: Tree entry modes git writes (``100664`` is an old git's, still accepted by git's own fsck).
_MODES = frozenset({b"100644", b"100755", b"100664", b"120000", b"40000", b"160000"})
#: Characters HFS+ ignores in a name (git's ``is_hfs_dotgit``): ``.g\u200cit`` is ``.git`` there.
_IGNORED = dict.fromkeys([*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF])


def _dotgit(name: bytes) -> bool:
    """Whether a tree entry's name means ``.git`` on some filesystem git checks out on (git's fsck:
    case, HFS+'s ignored characters, NTFS's trailing dots and spaces and ``git~1``)."""
    text = name.decode("utf-8", "replace").translate(_IGNORED).lower().rstrip(". ")
    return text in (".git", "git~1")


def well_formed(kind: str, content: bytes, width: int) -> None:
    """git's own checks of a commit, tree or tag that a hash check does not make (``git fsck``'s
    errors): a commit begins with one tree line, then its parents, author and committer; a tree's
    entries have a known mode and a name that is no path (``.``, ``..``, a ``/``, empty) nor ``.git``
    by any spelling a filesystem reads as it; a tag names an object and its type. ValueError otherwise."""
    if kind == "tree":
        i = 0
        raw = width // 2
        while i < len(content):
            space = content.find(b" ", i)
            nul = content.find(b"\0", space + 1)
            if space < 0 or nul < 0 or nul + 1 + raw > len(content):
                raise ValueError("a tree entry cut short")
            mode, name = content[i:space], content[space + 1 : nul]
            if mode not in _MODES:
                raise ValueError(f"a tree entry with mode {mode[:10]!r}")
            if name in (b"", b".", b"..") or b"/" in name or _dotgit(name):
                raise ValueError(f"a tree entry named {name[:40]!r}")
            i = nul + 1 + raw
        return
    lines = content.split(b"\n")
    hexes = re.compile(rb"[0-9a-f]{%d}" % width)
    if kind == "commit":
        if not lines or not lines[0].startswith(b"tree ") or not hexes.fullmatch(lines[0][5:]):
            raise ValueError("a commit that does not begin with its tree")
        rest = lines[1:]
        while rest and rest[0].startswith(b"parent "):
            if not hexes.fullmatch(rest[0][7:]):
                raise ValueError("a commit with a bad parent line")
            rest = rest[1:]
        if len(rest) < 2 or not rest[0].startswith(b"author ") or not rest[1].startswith(b"committer "):
            raise ValueError("a commit without its author and committer")
    elif kind == "tag" and (
        len(lines) < 3
        or not lines[0].startswith(b"object ")
        or not hexes.fullmatch(lines[0][7:])
        or lines[1][5:] not in _TYPES
        or not lines[1].startswith(b"type ")
    ):
        raise ValueError("a tag that does not name its object and its type")


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


def _links(kind: str, content: bytes, width: int) -> list[tuple[str, str]]:
    """(object, the type it must have) for each object a commit, tree or tag names."""
    found: list[tuple[str, str]] = []
    if kind == "tree":
        raw = width // 2
        i = 0
        while i < len(content):
            space = content.index(b" ", i)
            nul = content.index(b"\0", space)
            mode = content[i:space]
            oid = content[nul + 1 : nul + 1 + raw].hex()
            if len(oid) != width:
                raise ValueError("a tree entry cut short")
            if mode != b"160000":  # a submodule's commit lives in another repository
                found.append((oid, "tree" if mode == b"40000" else "blob"))
            i = nul + 1 + raw
        return found
    for line in content.split(b"\n"):
        if not line:
            break  # the message begins
        key, _, value = line.partition(b" ")
        oid = value.decode("ascii", "replace")
        if len(oid) != width and key in (b"tree", b"parent", b"object"):
            raise ValueError(f"a {key.decode()} line that names no object")
        if kind == "commit" and key in (b"tree", b"parent"):
            found.append((oid, "tree" if key == b"tree" else "commit"))
        elif kind == "tag" and key == b"object":
            found.append((oid, ""))
    return found


def store_view(common_dir: str | Path) -> str:
    """An object directory that is the shared store alone: its fan-out directories and packs, linked,
    and no alternates — so a question asked there is never answered by another turn's quarantine
    (which every reader sees through the store's alternates while that turn runs)."""
    view = root(common_dir) / ".store-view"
    shared = Path(common_dir) / "objects"
    if not (view / "pack").is_symlink():
        view.mkdir(mode=0o700, parents=True, exist_ok=True)
        for i in range(256):
            link = view / f"{i:02x}"
            if not link.is_symlink():
                with contextlib.suppress(FileExistsError):
                    os.symlink(shared / link.name, link)
        with contextlib.suppress(FileExistsError):
            os.symlink(shared / "pack", view / "pack")
    return str(view)


def _in_store(git: Git, repo: str | Path, common_dir: str | Path, names: list[str]) -> dict[str, str]:
    """object → its type, for each of ``names`` the shared store itself holds."""
    if not names:
        return {}
    listing = "".join(f"{n}\n" for n in names)
    out = git.run("cat-file", "--batch-check", cwd=repo, input=listing, objects=store_view(common_dir), check=False)
    found = {}
    for line in out.stdout.splitlines():
        oid, _, kind = line.partition(" ")
        kind = kind.split(" ")[0]
        if kind and kind != "missing":
            found[oid] = kind
    return found


def _existing(git: Git, repo: str | Path, wanted: dict[str, str], held: dict[str, str]) -> list[str]:
    """What of ``wanted`` (object → its type) the shared store (``held``: what it holds) lacks or holds as
    another type."""
    problems = []
    for name in sorted(wanted):
        kind = held.get(name)
        if kind is None:
            problems.append(f"{name} is missing")
        elif wanted[name] and kind != wanted[name]:
            problems.append(f"{name} is a {kind}, named as a {wanted[name]}")
    return problems


def _pack_objects(git: Git, repo: str | Path, idx: Path) -> list[str]:
    """The commits a pack holds, read from the index corral made of it."""
    out = git.run("verify-pack", "-v", str(idx), cwd=repo, check=False).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "commit" and len(parts[0]) in (40, 64):
            found.append(parts[0])
    return found


def settle(
    git: Git, repo: str | Path, common_dir: str | Path, command_id: str, object_format: str | None = None
) -> ObjectsReport | None:
    """Verify and move a turn's quarantined objects into the shared store; None when it had none.

    ``object_format``: the repository's (``sha1``, ``sha256``), when the caller knows it: not asked of git.

    Idempotent: what a crash left half done is finished by the next call (moved objects are
    skipped, the alternates line and the quarantine removed last). Loose objects are not
    fsynced one by one, as git's own are not (``core.fsync``'s default leaves loose objects out);
    a pack is.
    """
    import shutil  # after the turn only: a supervisor does not pay for it before its agent starts

    q = path_for(common_dir, command_id)
    if not q.is_dir() or q.is_symlink():
        with _Locked(common_dir):
            _rewrite_alternates(common_dir, drop=str(q))
        return None
    algorithm, width = _object_format(git, repo, q, object_format)
    shared = Path(common_dir) / "objects"
    staging = root(common_dir) / f".staging-{command_id}"  # packs are indexed here
    passed: list[tuple[Path, Path]] = []  # (the file checked, or a copy of it, and its place in the store)
    fanned: set[str] = set()  # the store's fan-out directories known to be there
    commits: list[str] = []
    problems: list[str] = []
    rejected = 0
    linked: dict[str, str] = {}  # what the new objects name, and the type each must have
    new: dict[str, str] = {}  # the new objects, by type
    parents: dict[str, tuple[str, ...]] = {}  # each new commit's parents
    kept_bytes = 0
    for name, path in _loose_files(q):
        try:
            if len(name) != width or not _NAME[width].match(name[2:]):
                raise ValueError("not an object name")
            final = shared / name[:2] / name[2:]
            fd = _open_regular(path, MAX_LOOSE_BYTES)
            out = None
            try:
                if os.path.lexists(final):
                    kind, content = copy_verified(fd, name, algorithm, None, kept_bytes < LINKS_BYTES)
                elif os.fstat(fd).st_nlink == 1:
                    # Its one name is the quarantine's, and every process of the turn is gone: nothing can
                    # write it after this check, so the file checked is the file moved (renamed, last).
                    kind, content = copy_verified(fd, name, algorithm, None, kept_bytes < LINKS_BYTES)
                    passed.append((path, final))
                else:  # a second name (a hard link the agent made): a copy of what was checked, as git writes one
                    if final.parent.name not in fanned:
                        final.parent.mkdir(exist_ok=True)
                        fanned.add(final.parent.name)
                    written = final.parent / f"tmp_obj_corral_{os.getpid()}_{name[2:10]}"
                    out = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o444)
                    passed.append((written, final))
                    kind, content = copy_verified(fd, name, algorithm, out, kept_bytes < LINKS_BYTES)
            finally:
                os.close(fd)
                if out is not None:
                    os.close(out)
        except (OSError, ValueError, zlib.error) as exc:
            rejected += 1
            problems.append(f"{name[:2]}/{name[2:]}: {exc}")
            continue
        new[name] = kind
        if kind == "commit":
            commits.append(name)
        if content is not None:
            kept_bytes += len(content)
            try:
                links = _links(kind, content, width)
                linked.update(links)
                if kind == "commit":
                    parents[name] = tuple(oid for oid, named in links if named == "commit")
            except (ValueError, UnicodeDecodeError) as exc:
                rejected += 1
                problems.append(f"{name[:2]}/{name[2:]}: a {kind} that cannot be read: {exc}")
    packs: list[tuple[Path, Path]] = []
    pack_dir = q / "pack"
    if pack_dir.is_dir() and not pack_dir.is_symlink():
        for entry in sorted(os.listdir(pack_dir)):
            if not entry.endswith(".pack"):
                continue
            pack = pack_dir / entry
            try:
                info = os.lstat(pack)
                if not stat.S_ISREG(info.st_mode):
                    raise ValueError("not a regular file")
                staging.mkdir(mode=0o700, parents=True, exist_ok=True)
                idx = staging / (entry[: -len(".pack")] + ".idx")
                copy = staging / entry
                shutil.copyfile(pack, copy, follow_symlinks=False)
                made = git.run("index-pack", "--fsck-objects", "-o", str(idx), str(copy), cwd=repo, check=False)
                if made.returncode != 0:
                    said = (made.stderr or made.stdout).strip().splitlines()
                    raise ValueError(said[-1] if said else f"index-pack exit {made.returncode}")
                digest = made.stdout.strip().split()[-1] if made.stdout.strip() else ""
                stem = f"pack-{digest}" if digest else entry[: -len(".pack")]
                os.replace(copy, staging / f"{stem}.pack")
                os.replace(idx, staging / f"{stem}.idx")
                packs.append((staging / f"{stem}.pack", staging / f"{stem}.idx"))
                commits += _pack_objects(git, repo, staging / f"{stem}.idx")
            except (OSError, ValueError, GitError) as exc:
                rejected += 1
                problems.append(f"pack/{entry}: {exc}")
    # Every object the new ones name is new too, or already in the store with the type it is named as.
    # (A pack's links are not read here: with a pack, the branch check asks git for the whole walk.)
    outside = {oid: kind for oid, kind in linked.items() if oid not in new}
    for oid, kind in linked.items():
        if oid in new and kind and new[oid] != kind:
            problems.append(f"{oid} is a {new[oid]}, named as a {kind}")
    known = not packs and kept_bytes < LINKS_BYTES
    complete = known
    # One question of the store alone: which of the quarantine's objects it held already (a copy of
    # another task's commit is not new in this turn), and whether what the new ones name is there.
    held = _in_store(git, repo, common_dir, sorted(set(new) | (set(outside) if known else set())))
    commits = [c for c in commits if c not in held]
    if complete and outside:
        missing = _existing(git, repo, outside, held)
        if missing:
            problems += missing[:PROBLEMS_KEPT]
            complete = False
    if rejected:
        for written, _final in passed:
            if written.name.startswith("tmp_obj_corral_"):  # a copy of corral's own; the quarantine's files stay
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(written)
        kept_at = root(common_dir) / f"{_REJECTED}{command_id}"
        with _Locked(common_dir):
            _rewrite_alternates(common_dir, drop=str(q))
            if not kept_at.exists():
                os.replace(q, kept_at)
            else:
                shutil.rmtree(q, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
        return ObjectsReport(
            commits=tuple(commits),
            complete=False,
            rejected=rejected,
            problems=tuple(problems[:PROBLEMS_KEPT]),
            kept=str(kept_at),
        )
    for written, final in passed:
        if os.path.lexists(final):  # one already there is never replaced
            if written.name.startswith("tmp_obj_corral_"):
                os.unlink(written)
            continue
        if final.parent.name not in fanned:
            final.parent.mkdir(exist_ok=True)
            fanned.add(final.parent.name)
        try:
            os.chmod(written, 0o444)  # as git leaves an object: read-only
            os.rename(written, final)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.copyfile(written, final)  # another filesystem: the quarantine's file, checked, copied
    for pack, idx in packs:
        target = shared / "pack"
        target.mkdir(parents=True, exist_ok=True)
        if not (target / idx.name).exists():
            for written in (pack, idx):
                fd = os.open(written, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(pack, target / pack.name)  # the pack first: git sees a pack once its index is there
            os.replace(idx, target / idx.name)
    with _Locked(common_dir):
        _rewrite_alternates(common_dir, drop=str(q))
    # Out of the way at once (one rename); its files are removed later, off the turn's end (purge).
    for settled, aside in ((q, f"{_TRASH}{command_id}"), (staging, f"{_TRASH}{command_id}.staging")):
        if settled.exists():
            if (root(common_dir) / aside).exists():
                shutil.rmtree(root(common_dir) / aside, ignore_errors=True)
            os.replace(settled, root(common_dir) / aside)
    return ObjectsReport(
        loose=len(passed),
        packs=len(packs),
        commits=tuple(commits),
        complete=(complete and not problems) if known else None,
        missing=tuple(problems[:PROBLEMS_KEPT]),
        parents=tuple(sorted(parents.items())),
    )


def purge(common_dir: str | Path) -> int:
    """Remove the settled quarantines set aside (their objects are in the store); how many went."""
    import shutil

    gone = 0
    try:
        names = os.listdir(root(common_dir))
    except OSError:
        return 0
    for name in names:
        if name.startswith(_TRASH):
            shutil.rmtree(root(common_dir) / name, ignore_errors=True)
            gone += 1
    return gone


def leftovers(common_dir: str | Path) -> list[str]:
    """The command ids of quarantines still open under ``common_dir`` (a crash's, for the reconciler)."""
    try:
        names = os.listdir(root(common_dir))
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return []
        raise
    return sorted(n for n in names if not n.startswith((".", _REJECTED)))
