"""A single person's install leaves the team's engine out: a plain ``pip install .`` into a fresh venv brings
no PostgreSQL driver, pool or job engine, and ``corral worker`` or a ``database_url`` then say the one line
that adds them, a line that works when typed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEAM = ("psycopg", "psycopg_pool", "procrastinate")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _checkout(into: Path) -> Path:
    """A copy of what ``pip install .`` reads, so building it leaves nothing in the working tree."""
    into.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", into)
    shutil.copy2(ROOT / "README.md", into)
    shutil.copytree(ROOT / "src", into / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return into


def _run(
    argv: list[str], *, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False)


#: What every ``pip install`` here adds to what a person types: quiet, and no byte-compiling of what it installs.
#: Compiling thousands of installed files ahead of use is most of an install's work and none of what this proves;
#: a module imported here is compiled as it is first imported, as in any install made with ``--no-compile``.
QUIET = ("-q", "--no-compile")


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv with ``pip install .`` of this checkout and nothing else: (the venv, the checkout).

    The venv gets its pip as ``pip install --upgrade pip`` gives it (from the index pip is configured with), not from
    ``ensurepip``: that one byte-compiles pip and setuptools as it installs them, and an older pip spends seconds more
    weighing every file an index lists for each dependency. Neither is what this proves."""
    base = tmp_path_factory.mktemp("plain-install")
    checkout = _checkout(base / "corral")
    venv = base / "venv"
    python = str(venv / "bin" / "python")
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    assert made.returncode == 0, made.stderr
    booted = _run([sys.executable, "-m", "pip", "--python", python, "install", *QUIET, "--upgrade", "pip"], cwd=base)
    assert booted.returncode == 0, booted.stdout + booted.stderr
    pip = _run([python, "-m", "pip", "install", *QUIET, "."], cwd=checkout)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv, checkout


def _importable(venv: Path, module: str) -> bool:
    probe = _run([str(venv / "bin" / "python"), "-c", f"import {module}"], cwd=venv)
    return probe.returncode == 0


def test_a_plain_install_has_no_team_engine_and_the_worker_says_the_line_that_adds_it(
    plain_install: tuple[Path, Path], tmp_path: Path, repo: Path
) -> None:
    venv, checkout = plain_install
    for module in TEAM:
        assert not _importable(venv, module), f"a plain install pulled in {module}"
    assert _importable(venv, "corral.cli")
    # The package's data files are installed too: without them a Pi turn gets no corral tools and the
    # dashboard no pages. ``missing()`` is the extension's own check a launch makes.
    probe = _run([str(venv / "bin" / "python"), "-c", "import corral.pi_extension as e; print(e.missing())"], cwd=venv)
    assert probe.returncode == 0 and probe.stdout.strip() == "[]", probe.stdout + probe.stderr

    worker = _run([str(venv / "bin" / "corral"), "worker"], cwd=repo)
    assert worker.returncode == 1, worker.stdout + worker.stderr
    assert "corral[team]" in worker.stderr
    assert "Traceback" not in worker.stderr
    python = str(venv / "bin" / "python")
    line = f"{python} -m pip install '{checkout}[team]'"
    assert line in worker.stderr, worker.stderr

    as_json = _run([str(venv / "bin" / "corral"), "worker", "--json"], cwd=repo)
    doc = json.loads(as_json.stdout)
    assert doc["error"]["code"] == "team-extra-missing"
    assert doc["error"]["hint"] == line

    # A database_url names the team's store: the same line, not a traceback or a driver's name alone.
    env = {**os.environ, "CORRAL_DATABASE_URL": "postgresql://corral@127.0.0.1:9/corral"}
    listed = _run([str(venv / "bin" / "corral"), "list", "--json"], cwd=repo, env=env)
    assert listed.returncode == 1, listed.stdout + listed.stderr
    error = json.loads(listed.stdout)["error"]
    assert error["code"] == "team-extra-missing"
    assert error["hint"] == line

    # The hint works when typed: it adds the extra to this very install, and the worker goes on to its own checks.
    typed = _run(["bash", "-c", " ".join([line, *QUIET])], cwd=tmp_path, timeout=500)
    assert typed.returncode == 0, typed.stdout + typed.stderr
    for module in TEAM:
        assert _importable(venv, module), f"the hint did not install {module}"
    after = _run([str(venv / "bin" / "corral"), "worker", "--json"], cwd=repo)
    assert json.loads(after.stdout)["error"]["code"] == "worker-no-projects", after.stdout + after.stderr
