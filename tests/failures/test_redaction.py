"""Secrets a harness prints never reach a diagnostic, `show`, `show --details` or `--json`.

Three plants, each in a real agent process: a key of a known shape in its stderr and in its
stream output (assistant text and the error result), and the value of an environment variable
named like a secret, which the agent echoes (the fake agent's ``echo_env`` step, to its stream
and its stderr). Three ways to end: a fatal failure (blocked), a SIGKILL (interrupted, with the
interrupt log tail), and a lost turn (the supervisor killed; the reconciler reads the output).
The verbatim ``output.log`` keeps them (mode 0600, shown only by `corral logs`) — that is how
the test knows they were really printed.
"""

from __future__ import annotations

import json

import pytest

from corral.domain.actors import Actor
from corral.domain.redact import MASK
from corral.engine.operations import turns
from corral.engine.operations.refresh import settle
from tests.failures.conftest import (
    diagnostic_files,
    kill_supervisor,
    new_task,
    reopen,
    run_start,
    wait_for,
)

SHAPED = "sk-live-AbCdEfGhIjKlMnOpQrStUv0123"  # a key of a known shape
ENV_NAME = "ACME_SERVICE_TOKEN"  # named like a secret
ENV_VALUE = "acme-7f3k2-p0tat0-salad"  # and of no known shape
SECRETS = (SHAPED, ENV_VALUE)


def noisy(*ending: dict) -> list[dict]:
    return [
        {"init": True},
        {"text": f"I found the key {SHAPED} in the config."},
        {"echo_env": ENV_NAME},
        {"stderr": f"error: upstream rejected {SHAPED} (token {ENV_VALUE})\n"},
        {"tool": "Bash", "input": {"command": f"curl -H 'x-key: {SHAPED}'"}, "is_error": True,
         "output": f"401 for {ENV_VALUE}"},
        *ending,
    ]  # fmt: skip


@pytest.fixture
def secret_env(fproj, monkeypatch):
    monkeypatch.setenv(ENV_NAME, ENV_VALUE)
    return reopen(fproj)


def surfaces(corral, ref: str) -> dict[str, str]:
    out = {
        "show": corral.ok("show", ref).stdout,
        "show --details": corral.ok("show", ref, "--details").stdout,
        "show --json": corral.ok("show", ref, "--json").stdout,
        "list --json": corral.ok("list", "--all", "--json").stdout,
    }
    json.loads(out["show --json"])
    return out


def assert_no_secrets(proj, corral, task) -> None:
    log = (proj.paths.turn_dir(task.id, 1) / "output.log").read_text() + (
        proj.paths.turn_dir(task.id, 1) / "stderr.log"
    ).read_text()
    for secret in SECRETS:
        assert secret in log, f"the plant did not happen: {secret}"  # the verbatim log keeps it
    files = diagnostic_files(proj)
    assert files, "no diagnostic was written"
    for path in files:
        body = path.read_text()
        for secret in SECRETS:
            assert secret not in body, (path, secret)
        assert MASK in body or "partial_output" in body
    for name, text in surfaces(corral, task.ref).items():
        for secret in SECRETS:
            assert secret not in text, (name, secret)


def test_a_fatal_failure_shows_no_secret(secret_env, agent, corral):
    agent.script(noisy({"result": f"Invalid API key · {SHAPED}", "is_error": True}, {"exit": 1}))
    task = new_task(secret_env)
    done = run_start(secret_env, task)
    assert done.resting_cause.code == "harness-not-authenticated"
    assert_no_secrets(secret_env, corral, task)
    diag = json.loads(diagnostic_files(secret_env)[0].read_text())
    texts = json.dumps(diag["output"]["partial_output"])
    assert MASK in texts and "curl" not in texts  # tool inputs never enter; masked text does
    secret_env.close()


def test_a_crash_with_its_interrupt_log_tail_shows_no_secret(secret_env, agent, corral):
    agent.script(noisy({"kill": "KILL"}))
    task = new_task(secret_env)
    done = run_start(secret_env, task)
    assert done.resting_cause.code == "turn-crashed"
    assert_no_secrets(secret_env, corral, task)
    doc = corral.json("show", task.ref)
    assert MASK in doc["session"]["interrupt"]["logs"]
    secret_env.close()


def test_a_lost_turn_shows_no_secret(secret_env, agent, corral):
    agent.script(noisy({"sleep": 60}))
    task = new_task(secret_env)
    turns.start(secret_env, task.ref, actor=Actor.HUMAN)
    log = secret_env.paths.turn_dir(task.id, 1) / "output.log"
    wait_for(lambda: log.exists() and "tool_result" in log.read_text(), 20, "the agent's output")
    kill_supervisor(secret_env, task)
    settle(secret_env)
    with secret_env.store.read() as tx:
        assert tx.get_task(task.id).resting_cause.code == "turn-lost"
    assert_no_secrets(secret_env, corral, task)
    secret_env.close()
