"""The order of a turn's two streams: the supervisor's copy writes ``output.index`` beside the logs,
one short record per switch of stream (not per chunk), before the bytes it announces; the reader
interleaves the logs by it, incrementally, and never gives a byte to a run that came before its
own record. Real pipes and a real process feed the copy; the logs stay verbatim."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from corral.adapters.harness.command import CommandHarness
from corral.engine.paths import OUTPUT_INDEX, OUTPUT_LOG, STDERR_LOG
from corral.engine.read.interleave import AttemptStart, Line, TurnLog
from corral.engine.runtime.output import OutputCopier, OutputIndex


def copy(directory: Path, script: str) -> None:
    """Run ``sh -c script`` and copy its streams as one attempt does (the logs opened for append)."""
    out_fd = os.open(directory / OUTPUT_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    err_fd = os.open(directory / STDERR_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        copier = OutputCopier(CommandHarness("sh"), out_fd, err_fd, OutputIndex.in_dir(directory, out_fd, err_fd))
        copier.pump(proc.stdout, proc.stderr, lambda _e: 60.0, lambda: None, lambda: proc.poll() is not None)
        copier.flush()
        proc.stdout.close()
        proc.stderr.close()
        proc.wait()
    finally:
        os.close(out_fd)
        os.close(err_fd)


def records(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / OUTPUT_INDEX).read_text().splitlines()]


def text_of(pieces) -> list[str]:
    return [
        f"#{p.number}" if isinstance(p, AttemptStart) else f"{p.stream[3:]}:{p.data.decode()}@{p.attempt}"
        for p in pieces
    ]


def test_the_copy_indexes_each_switch_of_stream_and_the_reader_interleaves_by_it(tmp_path: Path) -> None:
    copy(tmp_path, "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c; echo d; sleep 0.1; echo e >&2")
    copy(tmp_path, "echo second; sleep 0.1; echo oops >&2")
    assert (tmp_path / OUTPUT_LOG).read_bytes() == b"a\nc\nd\nsecond\n"  # stdout stays verbatim
    assert (tmp_path / STDERR_LOG).read_bytes() == b"b\ne\noops\n"
    kinds = [(r["k"], r["o"], r["e"]) for r in records(tmp_path)]
    # c and d came in one read or two: a second record for the same stream needs a second's pause.
    assert kinds == [
        ("a", 0, 0),
        ("o", 0, 0),
        ("e", 2, 0),
        ("o", 2, 2),
        ("e", 6, 2),
        ("a", 6, 4),
        ("o", 6, 4),
        ("e", 13, 4),
    ]
    assert os.stat(tmp_path / OUTPUT_INDEX).st_mode & 0o777 == 0o600
    got = TurnLog(tmp_path).finish()
    assert text_of(got) == [
        "#1",
        "out:a@1",
        "err:b@1",
        "out:c@1",
        "out:d@1",
        "err:e@1",
        "#2",
        "out:second@2",
        "err:oops@2",
    ]
    assert all(isinstance(p, AttemptStart) or p.at is not None for p in got)


def test_the_reader_follows_a_growing_turn_and_waits_for_a_line_to_end(tmp_path: Path) -> None:
    log = TurnLog(tmp_path)
    assert log.poll() == []  # nothing yet: no files at all
    index = os.open(tmp_path / OUTPUT_INDEX, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    out = tmp_path / OUTPUT_LOG
    err = tmp_path / STDERR_LOG
    now = time.time()

    def record(kind: str) -> None:
        sizes = [p.stat().st_size if p.exists() else 0 for p in (out, err)]
        os.write(index, (json.dumps({"k": kind, "o": sizes[0], "e": sizes[1], "t": now}) + "\n").encode())

    record("a")
    record("o")
    with out.open("ab") as fh:
        fh.write(b"par")
    assert text_of(log.poll()) == ["#1"]  # "par" has no line end yet
    record("e")
    with err.open("ab") as fh:
        fh.write(b"warn\n")
    assert text_of(log.poll()) == ["err:warn@1"]
    record("o")
    with out.open("ab") as fh:
        fh.write(b"tial\n")
    # A record announced before its bytes land: the reader stops at what is there and goes on later.
    record("e")
    assert text_of(log.poll()) == ["out:partial@1"]
    with err.open("ab") as fh:
        fh.write(b"last")
    os.write(index, b'{"k": "o", "o": 999')  # a record cut short by a crash is not read
    assert text_of(log.finish()) == ["err:last@1"]
    os.close(index)


def test_garbage_in_the_index_is_skipped_not_trusted(tmp_path: Path) -> None:
    (tmp_path / OUTPUT_LOG).write_bytes(b"one\ntwo\n")
    (tmp_path / STDERR_LOG).write_bytes(b"")
    lines = [
        b'{"k": "a", "o": 0, "e": 0, "t": 1}',
        b"not json",
        b'{"k": "x", "o": 0, "e": 0}',
        b'{"k": "o", "o": -5, "e": 0}',
        b"[" * 10_000,
        b'{"k": "o", "o": 0, "e": 0, "t": "soon"}',
    ]
    (tmp_path / OUTPUT_INDEX).write_bytes(b"\n".join(lines) + b"\n")
    got = TurnLog(tmp_path).finish()
    assert text_of(got) == ["#1", "out:one@1", "out:two@1"]
    assert isinstance(got[1], Line) and got[1].at is None  # a time that is not a number is no time
