"""`corral create` and `corral edit` through the real entry point."""

from __future__ import annotations

from pathlib import Path

from tests.cli.helpers import complete, create, json_error, no_traceback
from tests.conftest import git


def test_create_makes_the_ref_from_the_goal(corral) -> None:
    result = corral.ok("create", "Fix the login timeout!")
    no_traceback(result)
    assert "Created fix-the-login-timeout" in result.stdout
    assert "Next:" in result.stdout and "corral start fix-the-login-timeout" in result.stdout
    again = create(corral, "Fix the login timeout")
    assert again["ref"] == "fix-the-login-timeout-2"
    assert again["status"] == "backlog"
    assert again["goal"] == "Fix the login timeout"
    assert again["target"] == "main"
    assert again["parent"] is None


def test_create_with_flags_and_prompt(corral) -> None:
    doc = corral.json(
        "create",
        "Add retry to uploads",
        "--ref",
        "upload-retry",
        "--harness",
        "pi",
        "--model",
        "sonnet",
        "--protect",
        "migrations/*",
        "--protect",
        "secrets.env",
        "-m",
        "Use exponential backoff.\nKeep it under 60 s.",
    )
    task = doc["task"]
    assert task["ref"] == "upload-retry"
    assert (task["harness"], task["model"]) == ("pi", "sonnet")
    assert task["protected"] == ["migrations/*", "secrets.env"]
    assert task["prompt"] == "Use exponential backoff.\nKeep it under 60 s."
    assert doc["next"] == "Start it: corral start upload-retry"
    shown = corral.json("show", "upload-retry")
    assert shown["task"]["prompt"] == task["prompt"]
    assert shown["status_changes"][0]["from"] is None
    assert shown["status_changes"][0]["to"] == "backlog"
    assert shown["status_changes"][0]["actor"] == "human"


def test_the_creating_actor_comes_from_the_channel(corral) -> None:
    corral.json("create", "Made by a wrapper", "--ref", "wrapped", env={"CORRAL_ACTOR": "builder"})
    assert corral.json("show", "wrapped")["status_changes"][0]["actor"] == "builder"
    bad = corral("create", "x", "--json", env={"CORRAL_ACTOR": "robot"})
    json_error(bad, 2)


def test_invalid_refs_are_usage_errors_and_nothing_is_created(corral) -> None:
    for ref in ("Bad_Ref", "-leading", "trailing-", "double--hyphen", "x" * 49, "has space", "UPPER"):
        err = json_error(corral("create", "A goal", "--ref", ref, "--json"), 2, "invalid-ref")
        assert ref in err["message"]
        assert err["hint"]
    assert corral.json("list", "--all")["tasks"] == []
    text = corral("create", "A goal", "--ref", "Bad_Ref")
    assert text.returncode == 2
    no_traceback(text)
    assert "error:" in text.stderr and "hint:" in text.stderr
    assert text.stdout == ""


def test_a_taken_ref_is_refused_with_exit_3(corral) -> None:
    create(corral, "First", "--ref", "same")
    err = json_error(corral("create", "Second", "--ref", "same", "--json"), 3, "ref-taken")
    assert "same" in err["message"]
    tasks = corral.json("list", "--all")["tasks"]
    assert [(t["ref"], t["goal"]) for t in tasks] == [("same", "First")]


def test_an_empty_goal_is_a_usage_error(corral) -> None:
    json_error(corral("create", "   ", "--json"), 2)
    assert corral.json("list", "--all")["tasks"] == []


def test_create_a_subtask_with_parent(corral) -> None:
    parent = create(corral, "Parent work", "--ref", "parent")
    child = create(corral, "Child work", "--ref", "child", "--parent", "par")  # a unique prefix works
    assert child["parent"] == "parent"
    shown = corral.json("show", "parent")
    assert shown["children"] == [{"ref": "child", "status": "backlog", "substate": None}]
    assert corral.json("show", "child")["task"]["parent"] == "parent"
    assert parent["id"] != child["id"]
    json_error(corral("create", "Orphan", "--parent", "no-such-task", "--json"), 4, "task-not-found")


def test_a_finished_parent_takes_no_subtask(corral) -> None:
    create(corral, "Parent", "--ref", "parent")
    corral.ok("close", "parent", "-m", "not needed")
    err = json_error(corral("create", "Child", "--parent", "parent", "--json"), 3, "parent-terminal")
    assert "parent" in err["message"]


def test_create_on_a_detached_head_is_a_usage_error_with_a_hint(corral, repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    err = json_error(corral("create", "Detached work", "--json"), 2)
    assert "detached" in err["message"].lower()
    assert err["hint"] and "--target" in err["hint"]
    assert corral.json("list", "--all")["tasks"] == []
    task = create(corral, "Detached work", "--target", "main")
    assert task["target"] == "main"


def test_create_records_the_branch_checked_out(corral, repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "develop")
    assert create(corral, "On develop")["target"] == "develop"


def test_edit_changes_the_task(corral) -> None:
    create(corral, "Old goal", "--ref", "edit-me", "--protect", "a/*")
    doc = corral.json("edit", "edit-me", "--goal", "New goal", "-m", "New prompt", "--model", "opus")
    assert doc["task"]["goal"] == "New goal"
    assert doc["task"]["prompt"] == "New prompt"
    assert doc["task"]["model"] == "opus"
    assert doc["task"]["protected"] == ["a/*"]
    assert corral.json("edit", "edit-me", "--protect", "b/*", "--protect", "c/*")["task"]["protected"] == [
        "b/*",
        "c/*",
    ]
    assert corral.json("edit", "edit-me", "--no-protect")["task"]["protected"] == []
    shown = corral.json("show", "edit-me")["task"]
    assert (shown["goal"], shown["prompt"], shown["model"]) == ("New goal", "New prompt", "opus")


def test_editing_a_terminal_task_is_refused(corral) -> None:
    create(corral, "Closed goal", "--ref", "closed")
    corral.ok("close", "closed", "-m", "duplicate")
    err = json_error(corral("edit", "closed", "--goal", "Changed", "--json"), 3, "task-frozen")
    assert "abandoned" in err["message"]
    assert err["hint"] and "reopen" in err["hint"]
    assert corral.json("show", "closed")["task"]["goal"] == "Closed goal"


def test_editing_a_complete_task_is_refused(corral) -> None:
    create(corral, "Done goal", "--ref", "done")
    complete(corral, "done")
    json_error(corral("edit", "done", "-m", "more", "--json"), 3, "task-frozen")
    assert corral.json("show", "done")["task"]["prompt"] == ""


def test_a_protected_pattern_list_has_bounds_and_nothing_is_saved_past_them(corral) -> None:
    huge = corral("create", "Guarded", "--protect", "x" * 3000, "--json")
    assert huge.returncode == 2 and huge.json()["error"]["code"] == "pattern-too-long"
    assert "x" * 3000 not in huge.stdout  # the input is not echoed back whole
    assert corral.json("list", "--all")["tasks"] == []
    corral.ok("create", "Guarded", "--ref", "g")
    many = ["--protect", "p"] * 501
    refused = corral("edit", "g", *many, "--json")
    assert refused.returncode == 2 and refused.json()["error"]["code"] == "too-many-patterns"
    assert corral.json("show", "g")["task"]["protected"] == []
