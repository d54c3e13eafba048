"""Harness adapters: Claude Code, Pi, Codex and any command, behind one contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from corral.domain.settings import default
from corral.errors import UsageError

if TYPE_CHECKING:
    from corral.adapters.harness.base import Harness

NAMES = ("claude", "pi", "codex", "command")


def make_harness(name: str, settings: Mapping[str, Any]) -> Harness:
    """The adapter for ``name``, with executables from (trusted) settings."""

    def executable(key: str) -> str:
        return str(settings.get(key) or default(key, str))

    # Each adapter loads when it is asked for: a command that reads one turn's log needs one.
    if name == "claude":
        from corral.adapters.harness.claude import ClaudeHarness

        return ClaudeHarness(executable("claude_bin"))
    if name == "pi":
        from corral.adapters.harness.pi import PiHarness

        extensions, shell = tuple(settings.get("pi_extensions") or ()), settings.get("pi_corral_shell") is True
        return PiHarness(executable("pi_bin"), settings.get("pi_provider"), extensions, shell)
    if name == "codex":
        from corral.adapters.harness.codex import CodexHarness

        return CodexHarness(executable("codex_bin"))
    if name == "command":
        from corral.adapters.harness.command import CommandHarness

        return CommandHarness(settings.get("command") or "")
    raise UsageError(f"'{name}' is not a harness corral knows.", hint=f"Use one of: {', '.join(NAMES)}.")
