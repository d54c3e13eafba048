"""Every hint works when typed.

The hints are read from where they are made, so a new one is covered without a line here: each
status's own "Next" (``explain``), the "Next" of every resting cause with wording of its own (each
``case`` of ``explain._tailored``), what a refusal says the person can do now (the operations
table's ``NOW``), and what ``unblock`` with no feedback says. For each, a task is put in the state
that produces it — with real turns of the ``command`` harness, a resting cause written where no
real failure is cheap to cause — and the hint is read as the CLI prints it. Each command it names
is then typed exactly as printed, in a task in that state that no other command of the hint acted
on (after the steps the hint puts before it), and must not be refused, unknown or a placeholder:
a look on the task the hint was read from, the first command that acts there too while that task
is as a fresh one would be, every other in a fresh task.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from corral.domain import explain
from corral.domain.actors import Actor
from corral.domain.explain import commands, harness_name
from corral.domain.operations_table import NOW, OPERATIONS, Op
from corral.domain.records import FailureEvidence, RestingCause
from corral.domain.status import Status
from corral.testing.fake_agent import wrapper_script
from tests.cli.helpers import store_of
from tests.conftest import CLI, git

#: The agent: what it does is read from the mode file at each turn. A shell script: a turn's agent is a
#: process of its own, and a shell starts in a fraction of the time an interpreter takes.
AGENT = r"""set -e
cat >/dev/null
mode=$(cat "$HINT_MODE")
if [ "$mode" = sleep ]; then
    echo "working slowly"
    sleep 3
fi
name=work.txt
if [ "$mode" = protected ]; then name=guarded.txt; fi
echo "$mode" >>"$name"
git add "$name"
git commit -qm work
if [ "$mode" = die ]; then  # after its work: an interrupted task has work to review
    echo dying
    kill -KILL $$
fi
echo done
"""

#: What a hint must never say: a placeholder a person would have to replace.
PLACEHOLDERS = re.compile(r"\bPATH\b|\bMODE\b|<[^>]*>|…|\|")

#: Exit codes of a command that did not run: a usage error (an unknown command or option),
#: refused by the task's state, or something it names not found.
NOT_RUN = {2: "unknown or misused", 3: "refused", 4: "not found"}


class World:
    """Tasks put into states through the real CLI, real turns and, for a resting cause alone, the store."""

    def __init__(self, corral: CLI, repo: Path, mode: Path) -> None:
        self.corral, self.repo, self.mode = corral, repo, mode
        self.made = 0

    def ref(self) -> str:
        self.made += 1
        return f"t{self.made}"

    def turn(self, ref: str, mode: str, *args: str) -> None:
        self.mode.write_text(mode)
        self.corral(*args, "--wait", "--timeout", "60")
        self.mode.write_text("ok")  # what the hint's own commands run

    def backlog(self) -> str:
        ref = self.ref()
        self.corral.ok("create", f"Task {ref}", "--ref", ref, "--protect", "guarded.txt")
        return ref

    def blocked(self) -> str:
        ref = self.backlog()
        self.turn(ref, "ok", "start", ref)
        return self.expect(ref, Status.BLOCKED)

    def conflict(self) -> str:
        ref = self.backlog()
        self.turn(ref, "protected", "start", ref)
        return self.expect(ref, Status.CONFLICT)

    def interrupted(self) -> str:
        ref = self.backlog()
        self.turn(ref, "die", "start", ref)
        return self.expect(ref, Status.INTERRUPTED)

    def interrupted_with_violation(self) -> str:
        """Interrupted after changing a protected file: a decision is owed before it goes on."""
        ref = self.resting(self.interrupted(), None)
        with store_of(self.corral) as store, store.write() as tx:
            task = tx.task_by_ref(ref)
            assert task is not None
            tx.record_violations(task.id, ["guarded.txt"])
        return ref

    def working(self) -> str:
        ref = self.backlog()
        self.mode.write_text("sleep")
        self.corral.ok("start", ref)
        return self.expect(ref, Status.WORKING)

    def abandoned(self) -> str:
        ref = self.blocked()
        self.corral.ok("close", ref, "-m", "not needed")
        return self.expect(ref, Status.ABANDONED)

    def complete(self) -> str:
        ref = self.blocked()
        self.corral.ok("accept", ref, "--yes")
        return self.expect(ref, Status.COMPLETE)

    def moved(self, to: Status, actor: Actor = Actor.HUMAN) -> Callable[[], str]:
        def make() -> str:
            ref = self.blocked()
            with store_of(self.corral) as store, store.write() as tx:
                task = tx.task_by_ref(ref)
                assert task is not None
                tx.set_status(task.id, to, actor, "test setup")
            return ref

        return make

    def resting(self, ref: str, cause: RestingCause | None) -> str:
        with store_of(self.corral) as store, store.write() as tx:
            task = tx.task_by_ref(ref)
            assert task is not None
            tx.set_resting_cause(task.id, cause)
        return ref

    def expect(self, ref: str, status: Status) -> str:
        got = self.corral.json("show", ref)["task"]["status"]
        assert got == status.value, (ref, got)
        return ref

    def settle(self, ref: str) -> bool:
        """Let a turn the hint started end, so nothing runs on after the test: whether one was running."""
        if self.corral.json("show", ref)["task"]["status"] == Status.WORKING.value:
            self.corral("wait", ref, "--timeout", "60")
            return True
        return False


@pytest.fixture
def world(corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    script, mode = tmp_path / "agent.sh", tmp_path / "mode"
    script.write_text(AGENT)
    mode.write_text("ok")
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"sh {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("HINT_MODE", str(mode))
    # A hint may switch the task to Claude Code: here it is corral's scripted stand-in.
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"invocations": [], "default": [{"init": True}, {"result": "done"}]}))
    monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(wrapper_script(tmp_path / "bin")))
    monkeypatch.setenv("CORRAL_FAKE_SCENARIO", str(scenario))
    monkeypatch.setenv("CORRAL_FAKE_RECORD", str(tmp_path / "record"))
    return World(corral, repo, mode)


# -- where the hints come from ------------------------------------------------------------------

#: How a task comes to rest in each status (the statuses a person cannot reach are moved by the store).
BY_STATUS: dict[Status, Callable[[World], str]] = {
    Status.BACKLOG: World.backlog,
    Status.WORKING: World.working,
    Status.BLOCKED: World.blocked,
    Status.CONFLICT: World.conflict,
    Status.PAIRING: lambda w: w.moved(Status.PAIRING)(),
    Status.INTERRUPTED: lambda w: w.resting(w.interrupted(), None),  # the status's own hint, with no cause
    Status.MERGING: lambda w: w.moved(Status.MERGING)(),
    Status.SUBMITTED: lambda w: w.moved(Status.SUBMITTED)(),
    Status.ZOMBIE: lambda w: w.moved(Status.ZOMBIE, Actor.SYSTEM)(),
    Status.COMPLETE: World.complete,
    Status.ABANDONED: World.abandoned,
}


def tailored_codes() -> list[str]:
    """Every resting cause with wording of its own: each ``case`` of ``explain._tailored``."""
    return re.findall(r'case "([a-z-]+)":', inspect.getsource(explain._tailored))


#: Where each cause's hint is offered: the first status whose operations it names are allowed there.
RESTS_IN = (Status.INTERRUPTED, Status.BLOCKED, Status.BACKLOG)


def cause_of(code: str, world: World, ref: str) -> RestingCause:
    details: dict[str, Any] = {}
    if code == "read-only-changes-kept":  # what it kept aside is a real ref
        kept = f"refs/corral/kept/{ref}/1"
        git(world.repo, "update-ref", kept, "HEAD")
        details = {"reason": kept, "summary": "1 file changed"}
    evidence = FailureEvidence(source="test", code=code, details=details)
    return RestingCause(code, datetime.now(UTC), Actor.SYSTEM, evidence=evidence, details=details)


def resting_with(code: str) -> tuple[Status, Callable[[World], str]] | None:
    probe = RestingCause(code, datetime.now(UTC), Actor.SYSTEM)
    wording = explain._tailored(code, harness_name("command"), "t0", probe)
    if wording is None or wording.next is None:
        return None
    status = next((s for s in RESTS_IN if explain.offers(wording.next, s, "t0")), None)
    if status is None:
        return None
    make = {Status.INTERRUPTED: World.interrupted, Status.BLOCKED: World.blocked, Status.BACKLOG: World.backlog}[status]

    def build(world: World) -> str:
        ref = make(world)
        return world.resting(ref, cause_of(code, world, ref))

    return status, build


def next_of(world: World, ref: str) -> str | None:
    hint: str | None = world.corral.json("show", ref)["next"]
    return hint


def refused_hint(op: str) -> Callable[[World, str], str | None]:
    def read(world: World, ref: str) -> str | None:
        result = world.corral(*op.split(), ref, "--json")
        assert result.returncode == 3, (op, ref, result.stdout, result.stderr)
        hint: str | None = json.loads(result.stdout)["error"]["hint"]
        return hint

    return read


def unblock_without_feedback(world: World, ref: str) -> str | None:
    result = world.corral("unblock", ref, "--json")
    assert result.returncode == 2, result.stdout
    hint: str | None = json.loads(result.stdout)["error"]["hint"]
    return hint


Case = tuple[Callable[[World], str], Callable[[World, str], str | None]]


def cases() -> dict[str, Case]:
    out: dict[str, Case] = {f"next-{s.value}": (BY_STATUS[s], next_of) for s in Status}
    for code in tailored_codes():
        found = resting_with(code)
        if found is not None:
            out[f"cause-{code}"] = (found[1], next_of)
    for status in NOW:
        op = "resume" if status is Status.BACKLOG else "start"
        assert status not in OPERATIONS[Op(op)]
        out[f"refused-{status.value}"] = (BY_STATUS[status], refused_hint(op))
    for status in (Status.BLOCKED, Status.INTERRUPTED):
        out[f"unblock-no-feedback-{status.value}"] = (BY_STATUS[status], unblock_without_feedback)
    out["next-interrupted-with-protected-files"] = (World.interrupted_with_violation, next_of)
    return out


CASES = cases()

#: Commands a hint puts before another ("look, then …"): run first, in the fresh task, as the person would.
PREPARES = ("corral diff", "corral logs", "corral show", "corral edit", "corral config", "git ")


#: Commands that only look: they run on the task the hint was read from, as printed.
READS = ("corral diff", "corral logs", "corral show", "corral doctor", "git diff")


def run(world: World, command: str, ref: str) -> subprocess.CompletedProcess[str] | Any:
    argv = shlex.split(command)
    if argv[0] == "git":  # in the task's worktree, as the hint says
        worktree = world.corral.json("show", ref)["task"]["worktree"] or str(world.repo)
        return subprocess.run(argv, cwd=worktree, capture_output=True, text=True, env=dict(os.environ))
    return world.corral(*argv[1:], timeout=120)


def test_every_hint_source_is_covered() -> None:
    codes = tailored_codes()
    assert len(codes) >= 20 and "harness-missing" in codes  # the source was read, not an empty list
    assert {f"next-{s.value}" for s in Status} <= set(CASES)
    assert {f"refused-{s.value}" for s in Status} <= set(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_command_a_hint_names_runs_as_printed(world: World, name: str) -> None:
    build, read = CASES[name]
    ref = build(world)
    hint = read(world, ref)
    # The task the hint was read from stays in its state unless a turn was running (then it has ended).
    untouched = not world.settle(ref)
    if hint is None:
        return  # nothing to do (a complete task)
    assert not PLACEHOLDERS.search(hint), hint
    printed = commands(hint)
    for i, first in enumerate(printed):
        if first.startswith(READS):  # a look changes nothing: typed on the task the hint was read from
            result = run(world, first, ref)
            assert result.returncode in (0, 1) and "Traceback" not in result.stderr, (name, first, result)
            continue
        # Each command that acts, in a task of its own: the hint's others are alternatives. The first is typed on
        # the task the hint was read from (a turn fewer) when that task is still in the state, all it has seen since
        # are the looks a fresh task is given before this command, in the hint's order, and no look comes after.
        if (
            untouched
            and all(before.startswith(READS) and before.startswith(PREPARES) for before in printed[:i])
            and not any(after.startswith(READS) for after in printed[i + 1 :])
        ):
            untouched = False
            fresh, typed = ref, printed  # the looks before it were typed on it above
        else:
            fresh = build(world)
            typed = commands(read(world, fresh))  # the hint as it reads for this task
            for before in typed[:i]:
                if before.startswith(PREPARES):
                    run(world, before, fresh)
        command = typed[i]
        result = run(world, command, fresh)
        said = f"{name}: `{command}` from {hint!r} -> {result.returncode}\n{result.stdout}\n{result.stderr}"
        assert result.returncode not in NOT_RUN, said
        assert result.returncode in (0, 1), said
        assert "Traceback" not in result.stderr, said
        world.settle(fresh)


#: The agent of the dirty-checkout case: it changes README.md and adds notes.txt.
README_AGENT = (
    "sh -c 'echo agent > README.md && echo agents > notes.txt && git add -A && git commit -qm work && echo done'"
)


def test_the_command_that_gives_back_local_changes_an_accept_kept_works(
    corral: CLI, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", README_AGENT)
    corral.ok("create", "Change the readme", "--ref", "readme")
    corral.ok("start", "readme", "--wait", "--timeout", "60")
    (repo / "README.md").write_text("mine\n")  # the person's checkout: a change the merge overlaps,
    (repo / "notes.txt").write_text("my notes\n")  # and an untracked file where the merge adds one
    accepted = corral("accept", "readme", "--yes", "--json")
    assert accepted.returncode == 1, accepted.stdout
    kept = corral.json("show", "readme")["destination_restore_conflict"]
    command = kept["command"]
    assert not PLACEHOLDERS.search(command) and command.startswith("git ")
    ran = subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True)
    assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
    assert (repo / "README.md").read_text() == "mine\n" and (repo / "notes.txt").read_text() == "my notes\n"
    again = corral.json("show", "readme")
    assert again["destination_restore_conflict"] is None  # taken back: said no more
    assert git(repo, "stash", "list") == ""  # and the entry that held them is gone


@pytest.mark.slow
def test_the_demos_last_hint_runs_where_only_the_checkouts_corral_exists(tmp_path: Path) -> None:
    installed = Path(sys.executable).parent / "corral"  # the entry point an install made, as in .venv/bin
    if not installed.exists():
        if os.environ.get("CI"):  # the README's command installs it (pip install -e): CI always has it
            raise AssertionError(f"no {installed}: corral is not installed as a program beside this Python")
        pytest.skip("corral is not installed as a program beside this Python (pip install -e . makes it)")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != installed.parent)
    env = {**os.environ, "PATH": path}
    env.pop("CORRAL_SANDBOX", None)  # as a new user runs it: corral's defaults
    env.pop("CORRAL_AGENT_TOOLS", None)
    shown = subprocess.run(
        [str(installed), "demo", "--dir", str(tmp_path / "try")], env=env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    hint = lines[next(i for i, line in enumerate(lines) if "look around with:" in line) + 1].strip()
    assert not PLACEHOLDERS.search(hint), hint
    ran = subprocess.run(["bash", "-c", hint], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, (hint, ran.stdout, ran.stderr)
    assert "greet" in ran.stdout and "complete" in ran.stdout
