"""accept through the forge, the real gh against the scripted GitHub: merged at once, pending, blocked, re-entered."""

from __future__ import annotations

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations import control, forge_accept, forge_sync, tasks, turns
from corral.errors import ForgeBlocked
from tests.conftest import CLI, git


def work(path: str, content: str, message: str = "agent work") -> list[dict]:
    return [
        {"init": True},
        {"write": {"path": path, "content": content}},
        {"commit": message},
        {"result": f"Wrote {path}."},
    ]


def blocked_with(proj, agent, ref: str, steps) -> None:
    agent.script(steps)
    task = tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED


def task_of(proj, ref: str):
    with proj.store.read() as tx:
        return tx.task_by_ref(ref)


def test_accept_merged_at_once_verifies_follows_the_target_and_archives(fproj, agent, repo):
    proj, forge = fproj()
    blocked_with(proj, agent, "feat", work("feature.py", "x = 1\n"))
    tip = git(repo, "rev-parse", "corral/feat")
    events: list[dict] = []
    result = accepting.accept(proj, "feat", actor=Actor.HUMAN, report=events.append)
    assert result.task.status is Status.COMPLETE and result.commit
    pr = forge.pull()
    assert pr.state == "MERGED" and pr.head_oid == tip and pr.title == "Task feat"
    assert git(forge.bare, "rev-parse", "main") == result.commit == pr.merge_commit
    message = git(forge.bare, "log", "-1", "--format=%B", "main")
    assert f"Corral-Task: {result.task.id}" in message  # corral's trailers in the squash message
    assert git(repo, "rev-parse", "main") == result.commit  # the clean local target followed
    assert (repo / "feature.py").read_text() == "x = 1\n"
    assert git(repo, "rev-parse", "refs/corral/archive/feat") == tip
    assert not proj.paths.worktree("feat").exists()
    phases = [(e["id"], e["state"]) for e in events if e["event"] == "phase"]
    assert ("push", "done") in phases and ("open", "done") in phases and ("verify", "done") in phases
    merge_request = [b for m, p, b in forge.requests if m == "PUT" and p.endswith("/merge")]
    assert merge_request == [
        {
            "sha": tip,
            "merge_method": "squash",
            "commit_title": f"Task feat (#{pr.number})",
            "commit_message": merge_request[0]["commit_message"],
        }
    ]


def test_pending_checks_wait_on_the_forge_then_a_second_accept_completes(fproj, agent, repo):
    proj, forge = fproj(required_checks=("ci",), allow_auto_merge=False)
    blocked_with(proj, agent, "slow", work("slow.py", "y = 2\n"))
    result = accepting.accept(proj, "slow", actor=Actor.HUMAN)
    task = result.task
    assert task.status is Status.MERGING and result.commit is None
    assert "accept_in_flight_from" not in task.metadata  # the forge form: no local merge marker
    assert f"/pull/{forge.pull().number}" in (result.warning or "") and "ci (pending)" in (result.warning or "")
    from corral.engine.operations.refresh import settle

    settle(proj)  # the stranded-merge sweep leaves a merge that waits on the forge alone
    assert task_of(proj, "slow").status is Status.MERGING
    forge.finish_checks(forge.pull().number)
    again = accepting.accept(proj, "slow", actor=Actor.HUMAN)
    assert again.task.status is Status.COMPLETE and again.commit == forge.pull().merge_commit
    assert git(repo, "rev-parse", "main") == again.commit


def test_list_and_the_board_show_a_merge_that_waits_on_the_forge(fproj, agent, repo):
    proj, forge = fproj(required_checks=("ci",), allow_auto_merge=False)
    blocked_with(proj, agent, "slow", work("slow.py", "y = 2\n"))
    accepting.accept(proj, "slow", actor=Actor.HUMAN)
    number = forge.pull().number
    cli = CLI(repo)
    [row] = [r for r in cli.json("list")["tasks"] if r["ref"] == "slow"]
    pull = row["pull_request"]
    assert pull["number"] == number and pull["pending"] is True
    assert pull["line"] == f"PR #{number} waits on the forge: checks: ci (pending)"
    assert pull["url"] is not None and pull["url"].endswith(f"/pull/{number}")
    listed = cli.ok("list").stdout
    assert f"PR #{number} waits on the forge: checks: ci (pending)" in listed
    from corral.dashboard.board_page import _card

    card = str(_card({**row, "project": "p", "project_path": str(repo), "live": {}}, {}))
    assert f'href="{pull["url"]}"' in card and f"PR #{number} waits on the forge" in card
    from corral.cli import board_rows
    from corral.engine.operations import board as boards

    frame = "\n".join(board_rows.plain_rows(boards.board([(repo.name, proj)], only=["slow"]).to_json(), width=300))
    assert f"PR #{number} waits on the forge: checks: ci (pending)" in frame  # watch's board, as list says it
    # Once merged, the row keeps the pull request's number but no longer says it waits.
    forge.finish_checks(number)
    accepting.accept(proj, "slow", actor=Actor.HUMAN)
    [done] = [r for r in cli.json("list", "--all")["tasks"] if r["ref"] == "slow"]
    assert done["pull_request"]["pending"] is False and done["pull_request"]["line"] == f"PR #{number}"


def test_pending_then_merged_on_the_forge_completes_by_remote_sync(fproj, agent, repo):
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "auto", work("auto.py", "z = 3\n"))
    result = accepting.accept(proj, "auto", actor=Actor.HUMAN)
    assert result.task.status is Status.MERGING and "auto-merge is on" in (result.warning or "")
    forge.finish_checks(forge.pull().number)  # the forge's auto-merge, pinned to the reviewed head, lands it
    assert forge.pull().state == "MERGED"
    forge_sync.sync(proj, force=True)
    done = task_of(proj, "auto")
    assert done.status is Status.COMPLETE
    assert git(repo, "rev-parse", "main") == forge.pull().merge_commit


def test_failed_checks_block_naming_the_check_and_offer_its_log(fproj, agent):
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "red", work("red.py", "r = 1\n"))
    accepting.accept(proj, "red", actor=Actor.HUMAN)
    forge.finish_checks(forge.pull().number, "FAILURE", log="FAILED tests/test_red.py::test_one\x1b[31m boom\n")
    forge_sync.sync(proj, force=True)
    task = task_of(proj, "red")
    assert task.status is Status.BLOCKED
    with proj.store.read() as tx:
        assert (
            "checks failed" in tx.status_changes(task.id)[-1].reason and ": ci" in tx.status_changes(task.id)[-1].reason
        )
    assert forge.pull().state == "OPEN"  # left open
    feedback = forge_accept.take_feedback(proj, task.id)
    assert feedback and "check ci failed" in feedback and "test_one" in feedback
    assert "\x1b" not in feedback  # sanitized at intake
    assert "untrusted" in feedback
    assert forge_accept.take_feedback(proj, task.id) is None  # never twice


def test_changes_requested_block_and_a_closed_pull_request_blocks(fproj, agent):
    proj, forge = fproj(required_checks=("ci",), requires_approval=True)
    blocked_with(proj, agent, "rev", work("rev.py", "v = 1\n"))
    accepting.accept(proj, "rev", actor=Actor.HUMAN)
    number = forge.pull().number
    forge.add_review(number, "CHANGES_REQUESTED", "Please rename v.", author="alice")
    with pytest.raises(ForgeBlocked, match=r"changes requested .* by alice"):
        accepting.accept(proj, "rev", actor=Actor.HUMAN)  # a second accept re-enters and asks the forge
    task = task_of(proj, "rev")
    assert task.status is Status.BLOCKED
    assert "Please rename v." in (forge_accept.take_feedback(proj, task.id) or "")
    forge.add_review(number, "APPROVED", "ok now", author="alice")
    accepting.accept(proj, "rev", actor=Actor.HUMAN)  # blocked → merging again, the same pull request
    assert task_of(proj, "rev").status is Status.MERGING and len(forge.pulls) == 1
    forge.close_outside(number)
    forge_sync.sync(proj, force=True)
    task = task_of(proj, "rev")
    assert task.status is Status.BLOCKED
    with proj.store.read() as tx:
        why = tx.status_changes(task.id)[-1].reason
    assert "closed on the forge without merging" in why


def test_a_push_after_review_is_never_merged(fproj, agent, repo):
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "late", work("late.py", "l = 1\n"))
    reviewed = git(repo, "rev-parse", "corral/late")
    accepting.accept(proj, "late", actor=Actor.HUMAN)
    number = forge.pull().number
    forge.push_outside(number, "evil.py", "import os\n")
    forge.finish_checks(number)
    assert forge.pull().state == "OPEN"  # the auto-merge was pinned to the reviewed head
    forge_sync.sync(proj, force=True)
    task = task_of(proj, "late")
    assert task.status is Status.BLOCKED and git(forge.bare, "rev-parse", "main") != reviewed
    assert "evil.py" not in git(forge.bare, "ls-tree", "-r", "--name-only", "main")


def test_an_outage_and_a_rate_limit_are_waited_out_and_change_nothing(fproj, agent):
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "wait", work("wait.py", "w = 1\n"))
    accepting.accept(proj, "wait", actor=Actor.HUMAN)
    forge.fail_next(1)
    problems = forge_sync.sync(proj, force=True)
    assert problems and "outage" in problems[0]
    task = task_of(proj, "wait")
    assert task.status is Status.MERGING and "outage" in forge_accept.record_of(task)["unavailable"]
    forge.fail_next(1, reset_in=600)
    forge_sync.sync(proj, force=True)
    assert task_of(proj, "wait").status is Status.MERGING
    forge.finish_checks(forge.pull().number)
    before = len(forge.requests)
    assert forge_sync.sync(proj) == []  # until the stated reset, the forge is not asked again
    assert len(forge.requests) == before
    forge_sync.sync(proj, force=True)
    assert task_of(proj, "wait").status is Status.COMPLETE


def test_the_next_settle_and_a_wait_see_the_forge_merge(fproj, agent, repo):
    from corral.engine.operations.refresh import settle

    proj, forge = fproj(required_checks=("ci",), allow_auto_merge=False)
    blocked_with(proj, agent, "tick", work("tick.py", "t = 1\n"))
    accepting.accept(proj, "tick", actor=Actor.HUMAN)
    ended = control.wait(proj, "tick", timeout=0.5)  # still waiting on the forge: the wait times out
    assert ended.task.status is Status.MERGING
    forge.merge_outside(forge.pull().number)
    (proj.paths.root / "forge-sync.json").unlink()  # the next poll is due (as forge_poll seconds later)
    assert control.wait(proj, "tick", timeout=30).task.status is Status.COMPLETE
    settle(proj)
    assert git(repo, "rev-parse", "main") == forge.pull().merge_commit


def test_a_forge_merge_of_other_than_the_reviewed_change_is_not_completed(fproj, agent, repo):
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "odd", work("odd.py", "o = 1\n"))
    accepting.accept(proj, "odd", actor=Actor.HUMAN)
    number = forge.pull().number
    forge.push_outside(number, "extra.py", "e = 1\n")
    forge.merge_outside(number)  # merged on the forge by hand, with the unreviewed commit
    before = git(repo, "rev-parse", "main")
    forge_sync.sync(proj, force=True)
    task = task_of(proj, "odd")
    assert task.status is Status.BLOCKED
    with proj.store.read() as tx:
        assert "not the reviewed change" in tx.status_changes(task.id)[-1].reason
    assert git(repo, "rev-parse", "main") == before  # nothing here moved


def test_the_accept_command_answers_with_the_pull_request_and_what_it_waits_for(fproj, agent, corral):
    proj, forge = fproj(required_checks=("ci",), allow_auto_merge=False)
    blocked_with(proj, agent, "cli", work("cli.py", "c = 1\n"))
    result = corral.ok("accept", "cli")
    url = f"https://{forge.host}/acme/widgets/pull/{forge.pull().number}"
    assert f"cli is merging: the merge waits on the forge: {url} — checks: ci (pending)" in result.stdout
    shown = corral.ok("show", "cli").stdout
    assert f"Forge:    {url} — the merge waits on the forge: checks: ci (pending)" in shown
    forge_doc = corral.json("show", "cli")["forge"]
    assert forge_doc["pending"] and forge_doc["url"] == url and forge_doc["waits"] == "checks: ci (pending)"
    assert corral("wait", "cli", "--timeout", "0.5").returncode == 124  # still waiting on the forge
    forge.finish_checks(forge.pull().number, "FAILURE")
    failed = corral("accept", "cli")
    assert failed.returncode == 1 and "checks failed" in failed.stderr and ": ci" in failed.stderr
    assert "corral unblock cli" in failed.stderr


def test_reject_of_a_pending_task_closes_its_pull_request_with_the_reason(fproj, agent):
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "no", work("no.py", "n = 1\n"))
    accepting.accept(proj, "no", actor=Actor.HUMAN)
    ended = tasks.abandon(proj, "no", reason="not \x1b[31mwanted\x1b[0m after all", actor=Actor.HUMAN, how="reject")
    assert ended.task.status is Status.ABANDONED and ended.warning is None
    pr = forge.pull()
    assert pr.state == "CLOSED"
    (comment,) = [c.body for c in pr.comments]
    assert comment.startswith("Closed by corral (reject): not") and "after all" in comment
    assert "\x1b" not in comment
    with proj.store.read() as tx:
        changes = [(c.from_status, c.to_status) for c in tx.status_changes(ended.task.id)]
    assert changes[-2:] == [(Status.MERGING, Status.BLOCKED), (Status.BLOCKED, Status.ABANDONED)]


def test_forge_feedback_goes_with_the_next_unblock_once(fproj, agent):
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "fb", work("fb.py", "f = 1\n"))
    accepting.accept(proj, "fb", actor=Actor.HUMAN)
    number = forge.pull().number
    forge.add_comment(number, "Also \x1b]0;pwned\x07 handle the empty case.", author="mallory")
    forge.finish_checks(number, "FAILURE", log="assert 1 == 2\n")
    forge_sync.sync(proj, force=True)
    assert task_of(proj, "fb").status is Status.BLOCKED
    agent.script([{"result": "fixed"}], [{"result": "again"}])
    turns.unblock(proj, "fb", actor=Actor.HUMAN, message="Please fix the build.")
    control.wait(proj, "fb", timeout=30)
    first = agent.calls()[-1]["prompt"]
    assert "Please fix the build." in first and "check ci failed" in first and "assert 1 == 2" in first
    assert "handle the empty case" in first and "mallory" in first and "untrusted" in first
    assert "\x1b" not in first and "\x07" not in first  # sanitized at intake
    forge_sync.sync(proj, force=True)  # nothing new on the forge: nothing queued again
    turns.unblock(proj, "fb", actor=Actor.HUMAN, message="One more thing.")
    control.wait(proj, "fb", timeout=30)
    second = agent.calls()[-1]["prompt"]
    assert "One more thing." in second and "handle the empty case" not in second.split("One more thing.")[-1]


def test_forge_feedback_is_delivered_by_itself_with_forge_auto_deliver(fproj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_FORGE_AUTO_DELIVER", "true")
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "ad", work("ad.py", "a = 1\n"))
    accepting.accept(proj, "ad", actor=Actor.HUMAN)
    agent.script([{"result": "looked at it"}])
    forge.add_review(forge.pull().number, "CHANGES_REQUESTED", "Rename a to answer.", author="alice")
    forge_sync.sync(proj, force=True)
    assert control.wait(proj, "ad", timeout=30).task.status is Status.BLOCKED
    calls = agent.calls()
    assert "Rename a to answer." in calls[-1]["prompt"]
    with proj.store.read() as tx:
        task = tx.task_by_ref("ad")
        unblocks = [t for t in tx.turns(task.id) if t.kind == "unblock" and t.role is Role.HUMAN]
    assert [t.actor for t in unblocks] == [Actor.SYSTEM]
    forge_sync.sync(proj, force=True)  # a blocked task is not pending on the forge: nothing twice
    assert len(agent.calls()) == len(calls)


def test_every_forge_text_arrives_escaped(fproj, agent):
    proj, forge = fproj(required_checks=("ci\x1b[2J",))
    blocked_with(proj, agent, "esc", work("esc.py", "e = 1\n"))
    accepting.accept(proj, "esc", actor=Actor.HUMAN)
    number = forge.pull().number
    forge.finish_checks(number, "FAILURE", log="\x1b]52;c;cm0gLXJm\x07 failed\n")
    forge.add_review(number, "CHANGES_REQUESTED", "fix \x1b[8mhidden\x1b[0m", author="eve\x1b]0;title\x07")
    forge.fail_next(1, status=503)
    problems = forge_sync.sync(proj, force=True)
    assert problems and all("\x1b" not in p for p in problems)
    forge_sync.sync(proj, force=True)
    task = task_of(proj, "esc")
    assert task.status is Status.BLOCKED
    with proj.store.read() as tx:
        reason = tx.status_changes(task.id)[-1].reason
    assert "ci" in reason and "\x1b" not in reason and "\x07" not in reason
    feedback = forge_accept.take_feedback(proj, task.id) or ""
    assert "hidden" in feedback and "eve" in feedback
    assert not any(ch in feedback for ch in "\x1b\x07")


def test_the_pre_accept_turn_runs_before_the_push_and_its_commit_is_merged(fproj, agent, repo, monkeypatch):
    monkeypatch.setenv("CORRAL_PRE_ACCEPT_PROMPT", "Add a changelog line.")
    proj, forge = fproj()
    blocked_with(proj, agent, "pre", work("pre.py", "p = 1\n"))
    agent.script(
        [{"write": {"path": "CHANGES.md", "content": "- pre\n"}}, {"commit": "changelog"}, {"result": "Added it."}]
    )
    events: list[dict] = []
    result = accepting.accept(proj, "pre", actor=Actor.HUMAN, report=events.append)
    assert result.task.status is Status.COMPLETE
    assert "Add a changelog line." in agent.calls()[-1]["prompt"]
    assert git(forge.bare, "show", "main:CHANGES.md") == "- pre"  # the pre-accept turn's commit went with it
    assert "accept_in_flight_from" not in result.task.metadata
    plan = next(e for e in events if e["event"] == "plan")
    assert [p["id"] for p in plan["phases"]][:2] == ["pre-accept", "push"]


def test_a_target_with_local_changes_is_fetched_not_moved_and_the_accept_says_so(fproj, agent, repo):
    proj, forge = fproj()
    blocked_with(proj, agent, "dirty", work("d.py", "d = 1\n"))
    before = git(repo, "rev-parse", "main")
    (repo / "README.md").write_text("# demo\nmy local edit\n")
    result = accepting.accept(proj, "dirty", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    assert "uncommitted changes" in (result.warning or "") and "git pull" in (result.warning or "")
    assert git(repo, "rev-parse", "main") == before  # left as it was, the edit kept
    assert (repo / "README.md").read_text() == "# demo\nmy local edit\n"
    assert git(repo, "rev-parse", "refs/remotes/origin/main") == result.commit == forge.pull().merge_commit
