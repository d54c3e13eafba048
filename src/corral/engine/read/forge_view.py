"""A task's pull request as the reads show it (``show``, MCP): its URL, what a merge on the forge waits for, and
whether the forge could be asked (docs/forge.md). Every text here was escaped when corral took it in."""

from __future__ import annotations

from typing import Any

from corral.domain.explain import breaker_line
from corral.domain.records import Task
from corral.domain.status import Status


def forge_view(task: Task) -> dict[str, Any] | None:
    """None for a task with no pull request; else its number, URL, whether a merge waits on it and for what,
    the forge's last outage or rate limit, how many pieces of forge feedback wait for the next unblock, and why
    they were not delivered by themselves when the circuit breaker held them back (its own words)."""
    rec = task.metadata.get("forge")
    if not isinstance(rec, dict) or not isinstance(rec.get("number"), int):
        return None
    waiting = task.status is Status.MERGING and "accept_in_flight_from" not in task.metadata
    waits = rec.get("waits") if waiting else None
    unavailable = rec.get("unavailable") if waiting else None
    feedback = len(rec.get("feedback") or [])
    text = str(rec.get("url") or f"#{rec['number']}")
    if waiting:
        text += f" — the merge waits on the forge: {waits or 'its answer'}"
    if unavailable:
        text += f" (the forge could not be asked: {unavailable})"
    if feedback:
        text += f"; {feedback} piece(s) of forge feedback go with the next unblock"
    held = rec.get("held")
    if feedback and isinstance(held, int) and not isinstance(held, bool) and task.status is Status.BLOCKED:
        text += f" (not delivered by itself: {breaker_line(held)})"
    return {
        "number": rec["number"],
        "url": rec.get("url"),
        "pending": waiting,
        "waits": waits,
        "unavailable": unavailable,
        "feedback": feedback,
        "merged": rec.get("merged"),
        "text": text,
    }


def pull_request_row(task: Task) -> dict[str, Any] | None:
    """What a list row, a board card and the dashboard show of a task's pull request: its number, its URL when
    it is a web address, and, while a merge waits on the forge, what for (``line``, one short sentence)."""
    view = forge_view(task)
    if view is None:
        return None
    url = view["url"] if isinstance(view["url"], str) and view["url"].startswith("https://") else None
    line = f"PR #{view['number']}"
    if view["pending"]:
        line += f" waits on the forge: {view['waits'] or 'its answer'}"
        if view["unavailable"]:
            line += " (the forge could not be asked)"
    return {"number": view["number"], "url": url, "pending": view["pending"], "line": line}
