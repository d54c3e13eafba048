"""The first checks a new user meets: ``doctor`` outside a repository checks the install, ``config set`` refuses
a near miss with the value it was likely meant to be, a harness that is not installed is a warning at
``create`` (and ``start``'s refusal, with the install line), and ``wait`` / ``start --wait`` exit 1 when the
task rests on a decision about protected files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.cli.helpers import create, park, to_working
from tests.conftest import CLI, git
from tests.support.pi import pi_bin


def _fake_claude(bin_dir: Path) -> Path:
    """An executable named ``claude`` that answers ``--version`` as Claude Code does."""
    bin_dir.mkdir(exist_ok=True)
    claude = bin_dir / "claude"
    claude.write_text("#!/bin/sh\necho '2.1.332 (Claude Code)'\n")
    claude.chmod(0o755)
    return claude


def test_doctor_outside_a_repository_checks_the_install_and_exits_0(tmp_path: Path) -> None:
    nowhere = tmp_path / "not-a-repo"
    nowhere.mkdir()
    bin_dir = tmp_path / "bin"
    _fake_claude(bin_dir)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "ANTHROPIC_API_KEY": "sk-test-not-shown",
        "CORRAL_AGENT_TOOLS": "1",  # a person's default (the suite turns it off)
        "CORRAL_PI_BIN": str(pi_bin()),  # the real Pi, as .ci/install-agents puts it
    }
    result = CLI(nowhere)("doctor", "--json", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = result.json()
    assert doc["ok"] is True
    by_name: dict[str, list[dict[str, str]]] = {}
    for check in doc["checks"]:
        by_name.setdefault(check["name"], []).append(check)
    assert {"git", "home", "config", "harness", "sandbox", "daemon", "team"} <= set(by_name)
    assert by_name["git"][0]["status"] == "ok" and "git version" in by_name["git"][0]["message"]
    claude = by_name["harness"][0]
    assert claude["status"] == "ok", claude
    assert "2.1.332" in claude["message"] and "logged in ($ANTHROPIC_API_KEY)" in claude["message"]
    assert "sk-test-not-shown" not in result.stdout
    assert {c["message"].split(":")[0] for c in by_name["harness"]} == {"claude", "pi", "codex"}
    # Each harness's agents reach corral's tools by their own door: Pi's is corral's extension, not MCP.
    assert "corral's tools over MCP" in claude["message"]
    [pi] = [c for c in by_name["harness"] if c["message"].startswith("pi:")]
    assert pi["status"] == "ok", pi
    assert "corral's tools through corral's Pi extension" in pi["message"] and "MCP" not in pi["message"]
    daemon = by_name["daemon"][0]
    assert daemon["status"] == "ok" and "starts by itself" in daemon["message"]
    assert by_name["sandbox"][0]["status"] in ("ok", "warn")

    human = CLI(nowhere)("doctor", env=env)
    assert human.returncode == 0 and "not inside a git repository" not in human.stderr
    assert "daemon" in human.stdout and "claude" in human.stdout


def test_doctor_outside_a_repository_warns_of_the_chosen_harness_missing_and_still_exits_0(tmp_path: Path) -> None:
    nowhere = tmp_path / "not-a-repo"
    nowhere.mkdir()
    env = {"CORRAL_CLAUDE_BIN": str(tmp_path / "no-such-claude")}
    doc = CLI(nowhere)("doctor", "--json", env=env).json()
    [claude] = [c for c in doc["checks"] if c["name"] == "harness" and c["message"].startswith("claude")]
    assert claude["status"] == "warn" and "npm install -g @anthropic-ai/claude-code" in claude["hint"]
    assert doc["ok"] is True


def test_doctor_outside_a_repository_fails_on_a_harness_setting_no_harness_answers_to(tmp_path: Path) -> None:
    nowhere = tmp_path / "not-a-repo"
    nowhere.mkdir()
    Path(os.environ["CORRAL_CONFIG_FILE"]).write_text('harness = "claud"\n')
    result = CLI(nowhere)("doctor", "--json")
    assert result.returncode == 1
    [bad] = [c for c in result.json()["checks"] if c["name"] == "config" and c["status"] == "fail"]
    assert "'claud'" in bad["message"] and bad["hint"] == "Did you mean claude? corral config set harness claude"


def test_doctor_with_a_task_or_a_repo_named_still_needs_a_repository(tmp_path: Path) -> None:
    nowhere = tmp_path / "not-a-repo"
    nowhere.mkdir()
    assert CLI(nowhere)("doctor", "some-task").returncode == 2
    assert CLI(tmp_path)("--repo", str(nowhere), "doctor").returncode == 2


def test_doctor_in_a_repository_with_no_commit_does_not_call_its_own_state_an_older_corrals(tmp_path: Path) -> None:
    empty = tmp_path / "fresh"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    result = CLI(empty)("doctor", "--json")
    said = " ".join(f"{c['message']} {c.get('hint') or ''}" for c in result.json()["checks"])
    assert "older corral" not in said
    assert "no commit yet" in said


def test_config_set_refuses_a_near_miss_with_did_you_mean(corral: CLI) -> None:
    refused = corral("config", "set", "harness", "claud")
    assert refused.returncode == 2
    assert "did you mean claude" in refused.stderr
    assert "hint: corral config set harness claude" in refused.stderr
    assert corral("config", "set", "harness", "gpt-magic").returncode == 2
    assert corral("config", "set", "sandbox", "bwarp").returncode == 2
    assert "did you mean bwrap" in corral("config", "set", "sandbox", "bwarp").stderr
    user_file = Path(os.environ["CORRAL_CONFIG_FILE"])
    assert not user_file.exists() or "claud" not in user_file.read_text()  # nothing was written
    # The hint works when typed.
    corral.ok("config", "set", "harness", "claude")
    assert corral.json("config", "get", "harness")["value"] == "claude"


def test_create_with_a_misspelled_harness_says_the_name_meant_not_a_setting(corral: CLI) -> None:
    # The name came from the flag: the hint is the name meant, not a line that changes the person's setting.
    refused = corral("create", "Fix the login", "--ref", "login", "--harness", "claud")
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[1] == "hint: Did you mean claude?"
    assert "config set" not in refused.stderr
    corral.ok("create", "Fix the login", "--ref", "login", "--harness", "claude")  # the hint, typed


def test_create_with_a_harness_not_installed_warns_and_start_refuses_with_the_install_line(
    corral: CLI, tmp_path: Path
) -> None:
    env = {"CORRAL_CLAUDE_BIN": str(tmp_path / "no-such-claude")}
    made = corral("create", "Fix the login", "--ref", "login", "--harness", "claude", env=env)
    assert made.returncode == 0
    assert "warning:" in made.stderr and "npm install -g @anthropic-ai/claude-code" in made.stderr
    assert "corral start login will refuse" in made.stderr.replace("`", "")
    doc = corral("create", "Another", "--ref", "other", "--harness", "claude", "--json", env=env).json()
    assert "npm install -g @anthropic-ai/claude-code" in doc["warning"]
    started = corral("start", "login", env=env)
    assert started.returncode == 1
    assert "npm install -g @anthropic-ai/claude-code" in started.stderr

    installed = {"CORRAL_CLAUDE_BIN": str(_fake_claude(tmp_path / "bin"))}
    quiet = corral("create", "Installed", "--ref", "installed", "--harness", "claude", "--json", env=installed)
    assert "warning" not in quiet.json() and "warning:" not in quiet.stderr


def test_wait_exits_1_when_the_task_rests_in_conflict(corral: CLI) -> None:
    create(corral, "Touch a secret", "--ref", "secret", "--protect", "secret.txt")
    to_working(corral, "secret")
    assert park(corral, "secret", violations=["secret.txt"]).value == "conflict"
    waited = corral("wait", "secret", "--json")
    assert waited.returncode == 1, waited.stdout
    assert waited.json()["exit_code"] == 1


def test_start_wait_exits_1_when_the_turn_ends_in_conflict(corral: CLI, repo: Path, tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text("from pathlib import Path\nPath('secret.txt').write_text('changed')\nprint('I changed it.')\n")
    env = {"CORRAL_HARNESS": "command", "CORRAL_COMMAND": f"{sys.executable} {agent}"}
    (repo / "secret.txt").write_text("original\n")
    git(repo, "add", "secret.txt")
    git(repo, "commit", "-q", "-m", "a secret")
    corral.ok("create", "Touch a secret", "--ref", "secret", "--protect", "secret.txt", env=env)
    started = corral("start", "secret", "--wait", "--timeout", "60", "--json", env=env)
    doc = started.json()
    assert doc["task"]["status"] == "conflict", doc
    assert started.returncode == 1
