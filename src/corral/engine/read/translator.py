"""The one safe cause translator: allowlisted fields, masked secrets, bounded sizes.

Everything corral keeps about a failure passes through it: an allowlist of fields,
:func:`corral.domain.redact.redact` masking (known secret shapes, and the values of environment
variables named like ``*KEY*``, ``*TOKEN*``, …), and bounded sizes. Raw harness protocol is
never copied through it (``read/diagnostic_content`` reads such a line through the harness's own
parser and keeps only allowlisted event fields); plain output lines stay exact apart from masking.

The translator masks with the secrets of the process that uses it (the reconciler); the
supervisor masks its own tails with its environment's secrets before they reach the receipt,
so a secret only the supervisor's environment held is masked there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from msgspec.structs import replace

from corral.domain.records import FailureEvidence
from corral.domain.redact import RESULT_BYTES, bounded, masked_head, redact, secret_values

#: Size bounds (bytes of UTF-8).
TEXT_BYTES = 1000  # one reason or message
LIST_ITEMS = 50

#: The evidence ``details`` keys that may be stored, and the only ones.
DETAIL_KEYS = frozenset(
    {
        "reason",
        "summary",
        "error",
        "stop",
        "attempts",
        "receipt",
        "problem",
        "size",
        "executable",
        "timeout_seconds",
        "relaunches",
        "files",
        "last_phase",
        "last_heartbeat",
        "lost_command",
        "retry_class",
    }
)


class Translator:
    """The one safe cause translator: allowlisted fields, masked secrets, bounded sizes.

    Shared by diagnostics, evidence details, any tail corral keeps about a failure, and the
    texts a turn keeps from its harness (its result, the check's tail).
    """

    def __init__(self, secrets: Iterable[str] | None = None) -> None:
        self.secrets = list(secrets) if secrets is not None else secret_values(os.environ)

    def mask(self, text: str) -> str:
        return redact(text, self.secrets)

    def text(self, value: Any, limit: int = TEXT_BYTES) -> str:
        """A message: masked, then cut to ``limit`` bytes from its start."""
        text = value if isinstance(value, str) else str(value)
        window = text[: limit * 2 + 512]
        masked = self.mask(window)
        data = masked.encode("utf-8", "replace")
        if len(data) <= limit and len(window) == len(text):
            return masked
        return data[: max(0, limit - 3)].decode("utf-8", "ignore") + "…"

    def content(self, value: str, limit: int = RESULT_BYTES) -> str:
        """A text a turn keeps whole (its result): masked, then cut to ``limit`` bytes with a note."""
        return masked_head(value, self.secrets, limit)

    def tail(self, value: str, limit: int) -> str:
        """An output tail: masked, then its last ``limit`` bytes; exact apart from that.

        Masking runs on a window a little larger than the tail; when the window cut a
        line, that partial line is dropped, so a secret cut in half never survives.
        """
        margin = 4096
        if len(value) > limit + margin:
            window = value[-(limit + margin) :]
            newline = window.find("\n")
            window = window[newline + 1 :] if 0 <= newline < margin else window[margin:]
        else:
            window = value
        return bounded(self.mask(window), limit)

    def details(self, details: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in details.items():
            if key not in DETAIL_KEYS:
                continue
            safe = self.value(value)
            if safe is not _DROP:
                out[key] = safe
        return out

    def value(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list | tuple):
            items = [self.value(v) for v in list(value)[:LIST_ITEMS]]
            return [v for v in items if v is not _DROP and not isinstance(v, dict | list)]
        return _DROP

    def evidence(self, evidence: FailureEvidence | None) -> FailureEvidence | None:
        if evidence is None:
            return None
        return replace(evidence, details=self.details(evidence.details))


_DROP = object()
