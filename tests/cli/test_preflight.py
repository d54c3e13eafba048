"""The harness preflight and doctor's harness report, against real executables and real files.

``check_harness`` refuses, before anything runs, a ``command`` harness with no command (unset,
empty, blank, unparsable), an executable not on PATH, and a harness configuration file that
exists but cannot be used (not a file, not valid JSON or TOML) — each a coded error with exit
1 and a hint. ``report`` runs the real ``claude``, ``pi`` and ``codex`` binaries' ``--version``
(bounded: a hanging one is cut off), says whether each can tell it is logged in and where
the credential was found, and never carries the credential itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from corral.engine.operations import preflight
from corral.engine.project import Project
from corral.errors import HarnessMisconfigured, HarnessNotFound, UsageError

#: The pinned binaries (tests/seams pins them too): their real --version lines.
VERSIONS = {"claude": "2.1.332 (Claude Code)", "pi": "0.73.1", "codex": "codex-cli 0.171.0"}


def agents_dir() -> Path:
    for base in (Path(os.environ.get("CORRAL_AGENTS_HOME", "")), Path("/root/.cache/corral-agents")):
        candidate = base / "node_modules" / ".bin"
        if (candidate / "claude").exists():
            return candidate
    raise AssertionError("the agent CLIs are not installed in ~/.cache/corral-agents")


def opened(repo: Path) -> Project:
    return Project.open(repo)


def refusal(repo: Path, harness: str | None = None, **kw: object) -> HarnessMisconfigured | HarnessNotFound:
    project = opened(repo)
    try:
        with pytest.raises((HarnessMisconfigured, HarnessNotFound)) as caught:
            preflight.check_harness(project, harness, **kw)  # type: ignore[arg-type]
    finally:
        project.close()
    assert caught.value.exit_code == 1 and caught.value.hint
    return caught.value


@pytest.mark.parametrize("command", [None, "", "   "], ids=["unset", "empty", "blank"])
def test_a_command_harness_without_a_command_is_refused(repo: Path, monkeypatch, command: str | None) -> None:
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    if command is not None:
        monkeypatch.setenv("CORRAL_COMMAND", command)
    for runnable in (True, False):  # create and edit refuse it as start does
        err = refusal(repo, runnable=runnable)
        assert isinstance(err, HarnessMisconfigured) and err.code == "harness-command-unset"
        assert "docs/harnesses.md" in (err.hint or "")


def test_an_unparsable_command_is_refused_with_the_parse_error(repo: Path, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_COMMAND", "my-agent 'unclosed")
    err = refusal(repo, "command")
    assert err.code == "harness-command-invalid" and "quotation" in err.message


def test_a_task_setting_over_the_project_counts(repo: Path, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CORRAL_COMMAND", "true")
    err = refusal(repo, "command", settings={"command": ""})
    assert err.code == "harness-command-unset"
    project = opened(repo)
    try:
        monkeypatch.delenv("CORRAL_COMMAND")
        preflight.check_harness(project, "command", {"command": "true --flag"})  # on PATH: fine
    finally:
        project.close()


def test_a_missing_executable_is_refused_with_the_install_hint(repo: Path, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(tmp_path / "no-such-claude"))
    err = refusal(repo, "claude")
    assert isinstance(err, HarnessNotFound) and err.code == "harness-missing"
    assert "npm install -g @anthropic-ai/claude-code" in (err.hint or "")
    monkeypatch.setenv("CORRAL_CODEX_BIN", "codex-not-on-path")  # a bare name: looked up on PATH
    err = refusal(repo, "codex")
    assert isinstance(err, HarnessNotFound) and "@openai/codex" in (err.hint or "")
    monkeypatch.setenv("CORRAL_COMMAND", "my-agent-not-installed --flag")
    assert refusal(repo, "command").code == "harness-missing"
    project = opened(repo)
    try:
        preflight.check_harness(project, "codex", runnable=False)  # create/edit: installing later is fine
    finally:
        project.close()


def test_an_unknown_harness_is_a_usage_error(repo: Path) -> None:
    project = opened(repo)
    try:
        with pytest.raises(UsageError):
            preflight.check_harness(project, "gpt-magic")
    finally:
        project.close()


def test_an_unusable_harness_config_is_refused(repo: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{agents_dir()}{os.pathsep}{os.environ['PATH']}")
    home = Path(os.environ["HOME"])
    settings = home / ".pi" / "agent" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"defaultProvider": "x",\n  oops}')
    err = refusal(repo, "pi")
    assert err.code == "harness-config-unreadable" and str(settings) in err.message and "line 2" in err.message
    settings.unlink()
    settings.mkdir()  # not a regular file
    assert "not a regular file" in refusal(repo, "pi").message
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text("model = \n")
    assert "not valid TOML" in refusal(repo, "codex").message
    codex.write_text('model = "o3"\n')
    project = opened(repo)
    try:
        preflight.check_harness(project, "codex")  # valid again: no refusal
    finally:
        project.close()


@pytest.mark.slow
def test_doctor_report_of_the_real_binaries(repo: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{agents_dir()}{os.pathsep}{os.environ['PATH']}")
    secret = "sk-ant-test-DO-NOT-PRINT-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    home = Path(os.environ["HOME"])
    (home / ".codex").mkdir()
    (home / ".codex" / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-codex-secret-value"}))
    project = opened(repo)
    try:
        reports = {r.name: r for r in preflight.report(project, ["claude", "pi", "codex", "command"])}
    finally:
        project.close()
    for name, version in VERSIONS.items():
        r = reports[name]
        assert r.found and r.ok and r.version == version, r
        assert r.path == str(agents_dir() / name)
        assert r.read_only == preflight.READ_ONLY_MODES[name]
    assert reports["claude"].logged_in is True and reports["claude"].login_source == "$ANTHROPIC_API_KEY"
    assert reports["codex"].logged_in is True and reports["codex"].login_source == str(home / ".codex" / "auth.json")
    assert reports["pi"].logged_in is True and reports["pi"].login_source == "$ANTHROPIC_API_KEY"  # its provider's key
    assert not reports["command"].ok and reports["command"].problem
    doc = json.dumps([r.to_json() for r in reports.values()])
    assert secret not in doc and "sk-codex-secret-value" not in doc


def test_a_hanging_version_is_cut_off(repo: Path, monkeypatch, tmp_path: Path) -> None:
    slow = tmp_path / "claude"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(slow))
    monkeypatch.setattr(preflight, "VERSION_TIMEOUT", 0.5)
    project = opened(repo)
    try:
        [r] = preflight.report(project, ["claude"])
    finally:
        project.close()
    assert r.found and r.version is None and "did not answer" in (r.problem or "")
    assert r.logged_in is False and r.login_hint


def test_ask_help_text_names_every_harness_and_the_backstop() -> None:
    text = preflight.read_only_help()
    lines = text.splitlines()
    for name, how in preflight.READ_ONLY_MODES.items():
        assert any(line.split() and line.split()[0] == name and line.endswith(how) for line in lines), name
    assert "refs/corral/kept/<ref>/<turn>" in text
