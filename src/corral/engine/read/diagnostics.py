"""Detailed diagnostics: the technical detail of a failure, kept for 90 days
(docs/architecture.md#failure-evidence-wording-and-diagnostics).

A failure's lasting record is its typed :class:`FailureEvidence` on the turn or attempt
(and the task's resting cause); a diagnostic keeps the rest — the translated cause and
stack, a bounded output tail, the harness's partial output, the retry evidence and a
lost turn's last observation (``read/diagnostic_content``, every text of it through the one
safe translator, ``read/translator``) — as one JSON file per failed turn under the state
directory's ``diagnostics/<task id>/``. The evidence names it by a reference relative
to ``diagnostics/`` (``FailureEvidence.diagnostic``). This module names and writes those
files; ``read/diagnostic_retention`` removes them once they are 90 days old.

A diagnostic is **written before the row that references it**, atomically (temp file, fsync,
rename, fsync of the directory). The file name is derived from the turn's command id, so two
reconcilers racing on one receipt write the same file, and no row ever points at a file that
was not there when the row was written.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from corral.adapters.files import write_atomic
from corral.domain.clock import rfc3339
from corral.engine.paths import ProjectPaths, plain

DIAGNOSTIC_VERSION = 1


def reference(task_id: str, key: str) -> str:
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in key)[:80] or "diagnostic"
    return f"{task_id}/{safe}.json"


def path_of(paths: ProjectPaths, ref: str) -> Path:
    return paths.diagnostic(ref)


def present(diagnostics_dir: Path, task_id: str) -> set[str]:
    """The references of the task's diagnostics that still exist (one directory listing)."""
    try:
        return {f"{task_id}/{name}" for name in os.listdir(diagnostics_dir / plain(task_id, "task id"))}
    except OSError:
        return set()


def write(paths: ProjectPaths, task_id: str, key: str, content: dict[str, Any], now: datetime) -> str:
    """Write one diagnostic atomically and durably; returns its reference.

    The file's mtime is set to ``now`` (the project clock), which is what retention
    measures. Mode 0600, like the output log.
    """
    ref = reference(task_id, key)
    path = path_of(paths, ref)
    doc = {"diagnostic_version": DIAGNOSTIC_VERSION, "created_at": rfc3339(now), **content}
    payload = json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass")
    write_atomic(path, payload, mtime=now.timestamp())
    return ref


def try_write(paths: ProjectPaths, task_id: str, key: str, content: dict[str, Any], now: datetime) -> str | None:
    """:func:`write`, or None when the disk refuses: a diagnostic that cannot be kept must never
    keep the failure itself (its evidence, its resting cause) from being recorded."""
    try:
        return write(paths, task_id, key, content, now)
    except OSError:
        return None


def discard(paths: ProjectPaths, ref: str) -> None:
    """Remove a diagnostic no row came to reference (its write transaction found nothing to do)."""
    try:
        path_of(paths, ref).unlink()
    except OSError:
        pass


def remove_for_task(paths: ProjectPaths, task_id: str) -> None:
    import shutil  # deleting is rare; reading diagnostics is not

    shutil.rmtree(paths.diagnostics_dir(task_id), ignore_errors=True)
