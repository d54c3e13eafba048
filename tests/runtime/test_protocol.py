"""The typed protocol between corral and its supervisors: round trips, versions, and the one reader's refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest

from corral.adapters.harness.base import Posture
from corral.domain.failures import Budgets
from corral.domain.records import FailureEvidence, PossibleEffects
from corral.engine.runtime import protocol as proto


def a_command(**changes: object) -> proto.Command:
    base = proto.Command(
        command_id="c1",
        task_id="t1",
        task_ref="fix-it",
        kind="unblock",
        turn_id="u1",
        sequence=3,
        log_dir="/state/tasks/t1/turns/3",
        harness="claude",
        harness_settings=proto.HarnessSettings("claude", "pi", "codex", pi_provider="p", command=None),
        model="m",
        posture=Posture("acceptEdits", ("Bash", "Read"), read_only=False, is_sandbox=False),
        prompt_body="Please add the test.",
        system="You work in /wt.",
        resume_id="s-1",
        worktree="/wt",
        branch="corral/fix-it",
        target="main",
        sync_before_work=True,
        announce_merge=True,
        git_start_sha="abc",
        delivered=("u0", "u1"),
        watchdog=proto.Watchdog(1800.0, 3, 5.0),
        budgets=Budgets(21600.0, 3600.0, 12, 6),
        check=proto.CheckSpec("make test", 300.0),
        protected=("db/*",),
        created_at="2026-01-01T00:00:00.000000Z",
    )
    return msgspec.structs.replace(base, **changes)


def a_receipt() -> proto.Receipt:
    evidence = FailureEvidence(
        source="harness",
        code="harness-overloaded",
        phase="work",
        category="transient_overload",
        possible_effects=PossibleEffects.UNKNOWN,
        exit_code=1,
        details={"reason": "API Error: 529"},
    )
    return proto.Receipt(
        command_id="c1",
        task_id="t1",
        kind="unblock",
        status=proto.ReceiptStatus.COMPLETED,
        started_at="2026-01-01T00:00:00.000000Z",
        ended_at="2026-01-01T00:01:00.000000Z",
        harness_session_id="s-1",
        delivered=("u0", "u1"),
        attempts=(
            proto.AttemptRecord(1, "a", "b", "failed", "transient_overload", evidence, (0, 120)),
            proto.AttemptRecord(2, "c", "d", "succeeded", None, None, (120, 400)),
        ),
        sync=proto.SyncReport("merged", "main", ()),
        result="Done.",
        usage={"input_tokens": 10},
        check=proto.CheckResult("make test", 0, False, 300.0, "ok"),
        git=proto.GitFacts("def", ("def",), "abc", ("a.py",), (), False),
    )


def test_every_record_survives_its_file(tmp_path: Path) -> None:
    records = [
        a_command(),
        proto.SupervisorStatus(
            "c1", 42, "retrying", "unblock", 43, 2, proto.RetryState(2, "transient_overload", "529", 5000), "a", "b"
        ),
        proto.Progress("running migration 3/7", 42, "2026-01-01T00:00:00Z"),
        proto.StopRequest("human"),
        a_receipt(),
        proto.Receipt(
            command_id="c1",
            task_id="t1",
            kind="start",
            status=proto.ReceiptStatus.ERROR,
            error=proto.TurnError(proto.ErrorKind.WATCHDOG, "work", "no progress", 143, 15, "tail"),
            git=proto.GitFacts(error="git is broken"),
        ),
    ]
    for record in records:
        proto.write(tmp_path, record)
        assert proto.read(tmp_path / record.FILE, type(record)) == record
        assert json.loads((tmp_path / record.FILE).read_text())["protocol_version"] == proto.PROTOCOL_VERSION
        assert (tmp_path / record.FILE).stat().st_mode & 0o777 == 0o600


def test_a_version_1_command_is_still_read(tmp_path: Path) -> None:
    """Version 1 carried the watchdog and the check as flat fields; the relaunch and grace rules
    were the domain's then."""
    doc = a_command().to_json()
    v1 = {k: v for k, v in doc.items() if k not in ("watchdog", "check")}
    v1.update(protocol_version=1, watchdog_timeout=600, post_turn_check="make test", post_turn_check_timeout=120)
    (tmp_path / proto.COMMAND).write_text(json.dumps(v1))
    read = proto.read(tmp_path / proto.COMMAND, proto.Command)
    assert isinstance(read, proto.Command)
    from corral.domain.failures import TERM_GRACE_SECONDS, WATCHDOG_RELAUNCHES

    # the domain's rules: a zero-work stall relaunched once (issue 29 amended DESIGN's three)
    assert (
        read.watchdog == proto.Watchdog(600.0, WATCHDOG_RELAUNCHES, TERM_GRACE_SECONDS) == proto.Watchdog(600.0, 1, 5.0)
    )
    assert read.check == proto.CheckSpec("make test", 120.0)
    assert read.posture == a_command().posture


def test_a_version_1_receipt_is_still_read(tmp_path: Path) -> None:
    doc = a_receipt().to_json()
    doc["protocol_version"] = 1
    (tmp_path / proto.RESPONSE).write_text(json.dumps(doc))
    assert proto.read(tmp_path / proto.RESPONSE, proto.Receipt) == a_receipt()


def test_a_receipt_from_a_newer_corral_is_refused_with_its_cause(tmp_path: Path) -> None:
    doc = {**a_receipt().to_json(), "protocol_version": proto.PROTOCOL_VERSION + 1}
    (tmp_path / proto.RESPONSE).write_text(json.dumps(doc))
    found = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert isinstance(found, proto.Unreadable) and found.problem is proto.Problem.TOO_NEW
    assert f"protocol version {proto.PROTOCOL_VERSION + 1}" in found.detail


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"status": "finished"}, "status"),
        ({"attempts": [{"number": "one", "started_at": "a", "outcome": "failed"}]}, "number"),
        ({"command_id": 7}, "command_id"),
        ({"error": {"kind": "meteor", "phase": None, "reason": "x"}, "status": "error"}, "error.kind"),
        ({"git": {"changed_paths": "a.py"}}, "git.changed_paths"),
        ({"reaped": [{"pid": True, "command": "sleep"}]}, "reaped[0].pid"),
    ],
)
def test_the_wrong_shape_is_refused_naming_the_field(tmp_path: Path, change: dict[str, object], field: str) -> None:
    doc = {**a_receipt().to_json(), **change, "protocol_version": proto.PROTOCOL_VERSION}
    (tmp_path / proto.RESPONSE).write_text(json.dumps(doc))
    found = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert isinstance(found, proto.Unreadable) and found.problem is proto.Problem.WRONG_SHAPE
    assert field in found.detail


def test_the_reader_never_follows_a_symlink_or_waits_on_a_fifo(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    proto.write_json(target, a_receipt().to_json())
    (tmp_path / proto.RESPONSE).symlink_to(target)
    assert proto.read(tmp_path / proto.RESPONSE, proto.Receipt) == proto.Unreadable(proto.Problem.SYMLINK)
    fifo = tmp_path / proto.STATUS
    os.mkfifo(fifo)  # nobody writes it: a blocking open would hang this test for ever
    assert proto.read(fifo, proto.SupervisorStatus) == proto.Unreadable(proto.Problem.NOT_REGULAR)
    assert proto.read(tmp_path / proto.COMMAND, proto.Command) == proto.Unreadable(proto.Problem.MISSING)


def test_the_writer_keeps_to_the_readers_bound(tmp_path: Path) -> None:
    huge = proto.Receipt(
        command_id="c1", task_id="t1", kind="start", status=proto.ReceiptStatus.COMPLETED, result="x" * proto.MAX_BYTES
    )
    with pytest.raises(proto.TooLarge):
        proto.write(tmp_path, huge)
    assert not (tmp_path / proto.RESPONSE).exists()  # nothing half-written either
    (tmp_path / proto.RESPONSE).write_bytes(b"{" + b" " * proto.MAX_BYTES + b"}")
    found = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert isinstance(found, proto.Unreadable) and found.problem is proto.Problem.TOO_LARGE


@pytest.mark.parametrize(
    ("raw", "problem"),
    [(b"", proto.Problem.BLANK), (b"\xff\xfe", proto.Problem.INVALID_UTF8), (b"[1]", proto.Problem.INVALID_JSON)],
)
def test_unusable_bytes_are_named(tmp_path: Path, raw: bytes, problem: proto.Problem) -> None:
    (tmp_path / proto.RESPONSE).write_bytes(raw)
    found = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert isinstance(found, proto.Unreadable) and found.problem is problem


def test_a_lone_surrogate_is_written_as_its_escape_and_read_back_as_it_was(tmp_path):
    from corral.engine.runtime import protocol as proto

    path = tmp_path / "doc.json"
    proto.write_json(path, {"text": "cut inside \ud800 a character", "plain": "é"})
    raw = path.read_bytes()
    raw.decode("utf-8")  # valid UTF-8: no reader refuses it
    assert b"\\ud800" in raw and "é".encode() in raw
    assert proto.read_raw(path)["text"] == "cut inside \ud800 a character"
