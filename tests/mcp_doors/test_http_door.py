"""The daemon's MCP endpoint as an attacker meets it: tokens, Host and Origin, a URL naming another task.

A real daemon serves it; the token is the one corral minted for a real turn (the scripted
agent writes it out and holds its turn open while the test calls as that agent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.mcp_doors.conftest import Door
from tests.support.polling import until


async def _call(url: str, token: str, tool: str, args: dict[str, Any]) -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        if tool == "":
            return await client.list_tools()
        return await client.call_tool(tool, args)


def call(url: str, token: str, tool: str, args: dict[str, Any] | None = None) -> Any:
    return anyio.run(_call, url, token, tool, args or {})


@pytest.fixture
def held(door: Door, tmp_path: Path) -> Any:
    """A running turn of ``holder`` whose agent waits on a file; the test has its URL and token."""
    corral = door.cli
    corral.ok("create", "Hold the turn", "--ref", "holder")
    corral.ok("create", "Another", "--ref", "other")
    minted, hold = tmp_path / "token.json", tmp_path / "hold"
    door.script({"holder": [{"dump_token": str(minted)}, {"hold": str(hold)}]})
    corral.ok("start", "holder")
    until(hold.exists)
    doc = json.loads(minted.read_text())
    yield door, doc["url"], doc["token"], hold
    if hold.exists():
        hold.unlink()


def test_the_agent_is_its_token_and_loses_it_with_its_turn(held: Any) -> None:
    door, url, token, hold = held
    corral = door.cli
    listed = call(url, token, "")
    names = {t.name for t in listed.tools}
    assert {"create", "wait", "update_progress", "accept", "failures"} <= names
    read_only = {t.name for t in listed.tools if t.annotations and t.annotations.read_only_hint}
    assert read_only == {"show", "list", "logs", "diff", "wait", "failures"}
    shown = call(url, token, "show", {"task": "holder"})
    assert not shown.is_error and shown.structured_content["task"]["status"] == "working"
    posted = call(url, token, "update_progress", {"message": "reading the \x1b[2J code"})
    assert posted.structured_content["message"] == "reading the \\u001b[2J code"
    assert corral.json("show", "holder")["task"]["substate"].startswith("agent: reading the")
    refused = call(url, token, "stop", {"task": "other"})
    assert refused.is_error and refused.structured_content["error"]["code"] == "agent-out-of-scope"
    # the list an agent sees is its own subtree
    rows = call(url, token, "list", {"which": "all"}).structured_content["rows"]
    assert [r["ref"] for r in rows] == ["holder"]
    hold.unlink()  # the turn ends
    until(lambda: corral.json("show", "holder")["task"]["status"] != "working")
    gone = httpx2.post(url, headers={"Authorization": f"Bearer {token}", "Host": _host(url)}, json={})
    assert gone.status_code == 401 and gone.json()["error"]["code"] == "agent-token-invalid"


def _host(url: str) -> str:
    return url.split("/")[2]


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }


def test_host_origin_and_a_url_naming_another_task_are_refused(held: Any) -> None:
    door, url, token, _hold = held
    auth = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    port = _host(url).split(":")[1]
    rebound = httpx2.post(url, headers={**auth, "Host": f"evil.example:{port}"}, json=_initialize())
    assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "forbidden-origin"
    foreign = httpx2.post(url, headers={**auth, "Origin": "http://evil.example"}, json=_initialize())
    assert foreign.status_code == 403
    nobody = httpx2.post(url, headers={"Accept": auth["Accept"]}, json=_initialize())
    assert nobody.status_code == 401
    forged = httpx2.post(url, headers={**auth, "Authorization": "Bearer crl_forged"}, json=_initialize())
    assert forged.status_code == 401
    other = door.cli.json("show", "other")["task"]["id"]
    mismatch = httpx2.post(f"{url}/{other}", headers=auth, json=_initialize())
    assert mismatch.status_code == 403 and mismatch.json()["error"]["code"] == "agent-identity-mismatch"
    own = httpx2.post(f"{url}/holder", headers={**auth, "Origin": f"http://{_host(url)}"}, json=_initialize())
    assert own.status_code == 200, own.text


def test_an_unconfined_turn_gets_no_shell_and_its_dispositions_are_ignored(held: Any) -> None:
    _door, url, token, _hold = held
    shell = call(url, token, "bash", {"command": "touch ran", "operationId": "build"})
    assert shell.is_error and shell.structured_content["error"]["code"] == "shell-needs-sandbox"
    ignored = call(
        url, token, "failure_disposition", {"disposition": "expected", "targets": ["x"], "reason": "intended"}
    )
    assert not ignored.is_error
    assert ignored.structured_content["recorded"] is False and ignored.structured_content["ignored"] is True
    assert "confined" in ignored.structured_content["why"]


def test_an_agent_cannot_edit_its_own_task(held: Any) -> None:
    _door, url, token, _hold = held
    refused = call(url, token, "edit", {"task": "holder", "protect": []})
    assert refused.is_error and refused.structured_content["error"]["code"] == "agent-out-of-scope"
