"""corral: run AI coding agents on tasks in a git repository, supervised so nothing is lost."""

import sys as _sys

__version__ = "0.1.0"


def _load_msgspec() -> None:
    """Load msgspec (every record is its ``Struct``) on the standard library's typing alone.

    msgspec asks ``typing_extensions`` for ``get_type_hints``, ``Required`` and ``NotRequired``
    when it is installed and falls back to :mod:`typing`'s, which on Python 3.11 are the same
    things. Loading it pulls in ``inspect``, ``ast``, ``dis`` and ``tokenize``: about 8 ms of
    every command's start-up, a tenth of a read (docs/architecture.md#start-up). So msgspec is
    loaded first, here, the way it loads where the package is absent; a library that imports
    ``typing_extensions`` later gets it as usual.
    """
    if "msgspec" in _sys.modules or "typing_extensions" in _sys.modules:
        return
    _sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # import of it fails: msgspec's fallback
    try:
        import msgspec  # noqa: F401
    finally:
        del _sys.modules["typing_extensions"]


_load_msgspec()
