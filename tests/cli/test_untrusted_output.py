"""Agent output is untrusted input: no text surface lets an escape sequence, a bidi control or a NUL
reach the terminal; ``--json`` carries the exact text and ``logs --raw`` the exact bytes.

The agent is a real shell script run by the ``command`` harness. It prints a screen clear
(CSI ``2J``), an OSC title ended by BEL, a bidi override, a C1 CSI (U+009B) and a NUL on
stdout, and the same in the stderr line that becomes its failure's reason.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from corral.domain.sanitize import display

#: What a terminal would act on: none of it may reach a readable surface.
RAW = ["\x1b", "\x07", "\u202e", "\u202c", "\x9b", "\x00", "\x0d"]

HOSTILE_OUT = "clear \x1b[2J title \x1b]0;pwned\x07 bidi \u202eevil\u202c c1 \x9b nul \x00 end"
HOSTILE_ERR = "failing: \x1b[2J \x1b]0;pwned\x07 \u202e \x9b \x00 x"

SCRIPT = r"""#!/bin/sh
printf 'carriage\rreturn\n'
printf 'clear \033[2J title \033]0;pwned\007 bidi \342\200\256evil\342\200\254 c1 \302\233 nul \000 end\n'
printf 'failing: \033[2J \033]0;pwned\007 \342\200\256 \302\233 \000 x\n' >&2
exit "${EXIT_CODE:-0}"
"""


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "hostile-agent.sh"
    script.write_text(SCRIPT)
    return {
        "CORRAL_HARNESS": "command",
        "CORRAL_COMMAND": f"sh {script}",
        "CORRAL_AUTO_RESUME": "0",
        "CORRAL_WATCHDOG_TIMEOUT": "600",
    }


def on_a_terminal(corral, args: list[str], env: dict[str, str]) -> bytes:
    """What ``corral args`` writes to a pseudo-terminal (stdout and stderr both)."""
    primary, secondary = pty.openpty()
    try:
        subprocess.run(
            [sys.executable, "-m", "corral", *args],
            cwd=corral.cwd,
            env={**os.environ, **env},
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            timeout=60,
        )
    finally:
        os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the terminal's other end is closed and everything was read
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    return out


def clean(result, what: str) -> None:
    for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        for ch in RAW:
            assert ch not in text, f"{what}: raw {ch!r} on {stream}:\n{text!r}"


def test_the_display_escaper_renders_every_control_visibly_and_is_idempotent() -> None:
    shown = display(HOSTILE_OUT)
    assert shown == r"clear \x1b[2J title \x1b]0;pwned\x07 bidi \u202eevil\u202c c1 \x9b nul \x00 end"
    assert display(shown) == shown
    assert display("a\tb\nc") == "a\tb\nc"  # a block keeps its tabs and lines
    assert display("a\nb", multiline=False) == r"a\x0ab"
    assert display("\u2066x\u2069 \u200f \u061c \u2028 \x7f \x85") == r"\u2066x\u2069 \u200f \u061c \u2028 \x7f \x85"
    assert display(b"bad \xff byte".decode("utf-8", "surrogateescape")) == r"bad \xff byte"
    assert display("plain é ü 日本") == "plain é ü 日本"
    # Text a tool coloured (git's diff) keeps its colour sequences, and no other.
    coloured = "\x1b[32m+ok\x1b[m \x1b[1;31mx\x1b[0m \x1b]0;t\x07 \x1b[2J \x1b[ \u202e"
    kept = "\x1b[32m+ok\x1b[m \x1b[1;31mx\x1b[0m " + r"\x1b]0;t\x07 \x1b[2J \x1b[ \u202e"
    assert display(coloured, keep_sgr=True) == kept


@pytest.mark.slow
def test_a_failing_agents_escape_sequences_are_visible_on_every_surface_and_exact_in_json(corral, hostile):
    env = {**hostile, "EXIT_CODE": "127"}  # exit 127: the command could not run; no retry, the turn fails
    corral.ok("create", "Hostile output", "--ref", "hostile", env=env)
    started = corral("start", "hostile", "--wait", env=env)
    assert started.returncode == 1, started.stderr
    clean(started, "start --wait")
    assert r"failing: \x1b[2J \x1b]0;pwned\x07 \u202e \x9b \x00 x" in started.stdout + started.stderr

    surfaces = {
        "wait": ["wait", "hostile"],
        "show": ["show", "hostile"],
        "show --details": ["show", "hostile", "--details"],
        "show --all": ["show", "hostile", "--all"],
        "list": ["list"],
        "logs": ["logs", "hostile"],
        "logs -f": ["logs", "-f", "hostile"],
        "logs --turn": ["logs", "hostile", "--turn", "1"],
    }
    shown = {}
    for what, args in surfaces.items():
        result = corral(*args, env=env)
        assert "Traceback" not in result.stderr, result.stderr
        clean(result, what)
        shown[what] = result.stdout
    for what in ("logs", "logs -f", "logs --turn"):
        assert display(HOSTILE_OUT) in shown[what]
        assert r"carriage\x0dreturn" in shown[what]
        assert r"err│ failing: \x1b[2J \x1b]0;pwned\x07 \u202e \x9b \x00 x" in shown[what]

    # --json: the exact text, JSON-escaped; nothing a terminal acts on is written raw.
    result = corral("logs", "hostile", "--json", env=env)
    assert result.returncode == 0
    clean(result, "logs --json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    texts = {(e["stream"], e["text"]) for e in lines if e["event"] == "line"}
    assert ("stdout", HOSTILE_OUT) in texts and ("stderr", HOSTILE_ERR) in texts
    for args in (["show", "hostile", "--json"], ["list", "--json"], ["wait", "hostile", "--json"]):
        result = corral(*args, env=env)
        clean(result, " ".join(args))
        json.loads(result.stdout)


@pytest.mark.slow
def test_a_completed_turns_text_round_trips_through_json_and_raw_is_the_verbatim_surface(corral, hostile):
    corral.ok("create", "Hostile result", "--ref", "result", env=hostile)
    done = corral.ok("start", "result", "--wait", env=hostile)
    clean(done, "start --wait")
    assert display(HOSTILE_OUT) in done.stdout  # the turn's result, as wait prints it
    doc = corral.json("show", "result", env=hostile)
    agent = [t for t in doc["turns"] if t["role"] == "agent"]
    assert agent and HOSTILE_OUT in agent[-1]["content"]
    clean(corral("show", "result", env=hostile), "show")

    raw = subprocess.run(
        [sys.executable, "-m", "corral", "logs", "result", "--raw"],
        cwd=corral.cwd,
        env={**os.environ, **hostile},
        capture_output=True,
        check=True,
    ).stdout
    assert raw == b"carriage\rreturn\n" + HOSTILE_OUT.encode() + b"\n"
    # On a terminal, with colour: corral's own colours are there, the agent's sequences are not.
    page = on_a_terminal(corral, ["show", "result"], {**hostile, "NO_COLOR": ""})
    assert b"\x1b[1mresult\x1b[0m" in page  # the ref in bold
    assert display(HOSTILE_OUT, multiline=False).encode() in page  # the timeline's line of the result: its last
    assert page.count(b"\x1b") == page.count(b"\x1b[1m") + page.count(b"\x1b[0m") + page.count(b"\x1b[33m")
    assert b"\x1b]" not in page and b"\x1b[2J" not in page and "\u202e".encode() not in page

    help_text = corral.ok("logs", "--help").stdout
    assert "--raw" in help_text and "does not escape" in " ".join(help_text.split())


def test_an_error_line_escapes_what_it_quotes(corral, tmp_path):
    bad = tmp_path / "repo \x1b]0;pwned\x07 \u202e here"
    result = corral("--repo", str(bad), "list")
    assert result.returncode != 0
    clean(result, "error line")
    assert r"\x1b]0;pwned\x07 \u202e here" in result.stderr
    as_json = corral("--repo", str(bad), "list", "--json")
    clean(as_json, "error --json")
    assert str(bad) in as_json.json()["error"]["message"]
