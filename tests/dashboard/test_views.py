"""The dashboard's board card and task head name the host a worker runs a turn on, escaped (docs/workers.md)."""

from __future__ import annotations

from typing import Any

from corral.dashboard import board_page


def _row(**kw: Any) -> dict[str, Any]:
    base = {
        "id": "t-id",
        "ref": "fix",
        "status": "working",
        "substate": "agent",
        "needs": "working",
        "goal": "Fix it",
        "reason": None,
        "needs_action": 0,
        "project": "app",
        "project_path": "/x",
        "age_s": 3.0,
        "live": None,
    }
    return {**base, **kw}


def test_a_card_names_the_workers_host_escaped_and_a_queued_turn_none() -> None:
    html = str(board_page._card(_row(host="build-<b>2</b>"), {"/x": "s"}))
    assert "working · agent · on build-&lt;b&gt;2&lt;/b&gt;" in html
    queued = str(board_page._card(_row(substate="queued", host="queued"), {"/x": "s"}))
    assert "working · queued<" in queued and " on " not in queued
