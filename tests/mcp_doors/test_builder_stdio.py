"""``corral mcp`` over stdio, driven by the official MCP client as a builder would; recorded as ``builder``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import CLI, git

#: A harness that does a little work and commits it.
WORKER = "sh -c 'echo work >> work.txt && git add -A && git commit -qm work && echo finished'"


async def _session(repo: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "corral", "mcp"], cwd=str(repo), env=dict(os.environ)
    )
    out: list[Any] = []
    async with Client(params) as client:
        for tool, args in calls:
            out.append(await (client.list_tools() if tool == "" else client.call_tool(tool, args)))
    return out


def session(repo: Path, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    return anyio.run(_session, repo, list(calls))


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", WORKER)


def ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    doc: dict[str, Any] = result.structured_content
    return doc


def error(result: Any) -> dict[str, Any]:
    assert result.is_error, result.content[0].text
    err: dict[str, Any] = result.structured_content["error"]
    assert set(err) == {"code", "message", "hint"} and err["code"] and err["message"]
    return err


def test_tools_and_their_schemas(repo: Path) -> None:
    (listed,) = session(repo, ("", {}))
    tools = {t.name: t for t in listed.tools}
    expected = {
        "create", "start", "unblock", "resume", "ask", "wait", "stop", "sync", "edit", "show", "list", "logs",
        "diff", "accept", "submit", "reject", "close", "reopen", "comment", "journal", "failures",
    }  # fmt: skip
    assert set(tools) == expected  # update_progress is a task agent's only
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"]), tool.name
        assert tool.description


def test_a_builder_runs_a_task_from_create_to_accept(repo: Path, worker: None) -> None:
    results = session(
        repo,
        ("create", {"goal": "Add\x00 work", "ref": "job", "prompt": "Be \x07quick"}),
        ("start", {"task": "job"}),
        ("wait", {"task": "job"}),
        ("diff", {"task": "job"}),
        ("logs", {"task": "job"}),
        ("comment", {"task": "job", "body": "Looks \x1b[31mfine"}),
        ("journal", {"task": "job", "entry": "Decided to keep it small."}),
        ("failures", {"task": "job"}),
        ("list", {"which": "all"}),
        ("update_progress", {"message": "not mine"}),
        ("accept", {"task": "job"}),
        ("show", {"task": "job"}),
    )
    created, started, waited, diff, logs, comment, journal, failures, listed, progress, accepted, shown = results
    task = ok(created)["task"]
    assert task["goal"] == "Add\\u0000 work"  # escaped, no note on a goal
    assert task["prompt"].startswith("Be \\u0007quick\n\n[corral: 1 non-printable character")
    assert ok(started)["task"]["status"] == "working"
    assert ok(waited)["rests"] is True and ok(waited)["task"]["status"] == "blocked"
    assert "work.txt" in ok(diff)["diff"]
    assert "finished" in ok(logs)["text"]
    assert ok(comment)["comment"]["body"].startswith("Looks \\u001b[31mfine")
    assert ok(comment)["comment"]["actor"] == "builder"
    assert ok(journal)["journal"][0]["body"] == "Decided to keep it small."
    assert "rows" in ok(failures)
    assert [r["ref"] for r in ok(listed)["rows"]] == ["job"]
    assert error(progress)["code"] == "agent-only"
    assert ok(accepted)["task"]["status"] == "complete"
    doc = ok(shown)
    by = {(c["to"], c["actor"]) for c in doc["status_changes"]}
    # what the builder did is the builder's; the turn's end is the reconciler's (system)
    assert {("backlog", "builder"), ("working", "builder"), ("blocked", "system")} <= by
    assert {a for to, a in by if to in ("backlog", "working", "merging", "complete")} == {"builder"}
    assert all(t["actor"] == "builder" for t in doc["turns"] if t["role"] == "human")
    assert "work.txt" in git(repo, "ls-tree", "--name-only", "main").split()


def test_the_rest_of_the_lifecycle(repo: Path, worker: None) -> None:
    corral = CLI(repo)
    results = session(
        repo,
        ("create", {"goal": "One", "ref": "one"}),
        ("create", {"goal": "Two", "ref": "two"}),
        ("create", {"goal": "Child", "ref": "child", "parent": "one"}),
        ("edit", {"task": "two", "goal": "Two, edited", "protect": ["db/*"]}),
        ("start", {"task": "one"}),
        ("wait", {"task": "one"}),
        ("sync", {"task": "one"}),
        ("unblock", {"task": "one", "message": "Again\x00"}),
        ("wait", {"task": "one"}),
        ("ask", {"task": "one", "question": "Why?", "timeout_seconds": 60}),
        ("close", {"task": "two", "reason": "Not needed"}),
        ("reopen", {"task": "two"}),
        ("reject", {"task": "one", "reason": "Wrong"}),
        ("submit", {"task": "two"}),
        ("resume", {"task": "two"}),
        ("stop", {"task": "two"}),
        ("show", {"task": "nope"}),
        ("frobnicate", {}),
        ("show", {}),
        ("show", {"task": 7}),
    )
    (one, two, child, edited, started, _w, synced, unblocked, waited, asked, closed, reopened, rejected,
     submitted, resumed, stopped, missing, unknown, no_arg, wrong_type) = results  # fmt: skip
    assert ok(child)["task"]["parent"] == "one"
    assert ok(edited)["task"]["goal"] == "Two, edited" and ok(edited)["task"]["protected"] == ["db/*"]
    assert ok(synced)["sync"]["state"] in ("merged", "up-to-date")
    assert ok(unblocked)["task"]["status"] == "working"
    assert ok(waited)["task"]["status"] == "blocked"
    turns = corral.json("show", "one")["turns"]
    assert any(t["role"] == "human" and t["content"].startswith("Again\\u0000") for t in turns)
    assert ok(asked)["command_id"]
    assert ok(closed)["task"]["status"] == "abandoned"
    assert ok(reopened)["task"]["status"] in ("backlog", "blocked")
    assert ok(rejected)["task"]["status"] == "abandoned"
    assert error(submitted)["code"]  # no remote to push to: a typed refusal, not a traceback
    assert error(resumed)["code"] == "illegal-transition"
    assert error(stopped)["code"]
    assert error(missing)["code"] == "task-not-found"
    assert error(unknown)["code"] == "unknown-tool"
    assert error(no_arg)["code"] == "missing-argument"
    assert error(wrong_type)["code"] == "bad-argument"
    assert ok(one)["task"]["ref"] == "one" and ok(two)["task"]["ref"] == "two" and ok(started)


HOSTILE = "x\x00y\x1b[31m\x9b\x7f"


def test_every_string_argument_is_sanitized(repo: Path, worker: None) -> None:
    """Every tool, every string (and every array element) holding NUL and escapes: never a raw one
    back, never a traceback; the call is answered or refused with a code."""
    (listed,) = session(repo, ("", {}))
    calls: list[tuple[str, dict[str, Any]]] = []
    for tool in listed.tools:
        args: dict[str, Any] = {}
        for name, prop in tool.input_schema["properties"].items():
            if prop.get("type") == "string" and "enum" not in prop:
                args[name] = HOSTILE
            elif prop.get("type") == "array":
                args[name] = [HOSTILE]
        if tool.name in ("ask", "wait"):
            args["timeout_seconds"] = 1
        calls.append((tool.name, args))
    for (name, _args), result in zip(calls, session(repo, *calls), strict=True):
        text = result.content[0].text
        assert not any(ch in text for ch in "\x00\x1b\x9b\x7f"), (name, text)
        if result.is_error:
            assert result.structured_content["error"]["code"] != "internal-error", (name, text)
    shown = CLI(repo).json("list", "--all")
    for row in shown["tasks"] if "tasks" in shown else shown["rows"]:
        assert "\x00" not in row["goal"]
