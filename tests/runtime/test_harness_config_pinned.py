"""A harness's configuration is the person's: inside the sandbox its state directory is writable
for sessions, caches and credentials, and its configuration is read-only (docs/harnesses.md#sandbox).

The agents here are shell scripts under real bubblewrap: one run through the real supervisor as a
stand-in for ``claude`` (the sandbox's binds are chosen by the harness's name, so it must be the
``claude`` harness that runs it), and one per harness run in the argv :func:`bwrap_argv` builds for
that harness. Each tries each write and says ALLOWED or REFUSED; the test then looks at the
person's files. The real binaries, and an unconfined run of each afterwards, are in
``tests/seams/test_harness_config_readonly.py``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from corral.adapters import sandbox as sandboxing
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import tasks, turns
from tests.runtime.conftest import agent_turns, finished

pytestmark = pytest.mark.timeout(90)

needs_bwrap = pytest.mark.skipif(
    sandboxing.find_bwrap() is None and not os.environ.get("CI"), reason="bubblewrap is not installed"
)

TRY = 'try() { if sh -c "$2" >/dev/null 2>&1; then echo "ALLOWED $1"; else echo "REFUSED $1"; fi; }\n'
HOOK = json.dumps({"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "touch /pwned"}]}]}})


def verdicts(text: str) -> dict[str, str]:
    words = text.split()
    return {words[i + 1]: words[i] for i in range(len(words) - 1) if words[i] in ("ALLOWED", "REFUSED")}


#: Per harness: its state directory under a home, the attempts (name, shell) and what each must meet.
ATTEMPTS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "claude": (
        ".claude",
        [
            ("settings", f"printf %s {json.dumps(HOOK)} > $D/settings.json", "REFUSED"),
            ("settings_replaced", "mv $D/settings.json $D/s.old", "REFUSED"),
            ("hook_script", "echo 'touch /pwned' > $D/hooks/start.sh", "REFUSED"),
            ("mcp_servers", 'echo \'{"mcpServers": {"x": {}}}\' > $HOME/.claude.json', "REFUSED"),
            ("plugin", "mkdir $D/plugins/evil", "REFUSED"),
            ("agent", "echo x > $D/agents/evil.md", "REFUSED"),
            ("command", "echo x > $D/commands/evil.md", "REFUSED"),
            ("unknown_kept", "echo x > $D/daemon.json", "REFUSED"),
            ("ide_server", 'echo \'{"transport": "ws"}\' > $D/ide/4242.lock', "REFUSED"),
            ("backup", 'echo \'{"mcpServers": {"x": {}}}\' > $D/backups/.claude.json.backup.1', "REFUSED"),
            ("transcript", "mkdir -p $D/projects/k && echo {} >> $D/projects/k/s.jsonl", "ALLOWED"),
            ("credentials", "echo '{}' > $D/.credentials.json", "ALLOWED"),
            ("snapshot", "echo x > $D/shell-snapshots/snap.sh", "ALLOWED"),
        ],
    ),
    "codex": (
        ".codex",
        [
            ("config_toml", 'echo \'notify = ["touch", "/pwned"]\' >> $D/config.toml', "REFUSED"),
            ("config_replaced", "mv $D/config.toml $D/c.old", "REFUSED"),
            ("hooks_json", "echo {} > $D/hooks.json", "REFUSED"),
            ("rules", "echo x > $D/rules/default.rules", "REFUSED"),
            ("skill", "mkdir $D/skills/evil", "REFUSED"),
            ("transcript", "mkdir -p $D/sessions/2026 && echo {} >> $D/sessions/2026/r.jsonl", "ALLOWED"),
            ("state_db", "echo x > $D/state_5.sqlite", "ALLOWED"),
            ("credentials", "echo '{}' > $D/auth.json", "ALLOWED"),
            ("snapshot", "echo x > $D/shell_snapshots/snap.sh", "ALLOWED"),
        ],
    ),
    "pi": (
        ".pi/agent",
        [
            ("extension", "echo 'export default function () {}' > $D/extensions/evil.ts", "REFUSED"),
            ("settings", 'echo \'{"shellPath": "/pwned"}\' > $D/settings.json', "REFUSED"),
            ("models", "echo '{}' > $D/models.json", "REFUSED"),
            ("helper", "echo x > $D/bin/rg", "REFUSED"),
            ("transcript", "mkdir -p $D/sessions/--w-- && echo {} >> $D/sessions/--w--/s.jsonl", "ALLOWED"),
            ("credentials", "echo '{}' > $D/auth.json", "ALLOWED"),
            ("lock", "mkdir $D/auth.json.lock && rmdir $D/auth.json.lock", "ALLOWED"),
        ],
    ),
}


def confined(harness: str, home: Path, script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in the sandbox a turn of ``harness`` gets, with ``home`` as HOME."""
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    spec = sandboxing.SandboxSpec("bwrap", "test", bwrap=shutil.which("bwrap"))
    sandboxing.prepare(spec, harness, env)
    argv, inside = sandboxing.bwrap_argv(
        spec, worktree=str(worktree), program="/bin/sh", harness=harness, read_only=False, env=env
    )
    return subprocess.run(
        [*argv, "/bin/sh", "-c", script], env={**env, **inside}, capture_output=True, text=True, timeout=30
    )


@needs_bwrap
@pytest.mark.parametrize("harness", sorted(ATTEMPTS))
def test_the_configuration_is_read_only_and_the_session_and_login_writable(harness: str, tmp_path: Path) -> None:
    where, attempts = ATTEMPTS[harness]
    home = tmp_path / "home"
    state = home / where
    state.mkdir(parents=True)
    (home / ".claude.json").write_text('{"mcpServers": {}}')
    (state / "daemon.json").write_text("{}")  # a file corral has no name for: the person's all the same
    person = {"settings.json": '{"model": "mine"}', "config.toml": 'model = "mine"\n'}
    for name, text in person.items():
        (state / name).write_text(text)
    script = TRY + f"export D={state}\n" + "".join(f"try {name} {shlex.quote(shell)}\n" for name, shell, _ in attempts)
    done = confined(harness, home, script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert verdicts(done.stdout) == {name: meets for name, _, meets in attempts}, done.stdout
    # The person's files are as they were, and nothing the agent tried to add is there.
    for name, text in person.items():
        assert (state / name).read_text() == text
    assert (home / ".claude.json").read_text() == '{"mcpServers": {}}'
    assert (state / "daemon.json").read_text() == "{}"
    for added in ("hooks/start.sh", "plugins/evil", "agents/evil.md", "rules/default.rules", "extensions/evil.ts"):
        assert not (state / added).exists()
    # A shell snapshot (a script the harness sources) is the sandbox's own: none is left for another run.
    for snapshots in ("shell-snapshots", "shell_snapshots"):
        assert not (state / snapshots / "snap.sh").exists()


@needs_bwrap
def test_missing_configuration_is_made_empty_first_so_the_agent_cannot_create_it(tmp_path: Path) -> None:
    """A fresh home: the placeholders are made (never over the person's own), and pinned."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "CLAUDE.md").write_text("the person's memory\n")
    done = confined(
        "claude", home, TRY + f"try create 'echo {json.dumps(HOOK)} > $HOME/.claude/settings.json'\n", tmp_path
    )
    assert verdicts(done.stdout) == {"create": "REFUSED"}, (done.stdout, done.stderr)
    assert json.loads((home / ".claude" / "settings.json").read_text()) == {}
    assert (home / ".claude" / "CLAUDE.md").read_text() == "the person's memory\n"
    assert (home / ".claude" / "hooks").is_dir() and not list((home / ".claude" / "hooks").iterdir())


@needs_bwrap
def test_a_configuration_entry_that_is_a_link_holds_the_whole_directory_read_only(tmp_path: Path) -> None:
    """A mount follows a symbolic link out of the directory, and the link itself could be replaced:
    the directory is then bound read-only whole, its session writes refused with everything else."""
    home = tmp_path / "home"
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "settings.json").write_text('{"model": "mine"}')
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").symlink_to(dotfiles / "settings.json")
    script = TRY + (
        "try relink 'rm $HOME/.claude/settings.json && echo {} > $HOME/.claude/settings.json'\n"
        "try transcript 'mkdir -p $HOME/.claude/projects/k && echo {} > $HOME/.claude/projects/k/s.jsonl'\n"
    )
    done = confined("claude", home, script, tmp_path)
    assert verdicts(done.stdout) == {"relink": "REFUSED", "transcript": "REFUSED"}, (done.stdout, done.stderr)
    assert (home / ".claude" / "settings.json").is_symlink()
    assert (dotfiles / "settings.json").read_text() == '{"model": "mine"}'


def test_the_argv_binds_the_state_writable_and_pins_what_is_not_state(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home), "PATH": "/usr/bin"}
    spec = sandboxing.SandboxSpec("bwrap", "test", bwrap="/usr/bin/bwrap")
    sandboxing.prepare(spec, "codex", env)
    (home / ".codex" / "sessions").mkdir()
    (home / ".codex" / "newer-config.toml").write_text("")
    argv, _ = sandboxing.bwrap_argv(
        spec, worktree=str(tmp_path / "wt"), program="/usr/bin/true", harness="codex", read_only=True, env=env
    )
    codex = str(home / ".codex")
    triples = {tuple(argv[i : i + 3]) for i in range(len(argv) - 2)}
    assert ("--bind-try", codex, codex) in triples  # an ask's harness keeps its session too
    for pinned in ("config.toml", "hooks.json", "rules", "skills"):  # made by prepare: must be mounted
        assert ("--ro-bind", f"{codex}/{pinned}", f"{codex}/{pinned}") in triples
    # Found there, so the person's: pinned as well (where it is still there when bwrap mounts it).
    assert ("--ro-bind-try", f"{codex}/newer-config.toml", f"{codex}/newer-config.toml") in triples
    assert not any(t[1] == f"{codex}/sessions" for t in triples)
    assert ("--tmpfs", f"{codex}/shell_snapshots") in {(argv[i], argv[i + 1]) for i in range(len(argv) - 1)}
    # The state directory is mounted before what is pinned inside it.
    assert argv.index(codex) < argv.index(f"{codex}/config.toml")


# -- through the supervisor: a stand-in for claude -----------------------------------------------

#: Speaks just enough of Claude Code's stream-json for the turn to end with its probe as the answer.
STAND_IN = """#!/bin/sh
export D="$HOME/.claude"
{try_fn}
said=$( {{
try settings 'printf %s {hook} > "$D/settings.json"'
try hook_script 'echo "touch /pwned" > "$D/hooks/start.sh"'
try mcp_servers 'echo "{{}}" > "$HOME/.claude.json"'
try plugin 'mkdir "$D/plugins/evil"'
try transcript 'mkdir -p "$D/projects/k" && echo "{{}}" >> "$D/projects/k/s.jsonl"'
}} | tr '\\n' ' ')
id=2b7f3c1e-0000-4000-8000-000000000001
printf '{{"type":"system","subtype":"init","session_id":"%s"}}\\n' "$id"
printf '{{"type":"result","subtype":"success","is_error":false,"result":"%s","session_id":"%s"}}\\n' "$said" "$id"
"""


@needs_bwrap
def test_a_confined_claude_turn_cannot_write_claude_codes_configuration(
    box_env: Any, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.engine.project import Project
    from corral.engine.runtime.processes import reap_turn

    home = Path(os.environ["HOME"])
    (home / ".claude.json").write_text('{"mcpServers": {}}')
    stand_in = tmp_path / "claude-bin" / "claude"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN.format(try_fn=TRY.strip(), hook=json.dumps(HOOK)))
    stand_in.chmod(0o755)
    monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(stand_in))
    proj = Project.open(repo)
    try:
        task = tasks.create(proj, "Try the doors", actor=Actor.HUMAN, harness="claude")
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        done = finished(proj, task.ref)
        assert done.status is Status.BLOCKED, done.resting_cause
        (turn,) = agent_turns(proj, task)
    finally:
        reap_turn(proj, task.id)
        proj.close()
    assert verdicts(turn.content) == {
        "settings": "REFUSED",
        "hook_script": "REFUSED",
        "mcp_servers": "REFUSED",
        "plugin": "REFUSED",
        "transcript": "ALLOWED",
    }, turn.content
    assert json.loads((home / ".claude" / "settings.json").read_text()) == {}
    assert (home / ".claude.json").read_text() == '{"mcpServers": {}}'
    assert not (home / ".claude" / "hooks" / "start.sh").exists()
    assert (home / ".claude" / "projects" / "k" / "s.jsonl").read_text() == "{}\n"


@needs_bwrap
def test_a_state_directory_that_is_a_link_keeps_its_sessions_and_its_configuration_pinned(tmp_path: Path) -> None:
    """``~/.claude`` a link into a dotfiles checkout: the mounts land where it points, as they should."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "dotfiles" / "claude").mkdir(parents=True)
    (home / ".claude").symlink_to(tmp_path / "dotfiles" / "claude")
    script = TRY + (
        f"try settings 'echo {json.dumps(HOOK)} > $HOME/.claude/settings.json'\n"
        "try transcript 'mkdir -p $HOME/.claude/projects/k && echo {} > $HOME/.claude/projects/k/s.jsonl'\n"
    )
    done = confined("claude", home, script, tmp_path)
    assert verdicts(done.stdout) == {"settings": "REFUSED", "transcript": "ALLOWED"}, (done.stdout, done.stderr)
    assert json.loads((tmp_path / "dotfiles" / "claude" / "settings.json").read_text()) == {}
    assert (tmp_path / "dotfiles" / "claude" / "projects" / "k" / "s.jsonl").read_text() == "{}\n"
