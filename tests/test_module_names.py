"""No two modules share a basename: a name read in a traceback, an import or a review says which module it is.

The CLI's command modules that would share an engine module's name carry ``_cli``
(``cli/commands/tasks_cli.py`` beside ``engine/operations/tasks.py``); ``cli/root.COMMANDS`` maps
each command's name to its module, so no command is renamed with them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"


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


def test_no_two_modules_share_a_basename() -> None:
    shared = shared_basenames()
    assert shared == {}, f"modules that share a basename: {dict(shared)}; give each a name of its own"


def banner_modules(root: Path = SRC) -> list[str]:
    """Modules with a top-level ``# --`` section banner: a module that needs them is that many modules.

    A banner inside a class (indented) groups that one class's methods and is not counted."""
    return sorted(
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if any(line.startswith("# --") for line in path.read_text(encoding="utf-8").splitlines())
    )


def test_the_banner_scan_finds_a_module_level_banner_and_not_a_class_one(tmp_path: Path) -> None:
    (tmp_path / "sections.py").write_text("x = 1\n\n# -- the second part ----\ny = 2\n")
    (tmp_path / "one.py").write_text("class A:\n    # -- writing ----\n    def w(self) -> None: ...\n")
    assert banner_modules(tmp_path) == ["sections.py"]


def test_no_module_needs_section_banners() -> None:
    assert banner_modules() == [], "split each banner's section into a module of its own"
