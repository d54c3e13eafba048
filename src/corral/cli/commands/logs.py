"""``logs``: a turn's harness output, rendered readably or verbatim, optionally followed."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from corral.cli.app import App, json_option, pass_app
from corral.engine.operations import queries
from corral.engine.read import logs as turn_logs


def _read_lines(path: Path, follow: bool, still_running: Callable[[], bool]) -> Iterator[bytes]:
    with path.open("rb") as fh:
        pending = b""
        while True:
            chunk = fh.read(1 << 16)
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from (line + b"\n" for line in lines)
                continue
            if not follow or not still_running():
                if pending:
                    yield pending
                return
            time.sleep(0.2)


@click.command(
    epilog="""\b
Examples:
  corral logs fix-login              the latest turn, readable
  corral logs -f fix-login           follow the running turn
  corral logs fix-login --turn 3 --raw
"""
)
@click.argument("task")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the turn ends.")
@click.option("--turn", type=int, metavar="N", help="The turn's sequence number (default: the latest).")
@click.option("--raw", is_flag=True, help="The verbatim stream, byte for byte.")
@json_option
@pass_app
def logs(app: App, task: str, follow: bool, turn: int | None, raw: bool) -> None:
    """The harness output of a turn."""
    project = app.project
    found = queries.find_task(project, task)
    path = turn_logs.log_path(project, found, turn)
    lines = _read_lines(path, follow, lambda: queries.turn_running(project, found.id))
    if raw:
        out = sys.stdout.buffer
        for line in lines:
            out.write(line)
            out.flush()
        return
    for text in turn_logs.render_lines(project, found, lines):
        app.event({"line": text}, text)
