"""``daemon run | start | stop | status``: the optional background reconciler."""

from __future__ import annotations

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.render import local_time
from corral.daemon import service as daemons


@click.group(
    epilog="""\b
Examples:
  corral daemon start        in the background; auto-resume without typing a command
  corral daemon status
  corral daemon run --json   in the foreground, one JSON event per line
  corral daemon stop
"""
)
def daemon() -> None:
    """The daemon: reconcile ticks and supervisor watching (optional; one per repository)."""


@daemon.command("run")
@click.option(
    "--tick",
    type=float,
    default=daemons.TICK_SECONDS,
    show_default=True,
    metavar="S",
    help="Seconds between reconcile ticks.",
)
@json_option
@pass_app
def run(app: App, tick: float) -> None:
    """Run in the foreground until SIGTERM or Ctrl-C."""

    daemons.serve(
        app.project,
        tick=tick,
        on_event=lambda doc: app.event(doc, lambda: f"{local_time(doc['at'])} {doc['event']}", aside=True),
    )


@daemon.command("start")
@json_option
@pass_app
def start(app: App) -> None:
    """Start it in the background."""
    current = daemons.start_detached(app.project)
    app.answer(
        {"daemon": current.to_json()},
        f"The daemon runs (pid {current.pid}); its log is {app.project.paths.daemon_log}.",
    )


@daemon.command("stop")
@json_option
@pass_app
def stop(app: App) -> None:
    """Stop it (SIGTERM, then SIGKILL after 10 s)."""
    was = daemons.state(app.project)
    current = daemons.stop_running(app.project)
    app.answer(
        {"daemon": current.to_json(), "was_running": was.running},
        "The daemon stopped." if was.running else "No daemon was running.",
    )


@daemon.command("status")
@json_option
@pass_app
def status(app: App) -> int:
    """Whether it runs; exit 0 when it does, 1 when it does not."""
    current = daemons.state(app.project)
    app.answer(
        {"daemon": current.to_json()},
        f"running (pid {current.pid}, since {current.started_at}, last tick {current.last_tick})"
        if current.running
        else "not running",
    )
    return 0 if current.running else 1
