"""The forge's accept does not import the local accept: what it runs of it is handed over (accept_phases.Steps),
so the two modules form no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

OPERATIONS = Path(__file__).resolve().parents[2] / "src" / "corral" / "engine" / "operations"


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports at its top level (not inside a function)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_the_forge_accept_and_the_shared_phases_do_not_import_the_local_accept():
    for name in ("forge_accept.py", "forge_sync.py", "accept_phases.py"):
        assert "corral.engine.operations.accept" not in imported(OPERATIONS / name), name
    assert "corral.engine.operations.forge_accept" not in imported(OPERATIONS / "accept_phases.py")
