"""The CLI contract for failures: exit codes, the JSON error document, text intake, a broken
store, running from a task's worktree, and help that shows examples."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from corral.cli.root import cli
from tests.cli.helpers import create, database, json_error, no_traceback, state_paths
from tests.conftest import CLI, git

# -- not found, ambiguous, refused ------------------------------------------------------------


def test_an_unknown_task_is_exit_4_with_the_nearest_refs(corral) -> None:
    create(corral, "Fix the login timeout", "--ref", "fix-login-timeout")
    create(corral, "Docs", "--ref", "docs")
    err = json_error(corral("show", "fix-login-timout", "--json"), 4, "task-not-found")
    assert "fix-login-timout" in err["message"]
    assert err["hint"] and "fix-login-timeout" in err["hint"]
    assert "docs" not in err["hint"]
    text = corral("show", "fix-login-timout")
    assert text.returncode == 4
    assert "fix-login-timeout" in text.stderr
    assert text.stdout == ""


def test_an_ambiguous_prefix_is_exit_2_listing_the_candidates(corral) -> None:
    a = create(corral, "Fix login", "--ref", "fix-login")
    b = create(corral, "Fix logout", "--ref", "fix-logout")
    create(corral, "Docs", "--ref", "docs")
    err = json_error(corral("show", "fix-log", "--json"), 2, "ambiguous-task")
    assert "fix-login" in err["message"] and "fix-logout" in err["message"]
    assert a["id"][:8] in err["message"] and b["id"][:8] in err["message"]
    assert "docs" not in err["message"]


def test_an_exact_ref_wins_over_a_longer_one_it_prefixes(corral) -> None:
    create(corral, "Fix", "--ref", "fix")
    create(corral, "Fix more", "--ref", "fix-more")
    assert corral.json("show", "fix")["task"]["ref"] == "fix"


def test_an_illegal_transition_is_exit_3(corral) -> None:
    create(corral, "Waiting", "--ref", "waiting")
    err = json_error(corral("reopen", "waiting", "--json"), 3, "illegal-transition")
    assert "waiting" in err["message"]


# -- the JSON error document --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        (("show", "nope"), 4),
        (("create", "x", "--ref", "BAD"), 2),
        (("show",), 2),  # missing argument
        (("list", "--bogus"), 2),  # unknown option
        (("create",), 2),
        (("close", "nope", "-m", "x"), 4),
        (("edit", "nope", "--goal", "x"), 4),
        (("journal", "nope"), 4),
        (("doctor", "nope"), 4),
        (("config", "nope"), 2),  # unknown subcommand
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v),
)
def test_every_json_error_is_one_document_on_stdout(corral, args: tuple[str, ...], exit_code: int) -> None:
    result = corral(*args, "--json")
    err = json_error(result, exit_code)
    assert err["code"]
    assert result.stdout.count("\n") == 1  # exactly one document


def test_an_unknown_command_with_json_is_json_too(corral) -> None:
    err = json_error(corral("frobnicate", "--json"), 2, "usage")
    assert "frobnicate" in err["message"]


def test_usage_errors_in_text_mode_go_to_stderr(corral) -> None:
    result = corral("show")
    no_traceback(result)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "error:" in result.stderr and "TASK" in result.stderr


def test_outside_a_git_repository(tmp_path: Path) -> None:
    lonely = tmp_path / "not-a-repo"
    lonely.mkdir()
    err = json_error(CLI(lonely)("list", "--json"), 2, "not-a-repository")
    assert "--repo" in (err["hint"] or "")


# -- text intake: sanitized at the boundary, never a traceback ------------------------------------

NOTE = "[corral: "


def test_control_characters_in_a_goal_are_stored_escaped(corral) -> None:
    result = corral("create", "Fix \x07 the \x1b[31mbell\x7f", "--ref", "bell", "--json")
    no_traceback(result)
    assert result.returncode == 0
    goal = corral.json("show", "bell")["task"]["goal"]
    assert goal == "Fix \\u0007 the \\u001b[31mbell\\u007f"
    assert NOTE not in goal  # a goal is a field: escaped without the note
    text = corral.ok("show", "bell").stdout
    assert "Fix \\u0007 the \\u001b[31mbell\\u007f" in text
    assert "\x07" not in text and "\x1b" not in text


def test_control_characters_in_m_are_stored_escaped_with_a_note(corral) -> None:
    create(corral, "Prompted", "--ref", "prompted", "-m", "line one\x01\nline two\x9b")
    prompt = corral.json("show", "prompted")["task"]["prompt"]
    assert prompt.startswith("line one\\u0001\nline two\\u009b\n\n" + NOTE + "2 non-printable characters")
    corral.ok("comment", "prompted", "-m", "esc \x1b[2J here")
    body = corral.json("show", "prompted")["comments"][0]["body"]
    assert body.startswith("esc \\u001b[2J here\n\n" + NOTE)


def test_a_nul_on_stdin_is_stored_as_six_characters(corral) -> None:
    create(corral, "Nul", "--ref", "nul")
    result = corral("comment", "nul", "--json", input=b"before\x00after")
    no_traceback(result)
    assert result.returncode == 0, result.stdout
    body = corral.json("show", "nul")["comments"][0]["body"]
    assert body.startswith("before\\u0000after\n\n" + NOTE + "1 non-printable character was replaced")
    assert "\x00" not in body
    shown = corral.ok("show", "nul")
    assert "before\\u0000after" in shown.stdout
    assert "\x00" not in shown.stdout


def test_a_nul_and_invalid_utf8_in_a_reason_from_stdin(corral) -> None:
    create(corral, "Broken bytes", "--ref", "broken")
    result = corral("close", "broken", "--json", input=b"caf\xe9 \x00 done")
    no_traceback(result)
    assert result.returncode == 0, result.stdout
    reason = corral.json("show", "broken")["status_changes"][-1]["reason"]
    assert reason.startswith("caf\\xe9 \\u0000 done\n\n" + NOTE + "2 non-printable characters")
    assert "\x00" not in corral.ok("show", "broken").stdout


def test_invalid_utf8_in_an_argument(corral) -> None:
    create(corral, "Argv bytes", "--ref", "argv")
    # a str with a surrogate escape becomes the raw byte 0xff in the child's argv
    result = corral("journal", "argv", "-m", "bad \udcff byte", "--json")
    no_traceback(result)
    assert result.returncode == 0, result.stdout
    entry = corral.json("journal", "argv")["journal"][0]["body"]
    assert entry.startswith("bad \\xff byte\n\n" + NOTE)


def test_huge_text_is_refused_and_nothing_is_stored(corral) -> None:
    create(corral, "Big", "--ref", "big")
    huge = "x" * (100 * 1024 + 1)
    err = json_error(corral("comment", "big", "--json", input=huge), 2, "text-too-large")
    assert "102,401" in err["message"] and "102,400" in err["message"]
    json_error(corral("journal", "big", "-m", huge, "--json"), 2, "text-too-large")
    json_error(corral("create", "Bigger", "--ref", "bigger", "-m", huge, "--json"), 2, "text-too-large")
    json_error(corral("close", "big", "--json", input=huge), 2, "text-too-large")
    doc = corral.json("show", "big")
    assert doc["comments"] == [] and doc["journal"] == []
    assert doc["task"]["status"] == "backlog"
    assert [t["ref"] for t in corral.json("list", "--all")["tasks"]] == ["big"]
    # exactly at the cap is fine
    corral.ok("comment", "big", input="y" * (100 * 1024))


def test_the_text_cap_is_a_setting(corral) -> None:
    create(corral, "Small cap", "--ref", "small-cap")
    json_error(
        corral("comment", "small-cap", "-m", "x" * 1025, "--json", env={"CORRAL_TEXT_CAP": "1024"}),
        2,
        "text-too-large",
    )
    assert corral.json("show", "small-cap")["comments"] == []


# -- a broken store -----------------------------------------------------------------------------------


def test_a_corrupt_database_is_exit_1_naming_the_file_and_left_unchanged(corral) -> None:
    create(corral, "Before the damage", "--ref", "damaged")
    db = database(corral)
    garbage = b"this is not an sqlite database\n" * 200
    for extra in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        assert not extra.exists()
    db.write_bytes(garbage)
    for args in (("list",), ("show", "damaged"), ("create", "After"), ("comment", "damaged", "-m", "x")):
        err = json_error(corral(*args, "--json"), 1, "store-corrupt")
        assert str(db) in err["message"]
        assert err["hint"]
        assert db.read_bytes() == garbage
    text = corral("list")
    no_traceback(text)
    assert text.returncode == 1 and str(db) in text.stderr
    assert sorted(p.name for p in db.parent.iterdir() if p.name.startswith("corral.db")) == ["corral.db"]
    # doctor reports it as a failed check, not a crash
    doc = corral("doctor", "--json")
    no_traceback(doc)
    assert doc.returncode == 1
    assert any(c["name"] == "database" and c["status"] == "fail" for c in doc.json()["checks"])
    assert db.read_bytes() == garbage


# -- where corral runs from -------------------------------------------------------------------------


def test_a_task_worktree_maps_back_to_the_main_repository(corral, repo: Path, tmp_path: Path) -> None:
    create(corral, "Made in main", "--ref", "in-main")
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", str(worktree), "-b", "side")
    inside = CLI(worktree / ".")
    (worktree / "sub").mkdir()
    deeper = CLI(worktree / "sub")
    assert Path(state_paths(inside)["repository"]) == repo.resolve()
    assert state_paths(deeper)["database"] == state_paths(corral)["database"]
    assert [t["ref"] for t in deeper.json("list")["tasks"]] == ["in-main"]
    deeper.json("create", "Made in the worktree", "--ref", "in-worktree")
    assert sorted(t["ref"] for t in corral.json("list")["tasks"]) == ["in-main", "in-worktree"]


def test_repo_option_from_anywhere(corral, repo: Path, tmp_path: Path) -> None:
    create(corral, "Somewhere", "--ref", "somewhere")
    away = tmp_path / "away"
    away.mkdir()
    doc = CLI(away).json("--repo", str(repo), "list")
    assert [t["ref"] for t in doc["tasks"]] == ["somewhere"]


# -- help -------------------------------------------------------------------------------------------


def _leaf_commands() -> list[tuple[str, ...]]:
    """Every runnable command, found in the real click tree (new commands are covered too)."""

    def walk(group: click.Group, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        found: list[tuple[str, ...]] = []
        ctx = click.Context(group)
        for name in sorted(group.list_commands(ctx)):
            command = group.get_command(ctx, name)
            assert command is not None, name
            if isinstance(command, click.Group):
                found += walk(command, (*path, name))
            else:
                found.append((*path, name))
        return found

    return walk(cli, ())


COMMANDS = _leaf_commands()
FOUNDATION = {
    ("create",),
    ("edit",),
    ("list",),
    ("show",),
    ("close",),
    ("reject",),
    ("reopen",),
    ("comment",),
    ("journal",),
    ("paths",),
    ("doctor",),
    ("config", "show"),
}


def test_the_foundation_commands_exist() -> None:
    assert set(COMMANDS) >= FOUNDATION, FOUNDATION - set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_help_of_each_command_has_examples(corral, command: tuple[str, ...]) -> None:
    """A command's --help shows examples; a subcommand may rely on its group's examples
    when they show that very subcommand (``corral daemon --help`` lists ``corral daemon run``)."""
    result = corral(*command, "--help")
    no_traceback(result)
    assert result.returncode == 0
    assert f"corral {' '.join(command)}" in result.stdout
    if "Examples" in result.stdout:
        return
    assert len(command) > 1, f"corral {command[0]} --help has no Examples"
    group = corral.ok(*command[:-1], "--help").stdout
    assert "Examples" in group
    assert f"corral {' '.join(command)}" in group.split("Examples", 1)[1]


def test_top_level_help_lists_the_commands_and_exit_codes(corral) -> None:
    out = corral.ok("--help").stdout
    for name in {c[0] for c in COMMANDS}:
        assert f"  {name} " in out
    assert "Exit codes" in out


def test_a_goal_keeps_control_characters_python_counts_as_line_breaks(corral) -> None:
    """FS (\\x1c) and VT (\\x0b) are control characters: the goal must show them escaped,
    not folded into spaces as if they were line breaks."""
    corral.ok("create", "split\x1chere and\x0bthere", "--ref", "separators")
    goal = corral.json("show", "separators")["task"]["goal"]
    assert goal == "split\\u001chere and\\u000bthere"


def test_corral_home_that_is_a_file_is_explained_not_an_internal_error(corral, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x\n")
    env = {"CORRAL_HOME": str(blocker)}
    err = json_error(corral("list", "--json", env=env), 1)
    assert err["code"] != "internal-error", err
    assert str(blocker) in err["message"]
    # doctor is where a person goes when this happens: it reports failed checks, it does not crash
    result = corral("doctor", "--json", env=env)
    no_traceback(result)
    assert result.returncode == 1
    doc = result.json()
    assert "error" not in doc, doc
    assert doc["ok"] is False
    assert any(c["name"] == "state" and c["status"] == "fail" for c in doc["checks"])


# -- Ctrl-C -----------------------------------------------------------------------------------------


def _interrupt(*_args: object, **_kw: object) -> None:
    raise KeyboardInterrupt


def test_ctrl_c_is_the_interrupted_error_document_exit_130(
    corral, repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entry point in this process, with Ctrl-C arriving while the command reads."""
    from corral.cli import main
    from corral.engine.operations import queries

    create(corral, "Waiting", "--ref", "waiting")
    monkeypatch.setattr(queries, "list_tasks", _interrupt)
    assert main(["--repo", str(repo), "list", "--json"]) == 130
    out, _err = capsys.readouterr()
    assert out.count("\n") == 1  # one document, nothing else
    doc = json.loads(out)
    assert set(doc) == {"schema_version", "error"}
    assert doc["error"]["code"] == "interrupted" and doc["error"]["hint"]
    assert main(["--repo", str(repo), "list"]) == 130
    out, err = capsys.readouterr()
    assert out == ""
    assert "error: Interrupted." in err and "hint:" in err and "Traceback" not in err
