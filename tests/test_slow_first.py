"""The slow-first list names files that exist, once each, and puts their tests before all others."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import slow_first

ROOT = Path(__file__).resolve().parent.parent


def test_every_listed_file_is_a_test_file_of_the_suite_named_once() -> None:
    assert len(set(slow_first.FILES)) == len(slow_first.FILES)
    for path in slow_first.FILES:
        assert (ROOT / path).is_file(), f"{path} is listed in tests/support/slow_first.py but is not there"
        assert path.startswith("tests/") and Path(path).name.startswith("test_")


def test_a_listed_files_tests_run_before_any_other_in_the_lists_order(request: pytest.FixtureRequest) -> None:
    first, second = slow_first.FILES[0], slow_first.FILES[1]
    ids = ["tests/test_docs.py::test_a", f"{second}::test_b", f"{first}::test_c[1]", f"{first}::test_a"]
    assert sorted(ids, key=slow_first.rank) == [f"{first}::test_c[1]", f"{first}::test_a", f"{second}::test_b", ids[0]]
    session_order = [item.nodeid for item in request.session.items]
    listed = [i for i, nodeid in enumerate(session_order) if slow_first.rank(nodeid) < len(slow_first.FILES)]
    assert listed == list(range(len(listed))), "a listed file's test ran after an unlisted one"
