"""``demo``: the whole lifecycle on a scratch repository, with a scripted agent, up to accept.

No network and no agent CLI: the scripted agent is corral's own fake agent (test
seam 1) standing in for Claude Code, so the real supervisor, receipts, reconciler
and store all run exactly as they do for a real agent.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import click

from corral.adapters.git import Git
from corral.adapters.process import environ_overlay
from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.render import timeline
from corral.domain.actors import Actor
from corral.engine.api import Project, control, queries, tasks, turns
from corral.engine.api import accept as accepting
from corral.errors import UsageError
from corral.testing.fake_agent import wrapper_script

SCENARIO = {
    "invocations": [
        [
            {"init": True},
            {"text": "I'll add a greeting module with a function and commit it."},
            {"tool": "Write", "input": {"file_path": "greet.py"}, "output": "File created"},
            {"write": {"path": "greet.py", "content": 'def greet(name):\n    return f"Hello, {name}!"\n'}},
            {"tool": "Bash", "input": {"command": "git commit -am 'Add greet()'"}, "output": "1 file changed"},
            {"commit": "Add greet()"},
            {"result": "Added greet.py with greet(name). No tests yet."},
        ],
        [
            {"init": True},
            {"text": "Adding the test you asked for."},
            {"tool": "Write", "input": {"file_path": "test_greet.py"}, "output": "File created"},
            {
                "write": {
                    "path": "test_greet.py",
                    "content": (
                        "from greet import greet\n\n\ndef test_greet():\n    assert greet('Ada') == 'Hello, Ada!'\n"
                    ),
                }
            },
            {"commit": "Test greet()"},
            {"result": "Added test_greet.py covering greet(); both commits are on the branch."},
        ],
    ]
}


def typed_as() -> str:
    """How a person types this corral in a shell: ``corral`` when that is the one their PATH finds,
    else the path of the program running now (``.venv/bin/corral`` in a checkout never installed on
    PATH), or ``python -m corral`` when run so."""
    argv0 = sys.argv[0] if sys.argv else ""
    if not argv0 or Path(argv0).name == "__main__.py":  # python -m corral
        return f"{shlex.quote(sys.executable)} -m corral"
    found = shutil.which(argv0) if os.sep not in argv0 else argv0
    if found is None:
        return f"{shlex.quote(sys.executable)} -m corral"
    me = Path(found).absolute()
    on_path = shutil.which("corral")
    if on_path is not None and Path(on_path).resolve() == me.resolve():
        return "corral"
    return shlex.quote(str(me))


def _git(repo: Path, *args: str) -> str:
    return Git().out("-c", "user.name=corral demo", "-c", "user.email=demo@localhost", *args, cwd=repo)


@click.command(
    epilog="""\b
Examples:
  corral demo                    the scratch repository stays where it says, to look around
  corral demo --dir /tmp/try     make it there (a new directory)
  corral demo --clean            remove it at the end
"""
)
@click.option("--dir", "where", metavar="PATH", help="Make the scratch directory here (it must not exist yet).")
@click.option("--clean", is_flag=True, help="Remove the scratch directory at the end.")
@click.option("--keep", is_flag=True, hidden=True)  # the default now; kept so old scripts still run
@json_option
@pass_app
def demo(app: App, where: str | None, clean: bool, keep: bool) -> int:
    """Run create → start → blocked → unblock with feedback → accept on a scratch repo with a scripted agent."""
    keep = not clean
    if where is not None:
        scratch = Path(where).expanduser().absolute()
        try:
            scratch.mkdir(parents=True)
        except FileExistsError:
            raise UsageError(f"{scratch} already exists.", hint="Name a directory that does not exist yet.") from None
    else:
        scratch = Path(tempfile.mkdtemp(prefix="corral-demo-"))
    began = time.monotonic()
    events: list[dict[str, object]] = []
    shown = 0

    def say(line: str) -> None:
        events.append({"line": line})
        app.say(line)

    def show_new(project: Project, ref: str) -> None:
        nonlocal shown
        entries = timeline(queries.task_doc(project, ref))
        for when, line in entries[shown:]:
            say(f"  {when}  {line}")
        shown = len(entries)

    cleanup = ExitStack()
    try:
        repo = scratch / "repo"
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("# demo\n")
        _git(repo, "add", "README.md")
        _git(repo, "commit", "-q", "-m", "initial")
        scenario = scratch / "scenario.json"
        scenario.write_text(json.dumps(SCENARIO))
        overlay = environ_overlay(
            {
                "CORRAL_HOME": str(scratch / "home"),
                "CORRAL_CLAUDE_BIN": str(wrapper_script(scratch / "bin")),
                "CORRAL_FAKE_SCENARIO": str(scenario),
                "CORRAL_FAKE_RECORD": str(scratch / "record"),
                "CORRAL_HARNESS": "claude",
                # The scripted agent reads its scenario from the scratch directory under /tmp, which a
                # sandboxed turn cannot see, and it calls no corral tools: the demo runs it as it is.
                "CORRAL_SANDBOX": "off",
                "CORRAL_AGENT_TOOLS": "0",
            }
        )
        cleanup.enter_context(overlay)
        project = Project.open(repo)
        try:
            say(f"Scratch repository: {repo}")
            task = tasks.create(
                project,
                "Add a greeting function",
                actor=Actor.HUMAN,
                ref="greet",
                prompt="Put it in greet.py and commit it.",
            )
            say("$ corral create 'Add a greeting function' --ref greet -m 'Put it in greet.py and commit it.'")
            show_new(project, task.ref)
            say("$ corral start greet --wait")
            turns.start(project, task.ref, actor=Actor.HUMAN)
            first = control.wait(project, task.ref, timeout=60)
            show_new(project, task.ref)
            say("$ corral unblock greet -m 'Please add a test for greet().' --wait")
            turns.unblock(project, task.ref, actor=Actor.HUMAN, message="Please add a test for greet().")
            second = control.wait(project, task.ref, timeout=60)
            show_new(project, task.ref)
            log = _git(repo, "log", "--oneline", "main..corral/greet").splitlines()
            say(f"The branch corral/greet has {len(log)} commits beyond main:")
            for line in log:
                say(f"  {line}")
            ok = not first.timed_out and not second.timed_out and second.task.status.value == "blocked"
            status = second.task.status.value
            if ok:
                say("$ corral accept greet")
                accepted = accepting.accept(project, task.ref, actor=Actor.HUMAN)
                show_new(project, task.ref)
                say(f"main now ends with the squashed work: {_git(repo, 'log', '--oneline', '-1', 'main')}")
                status = accepted.task.status.value
                ok = status == "complete"
            say(f"Done in {time.monotonic() - began:.1f} s: the task is {status}.")
        finally:
            project.close()
        if keep:
            say(f"The scratch repository stays at {repo}; look around with:")
            home = shlex.quote(str(scratch / "home"))
            say(f"  cd {shlex.quote(str(repo))} && CORRAL_HOME={home} {typed_as()} show greet")
            say(f"Remove it with: rm -rf {shlex.quote(str(scratch))}")
        app.answer(
            {
                "ok": ok,
                "repository": str(repo) if keep else None,
                "home": str(scratch / "home") if keep else None,
                "events": events,
            }
        )  # the lines were said
        return 0 if ok else 1
    finally:
        cleanup.close()  # the environment as it was
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
