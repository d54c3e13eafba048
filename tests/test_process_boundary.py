"""Programs are started in one place: no module outside ``corral.adapters`` spawns a process itself.

The engine and the surfaces that run inside the daemon (the daemon, the worker, MCP, the dashboard)
start a program through a runner (``Project.runner``, :mod:`corral.adapters.process`), so a test can
hand them :class:`corral.testing.fake_runner.FakeRunner` and every spawn's failures are typed in one
home. This scan reads their source (imports under aliases, and names imported from the modules,
included) and refuses any call of ``subprocess``, of ``os``'s spawning, forking and exec functions,
of ``pty``'s, or of ``asyncio``'s subprocess functions. Naming a type (``subprocess.Popen[bytes]``
in an annotation) is not a call.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

#: The packages held to the rule.
SCANNED = ("engine", "daemon", "worker", "mcp", "dashboard")

#: Calls that start (or replace this process with) a program, by module.
SPAWNING = {
    "subprocess": None,  # every function of the module
    "os": frozenset({"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp"}),
    "pty": frozenset({"fork", "spawn"}),
    "asyncio": frozenset({"create_subprocess_exec", "create_subprocess_shell"}),
}
#: ``os``'s families of functions: ``execv``, ``execvpe``, ``spawnl``, …
OS_PREFIXES = ("exec", "spawn")


def _forbidden(dotted: str) -> bool:
    module, _, name = dotted.rpartition(".")
    if module not in SPAWNING:
        return False
    names = SPAWNING[module]
    if names is None:
        return True
    return name in names or (module == "os" and name.startswith(OS_PREFIXES))


def spawning_calls(source: str) -> list[str]:
    """Each call in ``source`` that starts a process directly, as ``line: module.function``."""
    tree = ast.parse(source)
    aliases: dict[
        str, str
    ] = {}  # local name -> what it names (``sp`` -> ``subprocess``, ``run`` -> ``subprocess.run``)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        parts: list[str] = []
        func: ast.expr = node.func
        while isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            continue
        dotted = ".".join([aliases.get(func.id, func.id), *reversed(parts)])
        if _forbidden(dotted):
            found.append(f"{node.lineno}: {dotted}")
    return found


def test_the_scan_finds_every_way_of_spawning() -> None:
    source = """
import os
import subprocess as sp
from subprocess import Popen as P
from os import execvp
from asyncio import create_subprocess_exec
import pty

def f(proc: sp.Popen[bytes]) -> None:
    sp.run(["x"])
    P(["x"])
    os.posix_spawn("x", ["x"], {})
    os.spawnlp(os.P_WAIT, "x")
    execvp("x", ["x"])
    os.system("x")
    pty.fork()
    create_subprocess_exec("x")
    os.getpid()
    os.path.join("a", "b")
"""
    assert [line.split(": ")[1] for line in spawning_calls(source)] == [
        "subprocess.run",
        "subprocess.Popen",
        "os.posix_spawn",
        "os.spawnlp",
        "os.execvp",
        "os.system",
        "pty.fork",
        "asyncio.create_subprocess_exec",
    ]


def test_no_module_outside_the_adapters_starts_a_process_itself() -> None:
    found = []
    for package in SCANNED:
        for path in sorted((SRC / package).rglob("*.py")):
            for call in spawning_calls(path.read_text(encoding="utf-8")):
                found.append(f"{path.relative_to(SRC)}:{call}")
    assert not found, (
        "processes started outside corral.adapters (start them through the project's runner, "
        "corral.adapters.process.Runner): " + ", ".join(found)
    )
