"""``dashboard``: the web dashboard's URL, the daemon started first when none runs (docs/dashboard.md)."""

from __future__ import annotations

import time

import click

from corral.adapters.loopback import LOOPBACK
from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.engine.api import corral_home, daemons
from corral.errors import CorralError


@click.command(
    epilog="""\b
Examples:
  corral dashboard                 print the URL (it carries your secret token: keep it to yourself)
  corral dashboard --open          and open it in the browser
  corral dashboard --host 0.0.0.0  serve it beyond this machine (the next daemon only; stop the running one first)
\b
The daemon serves it on loopback; the URL's token is exchanged for a cookie on the first visit.
"""
)
@click.option("--open", "open_", is_flag=True, help="Open the URL in the browser too.")
@click.option(
    "--host",
    metavar="ADDR",
    default=None,
    help="Serve it on ADDR instead of loopback (asked of the daemon this command starts).",
)
@json_option
@pass_app
def dashboard(app: App, open_: bool, host: str | None) -> None:
    """The web dashboard of every project under CORRAL_HOME: its URL (the daemon starts if needed)."""
    from corral.dashboard.security import open_file, signed_url

    home = corral_home()
    current = daemons.state(home)
    serving = current.running and current.dashboard_url is not None
    if host is not None and serving:
        served = _host_of(current.dashboard_url)
        if served != host and not (served in LOOPBACK and host in LOOPBACK):
            raise CorralError(
                f"The running daemon serves its dashboard on {served or 'no address'}, not {host}.",
                code="daemon-running",
                hint=f"Stop it first (corral daemon stop), then: corral dashboard --host {host}",
            )
    if host is not None and not serving and host not in LOOPBACK:
        daemons.ask_dashboard_host(host, home)
    daemons.want_dashboard(home)  # a running daemon serving none starts it now; every later one at its start
    current = daemons.ensure_running(home)
    deadline = time.monotonic() + 10
    while current.running and current.dashboard_url is None and time.monotonic() < deadline:
        time.sleep(0.1)
        current = daemons.state(home)
    if current.dashboard_url is None:
        raise CorralError(
            "The daemon runs, but its dashboard is not being served.",
            code="dashboard-unavailable",
            hint=f"See {daemons.log_file(home)}; `corral daemon stop` and try again.",
        )
    url = signed_url(current.dashboard_url, home)
    opened: bool | None = None
    if open_:
        import webbrowser

        opened = webbrowser.open(open_file(url, home).as_uri())  # the token never in the browser's argv
        if not opened and not app.json:
            app.note("No browser opened here (none found, or it failed to start): open the URL below yourself.")
    doc = {"url": url, "dashboard_url": current.dashboard_url, "daemon": current.to_json()}
    app.answer({**doc, "opened": opened} if open_ else doc, url)


def _host_of(url: str | None) -> str | None:
    if url is None:
        return None
    from urllib.parse import urlsplit

    return urlsplit(url).hostname
