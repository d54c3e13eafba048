#!/usr/bin/env python
"""Pi ``--mode json`` output logs of a chosen size and failure rate, for bench_incident_scan.py.

Each tool call ``i`` (from 1) is three lines, as Pi writes them:

- a ``message_update`` text delta: an 80-character ``delta`` and a 600-character ``partial``
  assistant message;
- a ``tool_execution_start`` of ``bash``, toolCallId ``t<i>``, args
  ``{"command": "pytest tests/test_mod<i % 97>.py -q"}``;
- a ``tool_execution_end`` of the same call, result text ``ok `` or ``FAILED `` and 400
  characters, ``isError`` true when ``i`` is a multiple of ``fail_every`` (0: never).

The logs are deterministic: the same arguments give the same bytes.

Usage::

    .venv/bin/python bench/gen_pi_logs.py OUT_DIR     # OUT_DIR/{clean,fail1pc,fail10pc}/output.log
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MB = 1024 * 1024
#: The three logs of the benchmark: name, size in MB, every how many calls one fails (0: none).
LOGS = (("clean", 100, 0), ("fail1pc", 100, 100), ("fail10pc", 20, 10))
COMMANDS = 97


def command(i: int) -> str:
    return f"pytest tests/test_mod{i % COMMANDS}.py -q"


def call_lines(i: int, fail_every: int) -> bytes:
    """Tool call ``i``'s three lines."""
    failed = bool(fail_every) and i % fail_every == 0
    partial = {"role": "assistant", "content": [{"type": "text", "text": "x" * 600}]}
    lines = [
        {
            "type": "message_update",
            "assistantMessageEvent": {"type": "text_delta", "delta": "y" * 80, "partial": partial},
        },
        {"type": "tool_execution_start", "toolCallId": f"t{i}", "toolName": "bash", "args": {"command": command(i)}},
        {
            "type": "tool_execution_end",
            "toolCallId": f"t{i}",
            "toolName": "bash",
            "result": {"content": [{"type": "text", "text": ("FAILED " if failed else "ok ") + "z" * 400}]},
            "isError": failed,
        },
    ]
    return b"".join(json.dumps(line).encode("utf-8") + b"\n" for line in lines)


def write_log(path: Path, size: int, fail_every: int, *, first: int = 1, append: bool = False) -> tuple[int, int]:
    """Write tool calls ``first``, ``first + 1``, … to ``path`` until ``size`` bytes are written.

    Returns (bytes written, the next call's number), so a log can be grown where it stopped.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    written, i = 0, first
    batch: list[bytes] = []
    with path.open("ab" if append else "wb") as out:
        while written < size:
            lines = call_lines(i, fail_every)
            batch.append(lines)
            written += len(lines)
            i += 1
            if len(batch) >= 1024:
                out.write(b"".join(batch))
                batch.clear()
        out.write(b"".join(batch))
    return written, i


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory to write <name>/output.log into")
    args = p.parse_args(argv)
    for name, mb, every in LOGS:
        path = args.out / name / "output.log"
        size, after = write_log(path, mb * MB, every)
        print(f"{name}: {size} bytes, {after - 1} tool calls, {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
