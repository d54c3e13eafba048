"""accept reads what it can from the repository's files, as git reads them: the branch's tip and the target's
commit and tree at pre-flight, the squash's tree and trailers at verification, each from a ref's file and an
object git keeps loose. Where the files are not the whole answer (a packed object, a symbolic ref, an object
that is not a commit, a damaged file), git is asked, and the answer is the one git gives."""

from __future__ import annotations

import zlib
from pathlib import Path

from corral.adapters.loose_objects import commit_tree, read_loose
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from tests.conftest import git
from tests.review.test_accept_ref_reads import blocked, write_ref


def _common(repo: Path) -> Path:
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    return common if common.is_absolute() else repo / common


def test_a_loose_commit_is_read_as_git_reads_it_and_anything_else_is_none(repo: Path) -> None:
    common = _common(repo)
    head = git(repo, "rev-parse", "HEAD")
    found = read_loose(common, head, whole=True)
    assert found is not None and found[0] == "commit"
    assert found[1].decode() == git(repo, "cat-file", "commit", head) + "\n"
    assert commit_tree(found[1]) == git(repo, "rev-parse", "HEAD^{tree}")
    assert read_loose(common, git(repo, "rev-parse", "HEAD^{tree}"))[0] == "tree"  # type: ignore[index]
    assert read_loose(common, "0" * 40) is None  # not there
    assert read_loose(common, "../../etc") is None  # not an object's name
    (repo / "damaged.txt").write_text("damaged\n")
    damaged = git(repo, "hash-object", "-w", "damaged.txt")
    path = common / "objects" / damaged[:2] / damaged[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 99\0damaged\n"))  # a size that is not the content's
    assert read_loose(common, damaged, whole=True) is None
    path.write_bytes(b"not deflated at all")
    assert read_loose(common, damaged) is None
    git(repo, "gc", "-q", "--prune=now")  # packed now: not loose, so git is asked
    assert read_loose(common, head) is None


def test_pre_flight_reads_the_tips_from_the_files_as_for_each_ref_gives_them(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "files", "files.txt", "files\n")
    tip, main = git(repo, "rev-parse", "corral/files"), git(repo, "rev-parse", "main")
    tree = git(repo, "rev-parse", "main^{tree}")
    assert accepting._tips_from_files(proj, "corral/files", "main") == (tip, (main, tree))
    assert accepting._read_tips(proj, "corral/files", "main") == (tip, True, (main, tree))
    assert accepting._tips_from_files(proj, "corral/files", None) == (tip, None)
    assert accepting._tips_from_files(proj, "corral/gone", "main") is None  # asked of git: it says gone
    assert accepting._read_tips(proj, "corral/gone", "main")[0] is None
    write_ref(repo, "refs/heads/blobby", tree)  # a ref naming a tree, not a commit
    assert accepting._tips_from_files(proj, "corral/files", "blobby") is None  # no commit: git is asked
    assert accepting._read_tips(proj, "corral/files", "blobby")[1] is False
    git(repo, "pack-refs", "--all")  # the refs packed: their lines in packed-refs are read the same
    assert accepting._tips_from_files(proj, "corral/files", "main") == (tip, (main, tree))
    git(repo, "gc", "-q", "--prune=now")  # the objects packed: git is asked, and answers the same
    assert accepting._tips_from_files(proj, "corral/files", "main") is None
    assert accepting._read_tips(proj, "corral/files", "main") == (tip, True, (main, tree))


def test_verification_reads_the_squash_from_the_files_as_git_log_gives_it(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "verified", "v.txt", "v\n")
    result = accepting.accept(proj, "verified", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE and result.commit
    from_files = accepting._facts_from_files(proj, "main", result.commit)
    assert from_files is not None
    assert from_files == proj.git.commit_facts("refs/heads/main", cwd=repo)
    assert from_files[2] == result.task.id
    assert accepting._facts_from_files(proj, "main", "f" * 40) is None  # the ref is not at it: git is asked
    git(repo, "gc", "-q", "--prune=now")
    assert accepting._facts_from_files(proj, "main", result.commit) is None  # packed: git is asked


def test_an_accept_onto_a_packed_target_asks_git_and_lands(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "packed", "packed.txt", "packed\n")
    git(repo, "gc", "-q", "--prune=now")  # every object and ref packed
    result = accepting.accept(proj, "packed", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    assert git(repo, "show", "main:packed.txt") == "packed"
    assert git(repo, "log", "-1", "--format=%(trailers:key=Corral-Task,valueonly)", "main") == result.task.id


def test_a_loose_object_that_inflates_past_the_bound_is_left_to_git_and_never_inflated_whole(repo: Path) -> None:
    """A file an agent could leave among the objects (an unconfined turn writes the repository): a commit's header
    over 64 MiB of zeros deflates to about 64 KiB. Read whole it is refused at the bound, not inflated; its start
    still reads, and a deflated file over the bound is not read past it."""
    import tracemalloc

    from corral.adapters.loose_objects import WHOLE_BYTES

    common = _common(repo)
    head = git(repo, "rev-parse", "HEAD")
    bomb = "b" * 40
    (common / "objects" / "bb").mkdir(exist_ok=True)
    size = 64 << 20
    deflate = zlib.compressobj()
    data = deflate.compress(f"commit {size}\0tree {head}\n".encode()) + deflate.compress(bytes(size)) + deflate.flush()
    (common / "objects" / "bb" / bomb[2:]).write_bytes(data)
    tracemalloc.start()
    try:
        assert read_loose(common, bomb, whole=True) is None
        assert read_loose(common, bomb) is not None  # its start: a commit (the callers then ask git)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * WHOLE_BYTES  # never the 64 MiB it inflates to
    big = "c" * 40
    (common / "objects" / "cc").mkdir(exist_ok=True)
    (common / "objects" / "cc" / big[2:]).write_bytes(
        zlib.compress(f"commit {WHOLE_BYTES * 4}\0".encode()) + bytes(WHOLE_BYTES)
    )
    assert read_loose(common, big, whole=True) is None
