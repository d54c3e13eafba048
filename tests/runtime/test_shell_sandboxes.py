"""The sandboxes corral's shell starts for a turn are written down where the turn's end reads them: what
each still holds is found (the sandbox first, to end it first), and nothing else is, however the record
was spoiled: a process that is no longer the one written down, or one without the turn's tag, is
never named for ending."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.adapters.pid_identity import proc_info
from corral.engine.runtime.processes import COMMAND_TAG, SHELL_SANDBOXES, note_shell_sandbox, shell_sandboxes

#: A sandbox-like process: a shell holding a sleeper of its own, both as long as the test needs.
HOLDER = "sleep 300 & echo $!; wait"


class Holder:
    """A sandbox-like process (a shell holding a sleeper of its own), with or without a turn's tag."""

    def __init__(self, command_id: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if k != COMMAND_TAG}
        if command_id is not None:
            env[COMMAND_TAG] = command_id
        self.proc = subprocess.Popen(["sh", "-c", HOLDER], env=env, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.sleeper = int(self.proc.stdout.readline())

    def end(self) -> None:
        for pid in (self.sleeper, self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for holder in made:
        holder.end()


def test_a_written_down_sandbox_is_found_first_then_what_it_holds(tmp_path: Path, holders: list[Holder]) -> None:
    box = Holder("turn-1")
    holders.append(box)
    note_shell_sandbox(tmp_path, box.proc.pid)
    found = [[p.pid for p in held] for held in shell_sandboxes(tmp_path, "turn-1")]
    assert found == [[box.proc.pid, box.sleeper]]  # the sandbox, to be ended first, then what it holds
    assert shell_sandboxes(tmp_path, "turn-2") == []  # another turn's end never ends it
    assert shell_sandboxes(tmp_path / "no-shell", "turn-1") == []  # a turn that ran no command of the shell


def test_a_spoiled_record_names_nothing_that_is_not_the_turns(tmp_path: Path, holders: list[Holder]) -> None:
    untagged, ended, moved = Holder(None), Holder("turn-1"), Holder("turn-1")
    holders += [untagged, ended, moved]
    note_shell_sandbox(tmp_path, untagged.proc.pid)  # not a process of the turn (no tag): written down all the same
    note_shell_sandbox(tmp_path, ended.proc.pid)
    ended.end()  # its pid is free for another process now
    start = proc_info(moved.proc.pid)
    assert start is not None
    with open(tmp_path / SHELL_SANDBOXES, "a", encoding="utf-8") as fh:
        fh.write("not json\n" + json.dumps({"pid": "x"}) + "\n" + json.dumps([1]) + "\n")
        # the turn's process, but not the one written down: its pid with another start
        fh.write(json.dumps({"pid": moved.proc.pid, "start": start.start + 1}) + "\n")
    assert shell_sandboxes(tmp_path, "turn-1") == []
