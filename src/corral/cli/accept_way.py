"""``accept``'s body, and the way in that runs its plain forms without click.

accept's start is part of what it costs beside git's own squash (bench/bench_accept.py), and click
(its parser, ``inspect``, ``gettext``: about 10 ms) is more than accept's parsing needs. :func:`quick`
recognises the plain forms — ``accept TASK`` with its own flags after the command (``--tip SHA``,
``-y``/``--yes``, ``--allow-markers``), ``--json`` and ``--repo PATH`` anywhere — and runs the body the
click command runs (:func:`run`, what ``corral.cli.commands.accept_cli`` calls), after the same gate.
Anything else (``--help``, a mistyped or repeated flag, a second TASK, shell completion, a turn's agent)
returns None and goes through click, which owns every message about usage. ``tests/cli/test_quick.py``
holds the grammar equal to the click command's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from corral.cli.quick_words import split as split_words
from corral.domain.agent_tools import TOKEN_ENV
from corral.errors import UsageError

if TYPE_CHECKING:
    from corral.cli.app import App
    from corral.engine.api import Moved

#: accept's switches the quick way takes: flag -> its parameter.
SWITCHES = {"-y": "yes", "--yes": "yes", "--allow-markers": "allow_markers"}
#: accept's option that takes a value (``--tip SHA`` or ``--tip=SHA``): flag -> its parameter.
VALUES = {"--tip": "tip"}


def quick(app: App, args: Sequence[str]) -> Callable[[], None] | None:
    """What to run for ``args`` if they are a plain ``accept``; else None (click's turn)."""
    if "_CORRAL_COMPLETE" in os.environ or os.environ.get(TOKEN_ENV, "").strip():
        return None  # completion, or a turn's agent: click's commands and their gates
    split = split_words(args, VALUES)
    if split is None or not set(split.flags) <= SWITCHES.keys():
        return None  # click says what is wrong with it, or takes it as it means
    if len({SWITCHES[flag] for flag in split.flags}) != len(split.flags):
        return None  # one switch twice (``-y --yes``): click's to take
    words, repo = split.words, split.repo
    given: dict[str, object] = {VALUES[name]: value for name, value in split.values.items()}
    given.update((SWITCHES[flag], True) for flag in split.flags)
    if len(words) != 2 or words[0] != "accept":
        return None
    if repo is not None:
        app.repo = repo
    task, pinned = words[1], given.get("tip")
    return lambda: gated(
        app, task, pinned if isinstance(pinned, str) else None, bool(given.get("yes")), bool(given.get("allow_markers"))
    )


def gated(app: App, task: str, tip: str | None, yes: bool, allow_markers: bool) -> None:
    """:func:`run` as the click command runs it: streaming, behind the CLI's gate (a prefix of a ref is refused
    for a command that merges a task, ``App.gate``)."""
    app.streaming = True  # before the gate: a refusal there is one more JSON Line too
    params: dict[str, object] = {"task": task, "tip": tip, "yes": yes, "allow_markers": allow_markers}
    app.gate("accept", params)
    run(app, str(params["task"]), tip, yes, allow_markers)


def run(app: App, task: str, tip: str | None, yes: bool, allow_markers: bool) -> int:
    """Squash-merge ``task`` into its target, its phases narrated as they go (JSON Lines with --json)."""
    from corral.engine.api import accept as accepting

    if tip is not None and yes:
        raise UsageError("--tip and --yes are two answers to one question.", hint="Give one of them.")
    result = accepting.accept(
        app.project,
        task,
        actor=app.actor,
        report=lambda event: app.event(event, lambda: progress(event), aside=True),
        tip=tip,
        confirm=(lambda moved: True) if yes else asker(app),
        allow_markers=allow_markers,
    )
    waits = result.commit is None and not result.already  # the merge waits on the forge (docs/forge.md)
    if result.warning and result.conflict is None and not waits:  # a kept stash is said once, as the error below
        app.note(f"warning: {result.warning}")
    if result.already:
        said = f"{result.task.ref} was already accepted."
    elif waits:
        said = f"{result.task.ref} is {result.task.status.value}: {result.warning}"
    else:
        said = f"{result.task.ref} is complete: merged as {result.commit[:12] if result.commit else '?'}."
    app.event(
        {
            "event": "result",
            "task": {"ref": result.task.ref, "status": result.task.status.value},
            "commit": result.commit,
            "already_accepted": result.already,
            "warning": result.warning,
        },
        said,
    )
    if result.conflict is not None:  # the merge stands, but the person's local changes are in a stash
        raise result.conflict
    return 0


def asker(app: App) -> Callable[[Moved], bool] | None:
    """On a terminal, the y/N question about commits that came since the diff; elsewhere none (refused)."""
    if app.json or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None

    def ask(moved: Moved) -> bool:
        import click  # the question is click's prompt, as every other command's

        since = f"{moved.since[:12]}, the tip its diff showed"
        app.note(f"The branch {moved.branch} moved since {since}; it is at {moved.tip[:12]} now:")
        for line in moved.lines():
            app.note(line)
        if moved.rewritten:
            app.note(f"  ({moved.since[:12]} is no longer on it: its history was rewritten)")
        return click.confirm("Merge these too?", default=False, err=True)

    return ask


def progress(event: dict[str, object]) -> str:
    """One event's line of human text."""
    if event["event"] == "tip-moved":
        commits = event["commits"]
        assert isinstance(commits, list)
        return f"Merging {event['count']} commit(s) made since the diff was shown: " + "; ".join(map(str, commits))
    if event["event"] == "plan":
        phases = event["phases"]
        assert isinstance(phases, list)
        return "Plan: " + " → ".join(str(p["label"]) for p in phases)
    where = f"[{event['position']}/{event['of']}] " if event.get("position") else ""
    detail = f" — {event['detail']}" if event.get("detail") else ""
    return f"{where}{event['label']}: {event['state']}{detail}"
