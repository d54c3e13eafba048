"""The protocol writer's bytes (``wire.encode``) are ``json``'s indenting encoder's, at a C encoder's cost.

Every protocol file has been written by ``json.dumps(..., ensure_ascii=False, indent=1)``, lone
surrogates escaped; the writer now takes ``json``'s C encoder and msgspec's formatter instead, and
falls back to the indenting encoder for what the formatter refuses. Whatever the document, the bytes
on disk are the same as before, and the reader gets back what was written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from corral.engine.runtime import protocol as proto
from corral.engine.runtime.wire import encode


def reference(data: dict[str, Any]) -> bytes:
    """The writer's bytes as ``json``'s indenting encoder made them (lone surrogates as their escapes)."""
    text = json.dumps({"protocol_version": proto.PROTOCOL_VERSION, **data}, ensure_ascii=False, indent=1)
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


#: Every kind of character a harness could print: controls, escapes, non-ASCII, astral, lone surrogates.
TEXT = st.text(st.characters(codec=None, categories=None), max_size=40) | st.sampled_from(
    ["", '"', "\\", "\x00\x1b[31m\x7f", "\u2028\u2029\ufeff", "😀", "\ud83d\ude00", "\ud800", "é\udc80ü"]
)
SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(TEXT, VALUE, max_size=6))
def test_the_writer_writes_the_indenting_encoders_bytes(data: dict[str, Any]) -> None:
    assert encode(data) == reference(data)


def test_what_the_formatter_refuses_is_written_as_before(tmp_path: Path) -> None:
    """NaN, the infinities and lone surrogates take the indenting encoder: the same bytes, read back as they were."""
    data = {"nan": float("nan"), "inf": [float("inf"), float("-inf")], "cut": "a\ud800b", "pair": "\ud83d\ude00"}
    assert encode(data) == reference(data)
    proto.write_json(tmp_path / "doc.json", data)
    back = proto.read_raw(tmp_path / "doc.json")
    assert back is not None and back["nan"] != back["nan"] and back["inf"] == [float("inf"), float("-inf")]
    assert back["cut"] == "a\ud800b" and back["pair"] == "😀"  # a pair's two escapes read as the one character


def test_a_record_is_written_as_its_fields_in_order_one_space_a_level(tmp_path: Path) -> None:
    check = proto.CheckResult(command="make test", exit_code=1, timed_out=False, timeout=1e-05, tail="é\n")
    proto.write(tmp_path, proto.Receipt(command_id="c1", task_id=None, kind="work", status="completed", check=check))
    assert (tmp_path / proto.RESPONSE).read_text() == (
        '{\n "protocol_version": 3,\n "command_id": "c1",\n "task_id": null,\n "kind": "work",\n'
        ' "status": "completed",\n "check": {\n  "command": "make test",\n  "exit_code": 1,\n'
        '  "timed_out": false,\n  "timeout": 1e-05,\n  "tail": "é\\n",\n  "confinement": null\n }\n}'
    )
