"""The real Claude Code CLI answered 401 by the scripted model server, through corral to `show`.

Reuses the seam-2 rig of ``tests/seams/test_corral_claude.py`` (the pinned binary behind a
recording wrapper, a loopback Anthropic Messages server); skips locally when the binary is
missing, as the seam tests do.
"""

from __future__ import annotations

import pytest

from corral.domain.status import Status
from tests.failures.conftest import diagnostic_files, line_after, show_json, show_text
from tests.seams.conftest import claude, claude_home  # noqa: F401  (fixtures of the rig)
from tests.seams.test_corral_claude import make_rig, start  # noqa: F401
from tests.support.claude import TEST_API_KEY
from tests.support.model_server import Error

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_claude_401_reads_not_authenticated_log_in_through_the_harness(make_rig, corral):  # noqa: F811
    rig = make_rig(auto_resume="0")  # Claude Code at its own retry settings: corral ends it at its first retry
    rig.script(Error(401))
    task = rig.create()
    done = start(rig, task)
    assert done.status is Status.BLOCKED and done.resting_cause.code == "harness-not-authenticated"

    text = show_text(corral, task.ref)
    assert line_after(text, "Stopped because:") == "Claude Code is not authenticated — log in through the harness."
    assert line_after(text, "Next:") == (
        f"Log in (for Claude Code: run `claude` and /login), then: corral unblock {task.ref} -m 'continue'"
    )
    assert "turn 1 · error · agent — Claude Code is not authenticated" in text  # the answer to turn 1 (an exchange)
    doc = show_json(corral, task.ref)
    evidence = doc["resting_cause"]["evidence"]
    assert evidence["category"] == "fatal_auth" and evidence["native"]["exit_code"] == 143  # ended by corral (SIGTERM)
    assert evidence["diagnostic_status"] == "kept"
    files = diagnostic_files(rig.proj)
    assert files
    for path in files:
        body = path.read_text()
        assert TEST_API_KEY not in body
        assert '"type": "assistant"' not in body and '"type":"assistant"' not in body  # no raw protocol
