"""pair in a pseudo-terminal, chat's lock, the stale-pairing sweep, protected files and submit."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.status import Status
from corral.domain.violations import Decision
from corral.engine.operations import control, pairing, tasks, turns
from corral.engine.operations import sync as syncing
from corral.engine.operations.refresh import settle
from corral.errors import RefusedError
from tests.turns.conftest import ok, reopen


def blocked(proj, agent, ref, *steps, expect=Status.BLOCKED):
    agent.script(*steps)
    tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref)
    turns.start(proj, ref, actor=Actor.HUMAN)
    assert control.wait(proj, ref, timeout=30).task.status is expect


def run_in_pty(argv: list[str], cwd: Path, timeout: float = 30) -> tuple[int, str]:
    """Run a command with a pseudo-terminal as its stdin/stdout, as a person's shell would."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.execvp(argv[0], argv)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


def test_pair_runs_the_harness_interactively_then_summarises_and_parks(proj, agent, repo):
    blocked(
        proj,
        agent,
        "pp",
        ok("first"),
        [
            {"stdout": "pairing with you\n"},
            {"write": {"path": "paired.txt", "content": "p"}},
            {"commit": "made while pairing"},
        ],
    )
    code, out = run_in_pty([sys.executable, "-m", "corral", "pair", "pp"], repo)
    assert code == 0, out
    assert "pairing with you" in out
    call = agent.calls()[-1]
    assert "-p" not in call["argv"]  # interactive, not print mode
    with proj.store.read() as tx:
        task = tx.task_by_ref("pp")
        session = tx.get_session(task.session_id)
        last = tx.turns(task.id)[-1]
        changes = [(c.from_status, c.to_status) for c in tx.status_changes(task.id)]
    assert call["argv"][call["argv"].index("--resume") + 1] == session.harness_session_id
    assert task.status is Status.BLOCKED
    assert changes[-2:] == [(Status.BLOCKED, Status.PAIRING), (Status.PAIRING, Status.BLOCKED)]
    assert last.kind == "pair summary" and last.role is Role.HUMAN and last.actor is Actor.HUMAN
    assert "1 commit made" in last.content
    assert not pairing.pairing_lock(proj, task.id).exists()


def test_a_killed_pair_is_recovered_by_the_stale_pairing_sweep(proj, agent, repo):
    blocked(proj, agent, "kp", ok("first"), [{"sleep": 60}])
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "pair", "kp"],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with proj.store.read() as tx:
            if tx.task_by_ref("kp").status is Status.PAIRING:
                break
        time.sleep(0.1)
    os.killpg(proc.pid, 9)
    proc.wait()
    settle(proj)
    with proj.store.read() as tx:
        task = tx.task_by_ref("kp")
        last = tx.turns(task.id)[-1]
    assert task.status is Status.BLOCKED
    assert last.kind == "pair summary" and last.actor is Actor.SYSTEM
    assert not pairing.pairing_lock(proj, task.id).exists()


def test_an_open_chat_blocks_unblock_sync_and_resume(proj, agent):
    blocked(proj, agent, "ch", ok("first"))
    with proj.store.read() as tx:
        task = tx.task_by_ref("ch")
    with pairing.holding_chat(proj, task):
        for attempt in (
            lambda: turns.unblock(proj, "ch", actor=Actor.HUMAN, message="x"),
            lambda: syncing.sync(proj, "ch", actor=Actor.HUMAN),
        ):
            with pytest.raises(pairing.ChatOpen):
                attempt()
    assert syncing.sync(proj, "ch", actor=Actor.HUMAN).state == "up-to-date"  # free again once it closed


def test_chat_is_read_only_and_status_neutral(proj, agent, repo):
    blocked(proj, agent, "cr", ok("first"), [{"stdout": "just talking\n"}])
    code, out = run_in_pty([sys.executable, "-m", "corral", "chat", "cr"], repo)
    assert code == 0 and "just talking" in out
    argv = agent.calls()[-1]["argv"]
    assert argv[argv.index("--permission-mode") + 1] == "plan"
    with proj.store.read() as tx:
        task = tx.task_by_ref("cr")
        assert task.status is Status.BLOCKED
        assert [t.kind for t in tx.turns(task.id)] == ["start", "start"]  # no turn recorded


def test_protected_changes_park_conflict_and_decisions_are_sticky(proj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_PROTECTED", "db/*,secrets.env")
    proj = reopen(proj)
    blocked(
        proj,
        agent,
        "pv",
        [
            {"init": True},
            {"write": {"path": "db/schema.sql", "content": "agent schema"}},
            {"write": {"path": "secrets.env", "content": "K=1"}},
            {"write": {"path": "ok.txt", "content": "fine"}},
            {"commit": "touch protected"},
            {"result": "changed things"},
        ],
        [
            {"init": True},
            {"write": {"path": "db/schema.sql", "content": "agent schema v2"}},
            {"commit": "again"},
            {"result": "changed again"},
        ],
        expect=Status.CONFLICT,
    )
    with proj.store.read() as tx:
        task = tx.task_by_ref("pv")
        assert sorted(tx.pending_paths(task.id)) == ["db/schema.sql", "secrets.env"]
    with pytest.raises(RefusedError) as caught:  # an undecided file: refused, naming it
        turns.unblock(proj, "pv", actor=Actor.HUMAN, message="go", approve=["db/schema.sql"])
    assert "secrets.env" in caught.value.message and caught.value.exit_code == 3
    with pytest.raises(RefusedError) as caught:
        turns.resume(proj, "pv", actor=Actor.HUMAN)
    turns.unblock(proj, "pv", actor=Actor.HUMAN, message="go", approve=["db/schema.sql"], revert=["secrets.env"])
    result = control.wait(proj, "pv", timeout=30)
    with proj.store.read() as tx:
        decisions = {v.path: v.decision for v in tx.violations(task.id)}
        session = tx.get_session(result.task.session_id)
    # the approved file, changed again, stays approved (sticky); nothing is pending: blocked
    assert decisions == {"db/schema.sql": Decision.APPROVED, "secrets.env": Decision.REVERTED}
    assert result.task.status is Status.BLOCKED
    assert not (Path(session.worktree) / "secrets.env").exists()  # reverted: it did not exist before
    # re-naming a decided file is accepted
    turns.unblock(proj, "pv", actor=Actor.HUMAN, message="more", approve=["db/schema.sql"])
    control.wait(proj, "pv", timeout=30)
    proj.close()
