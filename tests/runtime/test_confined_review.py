"""Hostile agents under bubblewrap against the review: what ``diff`` shows is what ``accept`` merges.

Each agent is a shell script on the ``command`` harness (tests/runtime/test_sandbox.py's fixtures).
It commits attributes meant to blind or drive the person's review (``-diff``, ``diff=`` with a
textconv and an external driver the person's repository configures), or moves its branch after the
review; every assertion is about what the person is shown and what lands on ``main``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept, tasks, turns
from corral.errors import TipMoved
from tests.conftest import git
from tests.runtime.conftest import finished
from tests.runtime.test_sandbox import needs_bwrap

pytestmark = [pytest.mark.timeout(120), needs_bwrap]

COMMIT = "git -c user.name=a -c user.email=a@b commit -q"


def run_agent(proj: Any, box_env: Path, script: str, goal: str) -> Any:
    box_env.write_text("#!/bin/sh\n" + script + "exit 0\n")
    task = tasks.create(proj, goal, actor=Actor.HUMAN, harness="command")
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    finished(proj, task.ref)
    return task


def test_attributes_committed_inside_neither_blind_nor_drive_the_review(
    boxed: Any, box_env: Path, repo: Path, tmp_path: Path
) -> None:
    proj = boxed
    textconv, external = tmp_path / "textconv-ran", tmp_path / "external-ran"
    git(repo, "config", "diff.evil.textconv", f"sh -c 'touch {textconv}; echo CONVERTED' --")
    git(repo, "config", "diff.evil.command", f"sh -c 'touch {external}; echo EXTERNAL' --")
    task = run_agent(
        proj,
        box_env,
        "printf '*.py -diff\\n*.txt diff=evil\\n' > .gitattributes\n"
        "printf 'import os; os.system(\"id\")\\n' > app.py\n"
        "printf 'a harmless note\\n' > notes.txt\n"
        f"git add .gitattributes app.py notes.txt && {COMMIT} -m 'add the app'\n",
        "Blind the review",
    )
    shown = tasks.diff(proj, task.ref, actor=Actor.HUMAN)
    assert "Binary files" not in shown.text
    assert '+import os; os.system("id")' in shown.text and "+a harmless note" in shown.text
    assert "CONVERTED" not in shown.text and "EXTERNAL" not in shown.text
    stat = tasks.diff(proj, task.ref, actor=Actor.HUMAN, stat=True).text
    assert "app.py" in stat and "notes.txt" in stat and "Bin" not in stat
    assert not textconv.exists() and not external.exists()
    done = accept.accept(proj, task.ref, actor=Actor.HUMAN)
    assert done.task.status is Status.COMPLETE
    assert git(repo, "show", "main:app.py") == 'import os; os.system("id")'  # what the review showed


def test_a_branch_the_agent_moves_after_the_review_is_named_and_merged_only_when_pinned(
    boxed: Any, box_env: Path, repo: Path
) -> None:
    proj = boxed
    # Every turn commits one more file: the second, run after the review, moves the branch.
    task = run_agent(
        proj,
        box_env,
        "n=$(ls turn-*.txt 2>/dev/null | wc -l)\n"
        'echo "turn $n" > "turn-$n.txt"\n'
        f"git add turn-$n.txt && {COMMIT} -m \"turn $n: $(printf 'a \\033]0;title\\007 b')\"\n",
        "Move after the review",
    )
    reviewed_tip = tasks.diff(proj, task.ref, actor=Actor.HUMAN).tip
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="one more")
    finished(proj, task.ref)
    tip = git(repo, "rev-parse", f"corral/{task.ref}")
    assert tip != reviewed_tip
    main = git(repo, "rev-parse", "main")
    with pytest.raises(TipMoved) as caught:
        accept.accept(proj, task.ref, actor=Actor.HUMAN)
    (named,) = caught.value.commits
    assert named.startswith(tip[:7]) and "turn 1: a \\u001b]0;title\\u0007 b" in named  # escapes made visible
    with pytest.raises(TipMoved):
        accept.accept(proj, task.ref, actor=Actor.HUMAN, tip=reviewed_tip)
    assert git(repo, "rev-parse", "main") == main
    done = accept.accept(proj, task.ref, actor=Actor.HUMAN, tip=tip)
    assert done.task.status is Status.COMPLETE and git(repo, "show", "main:turn-1.txt") == "turn 1"
