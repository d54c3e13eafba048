"""The click decorators every command shares: the application object and ``--json``."""

from __future__ import annotations

from typing import Any

import click

from corral.cli.app import App

pass_app = click.make_pass_decorator(App)


def json_option(f: Any) -> Any:
    """``--json`` on every command: one JSON document on stdout, human text on stderr."""

    def set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.ensure_object(App).json = True
        return value

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=set_json,
        help="Print one JSON document on stdout (errors too); human text goes to stderr.",
    )(f)
