"""A successful turn's texts are masked where they are captured: no secret outside output.log.

The agent (a real process) prints a key of a known shape, a GitHub token and the value of
``$MY_SECRET_TOKEN`` in its result, and a post-turn check prints them too. The variable is in
the environment the supervisor was spawned with, and only there: the test removes it from its
own environment before the turn is settled, and settles it through the real CLI (`wait`), so
the reconciler cannot know the value. Only the supervisor's masking at capture can keep it out
of the database file (and its -wal), every `show` form, `wait`'s output and the filed
``response.json``; ``output.log`` keeps all of it verbatim, mode 0600.
"""

from __future__ import annotations

import json
import os
import stat

from corral.domain.actors import Actor
from corral.domain.redact import MASK, RESULT_BYTES, masked_head, truncation_note
from corral.engine.operations import turns
from corral.engine.read.translator import Translator
from corral.engine.runtime import protocol as proto
from tests.failures.conftest import diagnostic_files, new_task, reopen

SHAPED = "sk-ant-api03-Zq8sLmN0pQrStUvWxYz12345"  # a key of a known shape
GITHUB = "ghp_a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ"  # a GitHub token
ENV_NAME = "MY_SECRET_TOKEN"  # named like a secret, held only by the supervisor's environment
ENV_VALUE = "plum-harbor-7731-sunrise"  # and of no known shape
SECRETS = (SHAPED, GITHUB, ENV_VALUE)


def test_a_successful_turn_keeps_no_secret_but_in_its_verbatim_log(fproj, agent, corral, monkeypatch):
    agent.script(
        [
            {"init": True},
            {"text": f"Found {SHAPED} in .env"},
            {"echo_env": ENV_NAME},
            {"result": f"Done. The key was {SHAPED}, the token {GITHUB}, the service password {ENV_VALUE}."},
        ]
    )
    # The check prints the token and the variable's value; its command line holds neither whole.
    monkeypatch.setenv("CORRAL_POST_TURN_CHECK", f'printf "check saw %s and ghp_%s\\n" "${ENV_NAME}" "{GITHUB[4:]}"')
    monkeypatch.setenv(ENV_NAME, ENV_VALUE)
    proj = reopen(fproj)
    task = new_task(proj)
    turns.start(proj, task.ref, actor=Actor.HUMAN)  # the supervisor is spawned with the secret
    proj.close()
    monkeypatch.delenv(ENV_NAME)  # and from here on, nobody but it and its agent has it
    assert ENV_NAME not in os.environ

    waited = corral("wait", task.ref, "--timeout", "60", "--json")
    assert waited.returncode == 0, waited.stderr
    surfaces = {
        "wait --json": waited.stdout + waited.stderr,
        "show": corral.ok("show", task.ref).stdout,
        "show --details": corral.ok("show", task.ref, "--details").stdout,
        "show --json": corral.ok("show", task.ref, "--json").stdout,
        "wait": corral.ok("wait", task.ref, "--timeout", "10").stdout,
    }
    doc = json.loads(surfaces["show --json"])
    assert doc["task"]["status"] == "blocked", doc

    proj = reopen(proj)
    turn_dir = proj.paths.turn_dir(task.id, 1)
    log = turn_dir / "output.log"
    verbatim = log.read_bytes().decode()
    for secret in SECRETS:
        assert secret in verbatim, f"the plant did not happen: {secret}"  # the agent really printed it
    assert stat.S_IMODE(log.stat().st_mode) == 0o600

    filed = turn_dir / proto.RESPONSE
    receipt = proto.read(filed, proto.Receipt)
    assert isinstance(receipt, proto.Receipt) and receipt.status is proto.ReceiptStatus.COMPLETED
    assert receipt.result is not None and MASK in receipt.result and "Done. The key was" in receipt.result
    assert receipt.check is not None and "check saw" in receipt.check.tail and MASK in receipt.check.tail
    surfaces["response.json"] = filed.read_text()

    with proj.store.read() as tx:
        turn = next(t for t in tx.turns(task.id) if t.role.value == "agent")
    assert MASK in turn.content and "service password" in turn.content
    proj.close()

    db = proj.paths.db
    stored = b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())
    assert b"Done. The key was" in stored  # the result is in the file, masked
    for secret in SECRETS:
        assert secret.encode() not in stored, f"{secret} is in {db.name}"
    for path in diagnostic_files(proj):
        surfaces[str(path)] = path.read_text()
    for name, text in surfaces.items():
        for secret in SECRETS:
            assert secret not in text, (name, secret)
    assert MASK in surfaces["show"] or MASK in surfaces["show --details"]


def test_a_secret_the_result_cut_would_split_is_masked_whole_first():
    total = RESULT_BYTES + 50_000
    cut = RESULT_BYTES - len(truncation_note(total).encode())  # where the kept head ends
    head = "a" * (cut - 12)
    text = head + SHAPED + " " + ENV_VALUE + "b" * (total - len(head) - len(SHAPED) - 1 - len(ENV_VALUE))
    assert len(text.encode()) == total
    kept = masked_head(text, [ENV_VALUE], RESULT_BYTES)
    assert len(kept.encode()) <= RESULT_BYTES and "cut:" in kept
    assert kept.startswith(head) and SHAPED[:12] not in kept  # the 12 bytes before the cut were masked first
    whole = Translator([ENV_VALUE]).content("x" * 10 + ENV_VALUE + " " + GITHUB)
    assert whole == f"x{'x' * 9}{MASK} {MASK}"


def test_a_failed_turns_diagnostic_keeps_no_secret_only_the_supervisor_had(fproj, agent, corral, monkeypatch):
    """The diagnostic's output comes from the supervisor's masked windows, not from the raw log."""
    agent.script(
        [
            {"init": True},
            {"text": f"Trying {GITHUB}"},
            {"echo_env": ENV_NAME},
            {"stderr": f"fatal: {ENV_VALUE} was refused\n"},
            {"result": f"Invalid API key · {ENV_VALUE}", "is_error": True},
            {"exit": 1},
        ]
    )
    monkeypatch.setenv(ENV_NAME, ENV_VALUE)
    proj = reopen(fproj)
    task = new_task(proj)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    proj.close()
    monkeypatch.delenv(ENV_NAME)
    waited = corral("wait", task.ref, "--timeout", "60")
    assert waited.returncode == 1, waited.stderr  # it rests with a cause: the key was refused
    proj = reopen(proj)
    verbatim = (proj.paths.turn_dir(task.id, 1) / "output.log").read_text()
    assert ENV_VALUE in verbatim and GITHUB in verbatim
    files = diagnostic_files(proj)
    assert files, "no diagnostic was written"
    for path in files:
        body = path.read_text()
        for secret in SECRETS:
            assert secret not in body, (path.name, secret)
        doc = json.loads(body)
        texts = json.dumps(doc["output"])
        assert "Invalid API key" in texts and MASK in texts and "was refused" in texts
    db = proj.paths.db
    stored = b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())
    for secret in SECRETS:
        assert secret.encode() not in stored, secret
    for args in (("show", task.ref), ("show", task.ref, "--details"), ("show", task.ref, "--json")):
        out = corral.ok(*args).stdout
        for secret in SECRETS:
            assert secret not in out, (args, secret)
    proj.close()
