"""``failures``' answer: the page of incidents and its lines, for click's command and the quick way in.

``corral failures --log PATH --harness H`` scans a log outside any task: no project, no store. Its
answer is built here, without click, so :func:`corral.cli.reads.quick` can run it as the click
command (:mod:`corral.cli.commands.failures_cli`) does, from a process that loaded only the scan.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.cli.app import App

HARNESSES = ("claude", "codex", "pi")
#: The labels of a row a person may dismiss (what needs action).
NEEDS_ACTION_LABELS = ("Action required", "Observation incomplete")


def log_body(
    app: App,
    log: str,
    harness: str,
    *,
    history: bool,
    raw: bool,
    cursor: str | None = None,
    max_bytes: int | None = None,
) -> None:
    """The incidents of ``log``, a ``harness``'s output log outside any task, as ``failures --log`` answers."""
    from corral.engine.api import log_failures

    every = log_failures(log, harness, history=history, raw=raw)
    again = f"corral failures --log {log} --harness {harness}"
    answer(app, every, [], again, history=history, raw=raw, cursor=cursor, max_bytes=max_bytes)


def answer(
    app: App,
    every: Mapping[str, Any],
    problems: list[str],
    again: str,
    *,
    history: bool,
    raw: bool,
    session: str | None = None,
    cursor: str | None = None,
    max_bytes: int | None = None,
) -> None:
    """Answer with the page of ``every`` (the summary and every row) at ``cursor``, fitted to ``max_bytes``;
    ``again`` is the command that shows it (what the page's hints repeat)."""
    from corral.domain.incidents import cursor_index, fit_page

    for problem in problems:
        app.note(f"warning: could not reconcile {problem} (see corral doctor)")
    for flag, on in (("--history", history), ("--raw", raw)):
        again += f" {flag}" if on else ""
    again += f" --session {session}" if session else ""
    again += f" --max-bytes {max_bytes}" if max_bytes is not None else ""
    # paged here, against the very lines printed (the hints included), so the page never exceeds its budget
    doc = fit_page(every, cursor_index(cursor, len(every["rows"])), max_bytes, lambda d: lines(d, again))
    app.answer({"failures": doc}, lambda: lines(doc, again))


def lines(doc: Mapping[str, Any], again: str) -> list[str]:
    """The incident rows, then the one-line account and the correctness note (kept whole)."""
    from corral.cli.render import incident_line

    out = [*(incident_line(r) for r in doc["rows"]), *([doc["line"]] if doc["line"] else [])]
    open_ids = [r["id"] for r in doc["rows"] if r.get("label") in NEEDS_ACTION_LABELS and r.get("id")]
    if open_ids and not again.startswith("corral failures --log"):
        task = again.split()[2]
        # an incident's id carries the tool call's id the agent's stream said: quoted, the command runs nothing else
        first = shlex.quote(open_ids[0])
        out.append(f"Dismiss one you have dealt with: corral failures {task} --dismiss {first} -m 'why'")
    if doc["note"]:
        out.append(doc["note"])
    if doc.get("next_cursor"):
        out.append(f"More: {again} --cursor {doc['next_cursor']}")
    return out
