"""The runner reaps a child that closed its output as soon as it exits, and still ends one past its time limit
(``SubprocessRunner.run`` waits on the child's pidfd once its output has ended)."""

from __future__ import annotations

import pytest

from corral.adapters.process import SubprocessRunner
from corral.errors import ProgramTimeout


def test_a_child_that_closed_its_output_is_waited_for_and_its_code_kept() -> None:
    done = SubprocessRunner().run(["sh", "-c", "echo said; exec >&- 2>&-; sleep 0.3; exit 7"], timeout=20)
    assert (done.returncode, done.stdout) == (7, "said\n")


def test_a_child_that_closed_its_output_is_still_ended_at_its_limit() -> None:
    with pytest.raises(ProgramTimeout):
        SubprocessRunner().run(["sh", "-c", "exec >&- 2>&-; sleep 30"], timeout=0.5)


def test_without_a_limit_the_wait_is_subprocess_s_own() -> None:
    done = SubprocessRunner().run(["sh", "-c", "exec >&- 2>&-; exit 3"])
    assert done.returncode == 3
