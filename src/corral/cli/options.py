"""The click decorators every command shares: the application object and ``--json``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from corral.cli.app import App

F = TypeVar("F", bound=Callable[..., Any])


def pass_app(f: F) -> F:
    """The application object as the command's first argument, once an agent's gates let it run."""

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        app = ctx.ensure_object(App)
        if getattr(f, "streams", False):  # before the gates: a refusal there is one more JSON Line too
            app.streaming = True
        app.gate(ctx.info_name or (ctx.command.name or ""), kwargs)
        return f(app, *args, **kwargs)

    return cast(F, run)


def streams(f: F) -> F:
    """Mark a command that always streams (JSON Lines with --json): its errors, its gates' included,
    are one more line. Put it below :func:`pass_app`."""
    f.streams = True  # type: ignore[attr-defined]
    return f


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
