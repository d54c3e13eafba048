"""A project's identity read from the shape its files have always had, and what it refuses."""

from __future__ import annotations

import pytest

from corral.engine.identity import Identity

ROOT = "0123456789abcdef" * 2 + "01234567"


def test_an_identity_in_the_stored_shape_reads_and_writes_back_the_same() -> None:
    ident = Identity(ROOT, "github.com/o/r", "i-1")
    old = {
        "root_commit": ROOT,
        "remote": "github.com/o/r",
        "instance": "i-1",
        "project": ident.project,
        "key": ident.key,
    }
    assert Identity.from_json({"version": 1, **old}) == ident
    assert ident.to_json() == old and list(ident.to_json()) == list(old)
    bare = Identity(ROOT)
    assert bare.to_json() == {
        "root_commit": ROOT,
        "remote": None,
        "instance": None,
        "project": bare.key,
        "key": bare.key,
    }
    assert Identity.from_json({"root_commit": "f" * 64}) == Identity("f" * 64)


def test_a_damaged_remote_or_instance_reads_as_none() -> None:
    assert Identity.from_json({"root_commit": ROOT, "remote": 3, "instance": ""}) == Identity(ROOT)
    assert Identity.from_json({"root_commit": ROOT, "remote": "", "instance": ["x"]}) == Identity(ROOT)


@pytest.mark.parametrize("root", [None, 3, "", ROOT.upper(), ROOT[:-1], ROOT + "0", ROOT + "\n", "g" * 40, "a" * 50])
def test_an_identity_without_a_root_commit_is_none(root: object) -> None:
    assert Identity.from_json({"root_commit": root, "remote": "github.com/o/r"}) is None
    assert Identity.from_json({"remote": "github.com/o/r"}) is None
