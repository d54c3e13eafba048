"""Fixtures for turns run by the real supervisor with the scenario-driven fake agent."""

from __future__ import annotations

from typing import Any


def ok(result: str = "Done.") -> list[dict[str, Any]]:
    return [{"init": True}, {"text": "working"}, {"result": result}]


def reopen(project):  # type: ignore[no-untyped-def]
    """The same repository opened again, reading settings changed since (env vars)."""
    from corral.engine.project import Project

    project.close()
    return Project.open(project.repo)
