"""The tests' PostgreSQL server (tests/support/postgres.py) ends with the run that started it, however the run ends.

A run killed by a signal runs no finalizer: before the watcher, each such run left its server running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.polling import until
from tests.support.postgres import Server

_RUN = (
    "import sys, time; sys.path.insert(0, sys.argv[1]); from tests.support.postgres import Server; "
    "s = Server(fsync=False); print(s.root, s.postmaster(), flush=True); time.sleep(600)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_run_killed_by_sigkill_leaves_no_server_running_and_no_cluster_on_disk() -> None:
    root = Path(__file__).resolve().parent.parent
    run = subprocess.Popen([sys.executable, "-c", _RUN, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        cluster, postmaster = run.stdout.readline().split()
        assert _alive(int(postmaster)) and Path(cluster, "data").is_dir()
        run.send_signal(signal.SIGKILL)
        run.wait()
        until(lambda: not _alive(int(postmaster)), timeout=60, what="the killed run's server stopped")
        until(lambda: not Path(cluster).exists(), timeout=60, what="the killed run's cluster removed")
    finally:
        run.kill()
        run.wait()


def test_a_server_stopped_at_a_runs_end_leaves_no_watcher_behind() -> None:
    server = Server(fsync=False)
    watcher = server._watcher
    postmaster = server.postmaster()
    assert watcher.poll() is None  # watching while the server runs
    server.stop()
    assert watcher.returncode == 0
    assert not _alive(postmaster) and not server.root.exists()
