"""The fit that keeps every receipt within the protocol's one bound.

A receipt corral wrote is always one corral can read: :func:`fit` measures it as the writer
will encode it and, while it is over :data:`~corral.engine.runtime.protocol.MAX_BYTES`,
shrinks its variable parts (the result, the tails, the lists of paths, commits and
attempts) rather than fail; the counts and the verbatim ``output.log`` keep the rest.
"""

from __future__ import annotations

from msgspec.structs import replace

from corral.domain.redact import bounded, truncation_note
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.wire import encode

#: Room left under the protocol's bound for what :func:`fit` cannot shrink (ids, times, codes).
FIT_MARGIN = 64 * 1024


def encoded_size(r: proto.Receipt) -> int:
    """The bytes :func:`~corral.engine.runtime.protocol.write` will put on disk for ``r``."""
    return len(encode(r.to_json()))


def _cut_text(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit // 4:  # at most 4 bytes a character: surely within the limit
        return text
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    note = truncation_note(len(data))
    return data[: max(0, limit - len(note.encode("utf-8")))].decode("utf-8", "ignore") + note


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


def _least_size(r: proto.Receipt) -> int:
    """A floor under :func:`encoded_size`: the characters of ``r``'s variable parts, each at least a byte on disk.

    Counted without encoding (a sum of lengths), so a receipt that is surely over the bound skips
    the measure that would only say so: encoding one with lists of a hundred thousand paths costs
    a good part of a second.
    """
    texts = (r.result, r.failure_reason, r.output_window, r.stderr_window)
    size = sum(len(t) for t in texts if t)
    if r.check is not None:
        size += len(r.check.tail)
    if r.error is not None:
        size += len(r.error.tail) + len(r.error.reason)
    lists = [r.sync.files] if r.sync is not None else []
    if r.git is not None:
        lists += [r.git.changed_paths, r.git.protected_changes, r.git.commits]
    return size + sum(sum(map(len, items)) for items in lists)


def _fits(r: proto.Receipt, budget: int) -> bool:
    """Whether the writer's encoding of ``r`` is within ``budget``: measured only when its floor is."""
    return _least_size(r) <= budget and encoded_size(r) <= budget


def fit(r: proto.Receipt, max_bytes: int = proto.MAX_BYTES) -> proto.Receipt:
    """``r``, shrunk until the writer's encoding is within ``max_bytes``: the writer never refuses it."""
    budget = max_bytes - FIT_MARGIN
    if _fits(r, budget):
        return r
    limit = budget // 2
    while limit > 0:
        smaller = _shrunk(r, limit)
        if _fits(smaller, budget):
            return smaller
        limit //= 2
    smallest = _shrunk(r, 0)
    if encoded_size(smallest) <= budget:
        return smallest
    # Only what the harness named itself is left (its usage, its session id): drop those too.
    return replace(smallest, usage=None, harness_session_id=None)
