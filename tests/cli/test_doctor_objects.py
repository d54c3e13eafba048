"""``doctor`` checks the repository's objects: a task's commit deleted from the object store, a loose
object rewritten in place with garbage or with other content, and a blob gone under a packed tree
are each reported, with the refs that reach them and a hint that works when typed.

The objects are broken as an agent that could write ``.git/objects`` would break them.
"""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from corral.engine.operations.doctor import check_objects
from tests.conftest import CLI, git


def loose(repo: Path, oid: str) -> Path:
    path = repo / ".git" / "objects" / oid[:2] / oid[2:]
    assert path.is_file(), f"{oid} is not a loose object"
    path.chmod(0o644)
    return path


@pytest.fixture
def task_branch(repo: Path) -> Path:
    """``corral/t`` one commit past main (its objects loose), with its verified tip on main."""
    git(repo, "checkout", "-q", "-b", "corral/t")
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('reviewed')\n")
    git(repo, "add", "src/app.py")
    git(repo, "commit", "-q", "-m", "the task's work")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", "refs/corral/verified/t", git(repo, "rev-parse", "main"))
    return repo


def objects_checks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc["checks"] if c["name"] == "objects"]


def test_a_sound_repository_passes(task_branch: Path, project: Any) -> None:
    [found] = check_objects(project)
    assert found.status == "ok" and "every object the refs reach is present" in found.message


def test_a_deleted_commit_of_a_task_branch_fails_doctor_naming_the_branch(task_branch: Path, corral: CLI) -> None:
    commit = git(task_branch, "rev-parse", "corral/t")
    loose(task_branch, commit).unlink()

    result = corral("doctor", "--json")

    assert result.returncode == 1, result.stderr
    doc = result.json()
    assert doc["ok"] is False
    bad = objects_checks(doc)[0]
    assert bad["status"] == "fail"
    assert commit[:12] in bad["message"] and "refs/heads/corral/t" in bad["message"]
    assert "git update-ref refs/heads/corral/t refs/corral/verified/t" in bad["hint"]
    assert "git fsck --name-objects" in bad["hint"]
    # the hint works when typed: the branch back on its verified tip, nothing the refs reach is missing
    subprocess.run("git update-ref refs/heads/corral/t refs/corral/verified/t", shell=True, cwd=task_branch, check=True)
    again = objects_checks(corral("doctor", "--json").json())
    assert [c["status"] for c in again] == ["ok"], again
    shown = corral("doctor")
    assert "objects" in shown.stdout


def test_a_commit_rewritten_in_place_with_garbage_is_corrupt(task_branch: Path, project: Any) -> None:
    commit = git(task_branch, "rev-parse", "corral/t")
    loose(task_branch, commit).write_bytes(b"garbage, not an object\n")

    found = check_objects(project)

    assert found[0].status == "fail"
    assert found[0].message.startswith(f"corrupt object {commit[:12]}")
    assert "refs/heads/corral/t" in found[0].message
    assert any("git stopped at the first bad object" in c.message for c in found)


def test_a_blob_rewritten_with_other_content_is_found_although_it_still_inflates(
    task_branch: Path, project: Any
) -> None:
    blob = git(task_branch, "rev-parse", "corral/t:src/app.py")
    evil = b"print('reviewed'); import os; os.system('id')\n"
    loose(task_branch, blob).write_bytes(zlib.compress(b"blob %d\0" % len(evil) + evil))
    assert "os.system" in git(task_branch, "show", "corral/t:src/app.py")  # git reads it as the reviewed name

    found = check_objects(project)

    assert [c.status for c in found][:1] == ["fail"]
    assert found[0].message.startswith(f"rewritten object (its content does not match its name) {blob[:12]}")
    assert "refs/heads/corral/t:src/app.py" in found[0].message


def test_a_blob_missing_under_a_packed_tree_is_named_by_ref_and_path(task_branch: Path, project: Any) -> None:
    git(task_branch, "checkout", "-q", "corral/t")
    (task_branch / "src" / "more.py").write_text("print('more')\n")
    git(task_branch, "add", "src/more.py")
    git(task_branch, "commit", "-q", "-m", "more")
    git(task_branch, "checkout", "-q", "main")
    git(task_branch, "repack", "-q", "-a", "-d")  # every object packed: no loose tree leads to the blob
    blob = git(task_branch, "rev-parse", "corral/t:src/more.py")
    listed = git(task_branch, "rev-list", "--objects", "--all").splitlines()
    wanted = "".join(line.split(" ")[0] + "\n" for line in listed if not line.startswith(blob))
    packs = task_branch / ".git" / "objects" / "pack"
    aside = task_branch.parent / "new-pack"
    aside.mkdir()
    subprocess.run(
        ["git", "pack-objects", "-q", str(aside / "pack")], cwd=task_branch, input=wanted, text=True, check=True
    )
    for old in packs.iterdir():  # the pack replaced by one without the blob: a tampered object store
        old.chmod(0o644)
        old.unlink()
    for new in aside.iterdir():
        new.rename(packs / new.name)
    assert not (task_branch / ".git" / "objects" / blob[:2] / blob[2:]).exists()

    found = check_objects(project)

    assert found[0].status == "fail"
    assert found[0].message.startswith(f"missing blob {blob[:12]}")
    assert "refs/heads/corral/t:src/more.py" in found[0].message
