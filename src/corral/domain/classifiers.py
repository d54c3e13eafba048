"""The shared signals of a failure: the HTTP statuses and socket errors every harness's output may carry.

Each harness's own classifier (``Harness.classify``) reads its structured fields first and falls
back on these; text none of them matches is ``unknown``, never a guess at ``fatal_*``
(:mod:`corral.domain.failures` says why).
"""

from __future__ import annotations

import re
from functools import cache

from corral.domain.failures import FailureClass

_SIGNALS = (
    (FailureClass.FATAL_AUTH, r"\b(401|403)\b|credit balance|invalid api key|unauthori[sz]ed|authentication"),
    (FailureClass.TRANSIENT_OVERLOAD, r"\b(429|529|503)\b|overloaded|rate.?limit|usage limit|too many requests"),
    (FailureClass.TRANSIENT_UNREACHABLE, r"ECONNREFUSED|ENOTFOUND|EAI_AGAIN|connection refused|getaddrinfo"),
    (
        FailureClass.TRANSIENT_NETWORK,
        r"ECONNRESET|ETIMEDOUT|EPIPE|socket hang up|\b(500|502|504)\b|network error|fetch failed",
    ),
)


@cache
def _compiled() -> tuple[tuple[FailureClass, re.Pattern[str]], ...]:
    """The shared signals, compiled on first use: most commands never classify a failure."""
    return tuple((cls, re.compile(pattern, re.I)) for cls, pattern in _SIGNALS)


def classify_common(text: str, exit_code: int | None = None) -> FailureClass:
    """Shared HTTP/socket signals (auth, overload, unreachable, network); else unknown."""
    if exit_code == 127:
        return FailureClass.FATAL_CONFIG
    for cls, pattern in _compiled():
        if pattern.search(text):
            return cls
    return FailureClass.UNKNOWN


#: The code of a failure the model provider's server answered with a 5xx of its own (not an overload):
#: retried on the network class's ladder and budget, told as the provider's fault, not the network's.
SERVER_ERROR_CODE = "harness-server-error"


def classify_http_status(status: int | None) -> FailureClass | None:
    if status is None:
        return None
    if status in (401, 403):
        return FailureClass.FATAL_AUTH
    if status in (429, 503, 529):
        return FailureClass.TRANSIENT_OVERLOAD
    if server_error(status):
        return FailureClass.TRANSIENT_NETWORK
    return None


def server_error(status: int | None) -> bool:
    """An HTTP status that is the provider's server failing (500, 502, 504 and the other 5xx), not an
    overload (503, 529): the request reached the provider, so it is no lost connection."""
    return status is not None and 500 <= status <= 599 and status not in (503, 529)
