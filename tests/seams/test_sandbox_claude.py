"""The real Claude Code CLI in corral's bubblewrap sandbox, scripted by the model server.

A project whose ``claude_bin`` is the pinned binary and whose ``sandbox`` is ``bwrap``; the
model (a loopback :class:`ScriptedServer`) asks for ``Write`` and ``Bash`` tool calls, and the
test looks at what happened on disk and at what corral recorded: the turn's ``output.log``
(each tool's result as the CLI reported it), the turn, git and ``show``'s sandbox line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.read.projection import show
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn
from tests.conftest import git
from tests.support.claude import claude_env, parse_stream
from tests.support.model_server import ScriptedServer, Text, ToolUse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def rig(claude: Path, claude_home: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    server = ScriptedServer([])
    env = claude_env(server, claude_home)  # Claude Code at the user's own retry settings
    env.update(
        {
            "CORRAL_CLAUDE_BIN": str(claude),
            "CORRAL_SANDBOX": "bwrap",
            "CORRAL_AUTO_RESUME": "0",
            "CORRAL_GRACE_PERIOD": "1",
        }
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # A user's Claude Code keeps its settings in ~/.claude.json, which it rewrites as it runs.
    (claude_home / ".claude.json").write_text("{}")
    (claude_home / ".ssh").mkdir()
    (claude_home / ".ssh" / "x").write_text("PRIVATE KEY\n")
    proj = Project.open(repo)
    yield {"server": server, "proj": proj, "home": claude_home}
    with proj.store.read() as tx:
        ids = [t.id for t in tx.tasks()]
    for task_id in ids:
        reap_turn(proj, task_id)
    proj.close()
    server.close()


def run_turn(proj: Project, task: Task, timeout: float = 60) -> Task:
    result = control.wait(proj, task.ref, timeout=timeout)
    assert not result.timed_out, f"{task.ref} still {result.task.status.value}"
    return result.task


def tool_results(proj: Project, task: Task, sequence: int) -> list[dict[str, Any]]:
    """Each tool result in the turn's output.log, as the CLI reported it: its text and is_error."""
    log = proj.paths.turn_dir(task.id, sequence) / "output.log"
    out = []
    for event in parse_stream(log.read_text(encoding="utf-8", errors="replace")):
        if event.get("type") != "user":
            continue
        for block in event.get("message", {}).get("content", []):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                content = block.get("content")
                if isinstance(content, list):
                    content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
                out.append({"text": str(content), "is_error": bool(block.get("is_error"))})
    return out


def test_a_sandboxed_claude_turn_writes_and_commits_in_its_worktree_and_nowhere_else(rig: Any, repo: Any) -> None:
    proj, server, home = rig["proj"], rig["server"], rig["home"]
    task = tasks.create(proj, "Write and commit", actor=Actor.HUMAN, prompt="Write hello.txt and commit it.")
    wt = proj.paths.worktree(task.ref)
    corral_home = proj.paths.home
    server.steps.extend(
        [
            ToolUse("Write", {"file_path": str(wt / "hello.txt"), "content": "hello\n"}),
            ToolUse("Bash", {"command": "git add hello.txt && git commit -q -m 'Add hello'", "description": "c"}),
            ToolUse("Write", {"file_path": str(repo / "evil.txt"), "content": "x\n"}),
            ToolUse("Bash", {"command": f"echo x > {corral_home}/evil.txt", "description": "state"}),
            ToolUse("Bash", {"command": f"echo x > {home}/evil.txt", "description": "home"}),
            ToolUse("Bash", {"command": f"cat {home}/.ssh/x", "description": "ssh"}),
            ToolUse("Bash", {"command": f"ls -A {corral_home}/agent-tokens | wc -l", "description": "tokens"}),
            Text("done"),
        ]
    )
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    done = run_turn(proj, task)
    assert done.status is Status.BLOCKED, done.resting_cause
    assert server.remaining == []

    # Inside the worktree: written and committed (objects, the branch and the worktree's admin dir).
    branch = f"corral/{task.ref}"
    assert git(repo, "log", "-1", "--format=%s", branch) == "Add hello"
    assert git(repo, "show", f"{branch}:hello.txt") == "hello"
    # Outside: nothing written, and each refusal is in the turn's record.
    assert not (repo / "evil.txt").exists()
    assert not (corral_home / "evil.txt").exists()
    assert not (home / "evil.txt").exists()
    results = tool_results(proj, task, 1)
    assert len(results) == 7
    write_ok, commit_ok, main_w, state_w, home_w, ssh_r, tokens = results
    assert not write_ok["is_error"] and not commit_ok["is_error"]
    assert main_w["is_error"] and "read-only file system" in main_w["text"].lower()
    assert state_w["is_error"] and "read-only file system" in state_w["text"].lower()
    assert home_w["is_error"] and "read-only file system" in home_w["text"].lower()
    assert ssh_r["is_error"] and "No such file or directory" in ssh_r["text"]
    assert "PRIVATE KEY" not in ssh_r["text"]
    assert not tokens["is_error"] and tokens["text"].strip().splitlines()[-1] == "0"  # invisible (empty)

    # The posture: every tool allowed, because the sandbox holds the agent; show says which sandbox.
    command = proto.read_record(Path(proj.paths.turn_dir(task.id, 1)) / proto.COMMAND, proto.Command)
    assert command is not None and command.sandbox is not None and command.sandbox.mode == "bwrap"
    assert command.posture.permission_mode == "bypassPermissions" and command.posture.is_sandbox
    with proj.store.read() as tx:
        doc = show(tx, tx.get_task(task.id))
    assert doc["sandbox"] == {"mode": "bwrap", "reason": "sandbox = bwrap in the settings"}
    (agent_turn,) = [t for t in turns_of(proj, task) if t.role is Role.AGENT]
    assert agent_turn.content == "done"


def test_a_sandboxed_claude_ask_cannot_write_its_worktree(rig: Any) -> None:
    proj, server = rig["proj"], rig["server"]
    task = tasks.create(proj, "Ask me", actor=Actor.HUMAN, prompt="Say hi.")
    wt = proj.paths.worktree(task.ref)
    server.steps.append(Text("hi"))
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert run_turn(proj, task).status is Status.BLOCKED
    # Plan mode refuses Bash before it runs; the sandbox is what stands behind it. The answer reads
    # a file through Read (allowed), which must still see the worktree.
    (wt / "notes.txt").write_text("the notes\n")
    server.steps.extend([ToolUse("Read", {"file_path": str(wt / "notes.txt")}), Text("the answer")])
    started = turns.ask(proj, task.ref, actor=Actor.HUMAN, question="What do the notes say?")
    answer = control.wait_answer(proj, started, timeout=60)
    assert answer is not None and answer.content == "the answer"
    seq = max(t.sequence for t in turns_of(proj, task) if t.kind == "ask" and t.role is Role.HUMAN)
    (read,) = tool_results(proj, task, seq)
    assert not read["is_error"] and "the notes" in read["text"]
    command = proto.read_record(proj.paths.turn_dir(task.id, seq) / proto.COMMAND, proto.Command)
    assert command is not None and command.posture.read_only and command.posture.permission_mode != "bypassPermissions"
    assert command.sandbox is not None and command.sandbox.mode == "bwrap"


def turns_of(proj: Project, task: Task) -> list[Any]:
    with proj.store.read() as tx:
        return list(tx.turns(task.id))


def test_the_sandboxed_turn_records_its_sandbox_in_the_command_json(rig: Any) -> None:
    """The command the supervisor ran carries the resolved sandbox, readable by an older shape's reader."""
    proj, server = rig["proj"], rig["server"]
    task = tasks.create(proj, "Hi", actor=Actor.HUMAN, prompt="Say hi.")
    server.steps.append(Text("hi"))
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert run_turn(proj, task).status is Status.BLOCKED
    raw = json.loads((proj.paths.turn_dir(task.id, 1) / proto.COMMAND).read_text())
    assert raw["sandbox"]["mode"] == "bwrap"
    assert raw["sandbox"]["branch"] == f"refs/heads/corral/{task.ref}"
    assert raw["sandbox"]["hidden"] == [str(proj.paths.home)]
