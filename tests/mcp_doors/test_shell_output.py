"""corral's shell keeps the head of what a command prints, whatever it floods: the daemon's memory is bounded."""

from __future__ import annotations

import os
import threading

from corral.engine.operations import shell


def test_a_flood_is_read_to_its_end_and_only_its_head_is_kept() -> None:
    read_end, write_end = os.pipe()
    chunk = b"x" * 65536
    total = 40 * 1024 * 1024

    def flood() -> None:
        with os.fdopen(write_end, "wb") as out:
            for _ in range(total // len(chunk)):
                out.write(chunk)

    writer = threading.Thread(target=flood)
    writer.start()
    kept: dict[str, bytes] = {}
    with os.fdopen(read_end, "rb") as pipe:
        shell.keep_head(pipe, kept, "out")
    writer.join(10)
    assert not writer.is_alive()  # the writer was never blocked: the pipe was drained to its end
    assert len(kept["out"]) == shell.OUTPUT_BYTES + 1  # the head, and one byte more to tell a cut
