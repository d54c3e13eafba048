"""Retention of diagnostics: :func:`prune` removes a diagnostic once it is 90 days old.

Its age is its mtime, set to the project clock's time at writing (``read/diagnostics.write``), so
an injected clock decides ages; the diagnostics of tasks that no longer exist go too. Evidence and
resting causes stay until the task is deleted; a reference whose file is gone reads
``"Expired after 90 days"`` (:data:`EXPIRED`). Only prune removes diagnostics, so a missing file
is taken to be an expired one.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from corral.engine.paths import ProjectPaths

RETENTION = timedelta(days=90)
EXPIRED = "Expired after 90 days"


class PruneReport:
    def __init__(self) -> None:
        self.removed: list[str] = []  # references
        self.orphaned: list[str] = []  # task directories of deleted tasks
        self.kept = 0

    def to_json(self) -> dict[str, Any]:
        return {"removed": self.removed, "orphaned_tasks": self.orphaned, "kept": self.kept}


def prune(paths: ProjectPaths, now: datetime, live_tasks: set[str] | None = None) -> PruneReport:
    """Remove diagnostics 90 days old or older, and those of tasks that no longer exist.

    ``live_tasks`` is every task id the store holds; None skips the orphan check.
    Half-written temp files older than a day go too.
    """
    import shutil  # pruning is rare; reading diagnostics is not

    report = PruneReport()
    root = paths.diagnostics
    try:
        task_dirs = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return report
    cutoff = (now - RETENTION).timestamp()
    stale_tmp = (now - timedelta(days=1)).timestamp()
    for entry in task_dirs:
        if not entry.is_dir(follow_symlinks=False):
            continue
        if live_tasks is not None and entry.name not in live_tasks:
            shutil.rmtree(entry.path, ignore_errors=True)
            report.orphaned.append(entry.name)
            continue
        for item in os.scandir(entry.path):
            try:
                mtime = item.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            temp = item.name.startswith(".")
            if (temp and mtime <= stale_tmp) or (not temp and mtime <= cutoff):
                try:
                    os.unlink(item.path)
                except OSError:
                    continue
                if not temp:
                    report.removed.append(f"{entry.name}/{item.name}")
            elif not temp:
                report.kept += 1
        try:
            os.rmdir(entry.path)  # only when it is empty now
        except OSError:
            pass
    return report
