"""``corral daemon stop`` with no state file to go by signals only corral's own daemon of this home.

When the home's daemon directory is gone, the daemon is found among this user's processes; a
process that merely carries the home in its environment and the words ``corral daemon run`` in its
command line (a shell running a script, an editor, a grep) is not it, and is left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.engine import daemons
from corral.engine.paths import corral_home
from tests.conftest import CLI

NOT_THE_DAEMON = [
    ["sh", "-c", "sleep 60; echo corral daemon run", "corral daemon run"],
    [sys.executable, "-c", "import time; time.sleep(60)", "corral", "daemon", "run"],
    [sys.executable, "-c", "import time; time.sleep(60)", "-m", "corral", "daemon", "run"],
]


@pytest.fixture
def lookalikes(repo: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {**os.environ, "CORRAL_HOME": str(corral_home())}
    procs = [subprocess.Popen(argv, env=env, cwd=repo, start_new_session=True) for argv in NOT_THE_DAEMON]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_daemon_stop_leaves_alone_a_process_that_only_names_the_daemon(
    lookalikes: list[subprocess.Popen[bytes]], corral: CLI
) -> None:
    assert not daemons.daemon_dir().exists() or not daemons.state().running
    stopped = corral.json("daemon", "stop")
    assert stopped["was_running"] is False
    assert [proc.poll() for proc in lookalikes] == [None] * len(lookalikes)


@pytest.mark.parametrize(
    ("argv", "is_daemon"),
    [
        (["/usr/bin/python3", "-m", "corral", "daemon", "run"], True),  # as the daemon is started in the background
        (["/home/u/.venv/bin/python", "/home/u/.venv/bin/corral", "daemon", "run", "--json"], True),  # the script
        (["/home/u/.local/bin/corral", "daemon", "run", "--tick", "5"], True),
        (["sh", "-c", "corral daemon run"], False),
        (["python3", "-c", "pass", "corral", "daemon", "run"], False),
        (["python3", "-c", "pass", "-m", "corral", "daemon", "run"], False),
        (["grep", "corral", "daemon", "run"], False),
        (["/usr/bin/python3", "-m", "corral", "daemon", "status"], False),
        (["/usr/bin/python3", "-m", "corral", "daemon", "run", "extra"], False),
    ],
)
def test_what_counts_as_the_daemons_command_line(argv: list[str], is_daemon: bool) -> None:
    assert daemons.is_daemon_command(argv) is is_daemon
