"""What a row says (seed 000): an open disposition's reason; in raw mode the whole excerpt (not 180
characters) and the evidence's absolute path; compact rows capped at 120 bytes with ``output.log#byte=N``."""

from __future__ import annotations

import json
from pathlib import Path

from corral.domain.incidents import FailureState, reduce, row_text
from corral.engine.read import incident_views
from tests.conftest import CLI


def _pi_log(path: Path, text: str) -> Path:
    start = {"type": "tool_execution_start", "toolCallId": "t1", "toolName": "bash", "args": {"command": "make"}}
    end = {"type": "tool_execution_end", "toolCallId": "t1", "toolName": "bash", "isError": True}
    end["result"] = {"content": [{"type": "text", "text": text}]}
    path.write_text(json.dumps(start) + "\n" + json.dumps(end) + "\n")
    return path


def test_raw_rows_keep_the_whole_excerpt_and_the_absolute_path(corral: CLI, tmp_path: Path) -> None:
    words = " ".join(f"word{n}" for n in range(40))  # 269 characters
    log = _pi_log(tmp_path / "output.log", words)
    raw = corral.json("failures", "--log", str(log), "--harness", "pi", "--history", "--raw")["failures"]["rows"][0]
    assert raw["summary"] == f"bash failed: {words}"  # longer than 180 characters, whole
    assert raw["evidence"].startswith(f"{log}#byte=")  # the log's whole path
    compact = corral.json("failures", "--log", str(log), "--harness", "pi", "--history")["failures"]["rows"][0]
    assert len(compact["summary"].encode()) <= 120 and compact["summary"].endswith("…")
    assert compact["evidence"].startswith("output.log#byte=")


def test_an_open_disposition_s_reason_is_shown() -> None:
    events = [
        {
            "kind": "failure",
            "id": "tool:a",
            "operation": "op:auth",
            "category": "tool",
            "summary": "gh failed: HTTP 401",
        },
        {
            "kind": "disposition",
            "id": "disposition:d1",
            "disposition": "open",
            "targets": ["tool:a"],
            "reason": "gh credentials are missing in the sandbox",
        },
    ]
    state = reduce(FailureState(), events)
    (row,) = incident_views.rows(state)
    assert row["reason"] == "gh credentials are missing in the sandbox"
    assert row_text(row) == "Action required: gh failed: HTTP 401 · open: gh credentials are missing in the sandbox"
