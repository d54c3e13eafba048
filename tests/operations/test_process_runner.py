"""The process runner: the one way the engine starts a program, injected through ``Project``.

With :class:`corral.testing.fake_runner.FakeRunner` no process runs: these tests check what the notify
hook, the doctor's ``--version``, the post-turn check and corral's shell ask for (the argv, the input,
the time limit, how output is taken) and how each reads the answer (an exit code, a timeout, a
program that is not there). The real runner's typed failures are driven with real processes.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.process import SubprocessRunner, pid_alive
from corral.engine.config import harness_settings, load_config
from corral.engine.operations import notify, preflight, shell
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.check import run_check
from corral.errors import ArgvError, ProgramError, ProgramMissing, ProgramTimeout
from corral.testing.fake_runner import Call, FakeRunner
from tests.support.polling import until

# -- the project carries the runner --------------------------------------------------------------


def test_a_project_runs_programs_through_the_runner_it_was_given_and_the_real_one_by_default(repo: Path) -> None:
    fake = FakeRunner()
    given = Project.open(repo, runner=fake)
    plain = Project.open(repo)
    try:
        assert given.runner is fake
        assert isinstance(plain.runner, SubprocessRunner)
    finally:
        given.close()
        plain.close()


# -- the notify hook -------------------------------------------------------------------------------

DOC: dict[str, object] = {"event": "notice", "task": {"id": "t1", "ref": "x"}, "notice": {"key": "k1"}}


def _hook(runner: FakeRunner, hook: str) -> list[dict[str, object]]:
    logged: list[dict[str, object]] = []
    notify.run_hook(runner, hook, DOC, logged.append)
    return logged


def test_the_hook_gets_its_words_as_a_shell_splits_them_and_the_notice_on_stdin_under_its_limit() -> None:
    runner = FakeRunner().on("notify-me")
    assert _hook(runner, "notify-me --urgent 'two words'") == []  # exit 0: nothing to log
    (call,) = runner.calls
    assert call.how == "run" and call.argv == ("notify-me", "--urgent", "two words")
    assert call.timeout == notify.HOOK_TIMEOUT_SECONDS
    assert json.loads(call.input or "") == DOC


def test_a_hook_that_exits_non_zero_is_logged_with_its_code_and_stderr() -> None:
    runner = FakeRunner().on("notify-me", returncode=3, stderr="no display\n")
    (failed,) = _hook(runner, "notify-me")
    assert failed == {"event": "notify-failed", "notice": "k1", "message": "exit 3: no display\n"}


def test_a_hook_that_is_not_installed_is_logged_as_missing_not_raised() -> None:
    (failed,) = _hook(FakeRunner(), "notify-me --urgent")
    assert failed["event"] == "notify-failed" and failed["code"] == "program-missing"
    assert "notify-me" in str(failed["message"])


def test_a_hook_that_hangs_is_logged_as_timed_out_not_raised() -> None:
    (failed,) = _hook(FakeRunner().on("notify-me", hangs=True), "notify-me")
    assert failed["code"] == "program-timeout"
    assert f"{notify.HOOK_TIMEOUT_SECONDS:g} s limit" in str(failed["message"])


def test_a_hook_that_cannot_be_split_or_is_blank_runs_nothing_and_says_why() -> None:
    runner = FakeRunner().on("notify-me")
    (unclosed,) = _hook(runner, "notify-me 'unclosed")
    (blank,) = _hook(runner, "   ")
    assert "cannot be parsed" in str(unclosed["message"]) and "no command" in str(blank["message"])
    assert runner.calls == []


def test_a_hook_argument_with_a_nul_is_refused_before_anything_runs_and_logged() -> None:
    runner = FakeRunner().on("notify-me")
    (failed,) = _hook(runner, "notify-me 'a\x00b'")
    assert failed["code"] == "argv-invalid" and runner.calls == []


# -- the doctor's look at a harness ---------------------------------------------------------------


@pytest.fixture
def claude_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An executable named ``claude`` on PATH that fails loudly if it is ever run: the fake answers instead."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "claude"
    exe.write_text("#!/bin/sh\necho 'the real program ran' >&2\nexit 99\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return str(exe)


def _values() -> dict[str, Any]:
    return harness_settings(load_config(user_file=None, project_file=None, env={}))


def test_doctor_asks_the_harness_for_its_version_under_its_limit_and_keeps_the_first_line(claude_on_path: str) -> None:
    runner = FakeRunner().on(claude_on_path, "--version", stdout="2.1.0 (Claude Code)\nmore\n")
    found = preflight.report_one("claude", _values(), runner)
    assert found.found and found.path == claude_on_path
    assert found.version == "2.1.0 (Claude Code)" and found.problem is None
    assert runner.calls == [Call("run", (claude_on_path, "--version"), timeout=preflight.VERSION_TIMEOUT)]


def test_doctor_reads_a_version_said_on_stderr_and_names_a_failing_exit(claude_on_path: str) -> None:
    runner = FakeRunner().on(claude_on_path, returncode=2, stderr="claude: bad install\n")
    found = preflight.report_one("claude", _values(), runner)
    assert found.version == "claude: bad install"
    assert found.problem == "`claude --version` exited 2"


def test_doctor_says_a_version_that_never_answers_ran_out_of_time(claude_on_path: str) -> None:
    found = preflight.report_one("claude", _values(), FakeRunner().on(claude_on_path, hangs=True))
    assert found.version is None
    assert found.problem == f"`claude --version` did not answer within {int(preflight.VERSION_TIMEOUT)} s"


def test_doctor_says_a_harness_that_vanished_before_its_version_could_not_run(claude_on_path: str) -> None:
    found = preflight.report_one("claude", _values(), FakeRunner().on(claude_on_path, missing=True))
    assert found.version is None and found.problem is not None
    assert found.problem.startswith("`claude --version` could not run:")


def test_doctor_report_uses_the_projects_runner(repo: Path, claude_on_path: str) -> None:
    runner = FakeRunner().on(claude_on_path, "--version", stdout="9.9.9\n")
    project = Project.open(repo, runner=runner)
    try:
        (found,) = preflight.report(project, ["claude"])
    finally:
        project.close()
    assert found.version == "9.9.9" and [c.argv for c in runner.calls] == [(claude_on_path, "--version")]


# -- the post-turn check ---------------------------------------------------------------------------


def test_the_check_runs_its_command_in_a_shell_in_the_worktree_with_stderr_in_its_output(tmp_path: Path) -> None:
    runner = FakeRunner().on("/bin/sh", returncode=3, stdout="1 failed\n", stderr="E assert\n")
    spec = proto.CheckSpec(command="make test", timeout_seconds=60)
    result = run_check(spec, tmp_path, [], 1.0, runner=runner)
    assert result is not None
    (call,) = runner.calls
    assert call == Call("start", ("/bin/sh", "-c", "make test"), str(tmp_path), None, merge_stderr=True)
    assert (result.exit_code, result.timed_out, result.confinement) == (3, False, "unconfined")
    assert result.tail == "1 failed\nE assert"
    assert runner.started[0].signals == ["stop_group"]  # a child it left behind goes with its group


def test_a_confined_check_runs_the_argv_and_environment_the_sandbox_gave(tmp_path: Path) -> None:
    runner = FakeRunner().on("bwrap", stdout="ok\n")
    seen: list[list[str]] = []

    def confine(argv: list[str]) -> tuple[list[str], dict[str, str]]:
        seen.append(argv)
        return ["bwrap", "--die-with-parent", "--", *argv], {"PATH": "/usr/bin"}

    result = run_check(proto.CheckSpec(command="true", timeout_seconds=5), tmp_path, [], 1.0, confine, runner=runner)
    assert result is not None and result.confinement == "bwrap" and result.exit_code == 0
    assert seen == [["/bin/sh", "-c", "true"]]
    (call,) = runner.calls
    assert call.argv == ("bwrap", "--die-with-parent", "--", "/bin/sh", "-c", "true")
    assert call.env == {"PATH": "/usr/bin"} and call.merge_stderr


def test_a_check_the_person_left_unconfined_never_asks_the_sandbox(tmp_path: Path) -> None:
    runner = FakeRunner().on("/bin/sh")

    def confine(argv: list[str]) -> tuple[list[str], dict[str, str]]:
        raise AssertionError("an unconfined check asked for the sandbox")

    spec = proto.CheckSpec(command="true", timeout_seconds=5, unconfined=True)
    result = run_check(spec, tmp_path, [], 1.0, confine, runner=runner)
    assert result is not None and result.confinement == "unconfined"


def test_a_check_past_its_limit_is_stopped_by_its_group_and_said_timed_out(tmp_path: Path) -> None:
    runner = FakeRunner().on("/bin/sh", hangs=True, stdout="still going\n")
    result = run_check(proto.CheckSpec(command="sleep 600", timeout_seconds=30), tmp_path, [], 2.0, runner=runner)
    assert result is not None
    assert result.timed_out and result.timeout == 30
    assert result.exit_code == -signal.SIGTERM
    assert runner.started[0].signals == ["stop_group"]
    assert result.tail == "still going"


def test_the_checks_output_and_command_are_masked(tmp_path: Path) -> None:
    secret = "s3cr3t-token-value-123456"
    runner = FakeRunner().on("/bin/sh", stdout=f"using {secret}\n")
    spec = proto.CheckSpec(command=f"TOKEN={secret} make", timeout_seconds=5)
    result = run_check(spec, tmp_path, [secret], 1.0, runner=runner)
    assert result is not None and secret not in result.tail and secret not in (result.command or "")


def test_no_check_command_runs_nothing(tmp_path: Path) -> None:
    runner = FakeRunner()
    assert run_check(proto.CheckSpec(command=None, timeout_seconds=5), tmp_path, [], 1.0, runner=runner) is None
    assert runner.calls == []


def test_a_check_shell_that_cannot_start_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(ProgramMissing):
        run_check(proto.CheckSpec(command="true", timeout_seconds=5), tmp_path, [], 1.0, runner=FakeRunner())


# -- corral's shell: how a command is watched ------------------------------------------------------


def _child(**script: Any) -> Any:
    return FakeRunner().on("bwrap", **script).start(["bwrap"], cwd="/")


def test_a_shell_command_that_ends_on_its_own_is_left_alone() -> None:
    child = _child(returncode=4)
    assert shell.watch(child, lambda: True, 30) == (False, False)
    assert child.signals == [] and child.returncode == 4


def test_a_shell_command_past_its_limit_is_killed_by_its_group() -> None:
    child = _child(hangs=True)
    assert shell.watch(child, lambda: True, 0) == (True, False)
    assert child.signals == ["kill_group"] and child.returncode == -signal.SIGKILL


def test_a_shell_command_whose_agent_is_gone_is_killed_and_ends_with_the_turn() -> None:
    child = _child(hangs=True)
    assert shell.watch(child, lambda: False, 30) == (False, True)
    assert child.signals == ["kill_group"]


def test_a_shell_command_killed_by_the_turns_own_sweep_ends_with_the_turn() -> None:
    swept = _child(returncode=-signal.SIGKILL)
    assert shell.watch(swept, lambda: False, 30) == (False, True)
    assert swept.signals == []  # already ended: nothing more to signal
    killed_by_itself = _child(returncode=-signal.SIGKILL)
    assert shell.watch(killed_by_itself, lambda: True, 30) == (False, False)  # its agent still runs


# -- the fake itself -------------------------------------------------------------------------------


def test_the_fake_plays_the_longest_matching_script_and_knows_no_other_program() -> None:
    runner = FakeRunner().on("git", stdout="any\n").on("git", "status", returncode=1)
    assert runner.run(["git", "status", "-s"]).returncode == 1
    assert runner.run(["git", "log"]).stdout == "any\n"
    with pytest.raises(ProgramMissing):
        runner.run(["hg", "log"])
    assert [c.argv[:2] for c in runner.calls] == [("git", "status"), ("git", "log"), ("hg", "log")]


def test_the_fake_refuses_a_nul_as_the_real_runner_does() -> None:
    for runner in (FakeRunner().on("echo"), SubprocessRunner()):
        with pytest.raises(ArgvError):
            runner.run(["echo", "a\x00b"])


# -- the real runner's typed failures ---------------------------------------------------------------


def test_the_real_runner_says_a_program_that_is_not_there_is_missing(tmp_path: Path) -> None:
    runner = SubprocessRunner()
    with pytest.raises(ProgramMissing) as ran:
        runner.run(["corral-no-such-program-here", "--version"])
    assert ran.value.code == "program-missing" and "corral-no-such-program-here" in ran.value.message
    with pytest.raises(ProgramMissing):
        runner.start(["corral-no-such-program-here"], cwd=tmp_path)


def test_the_real_runner_tells_a_missing_directory_from_a_missing_program(tmp_path: Path) -> None:
    with pytest.raises(ProgramError) as ran:
        SubprocessRunner().run(["true"], cwd=str(tmp_path / "gone"))
    assert type(ran.value) is ProgramError and str(tmp_path / "gone") in ran.value.message


def test_the_real_runner_ends_the_whole_group_of_a_run_past_its_limit(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = f"sleep 600 & echo $! > {pid_file}; wait"
    with pytest.raises(ProgramTimeout) as ran:
        SubprocessRunner().run(["/bin/sh", "-c", script], timeout=0.5)
    assert ran.value.code == "program-timeout" and "0.5 s limit" in ran.value.message
    child = int(until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the child's pid"))
    until(lambda: not pid_alive(child), what="the shell's own child to be ended with its group")


def test_the_real_runner_starts_a_child_in_its_own_group_and_merges_its_output_when_asked(tmp_path: Path) -> None:
    child = SubprocessRunner().start(
        ["/bin/sh", "-c", "echo out; echo err >&2; exit 4"], cwd=tmp_path, merge_stderr=True
    )
    assert child.stdout is not None and child.stderr is None
    assert child.wait(60) == 4
    assert child.stdout.read().split() == [b"out", b"err"]


def test_a_started_child_still_running_at_the_timeout_is_ended_by_its_group(tmp_path: Path) -> None:
    child = SubprocessRunner().start(["/bin/sh", "-c", "sleep 600 & wait"], cwd=tmp_path)
    assert os.getpgid(child.pid) == child.pid != os.getpgid(os.getpid())  # a group of its own
    assert child.wait(0.2) is None and child.poll() is None
    child.kill_group()
    assert child.wait(60) == -signal.SIGKILL
