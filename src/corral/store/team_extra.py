"""The team's engine is an extra: ``corral[team]`` adds the PostgreSQL driver, its pool and the job engine.

A single person's install leaves them out (they weigh more than the rest of corral together); the shared
store (``database_url``) and ``corral worker`` import them through :func:`team_module`, which turns a missing
package into :class:`~corral.errors.TeamExtraMissing` whose hint is the one line that adds the extra to the
very install that is running: this interpreter's pip, and the checkout corral was installed from when pip
recorded one (``direct_url.json``, PEP 610), else the distribution's name.
"""

from __future__ import annotations

import importlib
import json
import shlex
import sys
from importlib import metadata
from types import ModuleType
from urllib.parse import unquote, urlparse

from corral.errors import TeamExtraMissing

#: What the extra installs, by the module corral imports: the distribution each comes from.
TEAM_MODULES = {"psycopg": "psycopg", "psycopg_pool": "psycopg-pool", "procrastinate": "procrastinate"}


def _source() -> str:
    """What pip should install ``[team]`` of: the local checkout corral came from, or its name."""
    try:
        recorded = metadata.distribution("corral").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        recorded = None
    if recorded:
        try:
            url = json.loads(recorded).get("url", "")
        except (ValueError, AttributeError):
            url = ""
        parsed = urlparse(url) if isinstance(url, str) else None
        if parsed is not None and parsed.scheme == "file" and parsed.path:
            return unquote(parsed.path)
    return "corral"


def install_line() -> str:
    """The one command that adds the team's engine to the install that runs now."""
    return f"{shlex.quote(sys.executable)} -m pip install {shlex.quote(_source() + '[team]')}"


def missing() -> list[str]:
    """The team's packages this install lacks (their distribution names), in the extra's order."""
    gone = []
    for module, dist in TEAM_MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            gone.append(dist)
    return gone


def team_module(name: str, *, wanted_by: str) -> ModuleType:
    """Import ``name`` (one of the team's modules, or a submodule of one) for ``wanted_by`` (what the person
    asked for, in words), or say which line installs it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise TeamExtraMissing(
            f"{wanted_by} needs the team's engine (the corral[team] extra), which this install does not have "
            f"({exc.name or name} is missing).",
            hint=install_line(),
        ) from exc


def require_team(*, wanted_by: str) -> None:
    """Refuse at once, before anything starts, unless every package of the extra imports."""
    gone = missing()
    if gone:
        raise TeamExtraMissing(
            f"{wanted_by} needs the team's engine (the corral[team] extra), which this install does not have "
            f"({', '.join(gone)} {'is' if len(gone) == 1 else 'are'} missing).",
            hint=install_line(),
        )
