"""The error tree drawn in ``corral.errors`` is the class tree, every code is unique, and no
``CorralError`` subclass lives outside that module."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from corral import errors

SRC = Path(errors.__file__).resolve().parent


def _drawn() -> dict[str, str | None]:
    """class name -> the parent it is drawn under (None for the root)."""
    doc = errors.__doc__ or ""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        m = re.match(r"^(\s*)((?:[│ ]   )*)(?:[├└]── )?([A-Z][A-Za-z]+)\b", line)
        if not m or not re.search(r"[├└│]|^\s{4}CorralError", line):
            continue
        depth = len(m.group(2)) // 4 + (1 if re.search(r"[├└]── ", line) else 0)
        name = m.group(3)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((depth, name))
    return parents


def _classes() -> dict[str, type[errors.CorralError]]:
    return {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, errors.CorralError) and cls.__module__ == errors.__name__
    }


def test_the_drawing_is_the_class_tree() -> None:
    drawn = _drawn()
    classes = _classes()
    assert set(drawn) == set(classes)
    for name, cls in classes.items():
        parent = cls.__mro__[1].__name__ if cls is not errors.CorralError else None
        assert drawn[name] == parent, f"{name} is drawn under {drawn[name]}, but its base is {parent}"


def test_codes_are_unique() -> None:
    codes: dict[str, str] = {}
    for name, cls in _classes().items():
        assert cls.code not in codes, f"{name} and {codes.get(cls.code)} share the code {cls.code}"
        codes[cls.code] = name


def test_exit_codes_follow_the_contract() -> None:
    assert errors.UsageError.exit_code == 2
    assert errors.RefusedError.exit_code == 3
    assert errors.NotFoundError.exit_code == 4
    assert errors.Interrupted.exit_code == 130
    assert errors.TaskBusy("x").exit_code == 3


def _error_bases() -> set[str]:
    return set(_classes())


def test_no_error_class_outside_the_errors_module() -> None:
    bases = _error_bases() | {"Exception"}
    found = []
    for path in SRC.rglob("*.py"):
        if path.name == "errors.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if names & (bases - {"Exception"}):
                    found.append(f"{path.relative_to(SRC)}: {node.name}")
    assert not found, "CorralError subclasses outside corral.errors: " + ", ".join(found)


def test_the_checker_reads_a_drawing() -> None:
    assert _drawn()["TaskNotFound"] == "NotFoundError"
    assert _drawn()["CorralError"] is None
