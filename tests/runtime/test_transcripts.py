"""A harness session's transcript carried between worker hosts through the store (runtime/transcripts).

Two hosts are two homes and two worktrees on one machine; the store is the project's (SQLite: the
shipped rows are the same on PostgreSQL, whose conformance suite covers them). The harness adapters
are the real ones; the transcripts are files laid out as each harness lays them (the real binaries
are tests/seams/test_carry_sessions.py and tests/workers/test_carried_sessions.py).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.claude import ClaudeHarness, project_key
from corral.adapters.harness.codex import CodexHarness
from corral.adapters.harness.command import CommandHarness
from corral.adapters.harness.pi import PiHarness, session_key
from corral.adapters.harness.sessions import SessionFiles, install
from corral.cli.render import carry_text
from corral.domain.actors import Actor
from corral.domain.team import HARNESS_CARRY, SessionCarry
from corral.engine.operations import tasks
from corral.engine.shared_store import transcripts
from corral.errors import LeaseLost

SID = "df5c4b74-919f-4bc3-a1b7-b8182c69970b"


class Hosts:
    """Host A made the session; host B takes it over. Each has its HOME and its worktree of the task."""

    def __init__(self, root: Path) -> None:
        self.a_env = {"HOME": str(root / "a" / "home")}
        self.b_env = {"HOME": str(root / "b" / "home")}
        self.a_wt = root / "a" / "worktrees" / "t"
        self.b_wt = root / "b" / "srv" / "clone" / "worktrees" / "t"
        for path in (self.a_wt, self.b_wt):
            path.mkdir(parents=True)

    def claude_a(self) -> Path:
        """Host A's Claude Code project directory of the worktree."""
        return Path(self.a_env["HOME"]) / ".claude" / "projects" / project_key(self.a_wt)

    def claude_b(self) -> Path:
        return Path(self.b_env["HOME"]) / ".claude" / "projects" / project_key(self.b_wt)


@pytest.fixture
def hosts(tmp_path: Path) -> Hosts:
    return Hosts(tmp_path / "hosts")


@pytest.fixture
def claimed(project: Any) -> tuple[str, int]:
    """A task whose turn host A claimed: its id and the epoch."""
    task = tasks.create(project, "Carry the session", actor=Actor.HUMAN)
    with project.store.write() as tx:
        tx.queue_turn(task.id, "cmd-1", {})
        lease = tx.claim_turn(task.id, "cmd-1", "w-a", "build-1")
    assert lease is not None
    return task.id, lease.epoch


def _claude_session(place: Path, lines: list[dict[str, Any]], *, kept: bytes | None = None) -> Path:
    place.mkdir(parents=True, exist_ok=True)
    transcript = place / f"{SID}.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    if kept is not None:
        (place / SID / "tool-results").mkdir(parents=True)
        (place / SID / "tool-results" / "b1.txt").write_bytes(kept)
    return transcript


def _rows(project: Any, task_id: str) -> dict[str, int]:
    with project.store.read() as tx:
        return {p: s for p, s in tx.shipped_sizes(task_id).items() if p.startswith(transcripts.PREFIX)}


def test_a_transcript_shipped_by_one_host_is_resumable_where_the_other_keys_its_worktree(
    project: Any, hosts: Hosts, claimed: tuple[str, int]
) -> None:
    task_id, epoch = claimed
    harness = ClaudeHarness()
    first = [{"type": "user", "cwd": str(hosts.a_wt), "message": {"content": "the secret word is PAPAYA"}}]
    made = _claude_session(hosts.claude_a(), first, kept=b"a long tool output\n" * 100)
    sent = transcripts.ship(project, task_id, epoch, harness, SID, hosts.a_wt, "build-1", hosts.a_env)
    assert sent == made.stat().st_size + 1900

    carry = transcripts.carry(project, task_id, harness, SID, hosts.b_wt, "build-1", "build-2", hosts.b_env)
    assert carry == SessionCarry("build-1", "build-2", True)
    landed = hosts.claude_b() / f"{SID}.jsonl"
    assert landed.read_bytes() == made.read_bytes()  # Claude Code resumes it as it is (docs/harnesses.md)
    assert (hosts.claude_b() / SID / "tool-results" / "b1.txt").read_bytes() == b"a long tool output\n" * 100
    for path in (landed, hosts.claude_b() / SID / "tool-results" / "b1.txt"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    # The host that runs the session ships what the store lacks of it: what it appended, no more.
    with made.open("a") as fh:
        fh.write(json.dumps({"type": "assistant", "message": {"content": "noted"}}) + "\n")
    grown = len(json.dumps({"type": "assistant", "message": {"content": "noted"}})) + 1
    assert transcripts.ship(project, task_id, epoch, harness, SID, hosts.a_wt, "build-1", hosts.a_env) == grown
    assert transcripts.ship(project, task_id, epoch, harness, SID, hosts.a_wt, "build-1", hosts.a_env) == 0
    # Another host's copy replaces the store's whole, from its first byte.
    whole = landed.stat().st_size + 1900
    assert transcripts.ship(project, task_id, epoch, harness, SID, hosts.b_wt, "build-2", hosts.b_env) == whole
    assert _rows(project, task_id)[f"transcripts/{SID}/files/{SID}.jsonl"] == landed.stat().st_size


def test_a_worker_ships_its_turn_s_session_until_another_worker_claims_the_task(
    project: Any, hosts: Hosts, claimed: tuple[str, int]
) -> None:
    task_id, epoch = claimed
    transcript = _claude_session(hosts.claude_a(), [{"type": "user"}])

    def ship() -> int:
        return transcripts.ship(project, task_id, epoch, ClaudeHarness(), SID, hosts.a_wt, "build-1", hosts.a_env)

    with project.store.write() as tx:
        tx.release_turn(task_id, epoch)
    assert ship() > 0  # released by its own worker: the turn's last round still goes
    with project.store.write() as tx:
        tx.queue_turn(task_id, "cmd-2", {})  # a quick unblock: the next turn only waits for a worker
    with transcript.open("a") as fh:
        fh.write("{}\n")
    assert ship() == 3
    with project.store.write() as tx:
        assert tx.claim_turn(task_id, "cmd-2", "w-b", "build-2") is not None
    with transcript.open("a") as fh:
        fh.write("{}\n")
    before = _rows(project, task_id)
    with pytest.raises(LeaseLost):
        ship()  # another worker holds the session now: this one writes nothing more
    assert _rows(project, task_id) == before

    with project.store.write() as tx:
        lease = tx.lease(task_id)
        assert lease is not None and tx.fence_off(task_id, lease.epoch)  # build-2 lost, fenced off
        tx.queue_turn(task_id, "cmd-3", {})
    _claude_session(hosts.claude_b(), [{"type": "user"}, {"type": "assistant"}])
    with pytest.raises(LeaseLost):
        transcripts.ship(project, task_id, epoch + 2, ClaudeHarness(), SID, hosts.b_wt, "build-2", hosts.b_env)


def test_no_copy_in_the_store_or_one_over_the_bound_starts_a_fresh_session_and_says_why(
    project: Any, hosts: Hosts, claimed: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id, epoch = claimed
    harness = ClaudeHarness()
    missing = transcripts.carry(project, task_id, harness, SID, hosts.b_wt, "build-1", "build-2", hosts.b_env)
    assert missing == SessionCarry("build-1", "build-2", False, "no copy of it reached the store")

    _claude_session(hosts.claude_a(), [{"type": "user", "message": {"content": "x" * 5000}}])
    monkeypatch.setattr(transcripts, "CAP", 4096)
    transcripts.ship(project, task_id, epoch, harness, SID, hosts.a_wt, "build-1", hosts.a_env)
    assert list(_rows(project, task_id)) == [f"transcripts/{SID}/manifest.json"]  # none of it travelled
    over = transcripts.carry(project, task_id, harness, SID, hosts.b_wt, "build-1", "build-2", hosts.b_env)
    assert not over.carried and over.why is not None and over.why.startswith("it is over the bound of what travels")
    assert not hosts.claude_b().exists()
    assert carry_text(over.to_json()) == (
        f"fresh on build-2: the session made on build-1 could not be carried ({over.why})"
    )

    unrecorded = transcripts.carry(project, task_id, harness, SID, hosts.b_wt, None, "build-2", hosts.b_env)
    assert unrecorded.why == "the host that made it is not recorded"
    command = transcripts.carry(project, task_id, CommandHarness("x"), SID, hosts.b_wt, "build-1", "b", hosts.b_env)
    assert command.why == "the command harness keeps no session corral can carry"


def test_a_copy_not_whole_is_not_carried(project: Any, hosts: Hosts, claimed: tuple[str, int]) -> None:
    task_id, epoch = claimed
    harness = ClaudeHarness()
    _claude_session(hosts.claude_a(), [{"type": "user"}])
    transcripts.ship(project, task_id, epoch, harness, SID, hosts.a_wt, "build-1", hosts.a_env)
    manifest = f"transcripts/{SID}/manifest.json"
    with project.store.read() as tx:
        doc = json.loads(b"".join(d for _o, d in tx.shipped(task_id, manifest)))
    doc["files"][f"{SID}.jsonl"] += 10  # the manifest of a later round whose chunks never landed
    with project.store.write() as tx:
        tx.ship(task_id, manifest, 0, json.dumps(doc).encode())
    carry = transcripts.carry(project, task_id, harness, SID, hosts.b_wt, "build-1", "build-2", hosts.b_env)
    assert carry.why == "the copy in the store is incomplete"
    assert not hosts.claude_b().exists()


@pytest.mark.parametrize(
    "name",
    [
        f"../../../../escaped-{SID}.jsonl",
        f"{SID}/../../../escaped.jsonl",
        f"/tmp/escaped-{SID}.jsonl",
        "settings.json",
    ],
)
def test_a_hostile_stored_name_is_never_written_outside_the_session_directory(
    project: Any, hosts: Hosts, claimed: tuple[str, int], tmp_path: Path, name: str
) -> None:
    task_id, _epoch = claimed
    path = f"transcripts/{SID}/files/{name}"
    doc = {"harness": "claude", "session": SID, "host": "build-1", "files": {f"{SID}.jsonl": 4, name: 4}}
    with project.store.write() as tx:
        tx.ship(task_id, f"transcripts/{SID}/files/{SID}.jsonl", 0, b"{}\n\n")
        tx.ship(task_id, path, 0, b"evil")
        tx.ship(task_id, f"transcripts/{SID}/manifest.json", 0, json.dumps(doc).encode())
    before = {p for p in tmp_path.rglob("*")}
    carry = transcripts.carry(project, task_id, ClaudeHarness(), SID, hosts.b_wt, "build-1", "build-2", hosts.b_env)
    assert not carry.carried and carry.why is not None and "not one of the session's files" in carry.why
    assert {p for p in tmp_path.rglob("*")} == before  # nothing written anywhere, the session's own file neither
    assert not Path(f"/tmp/escaped-{SID}.jsonl").exists()


def test_install_writes_below_the_session_directory_only_never_through_a_link(tmp_path: Path) -> None:
    root = tmp_path / "projects"
    place = root / "-wt"
    files = SessionFiles(root, place)
    for bad in ("../x", "a/../../x", "/abs", "", "a//b", "a\\b"):
        with pytest.raises(ValueError):
            install(files, {bad: b"no"})
    with pytest.raises(ValueError):
        install(SessionFiles(root, tmp_path / "elsewhere"), {"x": b"no"})
    outside = tmp_path / "outside"
    outside.mkdir()
    place.mkdir(parents=True)
    (place / SID).symlink_to(outside)  # a link where the session's directory goes
    with pytest.raises(OSError):
        install(files, {f"{SID}/tool-results/b.txt": b"no"})
    assert list(outside.iterdir()) == []
    (place / f"{SID}.jsonl").symlink_to(outside / "target")  # a link at the file's name is replaced, not followed
    install(files, {f"{SID}.jsonl": b"yes\n"})
    assert not (outside / "target").exists()
    assert not (place / f"{SID}.jsonl").is_symlink() and (place / f"{SID}.jsonl").read_bytes() == b"yes\n"
    assert stat.S_IMODE((place / f"{SID}.jsonl").stat().st_mode) == 0o600
    install(SessionFiles(root, root / "-other"), {f"{SID}/subagents/a.jsonl": b"{}\n"})
    for made in (root / "-other", root / "-other" / SID, root / "-other" / SID / "subagents"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_pi_resumes_a_carried_session_in_this_worktree_and_codex_keeps_its_rollout_name(
    hosts: Hosts, tmp_path: Path
) -> None:
    pi = PiHarness()
    sid = "01a245b7-a33e-778f-8edc-fdb39c7b0b2b"
    name = f"2026-12-05T10-19-52-510Z_{sid}.jsonl"
    header = {"type": "session", "version": 3, "id": sid, "timestamp": "t", "cwd": str(hosts.a_wt)}
    data = (json.dumps(header) + "\n" + json.dumps({"type": "message", "cwd": "kept"}) + "\n").encode()
    rewritten = pi.carried(name, data, hosts.b_wt, sid)
    assert rewritten is not None
    first, rest = rewritten.split(b"\n", 1)
    assert json.loads(first) == {**header, "cwd": os.path.realpath(hosts.b_wt)}
    assert rest == data.split(b"\n", 1)[1]  # only the header: Pi runs in the directory it names
    assert (
        pi.carried(name, data.replace(sid.encode(), b"01a245b7-0000-7000-8000-000000000000", 1), hosts.b_wt, sid)
        is None
    )
    assert pi.carried(f"../{name}", data, hosts.b_wt, sid) is None
    files = pi.session_files(hosts.b_env, hosts.b_wt, sid)
    assert files is not None and files.place == Path(hosts.b_env["HOME"]) / ".pi/agent/sessions" / session_key(
        hosts.b_wt
    )
    assert session_key(Path("/srv/clone/wt")) == "--srv-clone-wt--"

    codex = CodexHarness()
    thread = "01a245b7-0f38-7c93-83f1-a15ee011cf1e"
    rollout = f"2026/12/05/rollout-2026-12-05T10-19-14-{thread}.jsonl"
    assert codex.carried(rollout, b"x", hosts.b_wt, thread) == b"x"  # as it is: Codex runs where it is started
    assert codex.carried(f"rollout-2026-12-05T10-19-14-{thread}.jsonl", b"x", hosts.b_wt, thread) == b"x"
    for bad in (f"../{rollout}", f"2026/12/05/rollout-x-{thread}.jsonl", rollout.replace(thread, "other")):
        assert codex.carried(bad, b"x", hosts.b_wt, thread) is None
    home = tmp_path / "codex-home"
    (home / "sessions" / "2026" / "12" / "05").mkdir(parents=True)
    (home / "sessions" / rollout).write_text("{}\n")
    found = codex.session_files({"CODEX_HOME": str(home)}, hosts.b_wt, thread)
    assert found is not None and found.names == (rollout,)
    assert codex.session_files({"CODEX_HOME": str(home)}, hosts.b_wt, "../x") is None


def test_the_latest_takeover_is_noted_and_the_transcript_goes_with_the_task(
    project: Any, hosts: Hosts, claimed: tuple[str, int]
) -> None:
    task_id, epoch = claimed
    carried = SessionCarry("build-1", "build-2", True)
    noted = transcripts.noted({"other": 1, HARNESS_CARRY: {"stale": True}}, carried)
    assert noted == {"other": 1, HARNESS_CARRY: carried.to_json()}
    assert SessionCarry.of(noted) == carried
    assert transcripts.noted(noted, None) == {"other": 1}  # a turn that took nothing over: the note goes
    assert carry_text(carried.to_json()) == "carried from build-1 to build-2 (its transcript came through the store)"

    _claude_session(hosts.claude_a(), [{"type": "user"}])
    transcripts.ship(project, task_id, epoch, ClaudeHarness(), SID, hosts.a_wt, "build-1", hosts.a_env)
    assert _rows(project, task_id)
    with project.store.write() as tx:
        tx.release_turn(task_id, epoch)
    task = tasks.abandon(project, task_id, reason="done with it", actor=Actor.HUMAN, how="close").task
    tasks.delete(project, task.ref, actor=Actor.HUMAN)
    with project.store.read() as tx:
        assert tx.shipped_sizes(task_id) == {}
