"""Imports point downward only (DESIGN.md "Architecture"), and the domain is pure.

Layers: errors (0) < domain (1) < store (2) < adapters (3) < engine (4) < cli (5).
A module may import its own layer or a lower one. Every import counts, including
those inside functions and under ``TYPE_CHECKING``.
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
    "engine": 4,
    "cli": 5,
}
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


@pytest.mark.parametrize("path", DOMAIN, ids=[_dotted(p) for p in DOMAIN])
def test_the_domain_is_pure(path: Path) -> None:
    bad = []
    for line, module in _imports(path):
        top = module.split(".")[0]
        where = f"{path.relative_to(SRC.parent)}:{line} imports {module}"
        if top == "corral":
            if not (module == "corral.errors" or module == "corral.domain" or module.startswith("corral.domain.")):
                bad.append(f"{where} (the domain may import only corral.errors and corral.domain)")
        elif top == "__future__":
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
    assert _layer_of_module("corral.engine.tasks") > _layer_of_module("corral.store.sqlite")
    assert _layer_of_module("corral.cli.app") == 5
    assert _layer_of_module("corral.errors") == 0
