"""The words of a plain command line, read before click: the one grammar the CLI's quick paths share.

``list``, ``show`` and ``failures --log`` (:mod:`corral.cli.reads`) and ``accept`` (:mod:`corral.cli.accept_way`)
run their plain forms without click. Each takes only what click would take as it is: this splits the line the
way click reads it, and anything it cannot be sure of is None, which sends the line to click (it owns every
message about usage). Tests hold each quick path's grammar equal to its click command's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple


class Words(NamedTuple):
    words: list[str]  # the command and its arguments
    flags: list[str]  # its switches, each once
    values: dict[str, str]  # its options that take a value, each once
    repo: str | None  # ``--repo PATH``


def split(args: Sequence[str], value_options: Collection[str]) -> Words | None:
    """``args`` as words, switches and option values: ``--repo PATH`` (or ``--repo=PATH``) and ``--json``
    anywhere; before the command no other option (the group's own: click says what it is); after it, each
    of ``value_options`` at most once with its value (``--opt V`` or ``--opt=V``, never a value that starts
    with ``-``), and each switch at most once. None for anything else."""
    words: list[str] = []
    flags: list[str] = []
    values: dict[str, str] = {}
    repo: str | None = None
    it = iter(args)
    for arg in it:
        name, eq, given = arg.partition("=")
        if arg == "--repo":
            repo = next(it, None)
            if repo is None or repo.startswith("-"):
                return None
        elif arg.startswith("--repo="):
            repo = arg.removeprefix("--repo=")
        elif arg == "--json":
            continue
        elif not words and arg.startswith("-"):
            return None  # before the command only the group's own options: click says what this one is
        elif name in value_options:
            value = given if eq else next(it, None)
            if not value or value.startswith("-") or name in values:
                return None  # click says what is wrong with it, or takes it as it means
            values[name] = value
        elif arg.startswith("-"):
            flags.append(arg)
        else:
            words.append(arg)
    if len(set(flags)) != len(flags):
        return None
    return Words(words, flags, values, repo)
