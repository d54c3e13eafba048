"""The forge's tests: the real ``gh`` against the scripted GitHub on loopback (tests/support/forge_server.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.forge_server import ForgeServer

if shutil.which("gh") is None:  # CI installs Debian's gh (.ci/run): there its absence is a failure
    if os.environ.get("CI"):
        raise RuntimeError("gh is not installed; the forge's tests run the real gh (apt-get install gh)")
    pytest.skip("gh is not installed (apt-get install gh); the forge's tests run the real gh", allow_module_level=True)


@pytest.fixture
def forge(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForgeServer]:
    """A scripted forge whose bare repository is ``repo``'s origin, and ``gh`` pointed at it."""
    server = ForgeServer(tmp_path / "forge", required_checks=("ci",))
    server.monkeypatch(monkeypatch)
    server.connect(repo)
    yield server
    server.close()


@pytest.fixture
def fproj(agent, repo, tmp_path, monkeypatch):
    """A forge project (``forge = "gh"`` from the person's environment) whose claude is the fake agent."""
    from corral.engine.project import Project

    def make(**policy) -> tuple[Project, ForgeServer]:
        server = ForgeServer(tmp_path / "forge", **policy)
        server.monkeypatch(monkeypatch)
        server.connect(repo)
        monkeypatch.setenv("CORRAL_FORGE", "gh")
        monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "30")
        monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
        made.append((Project.open(repo), server))
        return made[-1]

    made: list = []
    yield make
    for p, server in made:
        p.close()
        server.close()
