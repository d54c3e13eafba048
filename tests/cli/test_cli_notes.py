"""`corral comment` and `corral journal`: a person's notes, never sent to the agent."""

from __future__ import annotations

from corral.domain.records import SCHEMA_VERSION
from tests.cli.helpers import RFC3339_Z, create, json_error


def test_comment_with_m_and_from_stdin(corral) -> None:
    create(corral, "Noted", "--ref", "noted")
    first = corral.json("comment", "noted", "-m", "Checked on staging: still times out at 30 s")["comment"]
    assert first["actor"] == "human"
    assert first["body"] == "Checked on staging: still times out at 30 s"
    assert RFC3339_Z.match(first["at"])
    corral.ok("comment", "noted", input="From a pipe\nover two lines")
    comments = corral.json("show", "noted")["comments"]
    assert [c["body"] for c in comments] == [
        "Checked on staging: still times out at 30 s",
        "From a pipe\nover two lines",
    ]
    text = corral.ok("show", "noted").stdout
    assert "comment by human: Checked on staging" in text
    # a comment is not a turn: nothing is queued for the agent
    assert corral.json("show", "noted")["turns"] == []


def test_an_empty_comment_is_a_usage_error(corral) -> None:
    create(corral, "Quiet", "--ref", "quiet")
    json_error(corral("comment", "quiet", "--json", input=""), 2)
    json_error(corral("comment", "quiet", "-m", "  \n ", "--json"), 2)
    assert corral.json("show", "quiet")["comments"] == []


def test_comment_on_an_unknown_task(corral) -> None:
    json_error(corral("comment", "ghost", "-m", "hello", "--json"), 4, "task-not-found")


def test_journal_appends_and_reads_back_in_order(corral) -> None:
    create(corral, "Decided", "--ref", "decided")
    assert corral.json("journal", "decided") == {"schema_version": SCHEMA_VERSION, "task": "decided", "journal": []}
    assert "journal of decided is empty" in corral.ok("journal", "decided").stdout
    entries = [
        "Chose exponential backoff over a fixed delay.",
        "Deferred: retry jitter, tracked in #41",
        "Kept the 60 s cap.",
    ]
    added = [corral.json("journal", "decided", "-m", body)["entry"] for body in entries]
    assert all(e["actor"] == "human" for e in added)
    read = corral.json("journal", "decided")["journal"]
    assert [e["body"] for e in read] == entries
    assert read == added  # append-only: what was written is read back unchanged
    corral.ok("journal", "decided", "-m", "One more.")
    again = corral.json("journal", "decided")["journal"]
    assert again[:3] == added and again[3]["body"] == "One more."
    text = corral.ok("journal", "decided").stdout.splitlines()
    assert [line.split("human: ", 1)[1] for line in text] == [*entries, "One more."]
    assert [e["body"] for e in corral.json("show", "decided")["journal"]] == [*entries, "One more."]


def test_an_empty_journal_entry_is_a_usage_error(corral) -> None:
    create(corral, "Blank", "--ref", "blank")
    json_error(corral("journal", "blank", "-m", "", "--json"), 2)
    assert corral.json("journal", "blank")["journal"] == []


def test_notes_on_a_finished_task_are_still_taken(corral) -> None:
    create(corral, "Over", "--ref", "over")
    corral.ok("close", "over", "-m", "done with it")
    corral.ok("comment", "over", "-m", "for the record")
    corral.ok("journal", "over", "-m", "why we stopped")
    doc = corral.json("show", "over")
    assert [c["body"] for c in doc["comments"]] == ["for the record"]
    assert [j["body"] for j in doc["journal"]] == ["why we stopped"]
