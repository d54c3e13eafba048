"""Shared fixtures: a hermetic environment, temporary git repositories, the real CLI.

Every test runs with its own ``CORRAL_HOME``, no user config, no colour, a fixed
terminal width and a git identity, so nothing on the machine leaks in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from corral.testing.fake_agent import wrapper_script
from tests.support import inprocess, slow_first, template_repo

settings.register_profile("ci", deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=50)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

_ISOLATED = {
    "NO_COLOR": "1",
    "COLUMNS": "120",
    "LC_ALL": "C.UTF-8",
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
_GITCONFIG = "[init]\n\tdefaultBranch = main\n[user]\n\tname = Test\n\temail = test@example.com\n"
_DROPPED = ("CORRAL_ACTOR", "CORRAL_DEBUG", "VISUAL", "EDITOR", "GIT_DIR", "GIT_WORK_TREE")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own corral home, user config, git config and HOME; a daemon a test's launch
    started in that home is stopped after it (it would tick for the rest of the run, and after it)."""
    base = tmp_path_factory.mktemp("env")
    home = base / "home"
    home.mkdir()
    gitconfig = base / "gitconfig"
    gitconfig.write_text(_GITCONFIG)
    for key, value in _ISOLATED.items():
        monkeypatch.setenv(key, value)
    for key in list(os.environ):
        if key.startswith("CORRAL_") or key in _DROPPED:
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(home))
    # A turn's agent gets corral's tools from a home daemon that its launch starts: a test about
    # them turns this on (tests/mcp_doors/), every other test runs its turns without a daemon.
    monkeypatch.setenv("CORRAL_AGENT_TOOLS", "0")
    # The fake agent's scenario and record files live under /tmp, which a sandboxed turn cannot see:
    # turns run unconfined unless a test is about the sandbox (tests/runtime/test_sandbox.py).
    monkeypatch.setenv("CORRAL_SANDBOX", "off")
    monkeypatch.setenv("CORRAL_HOME", str(base / "corral-home"))
    monkeypatch.setenv("CORRAL_CONFIG_FILE", str(base / "user-config.toml"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(base / "xdg-data"))
    yield base
    corral_home = base / "corral-home"
    if (corral_home / "daemon").is_dir():
        from corral.engine import daemons

        daemons.stop_running(corral_home, timeout=5.0)  # only the daemon its own state names, as `daemon stop`


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture(scope="session")
def repo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository :func:`repo` copies, made once per test process in the environment
    :func:`isolated_env` gives a test (its git identity and config, nothing of the machine's)."""
    base = tmp_path_factory.mktemp("template")
    gitconfig = base / "gitconfig"
    gitconfig.write_text(_GITCONFIG)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(base),
        "GIT_CONFIG_GLOBAL": str(gitconfig),
        **_ISOLATED,
    }
    if "TZ" in os.environ:  # the commit's zone, as a test's own git would take it
        env["TZ"] = os.environ["TZ"]
    return template_repo.make(base / "repo", env)


@pytest.fixture
def repo(tmp_path: Path, repo_template: Path) -> Path:
    """A git repository on ``main`` with one commit (``README.md``): a copy of :func:`repo_template`,
    the repository ``git init``, ``add`` and ``commit`` would have made here."""
    return template_repo.copy(repo_template, tmp_path / "repo")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class CLI:
    """The real ``corral`` entry point in ``cwd``: run in the test process (:mod:`tests.support.inprocess`,
    exact as a process: arguments, cwd, environment, stdin, exit code, stdout and stderr apart), or
    as a process of its own through :attr:`process`.

    A test about a process boundary — signals, a terminal, a broken pipe, a process killed in the
    middle of a command, start-up cost, ``python -m corral`` itself — asks for ``corral.process``;
    so does every call in a test marked ``cli_process``, and every call with ``--cli-process``
    (the whole suite as it ran before, to tell whether a failure is the in-process run's).
    A call that cannot be exact in-process (crash points, which corral reads at import; another
    locale) is refused with the reason, so it is moved to ``corral.process`` by hand.
    """

    def __init__(self, cwd: Path, *, spawn: bool = False) -> None:
        self.cwd = cwd
        self.spawn = spawn

    @property
    def process(self) -> CLI:
        """The same CLI, run as a process of its own (``python -m corral``) for every call."""
        return CLI(self.cwd, spawn=True)

    def __call__(
        self,
        *args: str,
        input: str | bytes | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60,
    ) -> Result:
        full_env = dict(os.environ)
        full_env.update(env or {})
        data = input.encode("utf-8", "surrogateescape") if isinstance(input, str) else input
        if self.spawn or _EVERY_CALL_A_PROCESS:
            proc = subprocess.run(
                [sys.executable, "-m", "corral", *args],
                cwd=cwd or self.cwd,
                env=full_env,
                input=data if data is not None else b"",
                capture_output=True,
                timeout=timeout,
            )
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        else:
            why = inprocess.unfit(full_env)
            if why is not None:
                raise AssertionError(
                    f"`corral {' '.join(args)}` cannot run in the test process ({why}): use corral.process"
                )
            code, out, err = inprocess.run(
                args, cwd=Path(cwd or self.cwd), env=full_env, stdin=data or b"", timeout=timeout
            )
        return Result(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def ok(self, *args: str, **kw: Any) -> Result:
        result = self(*args, **kw)
        assert result.returncode == 0, f"corral {' '.join(args)} -> {result.returncode}\n{result.stderr}"
        return result

    def json(self, *args: str, **kw: Any) -> Any:
        return self.ok(*args, "--json", **kw).json()


#: Set for a test marked ``cli_process`` (and for the whole run by ``--cli-process``): every CLI call a process.
_EVERY_CALL_A_PROCESS = False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cli-process",
        action="store_true",
        help="Run every call of the corral CLI fixture as a process of its own (none in the test process).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cli_process: every call of the corral CLI fixture in this test runs as a process of its own"
    )
    if not hasattr(config, "workerinput"):  # once, in the process that runs or hands out the tests
        compile_corral()
    # The test modules' assertion rewriting is cached as pytest's own bytecode beside them, so each
    # run (and each worker of ``-n``) reads it instead of rewriting and compiling ~300 modules
    # again: seconds of every worker's collection where the environment says not to write bytecode.
    sys.dont_write_bytecode = False
    _terminal_signals()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of the longest tests first (:mod:`tests.support.slow_first`), so that under ``-n``
    neither worker is left running them alone at the end; each file's tests keep their order."""
    items.sort(key=lambda item: slow_first.rank(item.nodeid))


def compile_corral() -> None:
    """corral's modules compiled to bytecode once, before any test: the suite starts thousands of
    Python processes that import corral (supervisors, workers, daemons, the fake agent, commands
    run as processes), and where the environment says not to write bytecode
    (``PYTHONDONTWRITEBYTECODE``, set in some sandboxes) each of them would compile again every
    module changed since its bytecode was last written: a tenth of a second or more per process.
    Only what is stale is compiled (the bytecode records its source's time and size)."""
    import compileall

    import corral

    compileall.compile_dir(Path(corral.__file__).parent, quiet=2)


def _terminal_signals() -> None:
    """A shell starts a command it runs in the background (``&``, without job control) with SIGINT and SIGQUIT
    ignored, and every process a test starts would inherit that: its Ctrl-C tests would wait out their timeouts.
    The tests are about a person's terminal, where neither is ignored."""
    for sig, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL)):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def _cli_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    global _EVERY_CALL_A_PROCESS
    _EVERY_CALL_A_PROCESS = bool(
        request.config.getoption("--cli-process") or request.node.get_closest_marker("cli_process")
    )
    yield
    _EVERY_CALL_A_PROCESS = False


@pytest.fixture
def corral(repo: Path) -> CLI:
    return CLI(repo)


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def project(repo: Path, clock: FakeClock) -> Iterator[Any]:
    """An opened ``Project`` on ``repo`` with a fake clock."""
    from corral.engine.project import Project

    proj = Project.open(repo, clock=clock)
    yield proj
    proj.close()


class FakeAgent:
    """Scripts the fake agent's invocations and reads back what each one received."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.record = root / "record"
        self.scenario = root / "scenario.json"
        self.bin = wrapper_script(root / "bin")
        monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(self.bin))
        monkeypatch.setenv("CORRAL_FAKE_SCENARIO", str(self.scenario))
        monkeypatch.setenv("CORRAL_FAKE_RECORD", str(self.record))
        self.script()

    def script(self, *invocations: list[dict[str, Any]], default: list[dict[str, Any]] | None = None) -> None:
        doc: dict[str, Any] = {"invocations": [list(i) for i in invocations]}
        if default is not None:
            doc["default"] = default
        self.scenario.write_text(json.dumps(doc))
        counter = self.record / "fake-agent.count"
        if counter.exists():
            counter.unlink()

    def calls(self) -> list[dict[str, Any]]:
        path = self.record / "invocations.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeAgent:
    return FakeAgent(tmp_path / "agent", monkeypatch)


@pytest.fixture
def proj(agent: FakeAgent, repo: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A project on ``repo`` with the real clock, whose claude is the fake agent."""
    from corral.engine.project import Project

    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "30")
    # Crash recovery has its own tests; here an interrupted task stays interrupted.
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    p = Project.open(repo)
    yield p
    p.close()
