"""``command.json`` has one writer, ``protocol.write_command``: the file is made one way wherever it lands."""

from __future__ import annotations

import ast
import stat
from pathlib import Path

from corral.engine.runtime import protocol as proto
from tests.runtime.test_protocol import a_command

SRC = Path(__file__).resolve().parents[2] / "src" / "corral"


#: The modules that still write a command through ``protocol.write`` (each a one-line move to
#: ``write_command``, left while those modules are being reworked). None may join them.
def _names_a_command(arg: ast.expr) -> bool:
    """The argument is the command itself, or a path naming ``command.json`` (a receipt built from a
    command, as the supervisor's refusal is, is not one)."""
    if isinstance(arg, ast.Name):
        return arg.id == "command"
    return any(isinstance(n, ast.Attribute) and n.attr == "COMMAND" for n in ast.walk(arg))


def command_writes() -> set[str]:
    """Modules outside the protocol's that hand a command (or ``command.json``'s name) to a protocol writer."""
    found: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "engine/runtime/protocol.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in ("write", "write_json"):
                continue
            owner = node.func.value
            by_protocol = isinstance(owner, ast.Name) and owner.id in ("proto", "protocol")
            if by_protocol and any(_names_a_command(arg) for arg in node.args):
                found.add(rel)
    return found


def test_a_command_is_written_private_into_a_directory_made_private_and_reads_back_whole(tmp_path: Path) -> None:
    command = a_command()
    where = tmp_path / "tasks" / "t1" / "turns" / "3"  # nothing of it exists yet
    proto.write_command(where, command)
    for made in (where, where.parent, where.parent.parent):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert stat.S_IMODE((where / proto.COMMAND).stat().st_mode) == 0o600
    assert proto.read(where / proto.COMMAND, proto.Command) == command
    raw = proto.read_raw(where / proto.COMMAND)
    assert raw is not None and raw["protocol_version"] == proto.PROTOCOL_VERSION


def test_a_second_command_replaces_the_first(tmp_path: Path) -> None:
    proto.write_command(tmp_path, a_command(command_id="c1"))
    proto.write_command(tmp_path, a_command(command_id="c2", sequence=4))
    found = proto.read_record(tmp_path / proto.COMMAND, proto.Command)
    assert found is not None and (found.command_id, found.sequence) == ("c2", 4)


def test_the_scan_finds_a_command_handed_to_the_generic_writer(tmp_path: Path) -> None:
    """The guard below is only as good as its scan: it sees both ways a command reaches a writer."""
    source = (
        "proto.write(Path(command.log_dir), command)\n"
        "proto.write_json(d / proto.COMMAND, doc)\n"
        "proto.write(d, receipt.refused(command, None, why))\n"
    )
    calls = [n.value for n in ast.parse(source).body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    assert [any(_names_a_command(a) for a in c.args) for c in calls] == [True, True, False]


def test_every_command_is_written_by_write_command() -> None:
    assert command_writes() == set()
