"""Harness adapters: Claude Code, Pi, Codex and any command, behind one contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.adapters.harness.base import Harness
from corral.adapters.harness.claude import ClaudeHarness
from corral.adapters.harness.codex import CodexHarness
from corral.adapters.harness.command import CommandHarness
from corral.adapters.harness.pi import PiHarness
from corral.errors import UsageError

NAMES = ("claude", "pi", "codex", "command")


def make_harness(name: str, settings: Mapping[str, Any]) -> Harness:
    """The adapter for ``name``, with executables from (trusted) settings."""
    if name == "claude":
        return ClaudeHarness(settings.get("claude_bin") or "claude")
    if name == "pi":
        return PiHarness(settings.get("pi_bin") or "pi", settings.get("pi_provider"))
    if name == "codex":
        return CodexHarness(settings.get("codex_bin") or "codex")
    if name == "command":
        return CommandHarness(settings.get("command") or "")
    raise UsageError(f"'{name}' is not a harness corral knows.", hint=f"Use one of: {', '.join(NAMES)}.")
