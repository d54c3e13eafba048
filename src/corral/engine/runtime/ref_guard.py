"""Refs are guarded: after a turn, every ref the agent moved — other than its task's own branch — is put back.

An agent works on its task's branch. Any other ref it moves (the target, another task's
``corral/*`` branch, a tag, ``refs/corral/…``) is put back to its value before the turn, and
the agent's version is kept on ``refs/corral/kept/<task ref>/<turn>-<ref>`` (for example
``refs/corral/kept/fix-login/3-refs/heads/main``), beside the read-only turns' kept refs of
:mod:`corral.engine.readonly`. Without it an agent that runs ``git update-ref refs/heads/main
HEAD`` would have its own task completed by the merged-branch sweep: a self-accept with no
review.

How a turn goes:

- **Before the agent starts** (the first attempt's launch, ``ref_snapshot.hook_env``): the snapshot
  (``<log dir>/ref-guard/refs.json``) is every ref's value, read from the ref files themselves
  as git reads them (loose refs over ``packed-refs``; no git process, about a third of a
  ``for-each-ref``'s time with 1,000 loose refs; ``for-each-ref`` where refs are not files:
  reftable). On Linux an inotify watch on each refs directory (and on ``packed-refs``'
  directory) is made before the read and held by the process until the check. A hooks
  directory is made for the agent's process only: ``core.hooksPath`` through
  ``GIT_CONFIG_COUNT``/``KEY``/``VALUE`` in its environment, so a person's git, corral's own
  and the post-turn check never see it. Its ``reference-transaction`` hook appends each
  committed update (``old new ref``) to ``<log dir>/ref-guard/moves.log``, then runs the
  repository's own hook; every other hook the repository has (its ``core.hooksPath`` or
  ``.git/hooks``, as git would find it) is forwarded as it is, so the person's hooks still run.
- **After the work phase** (``ref_restore.settle``, from the supervisor; again from the reconciler
  for a turn that never wrote its receipt): the refs now. In the process that took the
  snapshot, only the paths its watch saw written are read again (a ref file, a directory made,
  removed or renamed, ``packed-refs``), whoever wrote them and however — git, or a file
  rewritten in place with its times put back; anywhere else (the reconciler), or when the
  watch lost events, every ref is read again. Each ref whose value differs from the snapshot
  is attributed:

  * **the agent's** when the hook log names it (``by: "hook"``) — and only when the ref still
    holds the value the agent gave it: someone who moved it after the agent is never undone
    (the move is reported, ``restored: false``);
  * **the agent's** when its new value carries a commit made in the task's worktree during
    the turn (``by: "worktree-commits"``): a commit reachable from the branch's tip or from a
    value the worktree's ``HEAD`` took during the turn (its reflog), and from no ref of the
    snapshot — unless the ref is checked out in another worktree whose ``HEAD`` took that value
    during the turn (a commit or merge made there: corral's sync of a subtask, the worktree
    corral makes for a subtask the agent started through MCP). This catches an agent that
    bypassed the hook (``git -c core.hooksPath=/dev/null update-ref …``);
  * **someone else's** otherwise — a person's commit on the target, corral's own accept of
    another task, sync, a read-only revert — and left alone (counted in ``others``).

  Save first, act second: the plan is written (``report.json``), then each kept ref, then
  each ref is put back with a compare-and-swap on the agent's value (a created ref is
  deleted, a deleted one re-created); the report is written again with the outcome. Calling
  ``ref_restore.settle`` again after a crash finishes the plan and returns the same report.

Not guarded: the task's own branch; ``refs/remotes/`` (``git fetch`` moves them, they say
what a remote holds, and the remote is beyond corral's reach anyway); the per-worktree refs
(``refs/bisect/``, ``refs/worktree/``, ``refs/rewritten/``); symbolic refs.

Limits, honestly: an agent that runs unconfined can do anything its user can, so this is a
guard, not a wall. It can bypass the hook, then move a ref to a commit it did not make this
turn (an older commit of its branch, another task's tip) or delete a ref: the fallback test
does not see those. It can write the hook log or the snapshot itself, or write a ref file
through a hard link it made outside ``refs/`` (or a mapping it kept after closing the file),
which no watch of the refs directories sees. A person who merges a running task's fresh
commits into another branch during that turn is indistinguishable from the agent doing it and
is treated as the agent (put back, kept: nothing is lost). The bwrap sandbox takes away what
it can (docs/harnesses.md); this guard runs whatever the sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

GUARD_DIR = "ref-guard"
SNAPSHOT = "refs.json"
MOVES = "moves.log"
REPORT = "report.json"
HOOKS = "hooks"
KEPT_PREFIX = "refs/corral/kept/"
#: Refs never guarded: remote-tracking refs (fetch moves them), the per-worktree namespaces, and
#: the branches' verified tips (corral's own, moved by the branch check; no sandbox reaches them).
EXEMPT = ("refs/remotes/", "refs/bisect/", "refs/worktree/", "refs/rewritten/", "refs/corral/verified/")
#: How many moves a report lists (its count of others is whole).
MOVES_KEPT = 100
ZERO = "0" * 40


def guard_dir(log_dir: Path | str) -> Path:
    return Path(log_dir) / GUARD_DIR


def kept_ref(task_ref: str, turn: int | str, ref: str) -> str:
    """Where the agent's version of ``ref`` is kept: ``refs/corral/kept/<task ref>/<turn>-<ref>``."""
    return f"{KEPT_PREFIX}{task_ref}/{turn}-{ref}"


class RefMove(Struct, frozen=True):
    """One ref the agent moved during a turn, and what corral did about it."""

    ref: str
    before: str | None  # its value before the turn (None: it did not exist)
    after: str | None  # the value the agent left (None: it deleted the ref)
    by: str  # how it was attributed: "hook" (its git's hook logged it) | "worktree-commits"
    kept: str | None  # where the agent's version is kept (None for a deletion)
    restored: bool
    error: str | None = None  # why it was not put back
    #: What the branch check found (``corral.engine.runtime.branch_check``: ``branch-symref``, …).
    code: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The move as it is stored: its fields by name, ``code`` only when the branch check set one."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        if self.code is None:
            del doc["code"]
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RefMove:
        """A stored move, validated by msgspec: a ``ref`` or ``by`` that is not a string, or another field
        of the wrong type, refuses it (``msgspec.ValidationError``, a ``ValueError`` naming the field).

        Two leniencies of the stored shape are kept, explicitly: an absent ``before``, ``after`` or
        ``kept`` reads as None, and a ``restored`` that is not ``true`` reads as false.
        """
        doc = {"before": None, "after": None, "kept": None, **data, "restored": data.get("restored") is True}
        return msgspec.convert(doc, cls)


class RefGuard(Struct, frozen=True):
    """What the ref guard found after a turn: the agent's moves, and how many moves were someone else's."""

    moves: tuple[RefMove, ...] = ()
    others: int = 0  # refs that moved during the turn, not by the agent: left alone
    hook: bool = True  # whether the agent's git had the logging hook
    error: str | None = None  # why the guard could not look (git unreadable, the snapshot gone)
    #: The turn's quarantined objects (``corral.engine.runtime.quarantine.ObjectsReport.as_summary``).
    objects: Mapping[str, Any] | None = None
    #: What the stray-ref sweep removed or left after the turn (``corral.engine.runtime.stray_refs``).
    strays: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as it is stored with the turn: its fields by name (``objects`` and ``strays`` only when set)."""
        doc: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        doc["moves"] = [m.to_json() for m in self.moves]  # each in its own stored shape
        for name in ("objects", "strays"):
            if doc[name] is None:
                del doc[name]
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RefGuard:
        """A stored report: its moves strictly (one that is not a move refuses the report with a ``ValueError``,
        as :meth:`RefMove.from_json` says), its other fields tolerantly, one by one: a count, a flag, an error
        or a nested report of the wrong type reads as its default, as stored reports always were read.
        """
        moves = data.get("moves") or []
        if not isinstance(moves, list) or not all(isinstance(m, dict) for m in moves):
            raise ValueError("refs.moves: expected a list of objects")
        fields: dict[str, Any] = {"moves": tuple(RefMove.from_json(m) for m in moves)}
        for f in msgspec.structs.fields(cls):
            if f.name != "moves" and f.encode_name in data:
                try:
                    fields[f.name] = msgspec.convert(data[f.encode_name], f.type)
                except msgspec.ValidationError:
                    pass  # the field's default, as the docstring says
        return cls(**fields)
