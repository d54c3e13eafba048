"""The team mode is an object (docs/architecture.md, "The placement"): no module outside the two placements
and the store asks whether a ``database_url`` is set, and a project's placement is the one its settings
choose unless a caller passes its own."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from corral.engine.placement import LocalPlacement, Placement
from corral.engine.project import Project
from corral.engine.shared_store.team_placement import SharedPlacement
from corral.errors import UsageError

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

#: Where the setting may be read: the placements, which make every decision it makes, and the store.
ALLOWED = ("engine/placement.py", "store/")


def reads_of_the_setting(tree: ast.AST) -> list[int]:
    """The lines that read ``database_url``: an attribute of that name (``project.database_url``), or a key
    of that name looked up (``config["database_url"]``, ``config.get("database_url")``). Its name in a
    message, a docstring or the settings' own declarations is no read."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            asks = node.attr == "database_url"
        elif isinstance(node, ast.Subscript):
            asks = _names_it(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            asks = node.func.attr in ("get", "pop", "setdefault") and _names_it(node.args[0])
        else:
            asks = False
        if asks:
            found.append(node.lineno)
    return sorted(found)


def _names_it(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "database_url"


def asking_modules(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(ALLOWED):
            continue
        lines = reads_of_the_setting(ast.parse(path.read_text(), filename=name))
        out += [f"{name}:{line}" for line in lines]
    return out


def test_no_module_outside_the_placements_and_the_store_asks_whether_a_database_url_is_set() -> None:
    assert asking_modules(SRC) == [], "ask project.placement (corral.engine.placement) instead"


def test_the_scan_sees_every_way_of_asking() -> None:
    asked = """
if project.database_url is None: pass
url = config["database_url"]
url = config.get("database_url")
SECRET = frozenset({"database_url"})  # naming the setting is no read
"""
    assert reads_of_the_setting(ast.parse(asked)) == [2, 3, 4]


def test_the_settings_choose_the_placement_and_a_given_one_wins(project: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(project.placement, LocalPlacement)
    monkeypatch.setenv("CORRAL_DATABASE_URL", "postgresql://corral@db.invalid/corral")
    opened = Project.open(project.repo)
    assert isinstance(opened.placement, SharedPlacement)
    assert "db.invalid" not in repr(opened.placement)  # a URL may carry a password
    given = LocalPlacement()
    assert Project.open(project.repo, placement=given).placement is given


@pytest.mark.parametrize("placement", [LocalPlacement(), SharedPlacement("postgresql://shared")], ids=repr)
def test_each_placement_makes_every_decision_of_one_mode(placement: Placement, project: Any) -> None:
    """What each placement says of itself; what each does is tests/placement's suite, run over both."""
    shared = isinstance(placement, SharedPlacement)
    assert placement.over_network() is shared
    assert (placement.queue_url() is not None) is shared
    owner = placement.owner(project)
    assert (owner is not None) is shared
    if shared:
        from corral.engine.placement import host_id

        assert owner == host_id(project)  # the identity its workers and its own local turns hold leases under
        with pytest.raises(UsageError, match="PostgreSQL"):
            placement.check_restorable()
    else:
        placement.check_restorable()
        with pytest.raises(UsageError, match="database_url is not set"):
            placement.shared_store(project, create=False)


def test_an_existing_store_is_read_where_it_is_and_none_is_created_locally(project: Any) -> None:
    assert not project.paths.db.exists()  # the store is opened on first use
    assert LocalPlacement().existing_store(project) is None
    assert not project.paths.db.exists()
    with project.store.read() as tx:
        assert tx.tasks() == []
    store = LocalPlacement().existing_store(project)
    assert store is not None
    try:
        assert store.location == project.store.location
    finally:
        store.close()
