"""The safe cause translator's masking: secrets never reach a stored text, a diagnostic or a tail.

Known token shapes (API keys, bearer tokens, private keys, JSON web tokens, the password of a
URL's credentials, a secret given to a command-line flag) and the values of
environment variables named like ``*KEY*``, ``*TOKEN*``, ``*SECRET*``,
``*PASSWORD*`` are replaced by ``[redacted]``. Everything else stays exact. One rule set
for every text corral keeps from a harness (a result, a reason, a tail), applied by the
process that captured it (with its environment's secrets) and again by the one that stores it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from corral.domain.bounded_json import Decoded, decode

MASK = "[redacted]"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|AUTH", re.I)
MIN_SECRET_LEN = 6

_SHAPES = [
    re.compile(r"sk-[A-Za-z0-9_\-]{16,}"),  # Anthropic / OpenAI style keys
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub tokens
    re.compile(r"github_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}"),  # Slack
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access key id
    re.compile(r"AIza[0-9A-Za-z_\-]{35}"),  # Google API key
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-~+/]{12,}=*"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"(?i)((?:api[_-]?key|token|secret|password)\s*[=:]\s*)['\"]?[^\s'\"]{8,}"),
    re.compile(r"glpat-[A-Za-z0-9_\-]{20,}"),  # GitLab personal access token
    re.compile(r"npm_[A-Za-z0-9]{36}"),  # npm access token
    re.compile(r"hf_[A-Za-z0-9]{30,}"),  # Hugging Face token
    re.compile(r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe keys
    # A JSON web token. It starts a run of its characters and its parts never give back what they took,
    # so a long run of such characters is scanned once, not again from every "eyJ" in it.
    re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}+\.eyJ[A-Za-z0-9_\-]{8,}+\.[A-Za-z0-9_\-]{8,}+"),
    # The password of credentials in a URL (https://user:PASSWORD@host): the user and host stay readable.
    # A scheme starts a word and is short, so a long word is not scanned again from each of its letters.
    re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://[^\s/:@]{1,256}:)[^\s/@]{1,1024}(?=@)"),
    # A secret given to a command line's flag (--password x, --token=x); a flag naming a file is left alone.
    re.compile(
        r"(?i)(--(?:password|passwd|token|secret|api-key|apikey|access-token)(?:=|\s+))(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)"
    ),
]


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of variables whose names say they hold a secret, longest first."""
    values = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def _masker(keep_prefix: bool) -> Callable[[re.Match[str]], str]:
    """A replacement that keeps a "key=" or "Bearer " prefix readable and masks the secret."""

    def mask(match: re.Match[str]) -> str:
        return (match.group(1) or "") + MASK if keep_prefix else MASK

    return mask


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, MASK)
    for shape in _SHAPES:
        text = shape.sub(_masker(bool(shape.groups)), text)
    return text


def _masked_fields(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, list):
        return [_masked_fields(v, secrets) for v in value]
    if isinstance(value, dict):
        return {redact(str(k), secrets): _masked_fields(v, secrets) for k, v in value.items()}
    return value


def redact_lines(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` masked line by line, a protocol line (a JSON object) field by field, then serialized.

    Masking a JSON line as text can break it (a secret's mask swallowing a quote its shape took for
    its end), and a broken protocol line reads as plain output, its tool input and all; masking the
    parsed fields keeps it the JSON it was, so a reader still parses it and keeps only what it allows.
    """
    values = list(secrets)
    out = []
    for line in text.split("\n"):
        stripped = line.strip()
        decoded = decode(stripped) if stripped.startswith("{") else None
        if isinstance(decoded, Decoded) and isinstance(decoded.value, dict):
            out.append(json.dumps(_masked_fields(decoded.value, values), ensure_ascii=False))
        else:
            out.append(redact(line, values))
    return "\n".join(out)


def bounded(text: str, max_bytes: int) -> str:
    """The last ``max_bytes`` of ``text`` (a tail), cut on a character boundary."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return text
    return data[-max_bytes:].decode("utf-8", "ignore")


#: The most of a turn's result text corral keeps (the receipt and the turn alike); output.log has all.
RESULT_BYTES = 256 * 1024
#: Characters masked beyond a cut, so a secret the cut would split is masked whole first.
CUT_MARGIN = 4096


def truncation_note(total: int) -> str:
    return f"\n[… cut: {total:,} bytes in all; the whole text is in the turn's output.log]"


def masked_head(text: str, secrets: Iterable[str], max_bytes: int) -> str:
    """``text`` masked, then cut to its first ``max_bytes`` (UTF-8) with a note saying so.

    Only a window a little longer than the bound is masked, so a 50 MB text costs the
    bound, not its size; the margin beyond the cut is masked too, so a secret the cut
    splits is masked before it is cut and never leaves half of itself behind.
    """
    if len(text) <= max_bytes // 4:  # at most 4 bytes a character: surely within the bound
        return redact(text, secrets)
    window = text[: max_bytes + CUT_MARGIN]
    masked = redact(window, secrets)
    data = masked.encode("utf-8", "replace")
    if len(window) == len(text) and len(data) <= max_bytes:
        return masked
    total = len(text.encode("utf-8", "replace"))
    note = truncation_note(total)
    room = max(0, max_bytes - len(note.encode("utf-8")))
    return data[:room].decode("utf-8", "ignore") + note
