"""``daemon run | start | stop | status``: the optional background reconciler of a ``CORRAL_HOME``.

One daemon serves every project kept under ``CORRAL_HOME``, so these commands need no
repository: they work from any directory (``--repo`` is accepted and changes nothing).
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.render import event_text
from corral.engine.api import DaemonState, corral_home, daemons

TICK_SECONDS = 2.0  # corral.daemon.daemon_service.TICK_SECONDS, without loading the daemon for `status`


@click.group(
    epilog="""\b
Examples:
  corral daemon start        in the background; auto-resume without typing a command
  corral daemon status
  corral daemon run --json   in the foreground, one JSON event per line
  corral daemon stop
\b
A turn whose agent gets corral's tools (agent_tools, on by default) and `corral dashboard`
start it when none runs, and say so once on stderr. It serves the web dashboard once
`corral dashboard` has asked for it in this CORRAL_HOME.
"""
)
def daemon() -> None:
    """The daemon: reconcile ticks, supervisor watching and the agents' MCP endpoint, for every
    project under CORRAL_HOME (optional; one per CORRAL_HOME, run from any directory)."""


@daemon.command("run")
@click.option(
    "--tick",
    type=float,
    default=TICK_SECONDS,
    show_default=True,
    metavar="S",
    help="Seconds between reconcile ticks.",
)
@json_option
@pass_app
def run(app: App, tick: float) -> None:
    """Run in the foreground until SIGTERM or Ctrl-C."""
    from corral.daemon import daemon_service as service

    service.serve(
        corral_home(),
        tick=tick,
        on_event=lambda doc: app.event(doc, lambda: event_text(doc, "project"), aside=True),
    )


def _described(current: DaemonState) -> Iterator[str]:
    if not current.running:
        yield "not running"
        return
    yield f"running (pid {current.pid}, since {current.started_at}, last tick {current.last_tick})"
    yield f"MCP endpoint: {current.mcp_url}" if current.mcp_url else "MCP endpoint: none (see the daemon's log)"
    if current.projects:
        yield f"serving {len(current.projects)} project{'s' if len(current.projects) != 1 else ''}:"
        yield from (f"  {repo}" for repo in current.projects)
    else:
        yield "serving no project yet"
    yield f"log: {daemons.log_file()}"


@daemon.command("start")
@json_option
@pass_app
def start(app: App) -> None:
    """Start it in the background (one that runs already is the answer: its pid, exit 0)."""
    current, started = daemons.start_detached()

    def human() -> list[str]:
        said = daemons.started_line(current.pid) if started else f"the corral daemon already runs (pid {current.pid})"
        return [said, *list(_described(current))[1:]]

    app.answer({"daemon": current.to_json(), "started": started}, human)


@daemon.command("stop")
@json_option
@pass_app
def stop(app: App) -> None:
    """Stop it (SIGTERM, then SIGKILL after 10 s), also one whose state directory was removed."""
    was = daemons.state()
    current = daemons.stop_running()
    running = was.running
    if not running:  # none the home's files name: one may run still, its state directory removed under it
        from corral.daemon import daemon_service as service

        running = bool(service.stop_unreachable(corral_home()))
    app.answer(
        {"daemon": current.to_json(), "was_running": running},
        "The daemon stopped." if running else "No daemon was running.",
    )


@daemon.command("status")
@json_option
@pass_app
def status(app: App) -> int:
    """Whether it runs, its MCP endpoint and the projects it serves; exit 0 when it runs, 1 when not."""
    current = daemons.state()
    app.answer({"daemon": current.to_json()}, lambda: list(_described(current)))
    return 0 if current.running else 1
