"""Every prompt corral sends an agent, built in this one module.

Tests import these functions rather than copy their text, so what a test expects
is what the agent receives. The launching operation puts a turn's body into the typed
command (``command.json``); the supervisor adds the upstream-merge note with
:func:`compose` once it knows how the merge went.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct

SYSTEM_TEXT = (
    "You are an AI coding agent working on one task that corral manages. You work in a git "
    "worktree of the repository, on the task's own branch: {worktree} (branch {branch}). Work only "
    "inside it. Commit your work with git as you go, in small commits with clear messages: commits "
    "are how your work is reviewed and merged. When you are done, or need a decision from a person, "
    "end your turn with a short summary of what you did and what is left."
)

# The crash-context texts for a clean and a dirty worktree (docs/architecture.md#prompts).
CRASH_CLEAN = (
    "You are being resumed after a crash. Upstream has been merged into your branch since your "
    "last turn. Don't assume your previous state is intact — verify before continuing."
)
CRASH_DIRTY = (
    "You are being resumed after a crash. There are uncommitted changes in your worktree from your "
    "interrupted turn. Review them, decide what to keep, commit or discard, then continue your work."
)
CARRY_ON = "Carry on with the task where you left off."
REDELIVERY_HEAD = "Before the crash you were given this feedback, which you have not acted on yet. It follows verbatim:"

ASK_PREAMBLE = (
    "A person has a question about your work on this task. Answer it from what you know and what "
    "you can read; do not change any files, run no commands that modify anything, and make no commits."
)


def system_text(worktree: str, branch: str) -> str:
    return SYSTEM_TEXT.format(worktree=worktree, branch=branch)


def first_turn(goal: str, prompt: str, message: str | None = None) -> str:
    """The first turn of a task: its goal, its prompt, and what the person said at start."""
    parts = [f"Task: {goal}"]
    if prompt.strip():
        parts.append(prompt)
    if message and message.strip():
        parts.append(message)
    return "\n\n".join(parts)


def retry_confirmed(summary: str, resource: str) -> str:
    """What the agent is told when a person confirms one retry of the operation it reported blocked."""
    return (
        f"[corral: the person confirmed ONE retry of the operation you reported blocked by a permission "
        f"({resource}): {summary}. Retry that same operation, in the same scope. Nothing more is granted: "
        "no other access, and no other tests or changes on its account.]"
    )


def feedback_block(pending: Sequence[str]) -> str:
    """Every pending feedback, older ones first and counted, then the newest verbatim."""
    if not pending:
        return ""
    *older, newest = pending
    if not older:
        return newest
    lines = [
        f"There {'is' if len(older) == 1 else 'are'} {len(older)} earlier message"
        f"{'' if len(older) == 1 else 's'} you have not acted on yet, oldest first:"
    ]
    for i, text in enumerate(older, 1):
        lines.append(f"--- earlier message {i} of {len(older)} ---\n{text}")
    lines.append(f"--- newest message ---\n{newest}")
    return "\n\n".join(lines)


def redelivery_block(pending: Sequence[str]) -> str:
    """The newest pending feedback verbatim, and how many older ones exist (docs/lifecycle.md#feedback-delivery)."""
    if not pending:
        return ""
    *older, newest = pending
    block = f"{REDELIVERY_HEAD}\n\n{newest}"
    if older:
        block += (
            f"\n\n(There {'is' if len(older) == 1 else 'are'} also {len(older)} older message"
            f"{'' if len(older) == 1 else 's'} you have not acted on yet; see the conversation above.)"
        )
    return block


def resume_after_crash(dirty: bool, pending: Sequence[str]) -> str:
    """The crash-context text (clean or dirty), then the redelivery block or the generic carry-on."""
    context = CRASH_DIRTY if dirty else CRASH_CLEAN
    return f"{context}\n\n{redelivery_block(pending) or CARRY_ON}"


def resume_without_session(goal: str, prompt: str, dirty: bool, pending: Sequence[str]) -> str:
    """A resume for a harness that keeps no session to resume (the ``command`` harness, or a session
    never captured): its agent remembers nothing, so it is told the task again and given every pending
    feedback in full (:func:`feedback_block`), never pointed at a conversation it cannot see."""
    context = CRASH_DIRTY if dirty else CRASH_CLEAN
    feedback = feedback_block(pending)
    if feedback:
        feedback = f"{REDELIVERY_HEAD}\n\n{feedback}"
    return f"{first_turn(goal, prompt)}\n\n{context}\n\n{feedback or CARRY_ON}"


def ask(question: str) -> str:
    return f"{ASK_PREAMBLE}\n\nThe question:\n\n{question}"


class SyncOutcome(Struct, frozen=True):
    """How the upstream merge before a turn went, as the supervisor saw it."""

    state: str  # merged | up-to-date | skipped-dirty | conflict | none
    target: str = ""
    files: tuple[str, ...] = ()


def sync_note(outcome: SyncOutcome) -> str:
    match outcome.state:
        case "merged":
            return f"The latest {outcome.target} has been merged into your branch."
        case "skipped-dirty":
            return (
                f"{outcome.target} was not merged into your branch, because your worktree has "
                "uncommitted changes. Commit or discard them first."
            )
        case "conflict":
            files = "\n".join(f"  {f}" for f in outcome.files)
            return (
                f"Merging the latest {outcome.target} into your branch stopped with conflicts in:\n{files}\n"
                "The merge is in progress in your worktree. In each of these files, resolve every conflict and "
                "delete its conflict markers (the lines that begin with <<<<<<<, |||||||, ======= and >>>>>>>). "
                "Commit the merge only once no marker is left: `git diff HEAD --check` names any that remain, "
                "and corral refuses to accept work that still carries them. Only then continue with the rest "
                "of this message."
            )
        case _:
            return ""


def compose(body: str, outcome: SyncOutcome | None) -> str:
    """The prompt as delivered: the merge note (if any), then the turn's body."""
    note = sync_note(outcome) if outcome else ""
    return f"{note}\n\n{body}" if note else body
