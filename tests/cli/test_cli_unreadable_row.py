"""One unreadable task row never takes a project down: ``list`` and ``list --all`` skip it, the sweeps pass
over it, reading it alone is a coded error, and ``doctor`` names it with the statement that mends it."""

from __future__ import annotations

import json
import sqlite3
import subprocess

from corral.engine.project import Project
from corral.engine.recovery.reconcile import reconcile
from tests.cli.helpers import database


def test_a_task_row_with_invalid_json_is_skipped_by_reads_and_named_by_doctor(corral) -> None:
    for ref in ("first", "broken", "third"):
        corral.ok("create", f"Task {ref}", "--ref", ref)
    db = database(corral)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE tasks SET metadata = '{not json' WHERE ref = 'broken'")
    conn.close()

    listed = corral("list")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["first", "third"]
    assert [t["ref"] for t in corral.json("list", "--all")["tasks"]] == ["first", "third"]
    corral.ok("show", "third")  # every other task reads as before
    alone = corral("show", "broken", "--json")
    assert alone.returncode == 1 and "Traceback" not in alone.stderr
    error = alone.json()["error"]
    assert error["code"] == "task-row-unreadable" and "column metadata is not JSON" in error["message"]
    assert "corral doctor" in error["hint"]

    proj = Project.open(corral.cwd)
    try:
        assert reconcile(proj).problems == []  # every sweep passes over it
    finally:
        proj.close()

    doc = corral("doctor", "--json")
    (check,) = [c for c in doc.json()["checks"] if c["name"] == "task-row"]
    assert check["status"] == "fail" and check["message"].startswith("task-row-unreadable: broken (")
    assert "column metadata is not JSON" in check["message"]
    assert all(c["status"] != "fail" for c in doc.json()["checks"] if c["name"] in ("database", "tasks"))
    # The statement the hint gives, typed as it reads, makes the row readable again.
    typed = check["hint"].split(": ", 1)[1]
    subprocess.run(["sh", "-c", typed], check=True)
    assert [t["ref"] for t in corral.json("list", "--all")["tasks"]] == ["first", "broken", "third"]
    assert not [c for c in json.loads(corral("doctor", "--json").stdout)["checks"] if c["name"] == "task-row"]
