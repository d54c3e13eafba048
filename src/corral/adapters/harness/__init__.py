"""Harness adapters: Claude Code, Pi, Codex and any command, behind one contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.adapters.harness.base import Harness
from corral.adapters.harness.claude import ClaudeHarness
from corral.adapters.harness.codex import CodexHarness
from corral.adapters.harness.command import CommandHarness
from corral.adapters.harness.pi import PiHarness
from corral.domain.settings import default
from corral.errors import UsageError

NAMES = ("claude", "pi", "codex", "command")


def make_harness(name: str, settings: Mapping[str, Any]) -> Harness:
    """The adapter for ``name``, with executables from (trusted) settings."""

    def executable(key: str) -> str:
        return str(settings.get(key) or default(key, str))

    if name == "claude":
        return ClaudeHarness(executable("claude_bin"))
    if name == "pi":
        return PiHarness(executable("pi_bin"), settings.get("pi_provider"))
    if name == "codex":
        return CodexHarness(executable("codex_bin"))
    if name == "command":
        return CommandHarness(settings.get("command") or "")
    raise UsageError(f"'{name}' is not a harness corral knows.", hint=f"Use one of: {', '.join(NAMES)}.")
