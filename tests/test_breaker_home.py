"""The circuit breaker has one home: no module outside the domain (and the store, which keeps them) writes its counters.

Every module that moves them asks ``corral.domain.breaker`` and writes what it returns
(``**update.fields()``). A write is any way of naming a counter's field as a value to store: a
keyword argument, a ``**{...}`` dict literal, or an item assignment into a dict of updates.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"
#: The session's breaker fields.
COUNTERS = frozenset({"consecutive_interruptions", "auto_resumed"})
#: Where they may be written: the breaker's own home, and the store that keeps them.
ALLOWED = (SRC / "domain", SRC / "store")


def writes(tree: ast.AST) -> list[tuple[int, str]]:
    """Each (line, field) where ``tree`` writes a breaker counter."""
    found: list[tuple[int, str]] = []  # in the order ast.walk meets them
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword):
            if node.arg in COUNTERS:
                found.append((node.value.lineno, node.arg))
            elif node.arg is None and isinstance(node.value, ast.Dict):  # f(**{"field": value})
                found += [
                    (key.lineno, key.value)
                    for key in node.value.keys
                    if isinstance(key, ast.Constant) and key.value in COUNTERS
                ]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):  # updates["field"] = value
            key = node.slice
            if isinstance(key, ast.Constant) and key.value in COUNTERS:
                found.append((node.lineno, key.value))
    return found


def test_no_module_outside_the_domain_writes_the_breakers_counters() -> None:
    offenders = [
        f"{path.relative_to(SRC.parent)}:{line} writes {name}"
        for path in sorted(SRC.rglob("*.py"))
        if not any(path.is_relative_to(root) for root in ALLOWED)
        for line, name in writes(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    ]
    assert not offenders, "the breaker's counters are written outside corral.domain.breaker:\n" + "\n".join(offenders)


def test_the_scan_sees_each_way_of_writing_a_counter() -> None:
    """The scan is not blind: each shape a write can take is found, and a read is not."""
    source = """
tx.update_session(sid, consecutive_interruptions=0)
tx.update_session(sid, **{"auto_resumed": True})
updates["consecutive_interruptions"] = 0
seen = session.consecutive_interruptions
view = {"auto_resumed": session.auto_resumed}
count = doc["consecutive_interruptions"]
"""
    found = sorted(writes(ast.parse(source)))
    assert found == [(2, "consecutive_interruptions"), (3, "auto_resumed"), (4, "consecutive_interruptions")]
