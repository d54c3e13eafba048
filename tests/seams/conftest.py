"""Fixtures for the real-binary seam tests: the pinned Claude Code CLI and a home for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.claude import claude_bin_or_skip


@pytest.fixture
def claude() -> Path:
    """The pinned Claude Code binary; fails under CI when missing, skips with the reason locally."""
    return claude_bin_or_skip()


@pytest.fixture
def claude_home(tmp_path: Path) -> Path:
    """A fresh HOME for the CLI (its config, sessions and transcripts land here)."""
    home = tmp_path / "claude-home"
    home.mkdir()
    return home
