"""What a confined agent may declare about its own commands and failures (docs/incidents.md).

Two tools corral serves a confined agent carry structured declarations, and both are read here,
purely, from the call's arguments as the agent sent them (camelCase), by the tool before it acts
and again by the collector when it replays the agent's log — so both reach the same verdict:

- corral's shell tool takes an optional intent: ``operationId`` (one logical operation across
  modified retries), ``attemptId`` (one execution, for use as evidence) and ``expectedExitCodes``
  (non-zero exits that are intentional). :func:`parse_intent` gives an :class:`Intent` or a
  :class:`Rejected` with one plain reason per problem; a rejected call is never run.
- ``failure_disposition`` takes ``disposition``, ``targets``, ``reason``, ``evidence`` and
  ``permissionResource``. :func:`parse_disposition` checks the request's own shape; whether its
  targets and evidence hold is decided against the incidents (``dispositions.check_disposition``).

Rules: an id matches :data:`ID_PATTERN` (1–64 characters, letters, digits and ``._:/-``, starting
with a letter or digit). ``expectedExitCodes`` is a list of integers 0–255 (a boolean is not an
integer); a 0 is ignored (exit 0 is already success), duplicates are folded into one (the list is
a set of codes), and at most :data:`MAX_EXPECTED` distinct non-zero codes are allowed.

A ``null``, and an empty string where a string is optional, is an undeclared field, exactly like an
omitted one (:func:`undeclared`): models with nullable schemas send every optional field, as null
when they mean nothing. A value of another type (a number for an id) is refused, never coerced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from msgspec import Struct

#: An operation or attempt id (the shell tool's schema carries the same pattern).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}")
#: Distinct non-zero expected exit codes one call may declare.
MAX_EXPECTED = 16
#: The intent's argument names: in a trusted run they are not part of the command's identity.
INTENT_KEYS = ("operationId", "attemptId", "expectedExitCodes")

DISPOSITIONS = ("recovered", "superseded", "expected", "open")
#: Dispositions that close an incident, and so need evidence of a later success.
NEEDS_EVIDENCE = ("recovered", "superseded")
PERMISSION_RESOURCES = (
    "credential-files",
    "process-inspection",
    "project-files",
    "outside-project-files",
    "runtime-control-files",
    "command-execution",
    "network-access",
    "unknown",
)
MAX_TARGETS = 20
TARGET_CHARS = 200
REASON_CHARS = 400
EVIDENCE_CHARS = 200
DISPOSITION_KEYS = ("disposition", "targets", "reason", "evidence", "permissionResource")


class Intent(Struct, frozen=True):
    """A valid intent (every field optional: a shell call with none of them is an empty intent)."""

    operation_id: str | None = None
    attempt_id: str | None = None
    #: The declared non-zero exit codes, distinct and sorted.
    expected: tuple[int, ...] = ()


class Rejected(Struct, frozen=True):
    """Why a declaration was refused: one plain sentence per problem."""

    reasons: tuple[str, ...]


class DispositionRequest(Struct, frozen=True):
    """A ``failure_disposition`` request of a valid shape (its targets not yet resolved)."""

    disposition: str
    targets: tuple[str, ...]
    reason: str
    evidence: str | None = None
    permission_resource: str | None = None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _id_problem(name: str, value: Any) -> str | None:
    if not isinstance(value, str):
        return f"{name} must be a string, not {_shown(value)}"
    if _ID.fullmatch(value) is None:
        return (
            f"{name} {_shown(value)} is not a valid id (1-64 characters: letters, digits and . _ : / -, "
            "starting with a letter or digit)"
        )
    return None


def undeclared(value: Any) -> bool:
    """Whether an optional field's value declares nothing: ``null``, or the empty string."""
    return value is None or value == ""


def declared(args: Mapping[str, Any], key: str) -> bool:
    """Whether ``args`` declare ``key``: present, and neither null nor an empty string."""
    return key in args and not undeclared(args[key])


def parse_intent(args: Mapping[str, Any]) -> Intent | Rejected:
    """The intent of a shell call's arguments, or why it is rejected (every problem, in order)."""
    if not isinstance(args, Mapping):
        return Intent()
    reasons: list[str] = []
    ids: dict[str, str | None] = {}
    for key in ("operationId", "attemptId"):
        ids[key] = None
        if declared(args, key):
            problem = _id_problem(key, args[key])
            if problem:
                reasons.append(problem)
            else:
                ids[key] = args[key]
    codes: set[int] = set()
    if declared(args, "expectedExitCodes"):
        given = args["expectedExitCodes"]
        if not isinstance(given, list | tuple):
            reasons.append(f"expectedExitCodes must be a list of integers, not {_shown(given)}")
        else:
            for n, code in enumerate(given):
                if not isinstance(code, int) or isinstance(code, bool):
                    reasons.append(f"expectedExitCodes[{n}] ({_shown(code)}) is not an integer")
                elif not 0 <= code <= 255:
                    reasons.append(f"expectedExitCodes[{n}] ({code}) is outside 0-255")
                elif code:
                    codes.add(code)
            if len(codes) > MAX_EXPECTED:
                reasons.append(f"expectedExitCodes has {len(codes)} distinct non-zero codes (at most {MAX_EXPECTED})")
    if reasons:
        return Rejected(tuple(reasons))
    return Intent(ids["operationId"], ids["attemptId"], tuple(sorted(codes)))


def command_args(args: Any) -> Any:
    """A shell call's arguments without its intent, and without an argument given as null (undeclared, as
    an omitted one): what the exact-retry rule compares in a trusted run."""
    if not isinstance(args, Mapping):
        return args
    return {k: v for k, v in args.items() if k not in INTENT_KEYS and v is not None}


def _text_problem(name: str, value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return f"{name} must be a string, not {_shown(value)}"
    if not value.strip():
        return f"{name} is empty"
    if len(value) > limit:
        return f"{name} is {len(value)} characters (at most {limit})"
    return None


def parse_disposition(args: Mapping[str, Any]) -> DispositionRequest | Rejected:
    """A ``failure_disposition`` request's shape, or why it is rejected (every problem, in order)."""
    if not isinstance(args, Mapping):
        return Rejected(("the request must be an object",))
    reasons = [f"unknown field {_shown(k)}" for k in args if k not in DISPOSITION_KEYS]
    disposition = args.get("disposition")
    if disposition not in DISPOSITIONS:
        reasons.append(f"disposition must be one of {', '.join(DISPOSITIONS)}, not {_shown(disposition)}")
    targets = args.get("targets")
    if not isinstance(targets, list | tuple):
        reasons.append(f"targets must be a list of 1-{MAX_TARGETS} ids, not {_shown(targets)}")
        targets = ()
    elif not targets:
        reasons.append("targets is empty (name 1 to 20 incidents)")
    elif len(targets) > MAX_TARGETS:
        reasons.append(f"targets has {len(targets)} items (at most {MAX_TARGETS})")
    for n, target in enumerate(targets):
        problem = _text_problem(f"targets[{n}]", target, TARGET_CHARS)
        if problem:
            reasons.append(problem)
    reason = args.get("reason")
    if "reason" not in args:
        reasons.append("reason is required")
    elif problem := _text_problem("reason", reason, REASON_CHARS):
        reasons.append(problem)
    evidence = args.get("evidence")
    if declared(args, "evidence"):
        if problem := _text_problem("evidence", evidence, EVIDENCE_CHARS):
            reasons.append(problem)
    elif disposition in NEEDS_EVIDENCE:
        reasons.append(
            f"evidence is required for {disposition}: the attemptId or tool call id of a successful attempt "
            "that started after the failure"
        )
    resource = args.get("permissionResource")
    if declared(args, "permissionResource"):
        if disposition != "open":
            reasons.append("permissionResource is only for an open disposition")
        if resource not in PERMISSION_RESOURCES:
            reasons.append(
                f"permissionResource must be one of {', '.join(PERMISSION_RESOURCES)}, not {_shown(resource)}"
            )
    if reasons:
        return Rejected(tuple(reasons))
    return DispositionRequest(
        str(disposition),
        tuple(str(t) for t in targets),
        str(reason),
        evidence if isinstance(evidence, str) and declared(args, "evidence") else None,
        resource if isinstance(resource, str) and declared(args, "permissionResource") else None,
    )
