"""The real process runner, keeping each argv it ran: for tests that count the git processes an operation starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corral.adapters.process import Completed, SubprocessRunner


class CountingRunner(SubprocessRunner):
    """The real runner, keeping each argv it ran."""

    def __init__(self) -> None:
        self.argvs: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], **options: Any) -> Completed:
        self.argvs.append(tuple(argv))
        return super().run(argv, **options)

    def subcommands(self) -> list[str]:
        """Each git run's subcommand (``git -c k=v --flag rev-parse …`` → ``rev-parse``), in order."""
        found = []
        for argv in self.argvs:
            words, i = list(argv[1:]), 0
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in ("-c", "-C") else 1
            found.append(words[i] if i < len(words) else "?")
        return found
