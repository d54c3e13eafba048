"""``worker``: run turns queued in the shared PostgreSQL store on this host (docs/workers.md)."""

from __future__ import annotations

from pathlib import Path

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.render import event_text, local_time


@click.command(
    epilog="""\b
Examples:
  corral config set database_url postgresql://corral@db.internal/corral
  corral config set worker_projects /srv/clones/app
  corral worker              in the foreground; SIGTERM or Ctrl-C drains and stops,
                             a second one hands its turns back to the queue
  corral worker --json       one JSON event per line
\b
A person sends turns to workers with `corral config set dispatch workers`; every trust setting a
turn runs with (posture, sandbox, commands) is this host's own (docs/workers.md). A worker needs
the team's engine, the corral[team] extra (from a checkout: pip install '.[team]').
"""
)
@click.option(
    "--project",
    "extra",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    metavar="DIR",
    help="Serve this clone too (besides worker_projects; repeatable).",
)
@json_option
@pass_app
def worker(app: App, extra: tuple[str, ...]) -> None:
    """Claim queued turns of the projects this host serves and run them here, until SIGTERM."""
    from corral.store.team_extra import require_team

    # A worker is the team's engine: without the corral[team] extra, the line that adds it, before anything opens.
    require_team(wanted_by="corral worker")
    from corral.engine.api import Project, corral_home, load_config, user_config_file
    from corral.worker.worker_service import Worker

    # The person's own settings say what this host serves, never a repository's corral.toml.
    listed = [str(p) for p in load_config(user_file=user_config_file(), project_file=None)["worker_projects"]]
    projects = [Project.open(Path(c)) for c in dict.fromkeys([*listed, *extra])]
    Worker(
        corral_home(), projects, on_event=lambda doc: app.event(doc, lambda: event_text(doc, "task"), aside=True)
    ).run()


@click.command(
    epilog="""\b
Examples:
  corral workers             every worker this project's store has heard from, and what each runs
  corral workers --json
"""
)
@json_option
@pass_app
def workers(app: App) -> None:
    """The workers of this project's shared store: host, state, last heartbeat, and the turns each runs."""
    from corral.engine.api import lookups

    rows = lookups.worker_rows(app.project)

    def human() -> list[str]:
        if not rows:
            return ["No worker has registered with this project's store (corral worker, on a host that serves it)."]
        lines = []
        for row in rows:
            state = "lost" if row["lost"] and row["state"] != "stopped" else row["state"]
            line = f"{row['host']:<20} {state:<9} last beat {local_time(row['heartbeat_at'])}"
            if row["running"]:
                line += f"  running {', '.join(row['running'])}"
            lines.append(line)
        return lines

    app.answer({"workers": rows}, human)
