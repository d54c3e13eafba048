"""corral's bubblewrap sandbox (docs/harnesses.md#sandbox), with scripted agents through the real supervisor.

The agent here is a shell script run by the ``command`` harness that tries each thing and says
on stdout whether it was allowed (the turn's result is its last lines, so what corral recorded
is the evidence), and the fake agent behind the ``claude`` wrapper for Claude Code's posture.
The isolation (tests/conftest.py) turns the sandbox off; these tests turn it on.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from corral.adapters import sandbox as sandboxing
from corral.adapters.pid_identity import all_processes, command_line, environ_has
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.config import load_config
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.read.projection import show
from corral.engine.runtime import protocol as proto
from corral.engine.runtime import ref_guard
from corral.engine.runtime.processes import reap_turn, tag
from corral.errors import HarnessMisconfigured
from corral.testing.fake_agent import wrapper_script
from tests.conftest import CLI, git
from tests.runtime.conftest import agent_turns, finished, until_logged

pytestmark = pytest.mark.timeout(90)

needs_bwrap = pytest.mark.skipif(
    sandboxing.find_bwrap() is None and not os.environ.get("CI"), reason="bubblewrap is not installed"
)


def lines(text: str) -> dict[str, str]:
    return {
        line.split()[1]: line.split()[0] for line in text.splitlines() if line.split()[:1] in (["ALLOWED"], ["REFUSED"])
    }


@needs_bwrap
def test_a_sandboxed_turn_writes_and_commits_in_its_worktree_and_nowhere_else(boxed: Any, repo: Any) -> None:
    proj = boxed
    task = tasks.create(proj, "Probe the sandbox", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    done = finished(proj, task.ref)
    assert done.status is Status.BLOCKED, done.resting_cause
    (turn,) = agent_turns(proj, task)
    assert lines(turn.content) == {
        "worktree": "ALLOWED",
        "main": "REFUSED",
        "corral_home": "REFUSED",
        "home": "REFUSED",
        "ssh": "REFUSED",
        "tokens": "REFUSED",
        "tmp": "ALLOWED",
        "commit": "ALLOWED",
    }
    home = Path(os.environ["HOME"])
    assert not (repo / "evil.txt").exists() and not (proj.paths.home / "evil.txt").exists()
    assert not (home / "evil.txt").exists()
    assert not Path(f"/tmp/{repo.parent.name}-scratch").exists()  # the agent's /tmp was its own
    branch = f"corral/{task.ref}"
    assert git(repo, "log", "-1", "--format=%s", branch) == "agent commit"
    assert git(repo, "show", f"{branch}:inside.txt") == "hi"
    with proj.store.read() as tx:
        doc = show(tx, tx.get_task(task.id))
    assert doc["sandbox"] == {"mode": "bwrap", "reason": "sandbox = bwrap in the settings"}
    # confined, but without corral's tools (agent_tools is off in these tests): the exact rule, said why
    assert doc["failure_rule"]["rule"] == "exact"
    assert doc["failure_rule"]["why"].startswith("the agent had no corral tools")
    out = CLI(repo).ok("show", task.ref).stdout
    assert "Sandbox:  bwrap (sandbox = bwrap in the settings)" in out
    assert "Rule:     tool failures judged by the exact-retry rule (the agent had no corral tools" in out


@needs_bwrap
def test_a_commit_works_when_the_branch_is_only_packed(boxed: Any, repo: Any, monkeypatch: Any) -> None:
    """A packed branch has no loose ref file: the commit writes one beside the read-only packed-refs."""
    proj = boxed
    task = tasks.create(proj, "Probe a packed branch", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    finished(proj, task.ref)
    git(repo, "pack-refs", "--all", "--prune")
    assert not (repo / ".git" / "refs" / "heads" / "corral" / task.ref).exists()
    monkeypatch.setenv("PROBE_TEXT", "again")
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="again")
    done = finished(proj, task.ref)
    assert done.status is Status.BLOCKED, done.resting_cause
    assert lines(agent_turns(proj, task)[-1].content)["commit"] == "ALLOWED"
    assert git(repo, "show", f"corral/{task.ref}:inside.txt") == "again"
    assert (repo / ".git" / "refs" / "heads" / "corral" / task.ref).is_file()  # a loose ref over the packed one


@needs_bwrap
def test_an_ask_runs_with_the_worktree_read_only(boxed: Any, repo: Any) -> None:
    proj = boxed
    task = tasks.create(proj, "Probe an ask", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    finished(proj, task.ref)
    started = turns.ask(proj, task.ref, actor=Actor.HUMAN, question="What is there?")
    answer = control.wait_answer(proj, started, timeout=45)
    assert answer is not None
    found = lines(answer.content)
    assert found["worktree"] == "REFUSED" and found["commit"] == "REFUSED" and found["home"] == "REFUSED"
    assert answer.details.get("read_only_changes") is None  # nothing changed: nothing to keep aside


@needs_bwrap
def test_refs_outside_the_tasks_namespace_are_read_only_and_moves_inside_reach_the_ref_guard(
    boxed: Any, box_env: Any, repo: Any
) -> None:
    """``main`` cannot be moved from inside, nor another task's ``corral/*`` branch (its ref file
    is pinned read-only); a new ``corral/*`` ref can be made (the directory is the task's own), and
    the ref guard's hook, run by git inside the sandbox, logs it — then the guard removes it."""
    proj = boxed
    other = tasks.create(proj, "Another task", actor=Actor.HUMAN, harness="command")
    git(repo, "branch", f"corral/{other.ref}", "main")
    main_before = git(repo, "rev-parse", "main")
    box_env.write_text(
        "#!/bin/sh\n"
        "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m mine\n"
        "if git update-ref refs/heads/main HEAD 2>/dev/null; then echo 'ALLOWED main'; else echo 'REFUSED main'; fi\n"
        f"if git update-ref refs/heads/corral/{other.ref} HEAD 2>/dev/null; then echo 'ALLOWED other';"
        " else echo 'REFUSED other'; fi\n"
        "if git update-ref refs/heads/corral/made-inside HEAD; then echo 'ALLOWED made'; else echo 'REFUSED made'; fi\n"
    )
    task = tasks.create(proj, "Move refs", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    finished(proj, task.ref)
    (turn,) = agent_turns(proj, task)
    assert lines(turn.content) == {"main": "REFUSED", "other": "REFUSED", "made": "ALLOWED"}
    assert git(repo, "rev-parse", "main") == main_before
    assert git(repo, "rev-parse", f"corral/{other.ref}") == main_before
    moves = (ref_guard.guard_dir(proj.paths.turn_dir(task.id, 1)) / ref_guard.MOVES).read_text()
    assert "refs/heads/corral/made-inside" in moves
    assert subprocess_ok(repo, "rev-parse", "--verify", "-q", "refs/heads/corral/made-inside") is False


def subprocess_ok(repo: Any, *args: str) -> bool:
    import subprocess

    return subprocess.run(["git", *args], cwd=repo, capture_output=True).returncode == 0


@needs_bwrap
def test_the_agent_tree_dies_with_its_supervisor(boxed: Any, box_env: Any) -> None:
    proj = boxed
    box_env.write_text("#!/bin/sh\nsleep 987654 &\nsleep 987653\n")
    task = tasks.create(proj, "Sleep", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    status_path = proj.paths.protocol_dir(task.id) / proto.STATUS
    command = proto.read_record(proj.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    assert command is not None and command.sandbox is not None and command.sandbox.mode == "bwrap"

    def sleepers() -> list[int]:
        entry = tag(command.command_id)
        return [p.pid for p in all_processes() if "sleep 98765" in command_line(p.pid) and environ_has(p.pid, entry)]

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(sleepers()) < 2:
        time.sleep(0.05)
    assert len(sleepers()) == 2
    status = proto.read_record(status_path, proto.SupervisorStatus)
    assert status is not None and status.agent_pid is not None
    os.kill(status.pid, signal.SIGKILL)  # the supervisor dies without a word
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sleepers():
        time.sleep(0.05)
    assert sleepers() == []


@needs_bwrap
def test_a_stop_reaches_the_sandboxed_agent_which_ends_in_its_own_way(boxed: Any, box_env: Any) -> None:
    """SIGTERM goes to the agent, not to bwrap (which would take the sandbox down with SIGKILL at once)."""
    proj = boxed
    box_env.write_text(
        "#!/bin/sh\ntrap 'echo got TERM; sleep 0.3; echo cleaned up; exit 3' TERM\necho ready\n"
        "while :; do sleep 0.1; done\n"
    )
    task = tasks.create(proj, "Trap", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    until_logged(proj, task, "ready", timeout=20)
    log = proj.paths.turn_dir(task.id, 1) / "output.log"
    control.stop(proj, task.ref, actor=Actor.HUMAN)
    finished(proj, task.ref)
    text = log.read_text()
    assert "got TERM" in text and "cleaned up" in text


def path_without_bwrap(tmp_path: Path) -> str:
    """A PATH with git and sh but no bwrap."""
    bin_dir = tmp_path / "no-bwrap-bin"
    bin_dir.mkdir()
    for name in ("git", "sh"):
        for where in ("/usr/bin", "/bin"):
            if Path(where, name).exists():
                (bin_dir / name).symlink_to(Path(where, name))
                break
    return str(bin_dir)


def test_sandbox_bwrap_without_bubblewrap_is_refused_at_start_with_the_install_hint(
    boxed: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    proj = boxed
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path))
    task = tasks.create(proj, "Probe without bwrap", actor=Actor.HUMAN, harness="command")
    with pytest.raises(HarnessMisconfigured) as refused:
        turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert refused.value.code == "sandbox-unavailable" and "apt install bubblewrap" in refused.value.message
    with proj.store.read() as tx:
        assert tx.get_task(task.id).status is Status.BACKLOG  # refused before anything was recorded
    assert not (proj.paths.worktree(task.ref) / "inside.txt").exists()  # nothing ran, confined or not


def test_sandbox_bwrap_that_does_not_work_is_fatal_config(boxed: Any, tmp_path: Any, monkeypatch: Any) -> None:
    proj = boxed
    bin_dir = tmp_path / "broken-bwrap"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    # It passes the launch's probe (``bwrap … true``) and fails every real run: the supervisor's
    # attempt is where it is met, and it is fatal_config there, never a turn run unconfined.
    fake.write_text(
        '#!/bin/sh\nfor last; do :; done\n[ "$last" = true ] && exit 0\n'
        "echo 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    task = tasks.create(proj, "Probe a broken bwrap", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    finished(proj, task.ref)
    (turn,) = agent_turns(proj, task)
    assert [a.failure_class for a in turn.attempts] == ["fatal_config"]
    reason = turn.details.get("failure_reason") or turn.content
    assert "No permissions to create new namespace" in reason and "apt install bubblewrap" in reason


def test_sandbox_auto_without_bubblewrap_runs_unconfined_and_says_so(
    box_env: Any, repo: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("CORRAL_SANDBOX", "auto")
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path))
    proj = Project.open(repo)
    try:
        task = tasks.create(proj, "Probe auto", actor=Actor.HUMAN, harness="command")
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        assert finished(proj, task.ref).status is Status.BLOCKED
        (turn,) = agent_turns(proj, task)
        with proj.store.read() as tx:
            doc = show(tx, tx.get_task(task.id))  # type: ignore[arg-type]
    finally:
        proj.close()
    assert lines(turn.content)["home"] == "ALLOWED"  # unconfined: the home is the person's
    Path(f"/tmp/{repo.parent.name}-scratch").unlink()  # and its /tmp too
    assert doc["sandbox"] == {"mode": "off", "reason": "sandbox = auto, and bubblewrap (bwrap) is not installed"}
    assert doc["failure_rule"] == {"rule": "exact", "why": "the agent ran unconfined"}


@needs_bwrap
def test_a_sandboxed_claude_work_turn_gets_every_tool_and_an_ask_keeps_plan_mode(
    repo: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """Claude Code's posture in the sandbox: bypassPermissions with IS_SANDBOX=1 for work, plan for an ask.

    The fake agent stands in for ``claude``; its scenario and record live in ``~/.claude/cache``,
    Claude Code's state, which a sandboxed Claude Code turn may write (its configuration it may not)."""
    state = Path(os.environ["HOME"]) / ".claude" / "cache"
    record = state / "fake-record"
    scenario = state / "scenario.json"
    state.mkdir(parents=True)
    scenario.write_text(json.dumps({"invocations": [], "default": [{"init": True}, {"result": "ok"}]}))
    monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(wrapper_script(tmp_path / "claude-bin")))
    monkeypatch.setenv("CORRAL_FAKE_SCENARIO", str(scenario))
    monkeypatch.setenv("CORRAL_FAKE_RECORD", str(record))
    monkeypatch.setenv("CORRAL_SANDBOX", "bwrap")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.delenv("IS_SANDBOX", raising=False)  # only corral's word counts here
    proj = Project.open(repo)
    try:
        task = tasks.create(proj, "Claude posture", actor=Actor.HUMAN, harness="claude")
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        assert finished(proj, task.ref).status is Status.BLOCKED
        started = turns.ask(proj, task.ref, actor=Actor.HUMAN, question="Why?")
        assert control.wait_answer(proj, started, timeout=45) is not None
    finally:
        reap_turn(proj, task.id)
        proj.close()
    work, ask = [json.loads(line) for line in (record / "invocations.jsonl").read_text().splitlines()]
    mode = work["argv"][work["argv"].index("--permission-mode") + 1]
    assert mode == "bypassPermissions" and work["env"].get("IS_SANDBOX") == "1"
    # The ask keeps plan mode; it is sandboxed too (IS_SANDBOX grants nothing in plan mode).
    assert ask["argv"][ask["argv"].index("--permission-mode") + 1] == "plan"
    assert "bypassPermissions" not in ask["argv"] and ask["env"].get("IS_SANDBOX") == "1"


# -- the trust rule: a repository may require the sandbox, never turn it off ---------------------


@pytest.mark.parametrize(("value", "taken"), [("bwrap", True), ("off", False), ("auto", False)])
def test_corral_toml_may_require_bwrap_but_never_turn_the_sandbox_off(
    repo: Any, tmp_path: Any, value: Any, taken: Any
) -> None:
    (repo / "corral.toml").write_text(f'sandbox = "{value}"\n')
    user = tmp_path / "user.toml"
    user.write_text('sandbox = "off"\n')
    config = load_config(user_file=user, project_file=repo / "corral.toml", env={})
    if taken:
        assert config.values["sandbox"].value == "bwrap" and config.values["sandbox"].source == "project"
        assert config.ignored == []
    else:
        assert config.values["sandbox"].value == "off" and config.values["sandbox"].source == "user"
        (said,) = config.ignored
        assert said.startswith(f"sandbox in {repo / 'corral.toml'}") and "may only require bwrap" in said


def test_the_environment_and_the_users_table_still_turn_it_off_over_corral_toml(repo: Any, tmp_path: Any) -> None:
    (repo / "corral.toml").write_text('sandbox = "bwrap"\n')
    config = load_config(user_file=None, project_file=repo / "corral.toml", env={"CORRAL_SANDBOX": "off"})
    assert config.values["sandbox"].value == "off"


def test_a_sandbox_value_corral_does_not_know_is_refused(repo: Any, tmp_path: Any) -> None:
    user = tmp_path / "user.toml"
    user.write_text('sandbox = "firejail"\n')
    with pytest.raises(Exception, match="must be one of auto, bwrap, off"):
        load_config(user_file=user, project_file=None, env={})


# -- the argv, pure ----------------------------------------------------------------------------


def test_the_bwrap_argv_hides_state_and_home_and_binds_what_git_writes(tmp_path: Any) -> None:
    home, state, common = tmp_path / "home", tmp_path / "state", tmp_path / "repo" / ".git"
    for d in (home / ".claude", state / "worktrees" / "t", common / "worktrees" / "t", common / "objects"):
        d.mkdir(parents=True)
    spec = sandboxing.SandboxSpec(
        "bwrap",
        "test",
        bwrap="/usr/bin/bwrap",
        hidden=(str(state),),
        git_common_dir=str(common),
        git_dir=str(common / "worktrees" / "t"),
        branch="refs/heads/corral/t",
    )
    env = {"HOME": str(home), "PATH": "/usr/bin"}
    quarantine = common / "corral-quarantine" / "c1"
    sandboxing.prepare(spec, "claude", env)  # Claude Code's configuration placeholders, pinned below
    argv, inside = sandboxing.bwrap_argv(
        spec,
        worktree=str(state / "worktrees" / "t"),
        program="/usr/bin/true",
        harness="claude",
        read_only=False,
        env=env,
        quarantine=str(quarantine),
    )
    pairs = {(argv[i], argv[i + 1]) for i in range(len(argv) - 1)}
    assert argv[-1] == "--" and {"--die-with-parent", "--unshare-pid"} <= set(argv)
    assert ("--cap-drop", "ALL") in pairs
    for hidden in ("/tmp", str(home), str(state)):
        assert ("--tmpfs", hidden) in pairs
    for root in (str(home), str(state)):
        assert ("--remount-ro", root) in pairs
    binds = {argv[i + 1]: argv[i] for i, a in enumerate(argv) if a.startswith("--") and "bind" in a}
    assert binds[str(state / "worktrees" / "t")] == "--bind"
    # The turn's objects go to its quarantine, bound over the store; the store itself is only read.
    triples = [tuple(argv[i : i + 3]) for i in range(len(argv) - 2)]
    assert ("--bind", str(quarantine), str(common / "objects")) in triples
    assert ("--ro-bind", str(common / "objects"), sandboxing.SHARED_OBJECTS) in triples
    assert ("--ro-bind", str(quarantine / "info"), str(common / "objects" / "info")) in triples
    assert not any(t[0] in ("--bind", "--bind-try") and t[1] == t[2] == str(common / "objects") for t in triples)
    assert binds[str(common / "worktrees" / "t")] == "--bind-try"
    assert binds[str(common / "refs" / "heads" / "corral")] == "--bind-try"
    assert binds[str(common / "logs" / "refs" / "heads" / "corral")] == "--bind-try"
    assert binds[str(home / ".claude")] == "--bind-try" and binds[str(home / ".claude.json")] == "--ro-bind-try"
    assert str(common / "packed-refs") not in binds and str(common / "refs") not in binds
    # A hidden directory is mounted before what is put back inside it.
    assert argv.index(str(state)) < argv.index(str(state / "worktrees" / "t"))
    assert inside == {"TMPDIR": "/tmp", "GIT_ALTERNATE_OBJECT_DIRECTORIES": sandboxing.SHARED_OBJECTS}
    ask, _ = sandboxing.bwrap_argv(
        spec,
        worktree=str(state / "worktrees" / "t"),
        program="/usr/bin/true",
        harness="claude",
        read_only=True,
        env=env,
    )
    ask_binds = {ask[i + 1]: ask[i] for i, a in enumerate(ask) if a.startswith("--") and "bind" in a}
    assert ask_binds[str(state / "worktrees" / "t")] == "--ro-bind"
    assert str(common / "objects") not in ask_binds


@needs_bwrap
def test_sandbox_auto_is_bwrap_where_it_works_and_off_never_probes(tmp_path: Any) -> None:
    spec = sandboxing.resolve("auto", hidden=["/state"], branch="refs/heads/corral/x")
    assert (spec.mode, spec.reason, spec.error) == ("bwrap", "sandbox = auto: bubblewrap works here", None)
    assert spec.hidden == ("/state",) and spec.branch == "refs/heads/corral/x"
    off = sandboxing.resolve("off", env={"PATH": str(tmp_path)})
    assert (off.mode, off.reason, off.bwrap) == ("off", "sandbox = off in the settings", None)


def test_the_runtime_directory_is_hidden(tmp_path: Any) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir()
    spec = sandboxing.SandboxSpec("bwrap", "test", bwrap="/usr/bin/bwrap")
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(runtime), "PATH": "/usr/bin"}
    argv, _ = sandboxing.bwrap_argv(
        spec, worktree=str(tmp_path / "wt"), program="/usr/bin/true", harness="command", read_only=False, env=env
    )
    pairs = {(argv[i], argv[i + 1]) for i in range(len(argv) - 1)}
    assert ("--tmpfs", str(runtime)) in pairs and ("--remount-ro", str(runtime)) in pairs


def test_the_spec_round_trips_through_the_command_json() -> None:
    spec = sandboxing.SandboxSpec("bwrap", "why", bwrap="/usr/bin/bwrap", hidden=("/h",), branch="refs/heads/corral/x")
    assert sandboxing.SandboxSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    with pytest.raises(ValueError):
        sandboxing.SandboxSpec.from_json({"mode": "maybe", "reason": "x"})


def test_a_chat_runs_in_the_sandbox_with_the_worktree_read_only(box_env: Any, repo: Any) -> None:
    from tests.conftest import CLI

    corral = CLI(repo)
    corral.ok("create", "Probe then chat", "--ref", "chatty", "--harness", "command")
    corral.ok("start", "chatty", "--wait")
    chat = corral("chat", "chatty", input="")
    assert chat.returncode == 0, chat.stderr
    seen = lines(chat.stdout)
    # read-only inside the sandbox: the worktree refuses, and so do the checkout, corral's state and the home
    assert seen["worktree"] == "REFUSED" and seen["main"] == "REFUSED" and seen["corral_home"] == "REFUSED"
    assert seen["home"] == "REFUSED" and seen["ssh"] == "REFUSED" and seen["tokens"] == "REFUSED"


#: An agent that repoints the worktree's git metadata (to hand corral's own, unconfined git a
#: configuration of its choosing: core.fsmonitor, hooks) and still commits its work.
REPOINT = """#!/bin/sh
gd=$(git rev-parse --git-dir)
try() {{ if sh -c "$2" >/dev/null 2>&1; then echo "ALLOWED $1"; else echo "REFUSED $1"; fi; }}
try dotgit 'echo "gitdir: /elsewhere" > .git'
try commondir 'echo /elsewhere > "$gd/commondir"'
try gitdir 'echo /elsewhere > "$gd/gitdir"'
try worktree_config 'printf "[core]\\n\\tfsmonitor = {pwn}\\n" > "$gd/config.worktree"'
try head 'echo "ref: refs/heads/main" > "$gd/HEAD"'
try swap 'mv "$gd/commondir" "$gd/commondir.old"'
try commit 'echo work > work.txt && git add work.txt && git commit -q -m work'
"""


def test_the_worktrees_git_metadata_cannot_be_repointed_from_inside(boxed: Any, box_env: Path, tmp_path: Path) -> None:
    proj = boxed
    pwn = tmp_path / "pwned"
    box_env.write_text(REPOINT.format(pwn=f"sh -c 'touch {pwn}'"))
    task = tasks.create(proj, "Repoint the metadata", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    done = finished(proj, task.ref)
    seen = lines(agent_turns(proj, task)[-1].content)
    for what in ("dotgit", "commondir", "gitdir", "worktree_config", "head", "swap"):
        assert seen[what] == "REFUSED", (what, seen)
    assert seen["commit"] == "ALLOWED" and done.status is Status.BLOCKED
    assert not pwn.exists()  # corral's own git after the turn ran nothing of the agent's


#: An agent that rewrites, then removes, another task's branch by writing its ref file directly.
SIBLING = """#!/bin/sh
common=$(git rev-parse --git-common-dir)
try() {{ if sh -c "$2" >/dev/null 2>&1; then echo "ALLOWED $1"; else echo "REFUSED $1"; fi; }}
try rewrite "git rev-parse HEAD > $common/refs/heads/corral/{other}"
try remove "rm $common/refs/heads/corral/{other}"
try commit 'echo mine > mine.txt && git add mine.txt && git commit -q -m mine'
"""


def test_another_tasks_branch_cannot_be_rewritten_from_inside_even_when_packed(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    proj = boxed
    other = tasks.create(proj, "Other work", actor=Actor.HUMAN, harness="command")
    turns.start(proj, other.ref, actor=Actor.HUMAN)
    finished(proj, other.ref)
    before = git(repo, "rev-parse", f"refs/heads/corral/{other.ref}")
    git(repo, "pack-refs", "--all", "--prune")  # the other branch is now only in packed-refs
    box_env.write_text(SIBLING.format(other=other.ref))
    task = tasks.create(proj, "Intrude", actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    finished(proj, task.ref)
    seen = lines(agent_turns(proj, task)[-1].content)
    assert seen["rewrite"] == "REFUSED" and seen["remove"] == "REFUSED", seen
    assert seen["commit"] == "ALLOWED"
    assert git(repo, "rev-parse", f"refs/heads/corral/{other.ref}") == before
