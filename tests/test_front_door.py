"""The engine's front door: surfaces reach the engine through ``corral.engine.api`` only, and open no store
transaction of their own (docs/architecture.md#the-front-door).

Every import counts, those inside functions included. A surface may still import the layers below the
engine (``corral.domain``, ``corral.errors``, ``corral.adapters``, ``corral.store``'s types; tests/test_layers.py
keeps those pointing down); of the engine, only the door.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"
SURFACES = ("cli", "dashboard", "mcp", "daemon", "worker")
DOOR = "corral.engine.api"


def _surface_modules() -> list[Path]:
    return sorted(p for surface in SURFACES for p in (SRC / surface).rglob("*.py"))


def _where(path: Path) -> str:
    return str(path.relative_to(SRC.parent)) if path.is_relative_to(SRC.parent) else path.name


def _package(path: Path) -> list[str]:
    """The package a module's relative imports start from (empty for a file outside the source tree)."""
    if not path.is_relative_to(SRC.parent):
        return []
    return list(path.relative_to(SRC.parent).with_suffix("").parts[:-1])


def _past_the_door(path: Path) -> list[str]:
    """Each import of ``path`` that names an engine module other than the door."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = _where(path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # `from ..engine import x`: resolved against the module's own package
                base = _package(path)[: len(_package(path)) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            # `from corral import engine` / `from corral.engine import x` name the engine package or its modules
            if module == "corral":
                names = [f"corral.{alias.name}" for alias in node.names]
            elif module == "corral.engine":
                names = [f"corral.engine.{alias.name}" for alias in node.names]
            else:
                names = [module]
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == "__import__" or getattr(node.func, "attr", None) == "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        else:
            continue
        found += [
            f"{where}:{node.lineno} imports {name}"
            for name in names
            if (name == "corral.engine" or name.startswith("corral.engine.")) and name != DOOR
        ]
    return found


def _transactions(path: Path) -> list[str]:
    """Each ``<…>.read()`` / ``<…>.write()`` called on something named ``store`` (``project.store.read()``,
    ``store.write()``), in a ``with`` or not."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = _where(path)
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("read", "write")
        ):
            continue
        owner = node.func.value
        named = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if "store" in named.lower():
            found.append(f"{where}:{node.lineno} opens a store transaction ({ast.unparse(node)})")
    return found


MODULES = _surface_modules()


def test_there_are_surfaces_to_scan() -> None:
    names = {p.relative_to(SRC).as_posix() for p in MODULES}
    assert {"cli/app.py", "mcp/tools.py", "dashboard/web.py", "daemon/daemon_service.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=[p.relative_to(SRC).as_posix() for p in MODULES])
def test_surfaces_import_the_engine_through_the_door_only(path: Path) -> None:
    past = _past_the_door(path)
    assert not past, "\n".join(past) + f"\nImport it from {DOOR} (add it to the door's exports if it is new)."


@pytest.mark.parametrize("path", MODULES, ids=[p.relative_to(SRC).as_posix() for p in MODULES])
def test_surfaces_open_no_store_transaction(path: Path) -> None:
    opened = _transactions(path)
    assert not opened, "\n".join(opened) + "\nAsk an engine query or operation (corral.engine.api) instead."


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    """The rules themselves: a function-level import past the door and a transaction are both reported."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f(project):\n"
        "    from corral.engine.operations import tasks\n"
        "    from corral.engine import daemons\n"
        "    import corral.engine.read.logs\n"
        "    from corral.engine.api import Project\n"
        "    importlib.import_module('corral.engine.runtime.protocol')\n"
        "    with project.store.read() as tx:\n"
        "        return tx, shared_store.write()\n"
    )
    past = _past_the_door(probe)
    opened = _transactions(probe)
    assert [line.split(" imports ")[1] for line in past] == [
        "corral.engine.operations",
        "corral.engine.daemons",
        "corral.engine.read.logs",
        "corral.engine.runtime.protocol",
    ]
    assert len(opened) == 2


def test_every_name_the_door_lists_is_there() -> None:
    """``__all__`` and the lazy lookup agree: each name resolves, and nothing unlisted does."""
    door = importlib.import_module(DOOR)
    assert sorted(door.__all__) == sorted(set(door.__all__)) == sorted(door._EXPORTS)
    for name in door.__all__:
        assert getattr(door, name) is not None, name
    with pytest.raises(AttributeError):
        door.nothing_by_this_name  # noqa: B018


def test_importing_the_door_loads_no_engine_module() -> None:
    """The door is lazy: importing it (as ``corral --help`` and the quick ``list`` do) imports nothing behind it."""
    probe = (
        "import sys; import corral.engine.api; "
        "print(sorted(m for m in sys.modules if m.startswith('corral.engine.') and m != 'corral.engine.api'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
