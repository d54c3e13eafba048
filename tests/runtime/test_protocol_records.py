"""The protocol's records as msgspec makes them: every field survives its file, older versions still read,
a field of the wrong type is refused naming it, and a record cannot be changed in place."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from corral.adapters.sandbox import SandboxSpec
from corral.engine.readonly import Before, Kept
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.ref_guard import RefGuard, RefMove
from tests.runtime.test_protocol import a_command, a_receipt


def every_field_command() -> proto.Command:
    return a_command(
        read_only_before=Before("corral/fix-it", "abc", "t1", "t2"),
        usage_limits="/home/u/.corral/usage-limits.json",
        journal_dir="/state/tasks/t1/journal",
        agent_tools=proto.AgentToolsSpec("http://127.0.0.1:9/mcp", "hash", "/state/grant", 30.0),
        agent_tools_absent=None,
        sandbox=SandboxSpec(
            "bwrap", "bwrap found", "/usr/bin/bwrap", None, ("/state",), "/repo/.git", "/repo/.git/wt", "refs/heads/x"
        ),
        fence=proto.Fence(7, "w-1", "host-a"),
        check=proto.CheckSpec("make test", 300.0, unconfined=True),
    )


def every_field_receipt() -> proto.Receipt:
    return msgspec.structs.replace(
        a_receipt(),
        failure_class="transient_overload",
        failure_code="harness-overloaded",
        failure_reason="529",
        failure_attempts=2,
        stop_reason="budget-exhausted",
        stopped_by="human",
        error=proto.TurnError(proto.ErrorKind.RECEIPT, None, "no receipt", receipt_problem="blank", receipt_size=0),
        output_window="out",
        stderr_window="err",
        reaped=(proto.Reaped(99, "sleep 1000"),),
        kept=Kept("refs/corral/kept/fix-it/3", "c", "b", "a", 1, ("a.py",), 1, True),
        refs=RefGuard(
            moves=(RefMove("refs/heads/main", "a", "b", "hook", "refs/corral/kept/x", True, code="moved"),),
            others=1,
            hook=False,
            objects={"checked": 3},
        ),
        git=proto.GitFacts("def", ("def",), "abc", ("a.py",), ("db/x",), True, None, 10, 1, 1),
    )


@pytest.mark.parametrize(
    "record",
    [
        every_field_command(),
        every_field_receipt(),
        proto.SupervisorStatus(
            "c1",
            42,
            "retrying",
            "unblock",
            43,
            2,
            proto.RetryState(2, "transient_overload", "529", 5000, by="harness"),
            "a",
            "b",
            100,
            101,
            12.5,
            proto.AccountWait("2026-01-01T05:00:00Z", "claude", behind_first=True),
        ),
        proto.Progress("3/7", 42, "2026-01-01T00:00:00Z"),
        proto.StopRequest("system"),
    ],
    ids=lambda r: type(r).__name__,
)
def test_every_field_of_every_protocol_record_survives_the_writer_and_the_reader(tmp_path: Path, record) -> None:
    proto.write(tmp_path, record)
    assert proto.read(tmp_path / record.FILE, type(record)) == record


def test_a_version_2_receipt_with_flat_git_facts_and_native_evidence_is_still_read(tmp_path: Path) -> None:
    """Before version 3 the receipt carried its git facts at its top level and each attempt's exit in ``native``."""
    doc = a_receipt().to_json()
    git = doc.pop("git")
    doc.update(git, protocol_version=2)
    failure = doc["attempts"][0]["failure"]
    failure["native"] = {"exit_code": failure.pop("exit_code"), "errno": None, "signal": None}
    (tmp_path / proto.RESPONSE).write_text(json.dumps(doc))
    assert proto.read(tmp_path / proto.RESPONSE, proto.Receipt) == a_receipt()

    broken = {**a_receipt().to_json(), "protocol_version": 2, "git_error": "git is broken"}
    del broken["git"]
    (tmp_path / proto.RESPONSE).write_text(json.dumps(broken))
    found = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert isinstance(found, proto.Receipt) and found.git == proto.GitFacts(error="git is broken")


def test_a_version_1_receipt_without_its_kind_or_owner_reads_as_work(tmp_path: Path) -> None:
    (tmp_path / proto.RESPONSE).write_text(json.dumps({"status": "completed", "head": "abc"}))
    found = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert found == proto.Receipt(None, None, "work", proto.ReceiptStatus.COMPLETED, git=proto.GitFacts(head="abc"))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"watchdog": {"timeout_seconds": 60, "relaunches": "3", "term_grace_seconds": 5}}, "watchdog.relaunches"),
        ({"sequence": 3.5}, "sequence"),
        ({"sync_before_work": "yes"}, "sync_before_work"),
        ({"delivered": ["u0", 1]}, "delivered[1]"),
        ({"fence": {"epoch": "7", "worker_id": "w", "host": "h"}}, "fence.epoch"),
        ({"sandbox": {"mode": "bwrap", "reason": 3}}, "sandbox.reason"),
        ({"posture": {"permission_mode": "x", "allowed_tools": "Bash"}}, "posture.allowed_tools"),
    ],
)
def test_a_command_field_of_the_wrong_type_is_refused_naming_it(tmp_path: Path, change: dict, field: str) -> None:
    doc = {**a_command().to_json(), **change, "protocol_version": proto.PROTOCOL_VERSION}
    (tmp_path / proto.COMMAND).write_text(json.dumps(doc))
    found = proto.read(tmp_path / proto.COMMAND, proto.Command)
    assert isinstance(found, proto.Unreadable) and found.problem is proto.Problem.WRONG_SHAPE
    assert field in found.detail, found.detail


def test_a_missing_field_is_refused_naming_it(tmp_path: Path) -> None:
    doc = {**proto.Progress("m", 1, "t").to_json(), "protocol_version": proto.PROTOCOL_VERSION}
    del doc["pid"]
    (tmp_path / proto.PROGRESS).write_text(json.dumps(doc))
    found = proto.read(tmp_path / proto.PROGRESS, proto.Progress)
    assert isinstance(found, proto.Unreadable) and found.problem is proto.Problem.WRONG_SHAPE
    assert "pid" in found.detail


def test_a_command_from_a_newer_corral_is_refused_as_too_new(tmp_path: Path) -> None:
    doc = {**a_command().to_json(), "protocol_version": proto.PROTOCOL_VERSION + 1, "a_new_field": 1}
    (tmp_path / proto.COMMAND).write_text(json.dumps(doc))
    found = proto.read(tmp_path / proto.COMMAND, proto.Command)
    assert isinstance(found, proto.Unreadable) and found.problem is proto.Problem.TOO_NEW


def test_an_oversized_status_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / proto.STATUS).write_bytes(b'{"command_id": "' + b"x" * proto.MAX_BYTES + b'", "pid": 1}')
    found = proto.read(tmp_path / proto.STATUS, proto.SupervisorStatus)
    assert isinstance(found, proto.Unreadable) and found.problem is proto.Problem.TOO_LARGE


def test_a_receipt_names_at_most_the_first_reaped_processes() -> None:
    many = tuple(proto.Reaped(pid, "sleep") for pid in range(proto.REAPED_KEPT + 20))
    receipt = msgspec.structs.replace(a_receipt(), reaped=many)
    assert receipt.reaped == many[: proto.REAPED_KEPT]
    assert len(receipt.to_json()["reaped"]) == proto.REAPED_KEPT


def test_a_record_cannot_be_changed_in_place() -> None:
    command = a_command()
    with pytest.raises(AttributeError):
        command.sequence = 4  # type: ignore[misc]
    assert msgspec.structs.replace(command, sequence=4).sequence == 4 and command.sequence == 3


def test_the_face_names_every_record_and_loads_the_command_and_receipt_modules_only_when_asked() -> None:
    script = (
        "import sys\n"
        "from corral.engine.runtime import protocol as proto\n"
        "heavy = ('corral.engine.runtime.turn_command', 'corral.engine.runtime.turn_outcome',"
        " 'corral.adapters.sandbox')\n"
        "assert not any(m in sys.modules for m in heavy), [m for m in heavy if m in sys.modules]\n"
        "for name in proto.__all__: getattr(proto, name)\n"
        "from corral.engine.runtime.protocol import Receipt\n"
        "assert Receipt is proto.Receipt and all(m in sys.modules for m in heavy)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
