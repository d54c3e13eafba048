"""Protected paths are matched on the exact names git stores, whatever characters they hold.

git quotes a path it prints without ``-z`` when the name holds a byte outside printable
ASCII, a tab, a double quote, a backslash or a line feed (``".github/workflows/d\\303\\251ploy.yml"``),
so a quoted name never matched ``.github/workflows/*`` and a workflow reached ``main`` with no
decision asked. Here the scripted agent commits such names under a protected pattern, end to
end through the CLI: the task parks in ``conflict`` naming every file (escaped where it is
shown), ``accept`` refuses until each is decided, and a decision names the file as it is.

The harnesses' own configuration and CI's workflows are protected with no setting given,
since a person's later run of that harness in the worktree, or CI, executes what they say.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.domain.violations import shown_path
from tests.cli.helpers import no_traceback
from tests.conftest import git

WORKFLOWS = ".github/workflows/"
#: One name for each thing git quotes, and a terminal escape.
ODD = [
    WORKFLOWS + "déploy.yml",
    WORKFLOWS + "tab\there.yml",
    WORKFLOWS + 'say"hi".yml',
    WORKFLOWS + "back\\slash.yml",
    WORKFLOWS + "esc\x1b[2Jape.yml",
    WORKFLOWS + "new\nline.yml",
]


def commits(*paths: str, result: str = "Added the workflows.") -> list[dict[str, Any]]:
    writes = [{"write": {"path": p, "content": f"# {json.dumps(p)}\non: push\n"}} for p in paths]
    return [{"init": True}, *writes, {"commit": "add files"}, {"result": result}]


def tree_names(repo: Path, rev: str) -> set[str]:
    out = git(repo, "ls-tree", "-r", "-z", "--name-only", rev)
    return {p for p in out.split("\0") if p}


def test_names_git_quotes_park_in_conflict_and_accept_waits_for_each_decision(corral, agent, repo) -> None:
    agent.script(commits(*ODD))
    corral.ok("create", "Add CI", "--ref", "ci", "--protect", ".github/workflows/*")
    main = git(repo, "rev-parse", "main")
    no_traceback(corral("start", "ci", "--wait"))
    doc = corral.json("show", "ci")
    assert doc["task"]["status"] == "conflict"
    assert sorted(v["path"] for v in doc["violations"]) == sorted(ODD)  # the exact names
    assert {v["decision"] for v in doc["violations"]} == {"pending"}

    shown = corral.ok("show", "ci").stdout
    assert "\x1b" not in shown
    for path in ODD:
        assert f"pending   {shown_path(path)}\n" in shown, (path, shown)
    assert '".github/workflows/tab\\there.yml"' in shown and '".github/workflows/new\\nline.yml"' in shown
    assert '".github/workflows/esc\\x1b[2Jape.yml"' in shown and f"pending   {WORKFLOWS}déploy.yml\n" in shown

    refused = corral("accept", "ci")
    no_traceback(refused)
    assert refused.returncode == 3 and "\x1b" not in refused.stderr
    assert "déploy.yml" in refused.stderr and "esc\\x1b[2Jape.yml" in refused.stderr
    assert git(repo, "rev-parse", "main") == main

    # A decision names a file exactly as git stores it; the rest stays pending, and accept waits.
    agent.script([{"init": True}, {"result": "Nothing more."}])
    partial = corral("unblock", "ci", "-m", "checked one", "--approve-file", ODD[0])
    assert partial.returncode != 0 and corral.json("show", "ci")["task"]["status"] == "conflict"
    assert corral("accept", "ci").returncode == 3 and git(repo, "rev-parse", "main") == main

    approved, reverted = ODD[:3], ODD[3:]
    decided = [
        *(a for p in approved for a in ("--approve-file", p)),
        *(a for p in reverted for a in ("--revert-file", p)),
    ]
    corral.ok("unblock", "ci", "-m", "keep three, undo three", *decided, "--wait")
    doc = corral.json("show", "ci")
    assert doc["task"]["status"] == "blocked"
    decisions = {v["path"]: v["decision"] for v in doc["violations"]}
    assert decisions == {**dict.fromkeys(approved, "approved"), **dict.fromkeys(reverted, "reverted")}
    corral.ok("accept", "ci")
    landed = tree_names(repo, "main")
    assert set(approved) <= landed and not set(reverted) & landed


@pytest.mark.parametrize("shown_as", ["quoted", "intake"])
def test_a_file_can_be_decided_by_the_name_it_is_shown_with(corral, agent, repo, shown_as: str) -> None:
    """The escaped form a person reads (``show``), or the one corral's intake makes of the exact
    name (an ESC as ``\\u001b``), names the same file when no other file is named so."""
    name = WORKFLOWS + "esc\x1bape.yml"
    agent.script(commits(name))
    corral.ok("create", "Add CI", "--ref", "ci", "--protect", ".github/workflows/*")
    no_traceback(corral("start", "ci", "--wait"))
    typed = shown_path(name) if shown_as == "quoted" else name
    agent.script([{"init": True}, {"result": "Nothing more."}])
    corral.ok("unblock", "ci", "-m", "undo it", "--revert-file", typed, "--wait")
    assert [(v["path"], v["decision"]) for v in corral.json("show", "ci")["violations"]] == [(name, "reverted")]
    assert name not in tree_names(repo, "corral/ci")


HARNESS_FILES = [
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".mcp.json",
    ".codex/config.toml",
    ".pi/settings.json",
    ".pi/agent/extensions/run.ts",
    ".github/workflows/ci.yml",
    ".github/workflows/nested/deep.yml",
]


def test_harness_configuration_and_workflows_are_protected_with_no_setting(corral, agent, repo) -> None:
    agent.script(commits(*HARNESS_FILES, "src/app.py", ".claude/notes.md", ".github/CODEOWNERS"))
    corral.ok("create", "Set up the tools", "--ref", "tools")
    no_traceback(corral("start", "tools", "--wait"))
    doc = corral.json("show", "tools")
    assert doc["task"]["status"] == "conflict"
    assert sorted(v["path"] for v in doc["violations"]) == sorted(HARNESS_FILES)  # only these
    shown = corral.json("config", "show")
    assert shown  # the defaults are listed where every setting is
    listed = corral.ok("config", "show").stdout
    assert ".github/workflows/**" in listed and "protected_defaults" in listed


def test_a_person_removes_a_default_in_their_own_file_and_a_repository_cannot(corral, agent, repo, monkeypatch) -> None:
    (repo / "corral.toml").write_text('protected_defaults = []\nprotected = ["secrets/*"]\n')
    git(repo, "add", "corral.toml")
    git(repo, "commit", "-qm", "settings")
    agent.script(commits(".mcp.json", "secrets/key.txt"), commits(".mcp.json", ".codex/config.toml"))
    corral.ok("create", "One", "--ref", "one")
    no_traceback(corral("start", "one", "--wait"))
    # The repository's corral.toml may add patterns, never take a default away.
    assert sorted(v["path"] for v in corral.json("show", "one")["violations"]) == [".mcp.json", "secrets/key.txt"]

    corral.ok("config", "set", "protected_defaults", '[".codex/**"]')  # the person's own file
    corral.ok("create", "Two", "--ref", "two")
    no_traceback(corral("start", "two", "--wait"))
    assert [v["path"] for v in corral.json("show", "two")["violations"]] == [".codex/config.toml"]


def test_a_name_that_is_not_utf8_is_recorded_escaped_and_asked_about(corral, agent, repo) -> None:
    """No text column holds a byte that is not UTF-8: the turn is recorded with it as ``\\xff``, a
    protected one parks the task in conflict, and an unprotected one is only listed."""
    protected, plain = WORKFLOWS + "bad\udcffname.yml", "src/odd\udcfe.py"  # the bytes 0xff and 0xfe
    agent.script(commits(protected, plain))
    corral.ok("create", "Add CI", "--ref", "ci")
    no_traceback(corral("start", "ci", "--wait"))
    doc = corral.json("show", "ci")
    assert doc["task"]["status"] == "conflict"
    assert [(v["path"], v["decision"]) for v in doc["violations"]] == [(WORKFLOWS + "bad\\xffname.yml", "pending")]
    assert corral("accept", "ci").returncode == 3


def test_a_local_change_to_an_oddly_named_file_the_merge_changes_is_kept_in_the_stash(proj, agent, repo) -> None:
    """accept stashes the person's overlapping change and, when it cannot go back, restores the merged
    file and names it: the stash's paths are read with ``-z``, so an odd name is among them."""
    from corral.domain.actors import Actor
    from corral.engine.operations import accept as accepting
    from corral.engine.operations import control, tasks, turns

    name = "docs/tab\there \x1b.md"
    (repo / "docs").mkdir()
    (repo / name).write_text("base\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "an oddly named file")
    agent.script(commits(name))
    task = tasks.create(proj, "Edit the doc", actor=Actor.HUMAN, ref="doc")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    control.wait(proj, task.ref, timeout=30)
    (repo / name).write_text("my local edit\n")  # overlaps with the merge
    result = accepting.accept(proj, "doc", actor=Actor.HUMAN)
    assert result.task.status.value == "complete"
    assert (repo / name).read_text() == f"# {json.dumps(name)}\non: push\n"  # the merged file, no conflict markers
    assert git(repo, "status", "--porcelain", "-z") == ""
    assert git(repo, "show", f"stash@{{0}}:{name}") == "my local edit"
    assert result.warning and shown_path(name) in result.warning and "\x1b" not in result.warning


def test_a_merge_conflict_names_each_path_exactly_as_stored(repo: Path) -> None:
    """accept's merge (merge-tree) reads the conflicted paths with -z: a tab, a quote, a newline stay."""
    from corral.adapters.git import Git

    names = ["f\ttab.txt", 'q"uote.txt', "new\nline.txt", "déploy.yml"]
    for name in names:
        (repo / name).write_text("base\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "theirs")
    for name in names:
        (repo / name).write_text("theirs\n")
    git(repo, "commit", "-q", "-am", "theirs")
    git(repo, "checkout", "-q", "main")
    for name in names:
        (repo / name).write_text("ours\n")
    git(repo, "commit", "-q", "-am", "ours")
    tree, conflicts = Git().merge_tree("main", "theirs", cwd=repo)
    assert tree is None and sorted(conflicts) == sorted(names)
