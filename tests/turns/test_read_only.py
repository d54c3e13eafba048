"""Read-only means read-only: an ask whose agent commits, edits, stages and deletes anyway has
every change kept on ``refs/corral/kept/<ref>/<turn>`` and reverted — the branch back on its
tip, the worktree back as the person left it (their own uncommitted edits included) — and
``show`` explains it. Driven through the real CLI with the ``command`` harness; the keep-aside
itself is also crashed between saving and reverting, and finished by the next reconcile.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from corral.adapters.git import Git
from corral.adapters.harness.base import Posture, TurnRequest
from corral.adapters.harness.codex import CodexHarness
from corral.adapters.harness.pi import PiHarness
from corral.engine import readonly
from tests.conftest import CLI, git
from tests.support.model_server import Step, Text, ToolUse, scripted_server
from tests.support.pi import MODEL, PROVIDER, pi_bin_or_skip, pi_env, run_launch, write_pi_config

#: A command-harness agent that honours nothing: its work turn commits one file; its ask
#: commits, edits a tracked file, stages a new one, leaves an untracked one and deletes the
#: person's untracked notes. It prints the contract's variables so the test sees them.
AGENT = r"""
import os, subprocess, sys
from pathlib import Path
kind = os.environ["CORRAL_TURN_KIND"]
prompt = Path(os.environ["CORRAL_PROMPT_FILE"]).read_text()
assert sys.stdin.read() == prompt
print(f"kind={kind} read_only={os.environ['CORRAL_READ_ONLY']}")
def git(*args):
    subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=a@example.com", *args], check=True)
if os.environ["CORRAL_READ_ONLY"] != "1":
    Path("work.txt").write_text("the work\n")
    git("add", "work.txt")
    git("commit", "-q", "-m", "the work")
    print("did the work")
else:
    Path("sneaky.txt").write_text("committed during an ask\n")
    git("add", "sneaky.txt")
    git("commit", "-q", "-m", "an ask must not commit")
    Path("work.txt").write_text("rewritten during an ask\n")
    Path("staged.txt").write_text("staged during an ask\n")
    git("add", "staged.txt")
    Path("untracked.txt").write_text("left during an ask\n")
    if Path("notes.txt").exists():
        Path("notes.txt").unlink()
    print("The answer is 42.")
"""


@pytest.fixture
def command_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    return script


def porcelain(worktree: Path) -> str:
    return git(worktree, "status", "--porcelain=v1", "--untracked-files=all")


@pytest.mark.slow
def test_an_ask_that_commits_and_edits_is_kept_aside_and_reverted(corral: CLI, command_agent: Path) -> None:
    corral.ok("create", "Answer questions", "--ref", "ro")
    corral.ok("start", "ro", "--wait", "--timeout", "60")
    task = corral.json("show", "ro")["task"]
    worktree = Path(task["worktree"])
    tip = git(worktree, "rev-parse", "HEAD")
    # The person's own uncommitted work, which the revert must leave exactly as it was.
    (worktree / "work.txt").write_text("the person's edit\n")
    (worktree / "notes.txt").write_text("the person's notes\n")
    (worktree / "README.md").write_text("# staged by the person\n")
    git(worktree, "add", "README.md")
    before_status = porcelain(worktree)
    before_diff = git(worktree, "diff")
    before_staged = git(worktree, "diff", "--cached")

    asked = corral("ask", "ro", "-m", "What is the answer?", "--json")
    assert asked.returncode == 0, asked.stderr
    answer = asked.json()
    assert "The answer is 42." in answer["answer"]
    assert "kind=ask read_only=1" in answer["answer"]
    assert answer["failure"]["code"] == "read-only-changes-kept"

    # The branch is back on its tip, HEAD on the branch, index and worktree as they were.
    assert git(worktree, "rev-parse", "HEAD") == tip
    assert git(worktree, "symbolic-ref", "HEAD") == f"refs/heads/{task['branch']}"
    assert porcelain(worktree) == before_status
    assert git(worktree, "diff") == before_diff
    assert git(worktree, "diff", "--cached") == before_staged
    assert (worktree / "work.txt").read_text() == "the person's edit\n"
    assert (worktree / "notes.txt").read_text() == "the person's notes\n"
    assert not (worktree / "sneaky.txt").exists() and not (worktree / "untracked.txt").exists()

    # Everything the agent did is on the kept ref, apart from the archive ref reopen restores.
    asked_turn = next(t for t in corral.json("show", "ro")["turns"] if t["kind"] == "ask" and t["role"] == "human")
    ref = f"refs/corral/kept/ro/{asked_turn['sequence']}"
    assert answer["failure"]["details"]["reason"] == ref
    kept = git(worktree, "rev-parse", ref)
    assert git(worktree, "show", f"{kept}:sneaky.txt") == "committed during an ask"
    assert git(worktree, "show", f"{kept}:work.txt") == "rewritten during an ask"
    assert git(worktree, "show", f"{kept}:staged.txt") == "staged during an ask"
    assert git(worktree, "show", f"{kept}:untracked.txt") == "left during an ask"
    assert git(worktree, "log", "-1", "--format=%s", f"{kept}^1") == "an ask must not commit"
    assert not git(worktree, "for-each-ref", "refs/corral/archive/")

    # show explains it: the task's cause, its timeline, and --json carries the typed code.
    shown = corral.ok("show", "ro")
    assert "read-only turn" in shown.stdout and ref in shown.stdout, shown.stdout
    doc = corral.json("show", "ro")
    assert doc["task"]["status"] == "blocked"
    assert doc["resting_cause"]["code"] == "read-only-changes-kept"
    agent_ask = next(t for t in doc["turns"] if t["role"] == "agent" and t["sequence"] > asked_turn["sequence"])
    assert agent_ask["failure"]["code"] == "read-only-changes-kept"


@pytest.mark.slow
def test_an_ask_that_changes_nothing_records_no_cause(corral: CLI, tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "quiet.py"
    script.write_text("import sys; sys.stdin.read(); print('nothing changed')\n")
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    corral.ok("create", "Quiet", "--ref", "quiet")
    corral.ok("start", "quiet", "--wait", "--timeout", "60")
    worktree = Path(corral.json("show", "quiet")["task"]["worktree"])
    (worktree / "mine.txt").write_text("untracked, the person's\n")
    answer = corral.json("ask", "quiet", "-m", "Anything?")
    assert answer["failure"] is None
    assert (worktree / "mine.txt").read_text() == "untracked, the person's\n"
    assert not git(worktree, "for-each-ref", "refs/corral/kept/")
    assert corral.json("show", "quiet")["resting_cause"] is None


@pytest.mark.slow
def test_a_kill_between_keeping_and_reverting_is_finished_by_the_next_command(corral: CLI, command_agent: Path) -> None:
    corral.ok("create", "Answer questions", "--ref", "crashy")
    corral.ok("start", "crashy", "--wait", "--timeout", "60")
    worktree = Path(corral.json("show", "crashy")["task"]["worktree"])
    tip = git(worktree, "rev-parse", "HEAD")
    killed = {"CORRAL_CRASH_AT": "read-only.kept", "CORRAL_CRASH_HOW": "kill"}
    died = corral.process("ask", "crashy", "-m", "Why?", env=killed)  # the CLI's own process is killed
    assert died.returncode != 0
    [ref] = git(worktree, "for-each-ref", "--format=%(refname)", "refs/corral/kept/").splitlines()
    assert git(worktree, "rev-parse", "HEAD") != tip  # saved, not yet reverted: the kill came between
    doc = corral.json("show", "crashy")  # the next command's reconcile finishes the revert
    assert git(worktree, "rev-parse", "HEAD") == tip
    assert not (worktree / "sneaky.txt").exists() and not (worktree / "untracked.txt").exists()
    assert git(worktree, "show", f"{ref}:sneaky.txt") == "committed during an ask"
    assert doc["task"]["status"] == "blocked"
    assert doc["resting_cause"]["code"] == "read-only-changes-kept"
    assert doc["resting_cause"]["evidence"]["details"]["reason"] == ref


def test_a_crash_between_keeping_and_reverting_is_finished_by_the_next_call(repo: Path) -> None:
    g = Git()
    (repo / "dirty.txt").write_text("the person's\n")
    before = readonly.take(g, repo, "main")
    tip = before.head
    (repo / "agent.txt").write_text("agent\n")
    git(repo, "add", "agent.txt")
    git(repo, "commit", "-q", "-m", "agent")
    ref = readonly.kept_ref("t", 2)
    # Save first: the kept ref is written, then the process "dies" before the revert.
    moved, after, index_tree, worktree_tree = readonly._changed(g, repo, before)
    assert moved
    commit = readonly._kept_commit(g, repo, before, after, index_tree, worktree_tree, "crash test")
    git(repo, "update-ref", ref, commit)
    kept = readonly.keep_aside(g, repo, before, ref, "crash test")
    assert kept is not None and kept.reverted and kept.commit == commit and kept.commits == 1
    assert git(repo, "rev-parse", "HEAD") == tip
    assert (repo / "dirty.txt").read_text() == "the person's\n" and not (repo / "agent.txt").exists()
    again = readonly.keep_aside(g, repo, before, ref, "crash test")
    assert again is not None and again.commit == commit  # idempotent: nothing new is made
    assert git(repo, "for-each-ref", "--format=%(refname)", "refs/corral/kept/") == ref


def test_pi_ask_gets_its_read_only_tool_set() -> None:
    pi = PiHarness("pi")
    ask = pi.ask(TurnRequest(prompt="q", cwd="/w"))
    assert ask.argv[ask.argv.index("--tools") + 1] == "read,grep,find,ls"
    work = pi.work(TurnRequest(prompt="q", cwd="/w"))
    assert "--tools" not in work.argv
    chat = pi.interactive(TurnRequest(prompt="", cwd="/w", posture=Posture(read_only=True)))
    assert chat.argv[chat.argv.index("--tools") + 1] == "read,grep,find,ls"


@pytest.mark.slow
def test_the_real_pi_in_an_ask_has_only_its_read_only_tools(repo: Path, tmp_path: Path) -> None:
    """The real binary, against the scripted model server: the model is offered read, grep, find
    and ls only, and its call to write (which a work turn has) fails without touching the file."""
    pi = pi_bin_or_skip()
    home = tmp_path / "pi-home"
    home.mkdir()
    harness = PiHarness(executable=str(pi), provider=PROVIDER)
    steps: list[Step] = [ToolUse("write", {"path": "made.txt", "content": "no"}), Text("could not write")]
    with scripted_server(steps) as server:
        write_pi_config(home, server)
        launch = harness.ask(TurnRequest(prompt="write made.txt", cwd=str(repo), model=MODEL))
        run = run_launch(harness, launch, cwd=repo, env=pi_env(home))
    assert run.returncode == 0, run.describe()
    assert not (repo / "made.txt").exists()
    first, second = server.script_requests
    assert {t["name"] for t in first.body["tools"]} == {"read", "grep", "find", "ls"}
    [result] = second.tool_results()
    assert result.get("is_error") is True, result


def test_the_before_state_and_the_kept_record_cross_the_process_boundary(tmp_path: Path) -> None:
    from msgspec.structs import replace

    from corral.engine.runtime import protocol as proto
    from tests.runtime.test_protocol import a_command, a_receipt

    before = readonly.Before("corral/x", "a" * 40, "b" * 40, "c" * 40)
    command = a_command(read_only_before=before)
    proto.write(tmp_path, command)
    assert proto.read(tmp_path / proto.COMMAND, proto.Command) == command
    kept = readonly.Kept("refs/corral/kept/x/3", "d" * 40, "a" * 40, "e" * 40, 2, ("f.txt",), 1, True)
    receipt = replace(a_receipt(), kept=kept)
    proto.write(tmp_path, receipt)
    assert proto.read(tmp_path / proto.RESPONSE, proto.Receipt) == receipt
    plain = a_command()
    proto.write(tmp_path, plain)  # a work turn's command carries no before-state at all
    assert "read_only_before" not in (proto.read_raw(tmp_path / proto.COMMAND) or {})


@pytest.mark.slow
def test_the_real_codex_in_an_ask_runs_in_its_read_only_sandbox(repo: Path, tmp_path: Path) -> None:
    """The real binary, against the scripted Responses server: the ask's turn is in Codex's
    read-only sandbox, so the command the model asks for cannot write the file."""
    from tests.support.codex import MODEL as CODEX_MODEL
    from tests.support.codex import codex_bin_or_skip, codex_config_args, codex_env
    from tests.support.responses_server import ExecCommand, Message, responses_server

    codex = codex_bin_or_skip()
    with responses_server([ExecCommand("echo no > made.txt"), Message("could not write")]) as server:
        harness = CodexHarness(executable=str(codex), extra=codex_config_args(server))
        launch = harness.ask(TurnRequest(prompt="write made.txt", cwd=str(repo), model=CODEX_MODEL))
        assert launch.argv[3:5] == ["-s", "read-only"]
        run = run_launch(harness, launch, cwd=repo, env=codex_env(tmp_path / "home", tmp_path / "codex-home"))
    assert run.returncode == 0, run.describe()
    assert not (repo / "made.txt").exists()
    first = server.script_requests[0]
    assert json.loads(first.headers["x-codex-turn-metadata"])["sandbox_mode"] == "read-only"


@pytest.mark.slow
def test_the_real_claude_in_an_ask_is_in_plan_mode_without_its_editing_tools(repo: Path, tmp_path: Path) -> None:
    """The real binary, against the scripted model server: an ask's launch (plan mode, the editing
    and shell tools disallowed) offers the model no Write, Edit or Bash, and a Write it asks for
    anyway is refused and writes nothing."""
    import subprocess

    from corral.adapters.harness.claude import READ_ONLY_DENIED, ClaudeHarness
    from tests.support.claude import claude_bin_or_skip, claude_env

    claude = claude_bin_or_skip()
    steps: list[Step] = [ToolUse("Write", {"file_path": str(repo / "made.txt"), "content": "no\n"}), Text("refused")]
    with scripted_server(steps) as server:
        launch = ClaudeHarness(str(claude)).ask(TurnRequest(prompt="write made.txt", cwd=str(repo)))
        assert launch.argv[launch.argv.index("--permission-mode") + 1] == "plan"
        env = {**claude_env(server, tmp_path / "claude-home"), **launch.env}
        done = subprocess.run(launch.argv, cwd=repo, env=env, input=launch.stdin, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (repo / "made.txt").exists()
    offered = {t["name"] for t in server.script_requests[0].body["tools"]}
    assert not offered & set(READ_ONLY_DENIED), offered
    assert "Read" in offered


@pytest.mark.slow
def test_an_ask_lost_with_no_receipt_is_reverted_all_the_same(corral: CLI, tmp_path: Path, monkeypatch) -> None:
    # The ask's agent commits, then kills its own supervisor: no receipt is ever written, so
    # the reconciler finds the turn lost, and must still hold it to read-only.
    script = tmp_path / "killer.py"
    script.write_text(
        AGENT.replace(
            'print("The answer is 42.")',
            'import signal; os.kill(os.getppid(), signal.SIGKILL); print("The answer is 42.")',
        )
    )
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Answer questions", "--ref", "lost-ask")
    corral.ok("start", "lost-ask", "--wait", "--timeout", "60")
    worktree = Path(corral.json("show", "lost-ask")["task"]["worktree"])
    tip = git(worktree, "rev-parse", "HEAD")
    corral("ask", "lost-ask", "-m", "Why?", timeout=60)
    doc = corral.json("show", "lost-ask")
    assert doc["task"]["status"] == "blocked"  # an ask is never resumed: the pre-ask status is back
    assert git(worktree, "rev-parse", "HEAD") == tip
    assert not (worktree / "sneaky.txt").exists() and not (worktree / "untracked.txt").exists()
    [ref] = git(worktree, "for-each-ref", "--format=%(refname)", "refs/corral/kept/").splitlines()
    assert git(worktree, "show", f"{ref}:sneaky.txt") == "committed during an ask"
    assert doc["resting_cause"]["code"] == "read-only-changes-kept"
    lost = doc["turns"][-1]
    assert lost["kind"] == "error" and lost["failure"]["code"] in ("turn-lost", "receipt-missing")
