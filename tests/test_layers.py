"""Imports point downward only (docs/architecture.md), the domain is pure, and nothing imports in a cycle.

Layers: errors (0) < domain (1) < store (2) < adapters (3) < engine (4) < surfaces: cli, daemon, worker, mcp,
dashboard (5).
Inside the engine, rooms: the house (project, paths, config, …) < runtime < read < recovery <
operations < shared_store < the front door (api). The shared store's room (``engine/shared_store``: the team
mode's queue, leases, claimed turns, shipping, …) sits above every room whose work it plays for a
team (it queues the turns the launch skeleton starts, ends the turns the recovery sweeps would);
the rooms below reach it only through the placement object the house injects
(``project.placement``, whose interface is the house's ``engine/placement.py``), and the house
names the shared placement by module (``placement.SHARED``) to load it when the settings choose it,
as a driver is loaded. A module may import its own layer or room, or a lower one. Every import
counts, including those inside functions and under ``TYPE_CHECKING``; and no module reaches itself
again through any chain of imports (no cycle anywhere, inside a layer or a room included).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

LAYERS = {
    "errors": 0,
    # Named crash points for the crash-recovery tests: a leaf every layer may call, like errors.
    "crashpoints": 0,
    "domain": 1,
    "store": 2,
    "adapters": 3,
    # The scenario-driven fake agent shipped for `corral demo`: a stand-in for a harness's
    # executable, so it sits with the adapters (it imports nothing from corral today).
    "testing": 3,
    # corral's Pi extension (TypeScript Pi runs) and where its files are: read by the Pi adapter.
    "pi_extension": 3,
    "engine": 4,
    "cli": 5,
    "daemon": 5,
    "worker": 5,
    "mcp": 5,
    "dashboard": 5,
}
#: The engine's rooms, lowest first; modules at the engine's root are the house (room 0).
ROOMS = {"runtime": 1, "read": 2, "recovery": 3, "operations": 4, "shared_store": 5}
# The front door (corral.engine.api) re-exports from every room, so it sits above them all.
DOOR_ROOM = {"api": 6}
# Modules at the package root that are not a layer of their own.
ROOT_MODULES = {"__init__": 0, "__main__": 5}

# Standard-library modules that do I/O: none of them may appear in the domain.
IO_MODULES = {
    "os",
    "subprocess",
    "sqlite3",
    "pathlib",
    "socket",
    "shutil",
    "tempfile",
    "fcntl",
    "select",
    "selectors",
    "asyncio",
    "threading",
    "multiprocessing",
    "urllib",
    "http",
    "io",
    "glob",
}


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def _dotted(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer_of_module(dotted: str) -> int:
    parts = dotted.split(".")
    assert parts[0] == "corral"
    if len(parts) == 1:
        return ROOT_MODULES["__init__"]
    head = parts[1]
    if head in LAYERS:
        return LAYERS[head]
    if head in ROOT_MODULES:
        return ROOT_MODULES[head]
    raise AssertionError(f"{dotted} belongs to no known layer; add it to tests/test_layers.py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in the file; relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # `from corral import engine` imports the engine package
            if module == "corral":
                found.extend((node.lineno, f"corral.{alias.name}") for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "__import__"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


MODULES = _modules()


def test_the_source_tree_is_there() -> None:
    names = {_dotted(p) for p in MODULES}
    assert {"corral.errors", "corral.domain.status", "corral.store.sqlite", "corral.cli"} <= names


@pytest.mark.parametrize("path", MODULES, ids=[_dotted(p) for p in MODULES])
def test_imports_point_downward(path: Path) -> None:
    here = _dotted(path)
    mine = _layer_of_module(here)
    upward = []
    for line, module in _imports(path):
        if module == "corral" or not module.startswith("corral."):
            continue
        theirs = _layer_of_module(module)
        if theirs > mine:
            upward.append(f"{path.relative_to(SRC.parent)}:{line} imports {module} (layer {theirs} > {mine})")
    assert not upward, "\n".join(upward)


DOMAIN = [p for p in MODULES if _dotted(p).startswith("corral.domain")]


#: The one library the domain builds on: its typed records are msgspec Structs (frozen, validated on decode).
RECORDS_LIBRARY = "msgspec"


@pytest.mark.parametrize("path", DOMAIN, ids=[_dotted(p) for p in DOMAIN])
def test_the_domain_is_pure(path: Path) -> None:
    bad = []
    for line, module in _imports(path):
        top = module.split(".")[0]
        where = f"{path.relative_to(SRC.parent)}:{line} imports {module}"
        if top == "corral":
            if not (module == "corral.errors" or module == "corral.domain" or module.startswith("corral.domain.")):
                bad.append(f"{where} (the domain may import only corral.errors and corral.domain)")
        elif top == "__future__" or top == RECORDS_LIBRARY:
            continue
        elif top not in sys.stdlib_module_names:
            bad.append(f"{where} (not the standard library)")
        elif top in IO_MODULES:
            bad.append(f"{where} (I/O has no place in the domain)")
    assert not bad, "\n".join(bad)


LEAVES = [p for p in MODULES if _layer_of_module(_dotted(p)) == 0 and _dotted(p) != "corral"]


@pytest.mark.parametrize("path", LEAVES, ids=[_dotted(p) for p in LEAVES])
def test_layer_zero_imports_nothing_from_corral(path: Path) -> None:
    for line, module in _imports(path):
        assert not module.startswith("corral"), f"{path.relative_to(SRC.parent)}:{line} imports {module}"


def test_the_checker_sees_a_violation() -> None:
    """The rule itself: an engine import from the store would be reported."""
    assert _layer_of_module("corral.engine.operations.tasks") > _layer_of_module("corral.store.sqlite")
    assert _layer_of_module("corral.cli.app") == 5
    assert _layer_of_module("corral.errors") == 0


def _room_of(dotted: str) -> int | None:
    parts = dotted.split(".")
    if parts[:2] != ["corral", "engine"]:
        return None
    if len(parts) == 2:
        return 0
    return ROOMS.get(parts[2], DOOR_ROOM.get(parts[2], 0))


ENGINE = [p for p in MODULES if _dotted(p).startswith("corral.engine")]


@pytest.mark.parametrize("path", ENGINE, ids=[_dotted(p) for p in ENGINE])
def test_engine_rooms_point_downward(path: Path) -> None:
    here = _dotted(path)
    mine = _room_of(here)
    assert mine is not None
    upward = []
    for line, module in _imports(path):
        theirs = _room_of(module)
        if theirs is not None and theirs > mine:
            upward.append(f"{path.relative_to(SRC.parent)}:{line} imports {module} (room {theirs} > {mine})")
    assert not upward, "\n".join(upward)


def _resolve(module: str, known: set[str]) -> str | None:
    """The source module an import names: itself, or the package a ``from pkg import name`` reads."""
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module or None


def _graph() -> dict[str, set[str]]:
    known = {_dotted(p) for p in MODULES}
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        here = _dotted(path)
        edges = graph.setdefault(here, set())
        for _line, module in _imports(path):
            if not module.startswith("corral"):
                continue
            target = _resolve(module, known)
            # A package's __init__ is not a dependency of its own submodules' siblings unless named.
            if target is not None and target != here:
                edges.add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_anywhere() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" ↔ ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_cycle() -> None:
    """The rule itself: two modules importing each other (even inside functions) are a cycle."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_shared_placement_the_house_names_is_a_placement_of_the_shared_room() -> None:
    """The one name the house gives of the room above: the shared placement, loaded by module when the settings
    choose it; every other call into the shared room goes through the placement object."""
    import importlib

    from corral.engine.placement import SHARED, Placement

    module, name = SHARED
    assert _room_of(module) == ROOMS["shared_store"]
    assert issubclass(getattr(importlib.import_module(module), name), Placement)
