"""Every stop explained: the plain line and the next step, derived from stored codes.

Only typed codes are stored (docs/architecture.md#failure-evidence-wording-and-diagnostics);
wording is made here, when read,
so every surface (CLI text, ``--json``, MCP, dashboard) says the same thing. No
code or id appears on the everyday line. An unknown code reads as unknown
reasons; a known category gets generic wording by category.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from msgspec import Struct

from corral.domain.operations_table import offers
from corral.domain.records import FailureEvidence, PossibleEffects, RestingCause, Task
from corral.domain.status import Status

UNKNOWN_REASON = "This turn failed for unknown reasons."
MAY_HAVE_CHANGED = "It may have changed files before it stopped."

HARNESS_NAMES = {"claude": "Claude Code", "pi": "Pi", "codex": "Codex", "command": "The agent command"}
#: The setting that holds each harness's program, by the harness's name in wording.
#: How a person logs each harness in, for "Next:" (docs/harnesses.md says where each looks).
_LOGIN = {
    "Claude Code": "for Claude Code: run `claude` and /login",
    "Codex": "for Codex: run `codex login`, or set the provider's env_key variable",
    "Pi": "for Pi: set its provider's API key, or log in to write ~/.pi/agent/auth.json",
}
_PATH_SETTING = {"Claude Code": "claude_bin", "Pi": "pi_bin", "Codex": "codex_bin", "The agent command": "command"}


def harness_name(harness: str | None) -> str:
    return HARNESS_NAMES.get(harness or "", "The agent")


class Wording(Struct, frozen=True):
    line: str
    next: str | None = None


#: A receipt problem (``corral.engine.runtime.protocol.Problem``) in plain words.
RECEIPT_PROBLEMS = {
    "missing": "it was missing",
    "not-regular": "it was not a regular file",
    "symlink": "it was a symbolic link",
    "too-large": "it was too large to read",
    "invalid-utf8": "it was not valid UTF-8",
    "blank": "it was blank",
    "invalid-json": "it was not a JSON object",
    "wrong-shape": "it had the wrong shape",
    "too-new": "it was written by a newer corral",
}

#: Codes of failures where the harness never ran: no "may have changed files" line.
NOTHING_RAN = frozenset({"harness-missing", "prompt-unrenderable", "harness-unknown"})
#: Codes whose line never carries the "may have changed files" sentence.
_NO_EFFECTS_LINE = NOTHING_RAN | {"prepare-failed", "stopped", "harness-not-authenticated"}


def _lost_half(evidence: FailureEvidence | None) -> str:
    """What is unknown about a lost turn, in plain words, from the phase it was last seen in."""
    phase = evidence.phase if evidence else None
    if phase is None and evidence is not None and evidence.possible_effects is PossibleEffects.NONE:
        return "corral's supervisor never started, so the agent never ran."
    match phase:
        case "command":
            return "corral's supervisor ended before it started the agent, so the agent never ran."
        case "sync":
            return (
                "corral's supervisor ended while merging the target into the task's branch, "
                "so whether that merge finished is unknown."
            )
        case "check":
            return (
                "the agent finished its work, but corral's supervisor ended during the post-turn check, "
                "so the check's result is unknown."
            )
        case _:
            return (
                "corral's supervisor ended without a receipt while the agent was working, "
                "so whether the agent finished — and what it did after its last reported step — is unknown."
            )


def _receipt_problem(evidence: FailureEvidence | None) -> str:
    problem = evidence.details.get("problem") if evidence else None
    return RECEIPT_PROBLEMS.get(problem, "") if isinstance(problem, str) else ""


def _seconds(evidence: FailureEvidence | None) -> str:
    value = evidence.details.get("timeout_seconds") if evidence else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return f" for {int(value)} s" if value < 120 else f" for {int(value // 60)} min"
    return " for too long"


def _tailored(code: str, agent: str, ref: str, cause: RestingCause | None) -> Wording | None:
    """The codes with wording of their own; None when the code has none (its category speaks)."""
    evidence = cause.evidence if cause else None
    match code:
        case "harness-missing":
            return Wording(
                f"{agent} couldn't start: its program was not found.",
                f"Install it (docs/harnesses.md has its install line), or point the "
                f"{_PATH_SETTING.get(agent, 'claude_bin')} setting at it; then: corral unblock {ref} -m 'continue'",
            )
        case "harness-unknown":
            return Wording(
                "The task's harness is not one corral knows, so no agent could start.",
                f"Pick one: corral edit {ref} --harness claude (or pi, codex or command); "
                f"then: corral unblock {ref} -m 'continue'",
            )
        case "prompt-unrenderable":
            return Wording(
                f"{agent} couldn't start: the prompt could not be passed to it.",
                f"Edit the text that holds the odd characters, then: corral unblock {ref} -m 'continue'",
            )
        case "harness-permission-refused":
            return Wording(
                f"{agent} refused the permission mode corral asked for.",
                "Choose another permission_mode for yourself (docs/configuration.md lists them), "
                f"then: corral unblock {ref} -m 'continue'",
            )
        case "harness-config":
            return Wording(
                f"{agent} couldn't run with this configuration.",
                f"Open the details (corral show {ref} --details), fix the setting, "
                f"then: corral unblock {ref} -m 'continue'",
            )
        case "harness-not-authenticated":
            return Wording(
                f"{agent} is not authenticated — log in through the harness.",
                f"Log in ({_LOGIN.get(agent, 'as the harness documents')}), then: corral unblock {ref} -m 'continue'",
            )
        case "harness-server-error":  # a 5xx of the provider's own: its fault, not the network's
            return Wording(f"{agent}'s model provider answered with a server error (HTTP 5xx), a fault on its side.")
        case "retry-budget-exhausted":
            reason = _detail(cause, evidence)
            return Wording(
                f"{agent} kept failing and corral's retry budget ran out" + (f" ({reason})." if reason else "."),
                f"When the service is healthy again: corral unblock {ref} -m 'continue'",
            )
        case "usage-limit-beyond-budget":
            reason = _detail(cause, evidence)
            return Wording(
                f"{agent}'s account hit its usage limit, and it resets later than corral's retry budget waits"
                + (f": {reason}" if reason else "."),
                f"After the reset: corral unblock {ref} -m 'continue'",
            )
        case "harness-exited":
            reason = _detail(cause, evidence)
            return Wording(
                f"{agent} exited without finishing its turn" + (f": {reason}" if reason else "."),
                f"Look at its output (corral logs {ref}), then: corral resume {ref}",
            )
        case "harness-killed":
            return Wording(f"{agent} was killed before it finished.", f"corral resume {ref}")
        case "turn-crashed":
            reason = _detail(cause, evidence)
            return Wording(
                f"{agent} stopped unexpectedly" + (f" ({reason})." if reason else "."),
                f"corral resume {ref} — or look first: corral logs {ref}",
            )
        case "crash-loop":
            how = _detail(cause, evidence).removeprefix("crash loop: ")
            return Wording(
                f"{agent} failed fast again and again (a crash loop)" + (f": {how}" if how else "."),
                f"Look at its output (corral logs {ref}), then: corral resume {ref}",
            )
        case "turn-lost":
            return Wording(
                f"The turn was lost: {_lost_half(evidence)}",
                f"corral resume {ref} (pending feedback is delivered again)",
            )
        case "receipt-missing":
            return Wording(
                "The turn's receipt is missing: the agent's turn ended, but its result never reached corral, "
                "so the result is unknown.",
                f"Look at its output (corral logs {ref}), then: corral resume {ref}",
            )
        case "receipt-too-large":
            return Wording(
                "The turn's receipt was too large to read, so its result is unknown.",
                f"Look at its output (corral logs {ref}), then: corral resume {ref}",
            )
        case "receipt-invalid":
            problem = _receipt_problem(evidence)
            return Wording(
                "The turn's receipt was invalid" + (f" ({problem})" if problem else "") + ", so its result is unknown.",
                f"Look at its output (corral logs {ref}), then: corral resume {ref}",
            )
        case "watchdog-no-progress":
            relaunches = evidence.details.get("relaunches") if evidence else None
            again = (
                " It hung again after corral relaunched it once, so corral does not resume it by itself."
                if isinstance(relaunches, int) and not isinstance(relaunches, bool) and relaunches >= 1
                else ""
            )
            return Wording(
                f"{agent} made no progress{_seconds(evidence)}, so the watchdog stopped it.{again}",
                f"Look at its output (corral logs {ref}), then: corral resume {ref}",
            )
        case "merge-conflict-on-accept":
            reason = _detail(cause, evidence)
            return Wording(
                "Accepting it conflicted with its target, which had moved" + (f": {reason}" if reason else "."),
                f"corral unblock {ref} -m 'merge the target and resolve the conflicts' (its agent is told to remove "
                f"every conflict marker), or resolve it by hand in its worktree and then: corral accept {ref}",
            )
        case "merge-and-fix-failed":
            return Wording(
                "Merging the target into the task's branch conflicted, and the agent could not resolve it.",
                f"Resolve it in the worktree, or: corral unblock {ref} -m 'resolve the merge conflict'",
            )
        case "prepare-failed":
            reason = _detail(cause, evidence)
            return Wording(
                "corral could not prepare the task's branch or worktree" + (f": {reason}" if reason else "."),
                f"Fix that, then: corral start {ref}",
            )
        case "internal-fault":
            reason = _detail(cause, evidence)
            return Wording(
                "corral hit an internal fault while running the task" + (f" ({reason})." if reason else "."),
                f"corral resume {ref}; if it happens again, report it with what `corral doctor` says",
            )
        case "read-only-changes-kept":
            summary = _detail(cause, evidence)
            kept = str(evidence.details.get("reason") or "") if evidence else ""
            see = (
                f"See what it changed: git diff -R {kept} (in the worktree); the task is as it was before the turn."
                if kept.startswith("refs/")
                else None
            )
            return Wording(
                f"{agent} changed the task during a read-only turn; corral kept its changes aside"
                + (f" ({summary})." if summary else " and reverted them."),
                see,
            )
        case "stopped":
            who = cause.actor.value if cause and cause.actor else None
            line = (
                f"The turn was stopped by {'you' if who == 'human' else 'the ' + who}."
                if who
                else "The turn was stopped."
            )
            return Wording(line, f"corral unblock {ref} -m 'continue' (pending feedback goes with it)")
    return None


_CATEGORY = {
    "transient_overload": "{agent} was overloaded or rate-limited.",
    "transient_network": "{agent} lost its network connection.",
    "transient_unreachable": "{agent} could not reach its service.",
    "fatal_auth": "{agent} is not authenticated — log in through the harness.",
    "fatal_config": "{agent} couldn't run with this configuration.",
    "crash": "{agent} stopped unexpectedly.",
    "receipt": "The turn's receipt could not be used, so its result is unknown.",
    "internal": "corral hit an internal fault while running the task.",
    "unknown": "{agent} reported an error. Open the details for the cause.",
}


def _detail(cause: RestingCause | None, evidence: FailureEvidence | None) -> str:
    for source in (cause.details if cause else {}, evidence.details if evidence else {}):
        for key in ("summary", "reason"):
            value = source.get(key)
            if isinstance(value, str) and value.strip():
                text = " ".join(value.split())
                return text if len(text) <= 160 else text[:159] + "…"
    return ""


def explain_failure(evidence: FailureEvidence | None, harness: str | None, ref: str) -> Wording:
    """The plain line (and next step) for one failed turn or attempt; unknown codes narrow tolerantly."""
    agent = harness_name(harness)
    if evidence is None:
        return Wording(UNKNOWN_REASON)
    cause = RestingCause(evidence.code, at=_EPOCH, evidence=evidence)
    tailored = _tailored(evidence.code, agent, ref, cause)
    if tailored is not None:
        return tailored
    if evidence.category in _CATEGORY:
        return Wording(_CATEGORY[evidence.category].format(agent=agent))
    if evidence.code.startswith("harness-"):
        return Wording(f"{agent} reported an error. Open the details for the cause.")
    return Wording(UNKNOWN_REASON)


def may_have_changed(code: str, evidence: FailureEvidence | None) -> bool:
    """Partial or unknown possible effects add the "may have changed files" line."""
    return (
        evidence is not None
        and evidence.possible_effects in (PossibleEffects.PARTIAL, PossibleEffects.UNKNOWN)
        and code not in _NO_EFFECTS_LINE
    )


def failure_line(evidence: FailureEvidence | None, harness: str | None, ref: str) -> str:
    """The reason shown on a failed timeline entry."""
    line = explain_failure(evidence, harness, ref).line
    if evidence is not None and may_have_changed(evidence.code, evidence):
        line = f"{line} {MAY_HAVE_CHANGED}"
    return line


def attempt_line(number: int, total: int, reason: str, *, retried: bool) -> str:
    """One failed attempt of a turn that had several: "Attempt 1 of 3 failed: … · retrying"."""
    return f"Attempt {number} of {total} failed: {reason}" + (" · retrying" if retried else "")


def stopped_because(cause: RestingCause | None, task: Task | None = None) -> str | None:
    """One plain line on why a task rests, or None when it rests without a cause."""
    if cause is None:
        return None
    agent = harness_name(task.harness if task else None)
    ref = task.ref if task else "TASK"
    wording = _tailored(cause.code, agent, ref, cause)
    if wording is None and cause.evidence is not None:
        wording = explain_failure(cause.evidence, task.harness if task else None, ref)
    line = wording.line if wording else UNKNOWN_REASON
    if may_have_changed(cause.code, cause.evidence):
        line = f"{line} {MAY_HAVE_CHANGED}"
    same = cause.details.get(SAME_CAUSE_BREAKER)
    if isinstance(same, dict):
        line = f"{line} {same_cause_line(same)}"
    return line


#: The resting cause's ``details`` key the same-cause breaker writes when it stops auto-resume.
SAME_CAUSE_BREAKER = "same_cause_breaker"


def same_cause_line(tripped: dict[str, object]) -> str:
    """The same-cause breaker's sentence: how many interruptions in a row had one cause."""
    run = tripped.get("run")
    exit_code = tripped.get("exit_code")
    status = f" (exit status {exit_code})" if isinstance(exit_code, int) else ""
    times = f"{run} times" if isinstance(run, int) and run != 2 else "twice"
    return (
        f"It was interrupted {times} in a row the same way{status} with no new commit, so corral stopped "
        "resuming it automatically (the same-cause breaker)."
    )


def interruptions_line(consecutive: int) -> str:
    """The count the breaker judges, beside an interrupted task's reason before it trips."""
    return f"(interrupted {consecutive} time{'' if consecutive == 1 else 's'} in a row)"


def breaker_line(consecutive: int) -> str:
    return (
        f"The agent was interrupted {consecutive} times in a row, so corral stopped resuming it "
        "automatically (the circuit breaker)."
    )


def next_step(
    task: Task, *, pending_violations: int = 0, breaker: bool = False, pending_paths: Sequence[str] = ()
) -> str | None:
    """What a person does next with the task, as a command they can type: every command in it runs
    as printed in the task's status (tests/cli/test_every_hint_works.py types each one).

    A hint never names an operation the operations table refuses in the task's status: a
    tailored hint that would is passed over for the status's own. ``pending_paths`` are the
    protected files awaiting a decision, named in the command that decides them.
    """
    pending_violations = max(pending_violations, len(pending_paths))
    hint = _next_step(task, pending_violations=pending_violations, breaker=breaker)
    if hint is not None and not offers(hint, task.status, task.ref):
        hint = _by_status(task, pending_violations, breaker)
    if hint is not None and _DECIDE in hint:
        how = decide_files(task.ref, pending_paths) if pending_paths else f"see them with corral show {task.ref}"
        hint = hint.replace(_DECIDE, how)
    return hint


#: Where the command deciding the pending protected files goes in a status's hint.
_DECIDE = "<decide>"


def decide_files(ref: str, paths: Sequence[str]) -> str:
    """The two commands that decide every pending protected file, with its path as a person types it:
    keep the changes, or put the files back."""
    keep = " ".join(f"--approve-file={shlex.quote(p)}" for p in paths)
    back = " ".join(f"--revert-file={shlex.quote(p)}" for p in paths)
    return (
        f"keep the changes (corral unblock {ref} -m 'continue' {keep}) "
        f"or put the files back (corral unblock {ref} -m 'continue' {back})"
    )


def _next_step(task: Task, *, pending_violations: int, breaker: bool) -> str | None:
    ref = task.ref
    cause = task.resting_cause
    if breaker and task.status is Status.INTERRUPTED and not pending_violations:
        return f"Look at what failed (corral logs {ref}), then: corral resume {ref}"
    if cause is not None and task.status in (Status.BLOCKED, Status.CONFLICT, Status.INTERRUPTED, Status.BACKLOG):
        tailored = _tailored(cause.code, harness_name(task.harness), ref, cause)
        if tailored is not None and tailored.next and not pending_violations:  # next_step asks the table of it
            return tailored.next
    return _by_status(task, pending_violations, breaker)


def _by_status(task: Task, pending_violations: int, breaker: bool) -> str | None:
    ref = task.ref
    match task.status:
        case Status.BACKLOG:
            return f"Start it: corral start {ref}"
        case Status.WORKING:
            return f"Wait for the turn: corral wait {ref} (or stop it: corral stop {ref})"
        case Status.BLOCKED:
            return (
                f"Review the turn (corral diff {ref}), then accept it (corral accept {ref}) "
                f"or give the agent feedback (corral unblock {ref} -m 'your feedback')"
            )
        case Status.CONFLICT:
            return f"Decide the protected files: {_DECIDE}"
        case Status.INTERRUPTED:
            if pending_violations:
                return f"Decide the protected files and continue: {_DECIDE}"
            if breaker:
                return f"Look at what failed (corral logs {ref}), then: corral resume {ref}"
            return f"Resume it (corral resume {ref}), or give feedback (corral unblock {ref} -m 'your feedback')"
        case Status.PAIRING:
            return "Someone is pairing in the worktree; the task rests again when they end it."
        case Status.MERGING:
            return f"A merge is in flight; see how it ends with corral show {ref}"
        case Status.SUBMITTED:
            return f"Waiting for review on the remote; once it is approved: corral accept {ref}"
        case Status.ZOMBIE:
            return "It is being completed; nothing to do."
        case Status.ABANDONED:
            return f"Nothing; if that was a mistake: corral reopen {ref}"
        case Status.COMPLETE:
            return None


from datetime import UTC, datetime  # noqa: E402  (kept beside its one use)

_EPOCH = datetime.fromtimestamp(0, UTC)


#: Where a command named in a hint ends (outside quotes): the words around it are not part of it.
_COMMAND_ENDS = (")", ";", " — ", " · ", ", then", ", or ", " or corral ", " or git ", "`", " (", " then")
_COMMAND_STARTS = re.compile(r"(?<![\w/.-])(?:corral|git) ")


def commands(hint: str | None) -> list[str]:
    """The commands a hint names, each exactly as a person would type it (a ``corral …`` or ``git …``
    command ends where the words around it begin: a parenthesis, a semicolon, a dash, "then", "or")."""
    found: list[str] = []
    text = hint or ""
    at = 0
    while (start := _COMMAND_STARTS.search(text, at)) is not None:
        i, quoted = start.start(), False
        while i < len(text):
            if text[i] == "'":
                quoted = not quoted
            elif not quoted and text.startswith(_COMMAND_ENDS, i):
                break
            i += 1
        found.append(text[start.start() : i].strip())
        at = max(i, start.end())
    return found


#: The MCP tools a hint's ``corral`` commands map to, and what each one's ``-m`` is called there.
_TOOL_MESSAGE = {"start": "message", "unblock": "message", "close": "reason", "reject": "reason", "reopen": "reason"}
_TOOLS = frozenset(
    {*_TOOL_MESSAGE, "resume", "wait", "stop", "sync", "show", "logs", "diff", "accept", "submit", "edit"}
)
_FILES = {"--approve-file": "approved_files", "--revert-file": "reverted_files"}


def tool_call(hint: str | None) -> dict[str, object] | None:
    """The next step of a hint as the MCP tool call that takes it (``{"tool", "arguments"}``): the first
    command the hint names that a tool does; None when none does (a setting, git, nothing to do)."""
    for command in commands(hint):
        try:
            argv = shlex.split(command)
        except ValueError:
            continue
        if len(argv) < 3 or argv[0] != "corral" or argv[1] not in _TOOLS:
            continue
        tool, args = argv[1], {"task": argv[2]}
        files: dict[str, list[str]] = {}
        rest = iter(argv[3:])
        for word in rest:
            name, _, value = word.partition("=")
            if not value and name in ("-m", "--message", "--approve-file", "--revert-file", "--harness"):
                value = next(rest, "")
            if name in ("-m", "--message") and tool in _TOOL_MESSAGE:
                args[_TOOL_MESSAGE[tool]] = value
            elif name == "--harness":
                args["harness"] = value
            elif name in _FILES:
                files.setdefault(_FILES[name], []).append(value)
        return {"tool": tool, "arguments": {**args, **files}}
    return None
