"""A command run in the test process begins without the memos an earlier call (or the test) left in corral's
modules, as a fresh process would: the memos found are kept between calls, and found again when a module
changes under them."""

from __future__ import annotations

from functools import cache

import pytest

from corral.domain import sanitize
from tests.support import inprocess


def test_a_memo_an_earlier_call_filled_is_empty_for_the_next() -> None:
    sanitize._display_pattern(False, False)
    assert sanitize._display_pattern.cache_info().currsize >= 1
    inprocess._clear_memos()
    assert sanitize._display_pattern.cache_info().currsize == 0
    sanitize._display_pattern(True, False)  # and again, where the memos were found before
    inprocess._clear_memos()
    assert sanitize._display_pattern.cache_info().currsize == 0


def test_a_memo_rebound_or_added_since_the_last_call_is_emptied_too(monkeypatch: pytest.MonkeyPatch) -> None:
    inprocess._clear_memos()  # the module's memos found and kept

    @cache
    def rebound(multiline: bool, keep_sgr: bool) -> str:
        return f"{multiline}{keep_sgr}"

    @cache
    def added() -> int:
        return 1

    for memo in (rebound, added):
        memo.__module__ = sanitize.__name__  # made in that module, as a memo there is
    monkeypatch.setattr(sanitize, "_display_pattern", rebound)
    monkeypatch.setattr(sanitize, "_added_memo", added, raising=False)
    rebound(False, False)
    added()
    inprocess._clear_memos()
    assert rebound.cache_info().currsize == 0
    assert added.cache_info().currsize == 0


def test_a_memo_imported_from_another_module_is_left_to_that_module() -> None:
    memo = sanitize._display_pattern
    memo(False, False)
    module = type(sanitize)("corral.not_its_home")
    module._display_pattern = memo  # type: ignore[attr-defined]
    found = inprocess._memos_of(module.__name__, module)
    assert found == []
    assert memo in inprocess._memos_of(sanitize.__name__, sanitize)
