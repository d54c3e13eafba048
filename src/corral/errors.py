"""Every error corral shows a person: a kebab-case code, one plain message, a hint.

The whole tree lives here, and ``tests/test_errors.py`` checks that this drawing is it
(each class fixes the exit code of the CLI contract; every code is unique)::

    CorralError                          exit 1   the operation failed
    ├── UsageError                       exit 2   the request itself is wrong
    │   ├── AmbiguousTask                         a prefix matches several tasks
    │   ├── PrefixRefused                         a prefix given where the whole ref is required
    │   ├── TextTooLarge                          text at intake over the cap
    │   ├── InvalidRef                            a ref that cannot name a branch
    │   ├── ConfigError                           a setting or a settings file is wrong
    │   └── NotARepository                        no git checkout where corral was pointed
    ├── RefusedError                     exit 3   the task's state does not allow it
    │   ├── IllegalTransition                     the transition table says no
    │   ├── TaskBusy                              another corral command holds the task
    │   ├── ChatOpen                              a chat holds the task's worktree
    │   ├── AcceptRefused                         accept's pre-flight says no
    │   │   ├── TipMoved                          the branch is not at the tip reviewed (or pinned)
    │   │   └── ConflictMarkers                   the squash would add conflict markers to the target
    │   ├── DaemonRunning                         a daemon already runs
    │   ├── RepositoryCopied                      a copy of a checkout whose tasks corral keeps
    │   ├── TaskAlreadyStarted                    a second start lost to the first: the task runs
    │   ├── AgentTokenInvalid                     a task agent's token is unknown, or its turn ended
    │   ├── OutOfScope                            a task agent aims past its own task and subtasks
    │   ├── DispositionRefused                    a failure_disposition refused whole, nothing recorded
    │   └── WorkNotPushed                         a worker's turn ended, its branch not on the remote yet
    ├── NotFoundError                    exit 4   no such task (or turn, or file)
    │   └── TaskNotFound
    ├── StoreError                       exit 1   the database cannot be used as it is
    │   ├── StoreCorrupt                          its bytes are damaged (not a database, not UTF-8)
    │   ├── StoreTooNew                           a newer corral's schema
    │   ├── StoreMissing                          gone or empty while the state still holds tasks
    │   ├── StoreReplaced                         not the store corral last knew here (another's, or rows lost)
    │   ├── StoreReadOnly                         the file, directory or mount refuses writes
    │   ├── StoreDiskFull                         no space left where the database lives
    │   ├── StoreIOError                          the disk or a file under it failed (a deleted -wal)
    │   └── UnsafeName                            a row names a path no corral would (another host's hostile id)
    ├── GitError                         exit 1   a git command failed
    │   ├── UnsafeBranch                          a task's branch is a symbolic ref or holds no commit
    │   ├── GitTimeout                            a git command ran past its time limit (a hanging hook)
    │   ├── MergeConflict                         merging the target into a task's branch conflicts
    │   └── MergeConflictOnAccept                 the task's branch conflicts with its target
    ├── PrepareFailed                    exit 1   a task's branch or worktree could not be made
    ├── LaunchFailed                     exit 1   a turn's supervisor could not be started
    ├── ArgvError                        exit 1   an argument no program can receive
    ├── ProgramError                     exit 1   a program corral runs could not start, or did not end
    │   ├── ProgramMissing                        its executable is not installed or not on PATH
    │   └── ProgramTimeout                        it ran past its time limit, and corral ended it
    ├── HarnessNotFound                  exit 1   the harness's executable is not on PATH
    ├── HarnessMisconfigured             exit 1   the harness cannot run as configured (fatal_config)
    ├── TeamExtraMissing                 exit 1   a team's feature without the corral[team] extra installed
    ├── DestinationRestoreConflict       exit 1   the merge stands; local changes kept aside
    ├── LeaseLost                        exit 1   a worker's claim on a turn was taken over (a stale epoch)
    ├── StopUnanswered                   exit 1   a stop relayed to the host that runs the turn, not answered
    ├── ForgeUnavailable                 exit 1   the forge cannot answer now (an outage, a rate limit)
    ├── ForgeRefused                     exit 1   the forge refused a request (4xx), in its words
    ├── ForgeBlocked                     exit 1   the forge will not merge the pull request as it stands
    └── Interrupted                      exit 130 the person pressed Ctrl-C

This module is pure (no I/O) so every layer may raise these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class CorralError(Exception):
    """An error with a stable code, a one-line message and a next step."""

    exit_code = 1
    code = "operation-failed"

    def __init__(self, message: str, *, hint: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


class UsageError(CorralError):
    exit_code = 2
    code = "usage"


class PrefixRefused(UsageError):
    """A command that ends or merges a task was given only the beginning of its ref or id."""

    code = "prefix-refused"

    def __init__(self, command: str, given: str, ref: str, task_id: str) -> None:
        super().__init__(
            f"'{given}' is only the beginning of {ref} ({task_id}): {command} takes a task's whole ref or id.",
            hint=f"corral {command} {ref}",
        )


class AmbiguousTask(UsageError):
    code = "ambiguous-task"

    def __init__(self, given: str, candidates: Sequence[str]) -> None:
        shown = ", ".join(candidates[:10]) + (" …" if len(candidates) > 10 else "")
        super().__init__(
            f"'{given}' matches {len(candidates)} tasks: {shown}",
            hint="Give more of the ref or id.",
        )
        self.candidates = list(candidates)


class TextTooLarge(UsageError):
    code = "text-too-large"

    def __init__(self, field: str, size: int, cap: int) -> None:
        super().__init__(
            f"The {field} is {size:,} bytes; corral takes at most {cap:,} bytes. Nothing was saved.",
            hint="Shorten it, or put the long part in a file in the repository and refer to it.",
        )


class RefusedError(CorralError):
    exit_code = 3
    code = "refused"


#: Internal statuses in a person's words (``zombie``: the reconciler is completing a task
#: whose work is already on its target).
STATUS_WORDS = {"zombie": "being completed (its work is already on its target)"}


class IllegalTransition(RefusedError):
    code = "illegal-transition"

    def __init__(
        self,
        current: str,
        target: str,
        allowed: Iterable[str],
        *,
        what: str | None = None,
        takes: Sequence[str] | None = None,
        hint: str | None = None,
        message: str | None = None,
    ) -> None:
        allowed = list(allowed)
        doing = what or f"move to {target}"
        can = ", ".join(allowed) if allowed else "nothing (it is final)"
        said = STATUS_WORDS.get(current, current)  # the status a person reads; the code keeps ``current``
        if message is not None:
            pass  # the caller's own words (an operation's refusal says what the person can do now)
        elif takes is not None:
            # An operation's refusal names the statuses it takes (from the operations table).
            verb = doing.split(" ", 1)[0]
            which = ", ".join(takes[:-1]) + f" or {takes[-1]}" if len(takes) > 1 else "".join(takes)
            message = (
                f"Cannot {doing}: it is {said}; {verb} takes a task that is {which} (from {said} it can go to {can})."
            )
        else:
            message = f"Cannot {doing}: the task is {said}, and from {said} it can go to {can}."
        super().__init__(message, hint=hint)
        self.current = current
        self.target = target
        self.allowed = allowed


class NotFoundError(CorralError):
    exit_code = 4
    code = "not-found"


class TaskNotFound(NotFoundError):
    code = "task-not-found"

    def __init__(self, given: str, nearest: Sequence[str]) -> None:
        hint = f"Did you mean: {', '.join(nearest)}?" if nearest else "List the tasks with `corral list --all`."
        super().__init__(f"No task matches '{given}'.", hint=hint)
        self.nearest = list(nearest)


class StoreError(CorralError):
    code = "store-error"


class StoreCorrupt(StoreError):
    code = "store-corrupt"


class StoreTooNew(StoreError):
    code = "store-too-new"


class StoreMissing(StoreError):
    """The database is missing or empty while the state directory still holds a project's evidence.

    corral refuses to start a new, empty database over task files, worktrees and diagnostics:
    that would read as "no tasks" and let a prune delete what the database no longer names.
    """

    code = "store-missing"


class StoreReplaced(StoreError):
    """The database holds another store than the one corral last knew at this place, or fewer tasks than
    it knew were created there (an older copy put back by hand): refused, and kept aside, never used."""

    code = "store-replaced"


class StoreReadOnly(StoreError):
    """Writes are refused: a read-only mount, an immutable file, a directory without write permission."""

    code = "store-read-only"


class StoreDiskFull(StoreError):
    """The file system holding the database has no space left; nothing was written."""

    code = "store-disk-full"


class StoreIOError(StoreError):
    """The operating system failed a read or write of the database or its ``-wal``/``-shm``."""

    code = "store-io-error"


class UnsafeName(StoreError):
    """A task id, session id, ref or diagnostic reference read from the store that would lead a path
    out of corral's own directories (``../``, ``/``, a NUL): a row no corral wrote, on a shared store
    another host's. Nothing is read, written or removed through it."""

    code = "unsafe-name"


class GitError(CorralError):
    code = "git-failed"


class UnsafeBranch(GitError):
    """A task's branch that corral will not follow: a symbolic ref, or a ref holding no commit (an
    agent inside the sandbox can write its own branch's file). Nothing was done through it."""

    code = "unsafe-branch"


class GitTimeout(GitError):
    """A git command ran past its time limit (a hook that hangs, a lock held for ever); it was stopped."""

    code = "git-timeout"


class MergeConflict(GitError):
    """Merging the target into a resting task's branch (``sync``) conflicts; the merge was aborted."""

    code = "sync-conflict"


class MergeConflictOnAccept(GitError):
    code = "merge-conflict"


class InvalidRef(UsageError):
    code = "invalid-ref"


class ConfigError(UsageError):
    code = "config-invalid"


class NotARepository(UsageError):
    code = "not-a-repository"


class TaskBusy(RefusedError):
    code = "task-busy"


class ChatOpen(RefusedError):
    code = "chat-open"


class AcceptRefused(RefusedError):
    code = "accept-refused"


class ConflictMarkers(AcceptRefused):
    """The squash adds ``<<<<<<<`` … ``=======`` … ``>>>>>>>`` regions: named by file and line, nothing merged
    (``accept --allow-markers`` lands markers a person means)."""

    code = "conflict-markers"


class TipMoved(AcceptRefused):
    """The task's branch moved since its diff was shown (or is not at the ``--tip`` given): the commits
    nobody reviewed are named, and nothing is merged until a person confirms them."""

    code = "tip-moved"

    def __init__(
        self, message: str, *, hint: str | None = None, since: str = "", tip: str = "", commits: Sequence[str] = ()
    ) -> None:
        super().__init__(message, hint=hint)
        self.since = since
        self.tip = tip
        self.commits = list(commits)


class DaemonRunning(RefusedError):
    code = "daemon-running"


class RepositoryCopied(RefusedError):
    """This checkout is a copy (or a second clone) of one that holds the project's tasks: it must choose
    to take the tasks over or to start its own list before corral uses either."""

    code = "repository-copied"


class TaskAlreadyStarted(RefusedError):
    """Two starts of one task at once: the one that lost is told the task already started."""

    code = "already-started"


class AgentTokenInvalid(RefusedError):
    code = "agent-token-invalid"


class OutOfScope(RefusedError):
    code = "agent-out-of-scope"


class DispositionRefused(RefusedError):
    code = "disposition-refused"


class WorkNotPushed(RefusedError):
    """The task's last turn ran on a worker that has not pushed its branch yet: the remote's tip is stale."""

    code = "work-not-pushed"


class PrepareFailed(CorralError):
    """The branch or worktree of a task could not be made; nothing half-made is left."""

    code = "prepare-failed"


class LaunchFailed(CorralError):
    code = "launch-failed"


class ArgvError(CorralError):
    code = "argv-invalid"


class ProgramError(CorralError):
    """A program corral runs (a hook, a harness's ``--version``, a check) could not be started: the
    process runner's failures are these, never the bare ``OSError`` a spawn raises."""

    code = "program-failed"


class ProgramMissing(ProgramError):
    """The program's executable is not installed, not on PATH, or not executable."""

    code = "program-missing"


class ProgramTimeout(ProgramError):
    """The program ran past the time limit it was given; corral ended its process group."""

    code = "program-timeout"


class HarnessNotFound(CorralError):
    """The harness's executable is not installed or not on PATH: refused before anything runs."""

    code = "harness-missing"


class HarnessMisconfigured(CorralError):
    """The harness cannot run as configured (the ``fatal_config`` class): its command is unset or
    empty, or its own configuration file cannot be read. Refused before anything runs."""

    code = "harness-config"


class TeamExtraMissing(CorralError):
    """A team's feature (the shared PostgreSQL store, a worker) asked of an install without the ``team``
    extra: its driver, pool and job engine are not installed. The hint is the one line that adds them."""

    code = "team-extra-missing"


class DestinationRestoreConflict(CorralError):
    """The merge stands, but local changes in the target's worktree could not be put back."""

    code = "destination-restore-conflict"


class LeaseLost(CorralError):
    """A write under a fencing epoch that is no longer the task's: another worker owns the turn now."""

    code = "lease-lost"


class StopUnanswered(CorralError):
    """A stop of a turn another host runs was asked through the store, and that host did not act on it in
    time: only it may signal its processes, so the turn still runs there (the stop stays asked)."""

    code = "stop-unanswered"


class ForgeUnavailable(CorralError):
    """The forge cannot answer now (an outage or a rate limit): nothing about the pull request is known."""

    code = "forge-unavailable"

    def __init__(self, message: str, *, retry_at: float | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint or "corral waits it out; `corral show` says when it looks again.")
        self.retry_at = retry_at


class ForgeRefused(CorralError):
    """The forge answered with a refusal (4xx): its words are in the message."""

    code = "forge-refused"

    def __init__(self, message: str, *, status: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class ForgeBlocked(CorralError):
    """The forge will not merge the pull request as it stands: the task is blocked and says why."""

    code = "forge-blocked"


class Interrupted(CorralError):
    exit_code = 130
    code = "interrupted"
