"""Diagnostics never hold tool inputs or protocol lines (seed 004 items 18-19), even when masking a secret
inside a protocol line broke its JSON; a corral shell's result is masked with the agent's own secrets."""

from __future__ import annotations

import json
import os

import pytest

from corral.domain.actors import Actor
from corral.engine.operations import turns
from corral.engine.operations.shell import agent_secrets
from tests.failures.conftest import diagnostic_files, new_task, reopen


def _dumps(doc: dict) -> str:
    return json.dumps(doc)


#: A tool input whose secret, masked by its shape (``token=…``), ends inside an escaped quote: the
#: masked protocol line is no longer JSON.
COMMAND = 'curl -s "https://deploy.example/hook?token=harbor-plum-31415-xyz" --data-private-note'


def test_a_protocol_line_broken_by_masking_never_lands_in_the_output_tail(fproj, agent, corral):
    agent.script(
        [
            {"init": True},
            {"tool": "Bash", "input": {"command": COMMAND}, "is_error": True, "output": "curl: (6) no host"},
            {"stderr": "fatal: the deploy hook failed\n"},
            {"result": "Invalid API key · the deploy hook failed", "is_error": True},  # fatal: no retry
            {"exit": 1},
        ]
    )
    proj = reopen(fproj)
    task = new_task(proj)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    proj.close()
    corral("wait", task.ref, "--timeout", "60")
    proj = reopen(proj)
    verbatim = (proj.paths.turn_dir(task.id, 1) / "output.log").read_text()
    assert "--data-private-note" in verbatim  # the log keeps it; a diagnostic never does
    files = diagnostic_files(proj)
    assert files, "no diagnostic was written"
    for path in files:
        body = path.read_text()
        assert "--data-private-note" not in body and "harbor-plum" not in body, path.name
        doc = json.loads(body)
        for line in doc["output"]["tail"].splitlines():
            assert not line.lstrip().startswith("{"), line  # no protocol line, whole or broken
        assert doc["output"]["protocol_lines_omitted"] > 0
        assert "the deploy hook failed" in json.dumps(doc["output"])  # plain stderr stays exact
    proj.close()


def test_the_shell_masks_with_the_agent_s_own_environment(tmp_path, monkeypatch):
    """The shell runs in the daemon, which may never have had the variable the agent was launched with."""
    import subprocess
    import sys

    monkeypatch.delenv("MY_DEPLOY_TOKEN", raising=False)
    env = {**os.environ, "MY_DEPLOY_TOKEN": "quince-lantern-2718"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        assert "quince-lantern-2718" in agent_secrets(child.pid)
        assert "quince-lantern-2718" not in agent_secrets(os.getpid())
    finally:
        child.kill()
        child.wait()


def test_a_protocol_line_is_masked_field_by_field_and_stays_json():
    import json as _json

    from corral.domain.redact import redact, redact_lines

    line = _json.dumps({"type": "tool_use", "input": {"command": COMMAND}})
    with pytest.raises(ValueError):
        _json.loads(redact(line))  # masked as text, the line is no longer JSON
    masked = _json.loads(redact_lines(line))
    assert masked["input"]["command"] == 'curl -s "https://deploy.example/hook?token=[redacted]" --data-private-note'


def test_a_broken_protocol_line_in_a_window_is_omitted_never_plain_output():
    from pathlib import Path

    from corral.adapters.harness import make_harness
    from corral.domain.redact import redact
    from corral.engine.read.diagnostic_content import translate_output
    from corral.engine.read.translator import Translator

    start = {"type": "tool_execution_start", "toolCallId": "t1", "toolName": "bash", "args": {"command": COMMAND}}
    window = redact(_dumps(start)) + "\nplain: the hook said no\n"
    out = translate_output(Path("/nonexistent"), make_harness("pi", {}), Translator([]), None, (window, ""))
    assert out.tail == "plain: the hook said no" and out.protocol_lines == 1
