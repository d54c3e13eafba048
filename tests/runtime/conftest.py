"""The bubblewrap sandbox's fixtures: a project whose turns run a scripted agent confined
(tests/runtime/test_sandbox.py, tests/runtime/test_confined_attacks.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Role
from corral.engine.operations import control
from corral.engine.project import Project
from corral.engine.runtime.processes import reap_turn

PROBE = """#!/bin/sh
try() {{ if sh -c "$2" >/dev/null 2>&1; then echo "ALLOWED $1"; else echo "REFUSED $1"; fi; }}
try worktree 'echo "${{PROBE_TEXT:-hi}}" > inside.txt'
try main 'echo x > {main}/evil.txt'
try corral_home 'echo x > {corral_home}/evil.txt'
try home 'echo x > {home}/evil.txt'
try ssh 'cat {home}/.ssh/x'
try tokens 'ls {corral_home}/agent-tokens'
try tmp 'echo x > {scratch} && test "$TMPDIR" = /tmp'
try commit 'git add inside.txt && git commit -q -m "agent commit"'
"""


def probe_script(path: Path, repo: Path, corral_home: Path, home: Path) -> Path:
    scratch = f"/tmp/{path.parent.parent.name}-scratch"  # the test's own name: never another's
    path.write_text(PROBE.format(main=repo, corral_home=corral_home, home=home, scratch=scratch))
    path.chmod(0o755)
    return path


@pytest.fixture
def box_env(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The environment of a project whose turns run the probe script (returned) in the sandbox
    (``sandbox = bwrap``); a test that runs another script writes it over the probe."""
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir()
    (home / ".ssh" / "x").write_text("PRIVATE KEY\n")
    monkeypatch.setenv("CORRAL_SANDBOX", "bwrap")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "30")
    corral_home = Path(os.environ["CORRAL_HOME"])
    corral_home.mkdir(parents=True, exist_ok=True)
    (corral_home / "agent-tokens").mkdir(exist_ok=True)
    (corral_home / "agent-tokens" / "another-turn").write_text("secret token\n")
    bin_dir = tmp_path / "agent-bin"
    bin_dir.mkdir()
    script = probe_script(bin_dir / "probe", repo, corral_home, home)
    monkeypatch.setenv("CORRAL_COMMAND", str(script))
    return script


@pytest.fixture
def boxed(box_env: Path, repo: Path):  # type: ignore[no-untyped-def]
    """A project opened in :func:`box_env`'s environment."""
    proj = Project.open(repo)
    yield proj
    with proj.store.read() as tx:
        ids = [t.id for t in tx.tasks()]
    for task_id in ids:
        reap_turn(proj, task_id)
    proj.close()


def finished(proj: Project, ref: str, timeout: float = 45) -> Any:
    result = control.wait(proj, ref, timeout=timeout)
    assert not result.timed_out, f"{ref} still {result.task.status.value}"
    return result.task


def agent_turns(proj: Project, task: Any) -> list[Any]:
    with proj.store.read() as tx:
        return [t for t in tx.turns(task.id) if t.role is Role.AGENT]


def until_logged(proj: Project, task: Any, text: str, timeout: float = 30) -> None:
    """Wait until the task's first turn's output holds ``text`` (the agent said it is there)."""
    import time

    log = proj.paths.turn_dir(task.id, 1) / "output.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (log.exists() and text in log.read_text()):
        time.sleep(0.05)
