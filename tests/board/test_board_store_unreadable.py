"""A board whose store becomes unreadable after it started (real SQLite: its files overwritten with garbage)
says why, keeps the board as last read, tries again only after its interval, and once the store reads
again shows the tasks as they are now."""

from __future__ import annotations

import asyncio
from pathlib import Path

from corral.cli.app import App as CliApp
from corral.cli.board_app import BoardApp
from corral.cli.watch_source import open_source
from tests.board.test_board_app import message, shows, when
from tests.conftest import CLI


def test_an_unreadable_store_is_said_then_the_board_comes_back(corral: CLI, repo: Path) -> None:
    corral.ok("create", "Before the damage", "--ref", "before")

    async def drive() -> None:
        cli = CliApp(str(repo))
        app = BoardApp(cli, open_source(cli, False, []), 3600.0)  # read again only when something changed
        async with app.run_test(size=(160, 30)) as pilot:
            await shows(pilot, "Backlog (1)", "before")
            db = Path(app.source.projects[0][1].store.path)
            saved = {suffix: Path(f"{db}{suffix}").read_bytes() for suffix in ("", "-shm")}
            for suffix, data in saved.items():  # garbage over the database and its shared index, in place
                with open(f"{db}{suffix}", "r+b") as fh:
                    fh.write(b"garbage!" * (len(data) // 8))
            await when(pilot, lambda _s: "cannot be read" in message(app), what="the store's failure said")
            shown = await shows(pilot, "Backlog (1)", "before")  # the board as last read stays
            assert app.is_running
            assert "corral restore" in message(app)  # the store's hint, with its message
            # Nothing changed since: the next look waits for the interval instead of failing four times a second.
            assert not app.source.due(app.interval)
            await pilot.pause(0.6)
            assert "cannot be read" in message(app) and shown == await shows(pilot, "before")

            for suffix, data in saved.items():  # the store readable again, nothing written to it since
                with open(f"{db}{suffix}", "r+b") as fh:
                    fh.write(data)
            app.interval = 0.5  # the retry the interval brings, without waiting an hour for it
            await when(pilot, lambda _s: message(app) == "", timeout=20, what="the failure's words gone")
            await shows(pilot, "Backlog (1)", "before")
            corral.ok("create", "After the repair", "--ref", "after")  # and the board reads on as before
            await shows(pilot, "Backlog (2)", "before", "after", timeout=20)
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(drive())
