"""Values written back as TOML text: what ``corral config`` writes into a settings file or shows.

:func:`toml_value` gives a value in the form ``tomllib`` reads back equal (the schema's types:
strings, whole numbers, floats, booleans, lists of strings); :func:`toml_comment` makes any text
safe to follow a ``#``. Text that came from the environment or a repository may hold anything, so
both escape every character TOML forbids rather than trust it.
"""

from __future__ import annotations


def toml_value(value: str | int | float | bool | list[str]) -> str:
    """``value`` as a TOML value that ``tomllib`` reads back equal. None has no TOML form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # repr is TOML's float syntax too, including inf, -inf and nan.
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_string(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


_STRING_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(text: str) -> str:
    out: list[str] = []
    for ch in text:
        code = ord(ch)
        if ch in _STRING_ESCAPES:
            out.append(_STRING_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            # An undecodable byte from the environment has no Unicode form; TOML text must be Unicode.
            out.append("\\uFFFD")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_comment(text: str) -> str:
    """``text`` made safe to follow a ``#``: TOML comments may hold no control character but tab."""
    out: list[str] = []
    for ch in text:
        code = ord(ch)
        if (code < 0x20 and ch != "\t") or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)
