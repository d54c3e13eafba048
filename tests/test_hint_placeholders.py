"""No hint hands the person a placeholder to fill in: a hint names the task, the path or the value it
means (it knows them where it is raised), or says in words what to give. ``tests/cli/test_every_hint_works.py``
types the hints a task's state produces; this reads every ``hint=`` written in the source, so a refusal
that state cannot reach is held to the same rule."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

#: A word in capitals standing for a value (``corral show TASK``, ``--log PATH``), an ellipsis or an angle
#: bracketed slot (``<commit>``). ``PATH`` the environment variable ("put it on PATH") is a name, not a slot.
PLACEHOLDER = re.compile(r"(?<!on )\b(PATH|TASK|REF|FILE|NAME|ID|SHA)\b|…|<[a-z][a-z -]*>")


def _hint_texts(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg == "hint":
            for part in ast.walk(node.value):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    found.append((part.lineno, part.value))
    return found


def test_no_hint_in_the_source_carries_a_placeholder() -> None:
    offending = [
        f"{path.relative_to(SRC)}:{line}: {text[:100]}"
        for path in sorted(SRC.rglob("*.py"))
        for line, text in _hint_texts(path)
        if PLACEHOLDER.search(text)
    ]
    assert not offending, "\n".join(offending)


def test_the_rule_sees_the_placeholders_it_is_for() -> None:
    for text in ("corral show TASK", "corral failures --log PATH", "git update-ref <commit>", "reopen --reason '…'"):
        assert PLACEHOLDER.search(text), text
    for text in ("Install it or put it on PATH", "corral close fix -m 'why'", "the checkout's path"):
        assert not PLACEHOLDER.search(text), text
