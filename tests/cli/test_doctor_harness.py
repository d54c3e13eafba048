"""``doctor`` checks every configured harness: found, its version, whether it can tell it is logged in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.helpers import create

pytestmark = pytest.mark.slow  # each runs real turns or real harness probes: seconds, not milliseconds


def _program(path: Path, version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo '{version}'; exit 0; fi\nexit 3\n")
    path.chmod(0o755)
    return path


def _harness_checks(corral, env):
    result = corral("doctor", "--json", env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return [c for c in result.json()["checks"] if c["name"] == "harness"], result


def test_doctor_names_each_configured_harness_its_version_and_its_login(corral, tmp_path):
    claude = _program(tmp_path / "bin" / "claude", "2.1.7 (Claude Code)")
    home = Path(os.environ["HOME"])
    env = {"CORRAL_CLAUDE_BIN": str(claude), "CORRAL_PI_BIN": str(tmp_path / "bin" / "no-such-pi")}
    found, _ = _harness_checks(corral, env)
    assert len(found) == 1 and found[0]["status"] == "warn"  # only the default harness is configured
    assert "claude: 2.1.7 (Claude Code)" in found[0]["message"] and str(claude) in found[0]["message"]
    assert "not logged in" in found[0]["message"] and "Log in" in found[0]["hint"]
    assert "read-only: --permission-mode plan" in found[0]["message"]

    credentials = home / ".claude" / ".credentials.json"
    credentials.parent.mkdir(parents=True)
    credentials.write_text('{"secret": "sk-do-not-print"}')
    found, result = _harness_checks(corral, env)
    assert len(found) == 1 and found[0]["status"] == "ok"
    assert f"logged in ({credentials})" in found[0]["message"]
    assert "sk-do-not-print" not in result.stdout + result.stderr  # where the credential is, never it
    assert result.returncode == 0 and result.json()["ok"] is True
    human = corral("doctor", env=env).stdout
    assert "claude: 2.1.7 (Claude Code) at" in human and "logged in" in human


def test_doctor_checks_a_harness_a_task_uses_and_says_how_to_install_one_not_found(corral, tmp_path):
    claude = _program(tmp_path / "bin" / "claude", "2.1.7 (Claude Code)")
    pi = tmp_path / "bin" / "no-such-pi"
    env = {"CORRAL_CLAUDE_BIN": str(claude), "CORRAL_PI_BIN": str(pi)}
    _program(pi, "0.1")  # there while the task is created (create checks the harness) …
    create(corral, "Uses pi", "--ref", "on-pi", "--harness", "pi")
    pi.unlink()  # … and gone since
    found, result = _harness_checks(corral, env)
    by_name = {c["message"].split(":")[0]: c for c in found}
    assert set(by_name) == {"claude", "pi"}
    missing = by_name["pi"]
    assert missing["status"] == "warn" and f"({pi}) is not installed or not on PATH" in missing["message"]
    assert "install" in missing["hint"].lower()
    assert result.returncode == 0 and result.json()["ok"] is True  # a harness warning is not a broken state
    human = corral("doctor", env=env).stdout
    assert f"pi: Pi ({pi}) is not installed" in human and "hint:" in human


def test_doctor_names_a_toolchain_in_the_home_a_confined_turn_cannot_see_and_its_hint_works(corral):
    import shlex

    home = Path(os.environ["HOME"])
    (home / ".cargo" / "bin").mkdir(parents=True)
    env = {"CORRAL_SANDBOX": "bwrap"}

    def sandbox_check():
        result = corral("doctor", "--json", env=env)
        assert "Traceback" not in result.stderr, result.stderr
        return next(c for c in result.json()["checks"] if c["name"] == "sandbox")

    found = sandbox_check()
    assert found["status"] == "warn" and str(home / ".cargo") in found["message"]
    typed = shlex.split(found["hint"].removeprefix("If they need it: "))
    assert typed[:2] == ["corral", "config"]
    corral.ok(*typed[1:], env=env)  # the hint, as a person types it
    assert sandbox_check()["status"] == "ok"
    assert not [
        c for c in corral("doctor", "--json", env={"CORRAL_SANDBOX": "off"}).json()["checks"] if c["name"] == "sandbox"
    ]
