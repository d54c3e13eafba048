"""Golden texts of every prompt corral sends an agent.

Each expected string is written out here in full, never computed by the functions under test,
so a change to any word an agent receives fails a test and has to be made on purpose.
"""

from __future__ import annotations

from corral.domain.prompts import (
    SyncOutcome,
    ask,
    compose,
    feedback_block,
    first_turn,
    redelivery_block,
    resume_after_crash,
    system_text,
)

CLEAN_GOLDEN = (
    "You are being resumed after a crash. Upstream has been merged into your branch since your "
    "last turn. Don't assume your previous state is intact — verify before continuing."
)
DIRTY_GOLDEN = (
    "You are being resumed after a crash. There are uncommitted changes in your worktree from your "
    "interrupted turn. Review them, decide what to keep, commit or discard, then continue your work."
)


def test_first_turn_goal_only() -> None:
    assert first_turn("Fix the login bug", "") == "Task: Fix the login bug"


def test_first_turn_blank_prompt_and_message_are_dropped() -> None:
    assert first_turn("Fix the login bug", "  \n", "   ") == "Task: Fix the login bug"


def test_first_turn_goal_and_prompt() -> None:
    assert first_turn("Fix the login bug", "The form rejects valid e-mails.") == (
        "Task: Fix the login bug\n\nThe form rejects valid e-mails."
    )


def test_first_turn_goal_prompt_and_message() -> None:
    assert first_turn("Fix the login bug", "The form rejects valid e-mails.", "Start with the validator.") == (
        "Task: Fix the login bug\n\nThe form rejects valid e-mails.\n\nStart with the validator."
    )


def test_feedback_block_empty() -> None:
    assert feedback_block([]) == ""


def test_feedback_block_one_message_is_verbatim() -> None:
    assert feedback_block(["Please add a test for the empty case."]) == "Please add a test for the empty case."


def test_feedback_block_two_messages_uses_singular() -> None:
    assert feedback_block(["Rename foo.", "Now run the linter."]) == (
        "There is 1 earlier message you have not acted on yet, oldest first:\n"
        "\n"
        "--- earlier message 1 of 1 ---\n"
        "Rename foo.\n"
        "\n"
        "--- newest message ---\n"
        "Now run the linter."
    )


def test_feedback_block_three_messages_counts_older_then_newest_verbatim() -> None:
    pending = ["Rename foo to bar.", "Also update the docs.", "Forget the docs; just run the tests.\nThen stop."]
    assert feedback_block(pending) == (
        "There are 2 earlier messages you have not acted on yet, oldest first:\n"
        "\n"
        "--- earlier message 1 of 2 ---\n"
        "Rename foo to bar.\n"
        "\n"
        "--- earlier message 2 of 2 ---\n"
        "Also update the docs.\n"
        "\n"
        "--- newest message ---\n"
        "Forget the docs; just run the tests.\n"
        "Then stop."
    )


def test_redelivery_block_empty() -> None:
    assert redelivery_block([]) == ""


def test_redelivery_block_one_message() -> None:
    assert redelivery_block(["Please add a test for the empty case."]) == (
        "Before the crash you were given this feedback, which you have not acted on yet. It follows verbatim:\n"
        "\n"
        "Please add a test for the empty case."
    )


def test_redelivery_block_two_messages_uses_singular() -> None:
    assert redelivery_block(["Rename foo.", "Now run the linter."]) == (
        "Before the crash you were given this feedback, which you have not acted on yet. It follows verbatim:\n"
        "\n"
        "Now run the linter.\n"
        "\n"
        "(There is also 1 older message you have not acted on yet; see the conversation above.)"
    )


def test_redelivery_block_several_messages() -> None:
    assert redelivery_block(["Rename foo to bar.", "Also update the docs.", "Just run the tests."]) == (
        "Before the crash you were given this feedback, which you have not acted on yet. It follows verbatim:\n"
        "\n"
        "Just run the tests.\n"
        "\n"
        "(There are also 2 older messages you have not acted on yet; see the conversation above.)"
    )


def test_resume_after_crash_clean_without_feedback() -> None:
    assert resume_after_crash(False, []) == (
        "You are being resumed after a crash. Upstream has been merged into your branch since your "
        "last turn. Don't assume your previous state is intact — verify before continuing.\n"
        "\n"
        "Carry on with the task where you left off."
    )


def test_resume_after_crash_dirty_without_feedback() -> None:
    assert resume_after_crash(True, []) == (
        "You are being resumed after a crash. There are uncommitted changes in your worktree from your "
        "interrupted turn. Review them, decide what to keep, commit or discard, then continue your work.\n"
        "\n"
        "Carry on with the task where you left off."
    )


def test_resume_after_crash_clean_with_feedback() -> None:
    assert resume_after_crash(False, ["Rename foo.", "Now run the linter."]) == (
        f"{CLEAN_GOLDEN}\n"
        "\n"
        "Before the crash you were given this feedback, which you have not acted on yet. It follows verbatim:\n"
        "\n"
        "Now run the linter.\n"
        "\n"
        "(There is also 1 older message you have not acted on yet; see the conversation above.)"
    )


def test_resume_after_crash_dirty_with_feedback() -> None:
    assert resume_after_crash(True, ["Please add a test for the empty case."]) == (
        f"{DIRTY_GOLDEN}\n"
        "\n"
        "Before the crash you were given this feedback, which you have not acted on yet. It follows verbatim:\n"
        "\n"
        "Please add a test for the empty case."
    )


def test_ask() -> None:
    assert ask("Why did you pick SQLite?") == (
        "A person has a question about your work on this task. Answer it from what you know and what "
        "you can read; do not change any files, run no commands that modify anything, and make no commits.\n"
        "\n"
        "The question:\n"
        "\n"
        "Why did you pick SQLite?"
    )


def test_system_text() -> None:
    assert system_text("/repo/.corral/worktrees/t-7", "corral/t-7") == (
        "You are an AI coding agent working on one task that corral manages. You work in a git "
        "worktree of the repository, on the task's own branch: /repo/.corral/worktrees/t-7 (branch corral/t-7). "
        "Work only inside it. Commit your work with git as you go, in small commits with clear messages: commits "
        "are how your work is reviewed and merged. When you are done, or need a decision from a person, "
        "end your turn with a short summary of what you did and what is left."
    )


BODY = "Task: Fix the login bug\n\nThe form rejects valid e-mails."


def test_compose_merged() -> None:
    assert compose(BODY, SyncOutcome("merged", target="main")) == (
        "The latest main has been merged into your branch.\n"
        "\n"
        "Task: Fix the login bug\n\nThe form rejects valid e-mails."
    )


def test_compose_skipped_dirty() -> None:
    assert compose(BODY, SyncOutcome("skipped-dirty", target="develop")) == (
        "develop was not merged into your branch, because your worktree has uncommitted changes. "
        "Commit or discard them first.\n"
        "\n"
        "Task: Fix the login bug\n\nThe form rejects valid e-mails."
    )


def test_compose_conflict_lists_every_file() -> None:
    outcome = SyncOutcome("conflict", target="main", files=("src/app.py", "docs/README.md"))
    assert compose(BODY, outcome) == (
        "Merging the latest main into your branch stopped with conflicts in:\n"
        "  src/app.py\n"
        "  docs/README.md\n"
        "The merge is in progress in your worktree. In each of these files, resolve every conflict and "
        "delete its conflict markers (the lines that begin with <<<<<<<, |||||||, ======= and >>>>>>>). "
        "Commit the merge only once no marker is left: `git diff HEAD --check` names any that remain, "
        "and corral refuses to accept work that still carries them. Only then continue with the rest "
        "of this message.\n"
        "\n"
        "Task: Fix the login bug\n\nThe form rejects valid e-mails."
    )


def test_compose_none_state_is_body_only() -> None:
    assert compose(BODY, SyncOutcome("none", target="main")) == (
        "Task: Fix the login bug\n\nThe form rejects valid e-mails."
    )


def test_compose_up_to_date_is_body_only() -> None:
    assert compose(BODY, SyncOutcome("up-to-date", target="main")) == (
        "Task: Fix the login bug\n\nThe form rejects valid e-mails."
    )


def test_compose_without_outcome_is_body_only() -> None:
    assert compose(BODY, None) == "Task: Fix the login bug\n\nThe form rejects valid e-mails."
