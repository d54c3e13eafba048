"""Every turn is launched through one skeleton: its command is built and its supervisor started only by
``turns.start_turn``, which a local launch (``turns._launch``) and a worker's claimed turn
(``shared_store/claimed.py``) both end with (docs/architecture.md). A second launch path would be a second place
for a fault handler, a fence or the command's copy beside the logs to be forgotten."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

#: The launch module's two steps that only the skeleton may take.
STEPS = ("build_command", "launch")


def launches(tree: ast.AST, name: str) -> list[str]:
    """``<module>:<function>`` for each call of ``launch.build_command`` or ``launch.launch`` in ``tree``."""
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "launch"
                and node.func.attr in STEPS
            ):
                found.append(f"{name}:{func.name}")
    return found


def test_only_the_skeleton_builds_a_command_and_starts_its_supervisor() -> None:
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        found.update(launches(ast.parse(path.read_text(encoding="utf-8")), name))
    assert found == {"engine/operations/turns.py:start_turn"}


def test_the_scan_sees_a_second_launch_path() -> None:
    second = """
def _launch(project, task, command):
    command = launch.build_command(project, task)
    return launch.launch(project, task, command)
"""
    assert launches(ast.parse(second), "m.py") == ["m.py:_launch", "m.py:_launch"]
