"""The task pane's cap: a long log keeps its end, a long diff its start, and each says where the rest is."""

from __future__ import annotations

from corral.cli import board_pane


def test_a_long_log_keeps_its_last_lines_and_a_long_diff_its_first() -> None:
    text = "\n".join(f"line {i}" for i in range(board_pane.MAX_LINES + 500))
    log = board_pane._tail(text, "fix-it").split("\n")
    assert log[0] == "… 500 earlier lines: corral logs fix-it" and log[-1] == f"line {board_pane.MAX_LINES + 499}"
    assert len(log) == board_pane.MAX_LINES + 1
    diff = board_pane._head(text, "fix-it").split("\n")
    assert diff[0] == "line 0" and diff[-1] == "… 500 more lines: corral diff fix-it"
    short = "a\nb"
    assert board_pane._tail(short, "x") == short == board_pane._head(short, "x")
