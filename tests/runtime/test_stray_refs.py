"""Stray refs: after a turn, the lock files, symbolic refs and refs under corral's namespaces that corral
did not make are removed and reported; a failed branch deletion is an error.

Every test drives real git in a real repository: the strays are made as an agent would make them
(``git symbolic-ref``, ``git update-ref --stdin``, files written into ``.git/refs``), then the
repository is read back after the sweep.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from corral.adapters.branches import delete_task_branch
from corral.adapters.git import Git
from corral.engine.runtime import stray_refs, stray_report
from corral.engine.runtime.stray_refs import sweep
from corral.engine.runtime.stray_report import StrayReport
from corral.errors import GitError
from tests.conftest import git
from tests.support.counting_runner import CountingRunner

SRC = Path(__file__).resolve().parents[2] / "src" / "corral"


def refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ") for line in out.splitlines())


def after_turn(repo: Path, known: list[str]) -> StrayReport:
    """The sweep as the supervisor runs it, once every lock the test made is older than the turn's end."""
    return sweep(Git(), repo, known, turn_ended=time.time() + 1, grace=0)


@pytest.fixture
def tasked(repo: Path) -> Path:
    """The repository with task ``t``'s branch (one commit of its own) and every ref corral makes for it."""
    git(repo, "branch", "corral/t")
    worktree = repo.parent / "wt-t"
    git(repo, "worktree", "add", "-q", str(worktree), "corral/t")
    (worktree / "work.txt").write_text("the agent's work\n")
    git(worktree, "add", "work.txt")
    git(worktree, "commit", "-q", "-m", "work")
    tip = git(repo, "rev-parse", "corral/t")
    for ref in (
        "refs/corral/archive/t",
        "refs/corral/verified/t",
        "refs/corral/kept/t/3",
        "refs/corral/kept/t/4-refs/heads/main",
        "refs/corral/stale/t/2",
        "refs/corral/wip/t",
    ):
        git(repo, "update-ref", ref, tip)
    return repo


OURS = {
    "refs/heads/corral/t",
    "refs/corral/archive/t",
    "refs/corral/verified/t",
    "refs/corral/kept/t/3",
    "refs/corral/kept/t/4-refs/heads/main",
    "refs/corral/stale/t/2",
    "refs/corral/wip/t",
}


def test_a_clean_repository_reports_nothing_and_keeps_every_ref(tasked: Path) -> None:
    before = refs(tasked)
    report = after_turn(tasked, ["t"])
    assert report.clean and stray_report.summary(report) is None
    assert refs(tasked) == before


def test_a_task_branch_made_a_symref_is_deleted_itself_never_followed_to_main(tasked: Path) -> None:
    main = git(tasked, "rev-parse", "main")
    git(tasked, "update-ref", "-d", "refs/heads/corral/t")
    git(tasked, "symbolic-ref", "refs/heads/corral/t", "refs/heads/main")
    git(tasked, "symbolic-ref", "refs/corral/verified/t", "refs/heads/main")

    report = after_turn(tasked, ["t"])

    after = refs(tasked)
    assert after["refs/heads/main"] == main  # main is where it was: the symref was not followed
    assert "refs/heads/corral/t" not in after and "refs/corral/verified/t" not in after
    assert not (tasked / ".git" / "refs" / "heads" / "corral" / "t").exists()
    assert (report.symrefs, report.refs, report.left) == (2, 0, 0)
    assert set(report.task_refs) == {"refs/heads/corral/t", "refs/corral/verified/t"}  # the caller puts them back
    shown = {i.name: i for i in report.items}
    assert shown["refs/heads/corral/t"].kind == "symref" and shown["refs/heads/corral/t"].value == "refs/heads/main"
    assert "2 symbolic refs" in (stray_report.summary(report) or "")


def test_refs_corral_did_not_make_are_removed_and_its_own_kept(tasked: Path) -> None:
    tip = git(tasked, "rev-parse", "main")
    strays = [
        "refs/heads/corral/not-a-task",
        "refs/corral/archive/gone-task",
        "refs/corral/kept/other/3",
        "refs/corral/unknown/t",
        "refs/corral/loose",
    ]
    for ref in strays:
        git(tasked, "update-ref", ref, tip)
    outside = {"refs/heads/feature": tip, "refs/tags/v1": tip, "refs/remotes/origin/main": tip}
    for ref, value in outside.items():
        git(tasked, "update-ref", ref, value)
    git(tasked, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")  # a clone makes this
    git(tasked, "symbolic-ref", "refs/heads/alias", "refs/heads/main")  # the person's own

    report = after_turn(tasked, ["t"])

    after = refs(tasked)
    assert set(after) >= OURS
    assert not set(strays) & set(after)
    assert set(outside) | {"refs/heads/alias", "refs/remotes/origin/HEAD"} <= set(after)  # outside: untouched
    assert git(tasked, "symbolic-ref", "refs/heads/alias") == "refs/heads/main"
    assert report.refs == len(strays) and report.task_refs == ()
    assert {i.name for i in report.items} == set(strays)
    assert all(i.removed and i.value == tip for i in report.items)


def test_three_thousand_refs_go_in_one_transaction_and_the_report_stays_bounded(tasked: Path) -> None:
    tip = git(tasked, "rev-parse", "main")
    packed = "".join(f"create refs/heads/corral/junk-{n:04d} {tip}\n" for n in range(1500))
    git_stdin(tasked, "update-ref", "--stdin", data=packed)
    git(tasked, "pack-refs", "--all")  # half of them packed, half loose: both are deleted
    loose = "".join(f"create refs/corral/kept/nobody/{n:04d} {tip}\n" for n in range(1500))
    git_stdin(tasked, "update-ref", "--stdin", data=loose)
    assert len(refs(tasked)) > 3000
    runner = CountingRunner()

    report = sweep(Git(runner), tasked, lambda: ["t"], turn_ended=time.time() + 1, grace=0)

    after = refs(tasked)
    assert set(after) == OURS | {"refs/heads/main"}
    assert report.refs == 3000 and report.left == 0 and report.error is None
    assert len(report.items) == stray_refs.ITEMS_KEPT
    assert "3,000 refs" in (stray_report.summary(report) or "")
    ran = [a[1:] for a in runner.argvs]
    assert len(ran) == 2, ran  # one for-each-ref, one update-ref transaction: not 3,000 processes
    assert ran[0][0] == "for-each-ref" and "update-ref" in ran[1] and "--stdin" in ran[1] and "--no-deref" in ran[1]
    packed_refs = (tasked / ".git" / "packed-refs").read_text()
    assert "junk-" not in packed_refs


def git_stdin(repo: Path, *args: str, data: str) -> None:
    import subprocess

    subprocess.run(["git", *args], cwd=repo, input=data, text=True, check=True, capture_output=True)


def test_a_ref_named_with_bytes_that_are_not_utf8_is_removed_by_its_exact_name(tasked: Path) -> None:
    tip = git(tasked, "rev-parse", "main")
    heads = os.fsencode(tasked / ".git" / "refs" / "heads" / "corral")
    odd = heads + b"/caf\xe9-\xff"
    with open(odd, "wb") as f:
        f.write(tip.encode() + b"\n")
    near = heads + b"/caf\xc3\xa9-\xc3\xbf"  # the same name read as Latin-1 and written as UTF-8: not it
    with open(near, "wb") as f:
        f.write(tip.encode() + b"\n")
    quote = tasked / ".git" / "refs" / "heads" / "corral" / "it's"
    quote.write_text(tip + "\n")

    report = after_turn(tasked, ["t"])

    assert not os.path.lexists(odd) and not os.path.lexists(near) and not quote.exists()
    assert report.refs == 3 and report.left == 0
    names = {i.name for i in report.items}
    assert "refs/heads/corral/caf\\xe9-\\xff" in names  # shown escaped, removed by its bytes
    assert set(refs(tasked)) >= OURS


def test_unreadable_ref_files_and_fifos_among_the_refs_are_removed_before_git_reads_them(tasked: Path) -> None:
    heads = tasked / ".git" / "refs" / "heads" / "corral"
    git(tasked, "symbolic-ref", "refs/heads/corral/dangling", "refs/heads/nothing")
    (heads / "garbage").write_text("not a ref\n")
    (heads / "a b").write_text(git(tasked, "rev-parse", "main") + "\n")  # a name git refuses
    os.mkfifo(heads / "fifo")  # every git listing refs would block on it
    os.mkfifo(tasked / ".git" / "refs" / "tags" / "fifo")  # outside corral's namespaces: as blocking
    secret = tasked.parent / "secret"
    secret.write_text(git(tasked, "rev-parse", "main") + "\n")
    (heads / "through").symlink_to(secret)  # git would read the file it points at

    report = after_turn(tasked, ["t"])

    assert not any(os.path.lexists(heads / n) for n in ("dangling", "garbage", "a b", "fifo", "through"))
    assert not os.path.lexists(tasked / ".git" / "refs" / "tags" / "fifo")
    assert secret.exists()  # the link went, never what it points at
    assert report.broken == 6 and report.left == 0 and report.error is None
    why = {i.name: i.why for i in report.items}
    assert "a FIFO among the refs" in (why["refs/tags/fifo"] or "")
    assert "read through" in (why["refs/heads/corral/through"] or "")
    assert set(refs(tasked)) >= OURS
    git(tasked, "for-each-ref")  # git lists the refs again


def test_a_task_branch_of_garbage_is_removed_and_named_for_the_caller(tasked: Path) -> None:
    (tasked / ".git" / "refs" / "heads" / "corral" / "t").write_text("ref: refs/heads/nothing-at-all\n")

    report = after_turn(tasked, ["t"])

    assert "refs/heads/corral/t" not in refs(tasked)
    assert report.broken == 1 and report.task_refs == ("refs/heads/corral/t",)


def test_stale_locks_go_and_a_lock_in_use_a_directory_and_a_fifo_stay(tasked: Path) -> None:
    dot = tasked / ".git"
    stale = [dot / "refs" / "heads" / "corral" / "t.lock", dot / "packed-refs.lock", dot / "refs" / "tags" / "x.lock"]
    for lock in stale:
        lock.write_text("")
    held = dot / "refs" / "heads" / "main.lock"
    held.write_text("")
    (dot / "refs" / "heads" / "corral" / "d.lock").mkdir()
    (dot / "refs" / "heads" / "corral" / "d.lock" / "inside").write_text("")
    os.mkfifo(dot / "refs" / "corral" / "f.lock")
    outside = tasked.parent / "outside"
    outside.mkdir()
    (outside / "keep.lock").write_text("")
    (dot / "refs" / "heads" / "corral" / "link").symlink_to(outside)  # a link among the refs: never followed
    fd = os.open(held, os.O_RDONLY)  # a git at work holds it open
    try:
        report = after_turn(tasked, ["t"])
    finally:
        os.close(fd)

    assert not any(lock.exists() for lock in stale)
    assert held.exists() and (dot / "refs" / "heads" / "corral" / "d.lock" / "inside").exists()
    assert (dot / "refs" / "corral" / "f.lock").exists()
    assert (outside / "keep.lock").exists() and not os.path.lexists(dot / "refs" / "heads" / "corral" / "link")
    assert report.locks == 3 and report.left == 3
    why = {i.name: i.why or "" for i in report.items if not i.removed}
    assert why["refs/heads/main.lock"].startswith(f"open by process {os.getpid()}")
    assert "a directory" in why["refs/heads/corral/d.lock"] and "a FIFO" in why["refs/corral/f.lock"]
    # with its lock gone, the task's branch moves again
    git(tasked, "update-ref", "refs/heads/corral/t", git(tasked, "rev-parse", "main"))


def test_a_lock_made_after_the_turn_ended_is_left_for_the_git_that_made_it(tasked: Path) -> None:
    lock = tasked / ".git" / "refs" / "heads" / "corral" / "t.lock"
    lock.write_text("")
    made = os.stat(lock).st_ctime
    os.utime(lock, (0, 0))  # its times put back: the inode's change time still says when

    report = sweep(Git(), tasked, ["t"], turn_ended=made - 10, grace=0)

    assert lock.exists()
    assert report.locks == 0 and report.left == 1
    assert report.items[0].why == "made after the turn: in use"


def test_a_young_lock_is_waited_for_then_removed(tasked: Path) -> None:
    lock = tasked / ".git" / "refs" / "heads" / "corral" / "t.lock"
    lock.write_text("")

    report = sweep(Git(), tasked, ["t"], turn_ended=time.time() + 1, grace=0.2)

    assert not lock.exists() and report.locks == 1


def test_the_report_round_trips_through_json(tasked: Path) -> None:
    git(tasked, "symbolic-ref", "refs/heads/corral/x", "refs/heads/main")
    (tasked / ".git" / "refs" / "heads" / "corral" / "y.lock").mkdir()
    report = after_turn(tasked, ["t"])
    assert StrayReport.from_json(report.to_json()) == report
    line = stray_report.summary(report.to_json()) or ""
    assert "1 symbolic ref" in line and "refs/heads/corral/y.lock" in line


def test_every_refs_corral_namespace_in_the_source_is_known_to_the_sweep() -> None:
    """A namespace corral makes refs in, missing from the tables, would have its refs swept away."""
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        names |= set(re.findall(r"refs/corral/([a-z][a-z-]*)/", path.read_text()))
    assert names, "the source names no refs/corral/ namespace: the scan is broken"
    assert names <= stray_refs.ONE_PER_TASK | stray_refs.MANY_PER_TASK, names


# -- a failed branch deletion is an error ----------------------------------------------------------


def test_delete_task_branch_deletes_a_plain_branch_and_an_absent_one_is_success(tasked: Path) -> None:
    tip = git(tasked, "rev-parse", "corral/t")
    git(tasked, "worktree", "remove", "--force", str(tasked.parent / "wt-t"))
    assert delete_task_branch(Git(), tasked, "corral/t") == tip
    assert "refs/heads/corral/t" not in refs(tasked)
    assert delete_task_branch(Git(), tasked, "corral/t") is None


def test_delete_task_branch_deletes_a_symref_itself_and_main_stays(tasked: Path) -> None:
    main = git(tasked, "rev-parse", "main")
    git(tasked, "symbolic-ref", "refs/heads/corral/s", "refs/heads/main")
    delete_task_branch(Git(), tasked, "corral/s")
    assert "refs/heads/corral/s" not in refs(tasked)
    assert refs(tasked)["refs/heads/main"] == main


def test_a_lock_in_the_way_is_an_error_with_a_hint_where_branch_d_failed_silently(tasked: Path) -> None:
    lock = tasked / ".git" / "refs" / "heads" / "corral" / "t.lock"
    lock.write_text("")
    with pytest.raises(GitError) as caught:
        delete_task_branch(Git(), tasked, "corral/t")

    assert caught.value.code == "branch-delete-failed"
    assert "corral/t" in caught.value.message and "File exists" in caught.value.message
    assert str(lock) in (caught.value.hint or "") and "rm '" in (caught.value.hint or "")
    assert "refs/heads/corral/t" in refs(tasked)
    lock.unlink()
    delete_task_branch(Git(), tasked, "corral/t")
    assert "refs/heads/corral/t" not in refs(tasked)


def test_a_branch_moved_since_the_value_expected_is_not_deleted(tasked: Path) -> None:
    with pytest.raises(GitError) as caught:
        delete_task_branch(Git(), tasked, "corral/t", expected=git(tasked, "rev-parse", "main"))
    assert caught.value.code == "branch-moved"
    assert "refs/heads/corral/t" in refs(tasked)


def test_a_ref_whose_lock_is_in_use_is_left_and_the_rest_still_removed(tasked: Path) -> None:
    tip = git(tasked, "rev-parse", "main")
    for name in ("busy", "idle-1", "idle-2"):
        git(tasked, "update-ref", f"refs/heads/corral/{name}", tip)
    lock = tasked / ".git" / "refs" / "heads" / "corral" / "busy.lock"
    lock.write_text("")
    fd = os.open(lock, os.O_RDONLY)
    try:
        report = after_turn(tasked, ["t"])
    finally:
        os.close(fd)

    after = refs(tasked)
    assert "refs/heads/corral/busy" in after and lock.exists()
    assert "refs/heads/corral/idle-1" not in after and "refs/heads/corral/idle-2" not in after
    assert report.refs == 2 and report.left == 2 and report.error is None
    why = {i.name: i.why or "" for i in report.items if not i.removed}
    assert "File exists" in why["refs/heads/corral/busy"] or "Unable to create" in why["refs/heads/corral/busy"]


def test_refs_that_move_or_go_while_the_sweep_runs_are_left_to_whoever_moved_them(tasked: Path) -> None:
    main, work = git(tasked, "rev-parse", "main"), git(tasked, "rev-parse", "corral/t")
    for name in ("moved", "gone", "stray-1", "stray-2"):
        git(tasked, "update-ref", f"refs/heads/corral/{name}", main)

    runner = CountingRunner()
    listed_first: list[bool] = []

    def meanwhile() -> list[str]:
        """Read after the refs are listed: a start makes its branch, another sweep or a person moves refs."""
        # the tasks are read after the listing: a branch listed was made after its task's row
        listed_first.append(any("for-each-ref" in argv for argv in runner.argvs))
        git(tasked, "update-ref", "refs/heads/corral/new", main)
        git(tasked, "update-ref", "refs/heads/corral/moved", work)
        git(tasked, "update-ref", "-d", "refs/heads/corral/gone")
        return ["t", "new"]

    report = sweep(Git(runner), tasked, meanwhile, turn_ended=time.time() + 1, grace=0)

    assert listed_first == [True]
    after = refs(tasked)
    assert after["refs/heads/corral/new"] == main  # the new task's branch: never a stray
    assert after["refs/heads/corral/moved"] == work  # moved after the listing: left as moved
    assert not {"refs/heads/corral/stray-1", "refs/heads/corral/stray-2"} & set(after)
    assert report.refs == 2 and report.left == 1 and report.error is None
    left = [i for i in report.items if not i.removed]
    assert [(i.name, i.why) for i in left] == [("refs/heads/corral/moved", "moved since it was listed")]
    assert "refs/heads/corral/gone" not in {i.name for i in report.items}
