"""No receipt too large to read: a 150,000-file commit and a 50 MB line, each followed by a normal turn.

Both are produced for real by an agent (the command harness running a script): the first
commits a vendored ``node_modules`` of 150,000 paths through git's plumbing (one blob, one
index, one commit; the files are marked skip-worktree, so no 150,000 files are written to
disk — the commit and every diff of it are real); the second prints lines of megabytes and a
last line of 50 MB. Either would make a receipt over the protocol's bound if what it holds were
not bounded. Each turn must be recorded as the completed turn it is, and the next turn must
run and succeed on top of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec.structs import replace

from corral.adapters.git import Git
from corral.domain.actors import Actor
from corral.domain.redact import RESULT_BYTES
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime import receipt_fit
from corral.engine.runtime.gitfacts import PATHS_KEPT, PROTECTED_KEPT, GitProbe
from tests.conftest import git

FILES = 150_000
#: Long enough names (about 60 bytes) that the whole list alone is over the protocol's bound.
PATH = "node_modules/@vendor/package-{pkg:04d}/dist/esm/module-{mod:02d}.js"

AGENT = r"""
import os, subprocess, sys
from pathlib import Path

count = Path(os.environ["AGENT_STATE"]) / "count"
n = int(count.read_text()) if count.exists() else 0
count.write_text(str(n + 1))
mode = os.environ["AGENT_MODE"]
if n == 0 and mode == "vendor":
    files = int(os.environ["AGENT_FILES"])
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], input=b"module.exports = 1;\n", capture_output=True, check=True
    ).stdout.decode().strip()
    paths = [os.environ["AGENT_PATH"].format(pkg=i // 100, mod=i % 100) for i in range(files)]
    subprocess.run(["git", "update-index", "--index-info"],
                   input="".join(f"100644 {blob}\t{p}\n" for p in paths).encode(), check=True)
    subprocess.run(["git", "update-index", "--skip-worktree", "--stdin"],
                   input="".join(p + "\n" for p in paths).encode(), check=True)
    subprocess.run(["git", "commit", "-q", "-m", "Vendor the dependencies"], check=True)
    print(f"vendored {files} files")
elif n == 0 and mode == "long-line":
    out = sys.stdout.buffer
    for i in range(12):
        out.write(b"%d:" % i + b"m" * (1536 * 1024) + b"\n")
    out.write(b"last:" + b"z" * (50 * 1024 * 1024) + b"\n")
    out.flush()
else:
    Path("second.txt").write_text("the second turn\n")
    subprocess.run(["git", "add", "second.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "Second turn"], check=True)
    print("second turn done")
"""


@pytest.fixture
def command_agent(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch):
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    state = tmp_path / "agent-state"
    state.mkdir()
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "120")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("AGENT_STATE", str(state))
    monkeypatch.setenv("AGENT_FILES", str(FILES))
    monkeypatch.setenv("AGENT_PATH", PATH)

    def open_with(mode: str) -> Project:
        monkeypatch.setenv("AGENT_MODE", mode)
        return Project.open(repo)

    return open_with


def turn_and_next(proj: Project):
    """The big turn, then a normal one; both must complete. Returns the task and its agent turns."""
    task = tasks.create(proj, "Vendor and go on", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    first = control.wait(proj, task.ref, timeout=120)
    assert not first.timed_out
    assert first.task.status is Status.BLOCKED, first.task.resting_cause
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="Now the second part.")
    second = control.wait(proj, task.ref, timeout=60)
    assert not second.timed_out
    assert second.task.status is Status.BLOCKED, second.task.resting_cause
    with proj.store.read() as tx:
        agent_turns = [t for t in tx.turns(task.id) if t.role.value == "agent"]
        session = tx.get_session(second.task.session_id)
    return task, agent_turns, session


def filed_receipt(proj: Project, task_id: str, sequence: int) -> proto.Receipt:
    path = proj.paths.turn_dir(task_id, sequence) / proto.RESPONSE
    assert path.stat().st_size <= proto.MAX_BYTES
    found = proto.read(path, proto.Receipt)
    assert isinstance(found, proto.Receipt), found
    return found


@pytest.mark.slow
def test_a_150000_file_commit_is_recorded_and_the_next_turn_succeeds(command_agent, repo):
    proj = command_agent("vendor")
    task, agent_turns, session = turn_and_next(proj)
    assert [t.kind for t in agent_turns] == ["start", "unblock"], [(t.kind, t.content[:200]) for t in agent_turns]
    first, second = agent_turns
    assert "vendored 150000 files" in first.content
    assert first.details["changed_paths"][:2] == [PATH.format(pkg=0, mod=0), PATH.format(pkg=0, mod=1)]
    assert len(first.details["changed_paths"]) == PATHS_KEPT
    assert first.details["changed_count"] == FILES and first.details["changed_paths_truncated"] is True
    assert first.details["commit_count"] == 1 and first.details["commits_truncated"] is False
    filed = filed_receipt(proj, task.id, 1)
    assert filed.status is proto.ReceiptStatus.COMPLETED
    assert len(filed.git.changed_paths) == PATHS_KEPT and filed.git.changed_count == FILES
    # The start commit advanced past the vendoring, so the second turn counts only its own file.
    assert second.details["changed_paths"] == ["second.txt"]
    assert second.details["changed_count"] == 1 and second.details["changed_paths_truncated"] is False
    assert "second turn done" in second.content
    assert session.git_start_sha == second.details["head"]
    proj.close()


@pytest.mark.slow
def test_a_50_mb_last_line_is_recorded_bounded_and_the_next_turn_succeeds(command_agent):
    proj = command_agent("long-line")
    task, agent_turns, _session = turn_and_next(proj)
    assert [t.kind for t in agent_turns] == ["start", "unblock"]
    first, second = agent_turns
    log = proj.paths.turn_dir(task.id, 1) / "output.log"
    assert log.stat().st_size > 50 * 1024 * 1024  # the verbatim log keeps every byte
    assert len(first.content.encode()) <= RESULT_BYTES
    assert "cut:" in first.content and "output.log" in first.content  # the note says where the rest is
    filed = filed_receipt(proj, task.id, 1)
    assert filed.result is not None and len(filed.result.encode()) <= RESULT_BYTES
    assert "second turn done" in second.content
    proj.close()


def test_protected_paths_are_matched_before_the_list_is_cut(repo: Path):
    """3,000 changed paths: the receipt lists the first 1,000, yet every protected one is found."""
    start = git(repo, "rev-parse", "HEAD")
    blob = (
        subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=b"x\n", capture_output=True, check=True)
        .stdout.decode()
        .strip()
    )
    paths = [PATH.format(pkg=i // 100, mod=i % 100) for i in range(3000)]
    subprocess.run(
        ["git", "update-index", "--index-info"],
        cwd=repo,
        input="".join(f"100644 {blob}\t{p}\n" for p in paths).encode(),
        check=True,
    )
    subprocess.run(["git", "checkout-index", "-a"], cwd=repo, check=True)
    git(repo, "commit", "-q", "-m", "many")
    facts = GitProbe(Git(), repo).facts(start, start, start, ["node_modules/@vendor/package-0029/*"])
    assert len(facts.changed_paths) == PATHS_KEPT
    assert PATH.format(pkg=29, mod=0) not in facts.changed_paths  # beyond the cut of the list...
    assert facts.protected_changes == tuple(PATH.format(pkg=29, mod=m) for m in range(100))  # ...yet protected
    assert len(facts.protected_changes) <= PROTECTED_KEPT
    assert (facts.changed_count, facts.protected_count) == (3000, 100)
    assert json.dumps(list(facts.changed_paths))


@pytest.mark.slow
def test_a_receipt_corral_writes_is_always_one_it_reads(tmp_path: Path):
    """Every variable part far over the bound at once: fit shrinks them and the writer never refuses."""
    attempt = proto.AttemptRecord(number=1, started_at="2026-01-01T00:00:00Z", ended_at=None, outcome="failed")
    paths = tuple(PATH.format(pkg=i // 100, mod=i % 100) for i in range(FILES))  # changed, and every one protected
    huge = proto.Receipt(
        command_id="c1",
        task_id="t1",
        kind="work",
        status=proto.ReceiptStatus.COMPLETED,
        result="r" * (20 * 1024 * 1024),
        failure_reason="f" * (9 * 1024 * 1024),
        check=proto.CheckResult(command="make test", exit_code=1, timed_out=False, timeout=60, tail="t" * 9_000_000),
        sync=proto.SyncReport("conflict", "main", tuple(f"conflicted/{i:07d}.txt" for i in range(300_000))),
        attempts=tuple(replace(attempt, number=n) for n in range(1, 40_001)),
        git=proto.GitFacts(
            head="h",
            changed_paths=paths,
            protected_changes=paths,
            commits=tuple(f"{i:040x}" for i in range(200_000)),
            changed_count=FILES,
        ),
    )
    assert receipt_fit.encoded_size(huge) > 5 * proto.MAX_BYTES
    with pytest.raises(proto.TooLarge):
        proto.write(tmp_path, huge)  # unshrunk, the writer would refuse it
    fitted = receipt_fit.fit(huge)
    proto.write(tmp_path, fitted)
    back = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert isinstance(back, proto.Receipt)
    assert (tmp_path / proto.RESPONSE).stat().st_size <= proto.MAX_BYTES
    assert back.result is not None and back.result.startswith("rrrr") and "cut:" in back.result
    assert back.attempts[0].number == 1 and back.attempts[-1].number == 40_000  # the first and the last kept
    assert back.git is not None and back.git.head == "h" and back.git.changed_paths[0] == PATH.format(pkg=0, mod=0)
    assert back.git.changed_count == FILES  # the lists shrank; their counts did not
    small = replace(huge, result="ok", failure_reason=None, check=None, sync=None, attempts=(), git=None)
    assert receipt_fit.fit(small) is small  # what already fits is written as it is
    near = replace(small, result="é" * ((proto.MAX_BYTES - receipt_fit.FIT_MARGIN) // 2 - 1024))  # 2 bytes each
    assert receipt_fit.encoded_size(near) <= proto.MAX_BYTES - receipt_fit.FIT_MARGIN
    assert receipt_fit.fit(near) is near  # and so is one just within the bound


@pytest.mark.parametrize(
    "result",
    [
        'plain text, "quoted", a tab\there, a newline\nand é, ü, 😀',
        "a harness cut inside a character: \ud83d, and a lone \udc80 at the end",
        "control characters \x00\x01\x1b[31m and \x7f\u2028",
    ],
)
def test_the_size_fit_measures_is_the_size_the_writer_writes(tmp_path: Path, result: str):
    """The fit measures a receipt as the writer encodes it, byte for byte: a lone surrogate included
    (written as its 6-byte escape), or a receipt the fit passed could still be over the bound."""
    receipt = proto.Receipt(
        command_id="c1",
        task_id="t1",
        kind="work",
        status=proto.ReceiptStatus.COMPLETED,
        result=result,
        failure_reason=result,
        check=proto.CheckResult(command="make test", exit_code=1, timed_out=False, timeout=60.5, tail=result),
    )
    proto.write(tmp_path, receipt)
    assert receipt_fit.encoded_size(receipt) == (tmp_path / proto.RESPONSE).stat().st_size
    back = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert isinstance(back, proto.Receipt) and back.result == result and back.check == receipt.check


TEXTS = st.text(st.characters(codec=None, categories=None), max_size=300)


@given(
    result=st.none() | TEXTS,
    tail=TEXTS,
    paths=st.lists(TEXTS, max_size=30),
    files=st.lists(TEXTS, max_size=30),
)
def test_the_fits_floor_is_never_over_the_size_the_writer_writes(result, tail, paths, files):
    """The fit skips measuring a receipt whose floor is over the bound: a floor over the real size
    would have it shrink a receipt that fits. Every character is at least a byte on disk, whatever it is."""
    receipt = proto.Receipt(
        command_id="c1",
        task_id="t1",
        kind="work",
        status=proto.ReceiptStatus.COMPLETED,
        result=result,
        output_window=tail or None,
        check=proto.CheckResult(command="make", exit_code=0, timed_out=False, timeout=1, tail=tail),
        error=proto.TurnError(kind=proto.ErrorKind.INTERNAL, phase=None, reason=tail, tail=tail),
        sync=proto.SyncReport("conflict", "main", tuple(files)),
        git=proto.GitFacts(head="h", changed_paths=tuple(paths), protected_changes=tuple(paths[:3]), commits=("c",)),
    )
    assert receipt_fit._least_size(receipt) <= receipt_fit.encoded_size(receipt)


def test_the_fit_keeps_the_most_that_fits():
    """The floor only skips measures: the fit takes the same, largest shrink that fits as measuring each would."""
    receipt = proto.Receipt(
        command_id="c1",
        task_id="t1",
        kind="work",
        status=proto.ReceiptStatus.COMPLETED,
        result="é" * 40_000,
        check=proto.CheckResult(command="make", exit_code=1, timed_out=False, timeout=1, tail="t" * 30_000),
        git=proto.GitFacts(head="h", changed_paths=tuple(PATH.format(pkg=i // 100, mod=i % 100) for i in range(3000))),
    )
    max_bytes = receipt_fit.FIT_MARGIN + 40_000
    fitted = receipt_fit.fit(receipt, max_bytes)
    budget, limit, measured = max_bytes - receipt_fit.FIT_MARGIN, (max_bytes - receipt_fit.FIT_MARGIN) // 2, []
    while receipt_fit.encoded_size(receipt_fit._shrunk(receipt, limit)) > budget:
        measured.append(limit)
        limit //= 2
    assert measured  # the largest shrinks were over the bound...
    assert fitted == receipt_fit._shrunk(receipt, limit)  # ...and the fit took the first one within it
    assert (
        receipt_fit.encoded_size(fitted) <= budget < receipt_fit.encoded_size(receipt_fit._shrunk(receipt, limit * 2))
    )
