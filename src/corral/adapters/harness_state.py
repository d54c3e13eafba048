"""What a harness keeps in its own state directory inside the sandbox, and what there stays the person's.

A confined turn's harness keeps its sessions, caches and login in its state directory (Claude
Code's ``~/.claude``, ``$CODEX_HOME``, Pi's ``~/.pi/agent``), which stays writable; everything
in it that a later, unconfined run of the harness would execute or obey is its configuration,
mounted read-only over it (:class:`HarnessState`, :func:`state_mounts`), so the agent cannot
change what the person runs next (docs/harnesses.md#sandbox). :mod:`corral.adapters.sandbox`
puts these mounts in its ``bwrap`` argv.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path

from msgspec import Struct


class HarnessState(Struct, frozen=True):
    """One of a harness's state directories inside the sandbox (docs/harnesses.md#sandbox).

    The directory is writable, so the harness keeps its session and its credentials; what in it
    is configuration that a later, unconfined run of the harness would execute or obey is pinned
    read-only (``read_only``), and what is only ever one session's scratch that the harness runs
    from (its shell snapshots) is a private tmpfs (``private``). ``state`` names (``fnmatch``
    patterns) are the harness's own state: every other entry of the directory that exists when
    the turn starts is pinned too, so configuration corral does not know of by name is still the
    person's. ``placeholders`` are configuration the harness reads that :func:`prepare` creates,
    empty, where it is missing (a directory, or a file with the content given), so that it can be
    pinned: a mount needs something to mount over, and an agent must not *create* them either.

    Why read-only mounts in the person's own directory, and not a private configuration directory
    per session seeded from it: the harness's login stays one. Claude Code, Codex and Pi refresh
    their tokens as they run, and a refresh written to a private copy would leave the person's
    own login stale (a refresh token used once is spent); the sessions stay where ``--resume``,
    the workers' session shipping (:mod:`corral.adapters.harness.sessions`) and ``chat`` find
    them; and there is no copy to keep in step or to clean. Why the directory stays writable and
    its configuration is pinned, not the reverse: a harness replaces its login file by renaming a
    new one beside it (Claude Code's ``.credentials.json``) or locks it with a directory beside it
    (Pi's ``auth.json.lock``), which a read-only directory would refuse.
    """

    root: Path
    state: tuple[str, ...] = ()
    private: tuple[str, ...] = ()
    placeholders: tuple[tuple[str, str | None], ...] = ()  # (name, file content) — None: a directory

    def pinned(self) -> list[Path]:
        """What is read-only inside: every placeholder, and each existing entry that is not state."""
        names = {name for name, _ in self.placeholders}
        try:
            names |= {entry.name for entry in os.scandir(self.root)}
        except OSError:
            pass
        keep = (*self.state, *self.private)
        return [self.root / n for n in sorted(names) if not any(fnmatch.fnmatchcase(n, p) for p in keep)]


#: Claude Code's own state in its configuration directory: what it writes keeping sessions, caches
#: and its login (``.credentials.json``, which it replaces by renaming a new file over it: the
#: directory must stay writable). Taken from the list Claude Code 2.1.332 itself keeps apart from
#: its configuration, less what holds or copies configuration (``backups/``, copies of
#: ``~/.claude.json`` with its ``mcpServers``; the managed settings it fetches, signed) or what it
#: runs later (its jobs, tasks and teams) or connects to (``ide/``: the editors' MCP servers it
#: finds by their lock files); everything else there (``settings.json``, ``hooks/``,
#: ``plugins/``, ``agents/``, ``commands/``, ``skills/``, ``CLAUDE.md``, ``.claude.json`` under
#: ``CLAUDE_CONFIG_DIR``…) is configuration.
CLAUDE_STATE = (
    ".credentials.json", ".claude.json.lock", "*.tmp.*", "*.lock",
    "projects", "sessions", "todos", "statsig", "file-history", "history.jsonl", "logs",
    "debug", "plans", "telemetry", "cache", "paste-cache", "image-cache", "stats-cache.json",
    "mcp-needs-auth-cache.json", "gh-pr-status-cache.json", "usage-data", "uploads", "feedback",
    "feedback-bundles", "traces", "startup-perf", "active-time.json", ".session_ingress_token",
)  # fmt: skip
#: Claude Code's configuration that is executed or obeyed, held even before it exists.
CLAUDE_PLACEHOLDERS: tuple[tuple[str, str | None], ...] = (
    ("settings.json", "{}\n"),
    ("settings.local.json", "{}\n"),
    ("CLAUDE.md", ""),
    *((name, None) for name in ("hooks", "agents", "commands", "skills", "plugins", "output-styles", "rules")),
    *((name, None) for name in ("workflows", "routines", "backups", "ide")),
)
#: Codex's own state in ``$CODEX_HOME``: its sessions, its SQLite state and logs, its login
#: (``auth.json``), caches and temporary files. Configuration: ``config.toml`` (``notify``, MCP
#: server commands, providers), ``hooks.json``, ``rules/`` (what it may run unasked),
#: ``skills/``, ``prompts/``, ``plugins/``, ``AGENTS.md``.
CODEX_STATE = (
    "sessions", "archived_sessions", "log", "*.sqlite", "*.sqlite-*", "auth.json", "history.jsonl",
    "installation_id", ".sandbox_migration", "version.json", "models_cache.json", "cache", "tmp", ".tmp",
    ".tmp*", "thread-writer-locks", "*.lock", "memories",
)  # fmt: skip
CODEX_PLACEHOLDERS: tuple[tuple[str, str | None], ...] = (
    ("config.toml", ""),
    ("hooks.json", "{}\n"),
    ("AGENTS.md", ""),
    *((name, None) for name in ("rules", "skills", "prompts", "plugins")),
)
#: Pi's own state in its agent directory: its sessions and its login (``auth.json``, locked by
#: a ``auth.json.lock`` directory beside it). Configuration: ``settings.json`` (``shellPath``,
#: packages), ``models.json`` (an ``apiKey`` may be a ``!command``), ``extensions/`` (code Pi
#: loads), ``skills/``, ``prompts/``, ``tools/``, ``bin/`` (the helpers it runs), ``AGENTS.md``.
PI_STATE = ("sessions", "auth.json", "*.lock", "*.tmp")
PI_PLACEHOLDERS: tuple[tuple[str, str | None], ...] = (
    ("settings.json", "{}\n"),
    ("models.json", '{"providers": {}}\n'),
    ("AGENTS.md", ""),
    ("APPEND_SYSTEM.md", ""),
    *((name, None) for name in ("extensions", "skills", "prompts", "tools", "bin")),
)


def harness_state(harness: str, env: Mapping[str, str]) -> list[HarnessState]:
    """The harness's state directories, each with what in it stays the person's."""
    home = Path(env.get("HOME") or "/")
    if harness == "claude":
        config = env.get("CLAUDE_CONFIG_DIR")
        # Under CLAUDE_CONFIG_DIR, .claude.json lives in it (state and MCP servers in one file).
        extra = ((".claude.json", "{}\n"),) if config else ()
        root = Path(config) if config else home / ".claude"
        return [HarnessState(root, CLAUDE_STATE, ("shell-snapshots", "session-env"), CLAUDE_PLACEHOLDERS + extra)]
    if harness == "codex":
        root = Path(env.get("CODEX_HOME") or home / ".codex")
        return [HarnessState(root, CODEX_STATE, ("shell_snapshots",), CODEX_PLACEHOLDERS)]
    if harness == "pi":
        agent_dir = env.get("PI_CODING_AGENT_DIR")
        root = Path(os.path.expanduser(agent_dir)) if agent_dir else home / ".pi" / "agent"
        return [HarnessState(root, PI_STATE, (), PI_PLACEHOLDERS)]
    return []


def pinned_files(harness: str, env: Mapping[str, str]) -> list[Path]:
    """Configuration outside the state directories, seen read-only inside: Claude Code's
    ``~/.claude.json`` (its state, and its ``mcpServers``, the user's and each project's). Claude
    Code rewrites it by renaming a new file over it, which the read-only home refuses, and goes on
    (checked with the real binary): what it would note there during a confined turn is not kept."""
    if harness == "claude" and not env.get("CLAUDE_CONFIG_DIR"):
        return [Path(env.get("HOME") or "/") / ".claude.json"]
    return []


def _make_placeholder(path: Path, content: str | None) -> None:
    if content is None:
        path.mkdir(exist_ok=True)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # the person's own, or a directory: pinned as it is
    with os.fdopen(fd, "w") as out:
        out.write(content)


def prepare_state(harness: str, env: Mapping[str, str]) -> None:
    """The harness's state directories made (a home hidden read-only would refuse its own ``mkdir``),
    with the configuration placeholders and private directories in them (:class:`HarnessState`:
    never over anything that exists)."""
    for state in harness_state(harness, env):
        try:
            state.root.mkdir(parents=True, exist_ok=True)
            for name in state.private:
                (state.root / name).mkdir(exist_ok=True)
            for name, content in state.placeholders:
                _make_placeholder(state.root / name, content)
        except OSError:
            pass  # state_mounts finds it missing and holds the whole directory read-only


def state_mounts(harness: str, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The harness-state part of the bwrap argv, as (flag, path) in mount order: each state
    directory writable, then its configuration pinned read-only and its private directories made
    tmpfs. A directory whose configuration cannot all be pinned (a placeholder :func:`prepare`
    could not make, or an entry that is a symbolic link, which a mount would follow out of it) is
    bound read-only whole: the harness then keeps nothing there, and nothing of the agent's stays."""
    out: list[tuple[str, str]] = []
    for state in harness_state(harness, env):
        root = os.path.normpath(os.path.abspath(state.root))
        pinned = state.pinned()
        private = [state.root / name for name in state.private]
        if any(not os.path.lexists(p) or os.path.islink(p) for p in [*pinned, *private]):
            out.append(("--ro-bind-try", root))
            continue
        out.append(("--bind-try", root))
        made = {name for name, _ in state.placeholders}
        # A placeholder must be there (or bwrap fails, and nothing runs); another entry may have
        # been a harness's temporary file, gone since: nothing of the person's to hold then.
        out += [("--ro-bind" if p.name in made else "--ro-bind-try", os.path.join(root, p.name)) for p in pinned]
        out += [("--tmpfs", os.path.join(root, p.name)) for p in private]
    for path in pinned_files(harness, env):
        out.append(("--ro-bind-try", os.path.normpath(os.path.abspath(path))))
    return out
