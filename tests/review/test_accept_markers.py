"""accept never lands conflict markers: a squash that adds a ``<<<<<<<`` … ``=======`` … ``>>>>>>>`` region
is refused, naming the files and lines and how to finish, unless a person passes ``--allow-markers``.

The first test walks the path that once put markers on ``main``: an accept conflicts, the task is
handed back, its agent commits the conflicted file as git left it, and accept is asked again.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli_turns import calls, fake_env
from tests.conftest import git

COMMITS_AS_LEFT = [{"init": True}, {"commit": "merge main"}, {"result": "Merged main."}]


def _writes(path: str, content: str) -> list[dict]:
    return [{"init": True}, {"write": {"path": path, "content": content}}, {"commit": "work"}, {"result": "Done."}]


def _status(corral, ref: str, env: dict[str, str]) -> str:
    return str(corral.json("show", ref, env=env)["task"]["status"])


def test_an_accept_conflict_handed_back_and_committed_with_markers_never_lands(corral, repo: Path, tmp_path: Path):
    env = fake_env(tmp_path, _writes("README.md", "the agent's line\n"), COMMITS_AS_LEFT)
    corral.ok("create", "Change the readme", "--ref", "clash", env=env)
    corral.ok("start", "clash", "--wait", env=env)
    (repo / "README.md").write_text("main's line\n")
    git(repo, "commit", "-qam", "main edit")
    wt = Path(corral.json("show", "clash", env=env)["task"]["worktree"])

    conflict = corral("accept", "clash", env=env)
    assert conflict.returncode == 1 and "README.md" in conflict.stderr
    hint = conflict.stderr.split("hint:", 1)[1]
    # Both ways to finish, each a command that works as typed: by hand in the worktree, or the agent's turn.
    assert f"git -C {wt} merge main" in hint and "corral accept clash" in hint
    assert "corral unblock clash -m" in hint

    corral.ok("unblock", "clash", "-m", "merge main and resolve the conflict", "--wait", env=env)
    prompt = calls(tmp_path)[-1]["prompt"]
    assert "README.md" in prompt and "conflict markers" in prompt and "<<<<<<<" in prompt
    assert "<<<<<<<" in (wt / "README.md").read_text()  # the agent committed the file as git left it

    main_before = git(repo, "rev-parse", "main")
    refused = corral("accept", "clash", env=env)
    assert refused.returncode == 3, refused.stderr
    error, hint = refused.stderr.split("hint:", 1)
    assert "conflict markers" in error and "README.md:1-5" in error and "Nothing was merged" in error
    assert f"git -C {wt}" in hint and "corral accept clash" in hint  # by hand, and what accept then does
    assert "corral unblock clash -m" in hint and "--allow-markers" in hint
    assert git(repo, "rev-parse", "main") == main_before and (repo / "README.md").read_text() == "main's line\n"
    assert _status(corral, "clash", env) == "blocked"  # put back as the accept found it

    streamed = corral("accept", "clash", "--json", env=env)
    assert streamed.returncode == 3
    last = json.loads(streamed.stdout.splitlines()[-1])
    assert last["event"] == "error" and last["error"]["code"] == "conflict-markers"
    assert "README.md:1-5" in last["error"]["message"] and "--allow-markers" in last["error"]["hint"]
    merge_failed = [json.loads(line) for line in streamed.stdout.splitlines()]
    assert any(e.get("id") == "merge" and e.get("state") == "failed" for e in merge_failed)
    assert not any(e.get("id") == "verify" and e.get("state") == "done" for e in merge_failed)

    # Resolved by hand as the hint says: accept then merges the fixed tip.
    (wt / "README.md").write_text("the agent's line\nmain's line\n")
    git(wt, "commit", "-qam", "resolve the conflict by hand")
    corral.ok("accept", "clash", env=env)
    assert (repo / "README.md").read_text() == "the agent's line\nmain's line\n"
    assert "<<<<<<<" not in git(repo, "show", "main:README.md")


def test_a_markdown_heading_underline_is_not_a_marker(corral, repo: Path, tmp_path: Path):
    doc = "Title\n=======\n\n>>>>>>> quoted three levels deep, no opening marker\n\nBody.\n"
    env = fake_env(tmp_path, _writes("guide.md", doc))
    corral.ok("create", "Write the guide", "--ref", "guide", env=env)
    corral.ok("start", "guide", "--wait", env=env)
    corral.ok("accept", "guide", env=env)
    assert git(repo, "show", "main:guide.md") == doc.rstrip("\n")


def test_allow_markers_lands_markers_a_person_means(corral, repo: Path, tmp_path: Path):
    meant = "How a conflict reads:\n<<<<<<< ours\nmine\n=======\ntheirs\n>>>>>>> theirs\n"
    env = fake_env(tmp_path, _writes("docs/conflicts.txt", meant))
    corral.ok("create", "Explain conflicts", "--ref", "explain", env=env)
    corral.ok("start", "explain", "--wait", env=env)
    refused = corral("accept", "explain", env=env)
    assert refused.returncode == 3 and "docs/conflicts.txt:2-6" in refused.stderr
    assert _status(corral, "explain", env) == "blocked"
    corral.ok("accept", "explain", "--allow-markers", env=env)
    assert git(repo, "show", "main:docs/conflicts.txt") == meant.rstrip("\n")
    assert _status(corral, "explain", env) == "complete"
