"""An attempt's wait for its agent's exit is woken by the exit, not by the end of a nap."""

from __future__ import annotations

import subprocess
import sys
import time

from corral.adapters.process import exited
from corral.engine.runtime.attempts import ExitWatch

LONG = 60.0  # far longer than any exit below takes: a wait that ran it out would fail the test


def test_the_wait_ends_when_the_child_exits_and_leaves_it_unreaped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    with ExitWatch(proc.pid) as ended:
        began = time.monotonic()
        ended.wait(LONG)
        waited = time.monotonic() - began
    assert waited < LONG / 2, "the wait ran out its timeout instead of waking at the exit"
    assert exited(proc) and proc.returncode is None  # a zombie still: its pid is not given away yet
    assert proc.wait() == 0


def test_a_child_already_exited_does_not_hold_the_wait() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    while not exited(proc):
        time.sleep(0.01)
    with ExitWatch(proc.pid) as ended:
        began = time.monotonic()
        ended.wait(LONG)
        assert time.monotonic() - began < LONG / 2
    proc.wait()


def test_a_running_child_holds_the_wait_for_its_timeout() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with ExitWatch(proc.pid) as ended:
            ended.wait(0.05)
        assert not exited(proc)
    finally:
        proc.kill()
        proc.wait()
