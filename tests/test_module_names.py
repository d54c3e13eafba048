"""No two modules share a basename: a name read in a traceback, an import or a review says which module it is.

Today's collisions are known and listed (:data:`KNOWN`); they are to be renamed in one go. Until
then the full rule is an expected failure (strict: it fails once they are all gone, so the mark
goes with them), and no module may join them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

#: The modules that share a basename today, by basename (paths under ``src/corral``).
KNOWN: dict[str, frozenset[str]] = {
    "app": frozenset({"cli/app.py", "dashboard/app.py"}),
    "config": frozenset({"cli/commands/config.py", "engine/config.py"}),
    "failures": frozenset({"cli/commands/failures.py", "domain/failures.py"}),
    "incidents": frozenset({"domain/incidents.py", "engine/read/incidents.py"}),
    "locks": frozenset({"adapters/locks.py", "engine/locks.py"}),
    "logs": frozenset({"cli/commands/logs.py", "engine/read/logs.py"}),
    "project": frozenset({"cli/commands/project.py", "engine/project.py"}),
    "protocol": frozenset({"engine/runtime/protocol.py", "store/protocol.py"}),
    "prune": frozenset({"cli/commands/prune.py", "engine/operations/prune.py"}),
    "service": frozenset({"daemon/service.py", "worker/service.py"}),
    "sync": frozenset({"engine/operations/sync.py", "engine/runtime/sync.py"}),
    "tasks": frozenset({"cli/commands/tasks.py", "engine/operations/tasks.py"}),
    "turns": frozenset({"cli/commands/turns.py", "engine/operations/turns.py"}),
}


def shared_basenames(root: Path = SRC) -> dict[str, frozenset[str]]:
    """Every basename two or more modules under ``root`` share, with their paths (``__init__.py`` aside)."""
    by_name: defaultdict[str, set[str]] = defaultdict(set)
    for path in root.rglob("*.py"):
        if path.name != "__init__.py":
            by_name[path.stem].add(path.relative_to(root).as_posix())
    return {name: frozenset(paths) for name, paths in sorted(by_name.items()) if len(paths) > 1}


def test_the_scan_finds_modules_sharing_a_basename_in_any_two_packages(tmp_path: Path) -> None:
    for where in ("a/__init__.py", "a/sync.py", "b/c/sync.py", "b/c/__init__.py", "b/own.py", "__init__.py"):
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text("")
    assert shared_basenames(tmp_path) == {"sync": frozenset({"a/sync.py", "b/c/sync.py"})}


def test_no_module_shares_a_basename_beyond_the_known_ones() -> None:
    known = frozenset().union(*KNOWN.values())
    new = {name: sorted(paths - known) for name, paths in shared_basenames().items() if paths - known}
    assert new == {}, f"modules that share a basename with another one: {new}; give each a name of its own"


@pytest.mark.xfail(strict=True, reason=f"to be renamed in one go: {', '.join(sorted(KNOWN))}")
def test_no_two_modules_share_a_basename() -> None:
    assert shared_basenames() == {}
