"""The fit that keeps every receipt within the protocol's one bound.

A receipt corral wrote is always one corral can read: :func:`fit` measures it as the writer
will encode it and, while it is over :data:`~corral.engine.runtime.protocol.MAX_BYTES`,
shrinks its variable parts (the result, the tails, the lists of paths, commits and
attempts) rather than fail; the counts and the verbatim ``output.log`` keep the rest.
"""

from __future__ import annotations

import json

from msgspec.structs import replace

from corral.domain.redact import bounded, truncation_note
from corral.engine.runtime import protocol as proto

#: Room left under the protocol's bound for what :func:`fit` cannot shrink (ids, times, codes).
FIT_MARGIN = 64 * 1024


def encoded_size(r: proto.Receipt) -> int:
    """The bytes :func:`~corral.engine.runtime.protocol.write` will put on disk for ``r``."""
    doc = {"protocol_version": proto.PROTOCOL_VERSION, **r.to_json()}
    return len(json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass"))


def _cut_text(text: str | None, limit: int) -> str | None:
    if text is None or len(text.encode("utf-8", "replace")) <= limit:
        return text
    note = truncation_note(len(text.encode("utf-8", "replace")))
    head = text.encode("utf-8", "replace")[: max(0, limit - len(note.encode("utf-8")))]
    return head.decode("utf-8", "ignore") + note


def _shrunk(r: proto.Receipt, limit: int) -> proto.Receipt:
    """``r`` with every variable part cut to at most ``limit`` bytes or ``limit // 64`` items."""
    items = max(0, limit // 64)
    git = r.git
    if git is not None and git.error is None:
        git = replace(
            git,
            changed_paths=git.changed_paths[:items],
            protected_changes=git.protected_changes[:items],
            commits=git.commits[:items],
        )
    attempts = r.attempts
    if len(attempts) > max(2, items):
        keep = max(2, items)
        attempts = attempts[: keep // 2] + attempts[-(keep - keep // 2) :]
    return replace(
        r,
        result=_cut_text(r.result, limit),
        check=replace(r.check, tail=bounded(r.check.tail, limit)) if r.check else None,
        error=replace(r.error, tail=bounded(r.error.tail, limit), reason=_cut_text(r.error.reason, limit) or "")
        if r.error
        else None,
        failure_reason=_cut_text(r.failure_reason, limit),
        output_window=bounded(r.output_window, limit) if r.output_window else r.output_window,
        stderr_window=bounded(r.stderr_window, limit) if r.stderr_window else r.stderr_window,
        sync=replace(r.sync, files=r.sync.files[:items]) if r.sync else None,
        attempts=attempts,
        git=git,
    )


def fit(r: proto.Receipt, max_bytes: int = proto.MAX_BYTES) -> proto.Receipt:
    """``r``, shrunk until the writer's encoding is within ``max_bytes``: the writer never refuses it."""
    budget = max_bytes - FIT_MARGIN
    if encoded_size(r) <= budget:
        return r
    limit = budget // 2
    while limit > 0:
        smaller = _shrunk(r, limit)
        if encoded_size(smaller) <= budget:
            return smaller
        limit //= 2
    smallest = _shrunk(r, 0)
    if encoded_size(smallest) <= budget:
        return smallest
    # Only what the harness named itself is left (its usage, its session id): drop those too.
    return replace(smallest, usage=None, harness_session_id=None)
