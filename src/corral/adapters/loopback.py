"""The names a loopback bind answers to: apart from the HTTP server, so a command that only checks an
address (``corral dashboard --host``, and so ``--help``) does not load the server and asyncio with it."""

from __future__ import annotations

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
