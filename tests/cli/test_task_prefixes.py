"""A prefix of a task's ref, through the real CLI and the MCP stdio door: a command that changes a
task says which task the prefix matched (stderr, and ``matched_by_prefix`` in JSON); one that
ends or merges a task (accept, close, reject, delete) refuses it, naming the whole ref; a read
takes it silently (docs/cli.md#task-references).
"""

from __future__ import annotations

from pathlib import Path

from tests.mcp_doors.test_builder_stdio import error, ok, session


def _two(corral) -> str:
    corral.ok("create", "Read big input from stdin", "--ref", "bigstdin")
    corral.ok("create", "Another task", "--ref", "other")
    return str(corral.json("show", "bigstdin")["task"]["id"])


def test_edit_by_a_prefix_says_which_task_it_changed(corral):
    task_id = _two(corral)
    edited = corral("edit", "big", "--goal", "Read bigger input")
    assert edited.returncode == 0, edited.stderr
    assert f"bigstdin ({task_id[:8]}), matched by prefix 'big'" in edited.stderr
    assert "Updated bigstdin." in edited.stdout
    doc = corral.json("edit", "big", "--model", "m1")
    assert doc["matched_by_prefix"] == {"given": "big", "ref": "bigstdin", "id": task_id}
    assert doc["task"]["model"] == "m1" and doc["task"]["goal"] == "Read bigger input"
    # by an id's prefix too
    assert corral.json("edit", task_id[:6], "--model", "m2")["matched_by_prefix"]["ref"] == "bigstdin"


def test_the_whole_ref_or_id_says_nothing_and_a_read_takes_a_prefix_silently(corral):
    task_id = _two(corral)
    for name in ("bigstdin", task_id):
        whole = corral("edit", name, "--model", "m")
        assert whole.returncode == 0 and "matched by prefix" not in whole.stderr
        assert "matched_by_prefix" not in corral.json("edit", name, "--model", "m")
    shown = corral("show", "big")
    assert shown.returncode == 0 and "matched by prefix" not in shown.stderr
    assert "matched_by_prefix" not in corral.json("show", "big")


def test_ending_or_merging_commands_refuse_a_prefix_and_name_the_whole_ref(corral):
    _two(corral)
    for args in (
        ("close", "big", "-m", "not needed"),
        ("reject", "big", "-m", "wrong"),
        ("delete", "big", "--yes"),
        ("accept", "big"),
    ):
        refused = corral(*args, "--json")
        assert refused.returncode == 2, (args, refused.stdout)
        err = refused.json()["error"]
        assert err["code"] == "prefix-refused", err
        assert "'big' is only the beginning of bigstdin" in err["message"]
        assert err["hint"] == f"corral {args[0]} bigstdin"
    assert corral.json("show", "bigstdin")["task"]["status"] == "backlog"  # nothing was done to it
    closed = corral("close", "bigstdin", "-m", "not needed")  # the hint, typed, works
    assert closed.returncode == 0, closed.stderr


def test_an_ambiguous_prefix_is_refused_as_before(corral):
    corral.ok("create", "One", "--ref", "big-one")
    corral.ok("create", "Two", "--ref", "big-two")
    result = corral("edit", "big", "--model", "m", "--json")
    assert result.returncode == 2 and result.json()["error"]["code"] == "ambiguous-task"


def test_mcp_tools_follow_the_same_rule(repo: Path, corral) -> None:
    task_id = _two(corral)
    edited, shown, closed = session(
        repo,
        ("edit", {"task": "big", "model": "m1"}),
        ("show", {"task": "big"}),
        ("close", {"task": "big", "reason": "not needed"}),
    )
    assert ok(edited)["matched_by_prefix"] == {"given": "big", "ref": "bigstdin", "id": task_id}
    assert "matched_by_prefix" not in ok(shown)
    refused = error(closed)
    assert refused["code"] == "prefix-refused" and refused["hint"] == "corral close bigstdin"
