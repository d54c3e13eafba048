"""The ``corral`` command line: a thin surface over the engine's operations."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.errors import CorralError, Interrupted, UsageError

if TYPE_CHECKING:
    import click

    from corral.cli.app import App


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: every failure becomes a coded message and an exit code, never a traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    args = list(sys.argv[1:] if argv is None else argv)
    from corral.cli.early import answer

    early = answer(args, sys.stdout)  # --version and the help: before click and the engine load
    if early is not None:
        return early
    from corral.cli.app import App

    app = App()
    app.json = "--json" in args
    code: int
    try:
        code = _announcing(app, args)
    except CorralError as exc:
        code = _fail(app, exc)
    except KeyboardInterrupt:
        code = _fail(app, _interrupted())
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # the last line of defence: explain, log, never dump a traceback
        code = _fail(app, _internal(exc))
    finally:
        app.close()
    return code


def _announcing(app: App, args: list[str]) -> int:
    """The command, told of a daemon it starts on its way (a launch whose agent gets corral's tools).

    The plain reads run without click (:mod:`corral.cli.reads`); one that settles nothing (a log's
    incidents) cannot start a daemon, and runs without the watch for one too.
    """
    from corral.cli.reads import quick

    found = quick(app, args)
    if found is not None and not found.settles:
        found.run()
        return 0
    from corral.engine.api import daemons

    with daemons.announcing(lambda state: app.started_daemon(state.pid, daemons.started_line(state.pid))):
        if found is not None:
            found.run()
            return 0
        return _run(app, args)


def _run(app: App, args: list[str]) -> int:
    """Everything but the plain reads: through click."""
    import click

    from corral.cli.root import cli

    try:
        result = cli.main(args=args, prog_name="corral", standalone_mode=False, obj=app)
    except click.exceptions.NoArgsIsHelpError as exc:  # `corral`, `corral config`: the help, not an error
        return _help(app, exc.ctx)
    except click.UsageError as exc:  # NoSuchOption included
        raise UsageError(exc.format_message(), hint=_usage_hint(exc)) from None
    except click.exceptions.Abort:  # click turns a Ctrl-C inside a command into Abort
        raise KeyboardInterrupt from None
    return result if isinstance(result, int) else 0


def _fail(app: App, error: CorralError) -> int:
    """Render an error; a reader that went away (``| head``) gets no traceback either."""
    try:
        return app.fail(error)
    except BrokenPipeError:
        return error.exit_code


def _help(app: App, ctx: click.Context) -> int:
    text = ctx.get_help()
    try:
        if app.json:
            app.emit({"help": text})
        else:
            print(text, file=app.stdout)
    except BrokenPipeError:
        pass
    return 0


def _usage_hint(exc: click.UsageError) -> str:
    ctx = exc.ctx
    path = ctx.command_path if ctx is not None else "corral"
    return f"See `{path} --help`."


def _interrupted() -> CorralError:
    return Interrupted(
        "Interrupted.",
        hint="See where things stand with `corral list`; `corral doctor` checks the state.",
    )


def _internal(exc: BaseException) -> CorralError:
    if os.environ.get("CORRAL_DEBUG"):
        import traceback

        traceback.print_exc()
    return CorralError(
        f"corral hit an internal error: {type(exc).__name__}: {exc}",
        code="internal-error",
        hint="Run again with CORRAL_DEBUG=1 to see where, and report it with that output.",
    )


def run() -> None:
    sys.exit(main())
