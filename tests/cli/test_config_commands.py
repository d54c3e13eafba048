"""`corral config get | set | unset | edit | path` through the real CLI, and broken settings on every command."""

from __future__ import annotations

import os
import re
import stat
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from corral.domain.explain import explain_failure
from corral.domain.records import FailureEvidence
from tests.cli.helpers import json_error, no_traceback


def user_file(isolated_env: Path) -> Path:
    return isolated_env / "user-config.toml"


# -- set / get / unset ---------------------------------------------------------------------------


@pytest.mark.slow
def test_set_then_get_in_the_user_file_keeps_its_comments_and_tables(corral, isolated_env: Path) -> None:
    path = user_file(isolated_env)
    path.write_text(
        '# my settings\nmodel = "sonnet"  # the cheap one\n\n[projects."/elsewhere"]\nwatchdog_timeout = 5.0\n'
    )
    done = corral.json("config", "set", "watchdog_timeout", "600")
    assert done["file"] == str(path) and done["scope"] == "user" and done["changed"] is True
    assert done["in_force"] == {"value": 600.0, "source": "user", "origin": str(path)}
    corral.ok("config", "set", "model", "opus")
    text = path.read_text()
    assert text.startswith("# my settings\n")
    assert 'model = "opus"  # the cheap one\n' in text  # the value changed, its comment stayed
    assert tomllib.loads(text) == {
        "model": "opus",
        "watchdog_timeout": 600.0,
        "projects": {"/elsewhere": {"watchdog_timeout": 5.0}},
    }
    assert text.index("watchdog_timeout = 600.0") < text.index("[projects")  # top level, before the tables
    assert corral.ok("config", "get", "watchdog_timeout").stdout == "600.0\n"
    got = corral.json("config", "get", "model")
    assert (got["name"], got["value"], got["source"], got["origin"]) == ("model", "opus", "user", str(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # the file keeps its own permissions


def test_get_of_a_setting_not_set_prints_nothing(corral) -> None:
    result = corral.ok("config", "get", "forge")
    assert result.stdout == "" and "forge is not set" in result.stderr
    assert corral.json("config", "get", "forge")["value"] is None


@pytest.mark.slow
def test_a_list_setting_is_set_as_a_toml_array_or_comma_separated(corral, isolated_env: Path) -> None:
    corral.ok("config", "set", "protected", '["secrets/*", "a, b.pem"]')
    assert tomllib.loads(user_file(isolated_env).read_text())["protected"] == ["secrets/*", "a, b.pem"]
    assert corral.ok("config", "get", "protected").stdout == '["secrets/*", "a, b.pem"]\n'
    corral.ok("config", "set", "protected", "x/*, y/*")
    assert corral.json("config", "get", "protected")["value"] == ["x/*", "y/*"]
    bad = json_error(corral("config", "set", "protected", "[1, 2", "--json"), 2, "config-invalid")
    assert "array" in bad["message"]


@pytest.mark.slow
def test_a_misspelt_key_is_refused_naming_the_nearest_setting(corral, isolated_env: Path) -> None:
    for command in (("get", "watchdog_timout"), ("set", "watchdog_timout", "5"), ("unset", "watchdog_timout")):
        err = json_error(corral("config", *command, "--json"), 2, "config-invalid")
        assert "'watchdog_timout' is not a setting" in err["message"]
        assert "did you mean 'watchdog_timeout'?" in err["message"]
    assert not user_file(isolated_env).exists()  # nothing was written
    human = corral("config", "set", "modle", "x")
    no_traceback(human)
    assert human.returncode == 2 and "did you mean 'model'?" in human.stderr


def test_a_value_of_the_wrong_type_is_refused_and_nothing_is_written(corral, isolated_env: Path) -> None:
    path = user_file(isolated_env)
    path.write_text("watchdog_timeout = 10.0\n")
    err = json_error(corral("config", "set", "watchdog_timeout", "soon", "--json"), 2, "config-invalid")
    assert "watchdog_timeout" in err["message"] and "a number" in err["message"]
    assert path.read_text() == "watchdog_timeout = 10.0\n"


def test_local_scope_writes_this_repositorys_table(corral, repo: Path, isolated_env: Path, tmp_path: Path) -> None:
    done = corral.json("config", "set", "model", "opus", "--scope", "local")
    assert done["table"] == str(repo.resolve())
    doc = tomllib.loads(user_file(isolated_env).read_text())
    assert doc == {"projects": {str(repo.resolve()): {"model": "opus"}}}
    shown = corral.json("config", "show")["settings"]["model"]
    assert (shown["value"], shown["source"]) == ("opus", "user_project")
    # another repository does not see it
    other = tmp_path / "other"
    other.mkdir()
    os.system(f"git -C {other} init -q -b main && git -C {other} commit -q --allow-empty -m init")
    assert corral.json("config", "get", "model", cwd=other)["value"] is None
    # a second set in the same scope changes the line, not a second table
    corral.ok("config", "set", "model", "haiku", "--scope", "local")
    text = user_file(isolated_env).read_text()
    assert text.count("[projects.") == 1 and tomllib.loads(text)["projects"][str(repo.resolve())] == {"model": "haiku"}


@pytest.mark.slow
def test_project_scope_writes_corral_toml_and_refuses_what_a_repository_may_not_set(corral, repo: Path) -> None:
    corral.ok("config", "set", "watchdog_timeout", "3600", "--scope", "project")
    toml = repo / "corral.toml"
    assert tomllib.loads(toml.read_text()) == {"watchdog_timeout": 3600.0}
    assert stat.S_IMODE(toml.stat().st_mode) & 0o044 == 0o044  # a shared file stays readable, not 0600
    shown = corral.json("config", "show")["settings"]["watchdog_timeout"]
    assert (shown["value"], shown["source"]) == (3600.0, "project")
    for name, value in (("permission_mode", "bypassPermissions"), ("is_sandbox", "true"), ("allowed_tools", "Bash")):
        err = json_error(corral("config", "set", name, value, "--scope", "project", "--json"), 2, "config-invalid")
        assert name in err["message"] and "--scope local" in (err["hint"] or "")
    assert tomllib.loads(toml.read_text()) == {"watchdog_timeout": 3600.0}
    # a setting that runs something is only a proposal there, and says so
    proposed = corral("config", "set", "post_turn_check", "make test", "--scope", "project")
    assert proposed.returncode == 0 and "only proposes post_turn_check" in proposed.stdout
    assert corral.json("config", "get", "post_turn_check")["value"] is None


def test_the_environment_still_wins_and_set_says_so(corral, isolated_env: Path) -> None:
    result = corral.ok("config", "set", "watchdog_timeout", "700", env={"CORRAL_WATCHDOG_TIMEOUT": "3"})
    assert "The value in force is 3.0 from CORRAL_WATCHDOG_TIMEOUT" in result.stdout
    assert tomllib.loads(user_file(isolated_env).read_text()) == {"watchdog_timeout": 700.0}


def test_unset_removes_the_line_and_the_default_applies_again(corral, isolated_env: Path) -> None:
    path = user_file(isolated_env)
    path.write_text('# keep me\nmodel = "opus"\nwatchdog_timeout = 5.0\nwatchdog_timout = 1\n')
    # a misspelt key written in the file can be removed by its own (wrong) name
    removed = corral.json("config", "unset", "watchdog_timout")
    assert removed["changed"] is True
    done = corral.json("config", "unset", "watchdog_timeout")
    assert done["changed"] is True and done["in_force"]["source"] == "default"
    assert path.read_text() == '# keep me\nmodel = "opus"\n'
    again = corral.json("config", "unset", "watchdog_timeout")
    assert again["changed"] is False


def test_a_multiline_value_is_never_mangled(corral, isolated_env: Path) -> None:
    path = user_file(isolated_env)
    original = 'protected = [\n  "a/*",\n  "b/*",\n]\nmodel = "x"\n'
    path.write_text(original)
    err = json_error(corral("config", "set", "protected", "c/*", "--json"), 2, "config-invalid")
    assert "could not be edited safely" in err["message"] and "corral config edit" in (err["hint"] or "")
    assert path.read_text() == original


def test_the_hint_to_set_a_harness_path_names_a_command_that_works(corral, tmp_path: Path) -> None:
    evidence = FailureEvidence(source="supervisor", code="harness-missing", category="fatal_config")
    wording = explain_failure(evidence, "claude", "fix-it")
    found = re.search(r"point the (\w+) setting at it", wording.next or "")  # named, never with a placeholder
    assert found, wording
    program = tmp_path / "my-claude"
    corral.ok("config", "set", found.group(1), str(program))
    assert corral.json("config", "get", "claude_bin")["value"] == str(program)


# -- edit ---------------------------------------------------------------------------------------


def _editor(tmp_path: Path, *contents: str) -> str:
    """An $EDITOR that writes the next of ``contents`` into the file it is given, once per run."""
    script = tmp_path / "editor.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import json, pathlib, sys
            contents = {list(contents)!r}
            count = pathlib.Path({str(tmp_path / "edits")!r})
            n = int(count.read_text()) if count.exists() else 0
            count.write_text(str(n + 1))
            pathlib.Path({str(tmp_path / "seen")!r}).write_text(pathlib.Path(sys.argv[1]).read_text())
            pathlib.Path(sys.argv[1]).write_text(contents[min(n, len(contents) - 1)])
            """
        )
    )
    return f"{sys.executable} {script}"


def test_edit_saves_a_valid_file(corral, isolated_env: Path, tmp_path: Path) -> None:
    path = user_file(isolated_env)
    path.write_text("model = 'a'\n")
    editor = _editor(tmp_path, 'model = "b"\nwatchdog_timeout = 60\n')
    done = corral.json("config", "edit", env={"EDITOR": editor, "VISUAL": ""})
    assert done == {**done, "file": str(path), "changed": True}
    assert (tmp_path / "seen").read_text() == "model = 'a'\n"  # the editor was given the file as it was
    assert corral.json("config", "get", "watchdog_timeout")["value"] == 60.0
    assert not list(isolated_env.glob(".user-config.toml.edit*"))  # the draft is gone


def test_a_bad_edit_is_kept_out_and_kept_aside(corral, isolated_env: Path, tmp_path: Path) -> None:
    path = user_file(isolated_env)
    path.write_text('model = "a"\n')
    for bad, words in (
        ("model = \n", "line 1, column 9"),
        ("watchdog_timout = 5\n", "did you mean 'watchdog_timeout'"),
    ):
        (tmp_path / "edits").unlink(missing_ok=True)
        result = corral("config", "edit", env={"EDITOR": _editor(tmp_path, bad), "VISUAL": ""})
        no_traceback(result)
        assert result.returncode == 2, result.stderr
        assert words in result.stderr and "was not saved" in result.stderr
        assert path.read_text() == 'model = "a"\n'  # unchanged
        rejected = isolated_env / "user-config.toml.rejected"
        assert rejected.read_text() == bad
        assert (tmp_path / "edits").read_text() == "1"  # no terminal: not reopened


@pytest.mark.slow
def test_edit_of_the_project_file_fixes_a_broken_one(corral, repo: Path, tmp_path: Path) -> None:
    (repo / "corral.toml").write_text("watchdog_timeout = [\n")
    assert corral("list").returncode == 2
    corral.ok("config", "edit", "--scope", "project", env={"EDITOR": _editor(tmp_path, "watchdog_timeout = 3600\n")})
    assert corral.json("config", "get", "watchdog_timeout")["source"] == "project"
    corral.ok("list")


# -- path ---------------------------------------------------------------------------------------


def test_path_lists_the_files_strongest_first_and_which_exist(corral, repo: Path, isolated_env: Path) -> None:
    files = corral.json("config", "path")["files"]
    assert [f["scope"] for f in files] == ["local", "project", "user"]
    by_scope = {f["scope"]: f for f in files}
    assert by_scope["user"]["path"] == str(user_file(isolated_env)) and by_scope["user"]["exists"] is False
    assert by_scope["project"]["path"] == str(repo.resolve() / "corral.toml")
    assert by_scope["local"]["table"] == str(repo.resolve())
    (repo / "corral.toml").write_text("x = \n")
    user_file(isolated_env).write_text("model = 'a'\n")
    by_scope = {f["scope"]: f for f in corral.json("config", "path")["files"]}
    assert by_scope["user"]["exists"] is True and by_scope["user"]["problem"] is None
    assert "line 1, column 5" in by_scope["project"]["problem"]
    text = corral.ok("config", "path").stdout
    assert str(repo.resolve() / "corral.toml") in text and "broken" in text and "(exists)" in text


def test_path_works_outside_a_repository(corral, tmp_path: Path, isolated_env: Path) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    files = corral.json("config", "path", cwd=outside)["files"]
    assert files == [
        {"scope": "user", "path": str(user_file(isolated_env)), "table": None, "exists": False, "problem": None}
    ]
    corral.ok("config", "set", "model", "opus", cwd=outside)
    assert tomllib.loads(user_file(isolated_env).read_text()) == {"model": "opus"}
    assert stat.S_IMODE(user_file(isolated_env).stat().st_mode) == 0o600  # a new user file is private


# -- broken settings: every command says so; doctor and config still run -------------------------


def test_a_misspelt_key_in_a_file_is_an_error_on_every_command(corral, repo: Path, isolated_env: Path) -> None:
    user_file(isolated_env).write_text("watchdog_timout = 5\n")
    for args in (("list",), ("create", "x"), ("paths",), ("show", "x")):
        err = json_error(corral(*args, "--json"), 2, "config-invalid")
        assert str(user_file(isolated_env)) in err["message"], args
        assert "did you mean 'watchdog_timeout'?" in err["message"], args
    user_file(isolated_env).unlink()
    (repo / "corral.toml").write_text("harnes = 'pi'\n")
    err = json_error(corral("list", "--json"), 2, "config-invalid")
    assert "corral.toml" in err["message"] and "did you mean 'harness'?" in err["message"]


def test_a_broken_project_file_names_file_line_and_column(corral, repo: Path) -> None:
    (repo / "corral.toml").write_text('model = "a"\nwatchdog_timeout = \n')
    err = json_error(corral("list", "--json"), 2, "config-invalid")
    assert err["message"].startswith(f"{repo.resolve() / 'corral.toml'} is not valid TOML: line 2, column 20:")
    (repo / "corral.toml").write_text('model = "a\n')
    err = json_error(corral("list", "--json"), 2, "config-invalid")
    assert "line 1, column" in err["message"]


@pytest.mark.slow
def test_doctor_and_config_run_on_broken_settings_and_report_them(corral, repo: Path, isolated_env: Path) -> None:
    (repo / "corral.toml").write_text("watchdog_timeout = [\n")
    user_file(isolated_env).write_text('modle = "opus"\nmodel = "haiku"\n')
    doctor = corral("doctor", "--json")
    no_traceback(doctor)
    assert doctor.returncode == 1
    checks = doctor.json()["checks"]
    failed = [c["message"] for c in checks if c["name"] == "config" and c["status"] == "fail"]
    assert any("corral.toml is not valid TOML: line 2, column 1:" in m for m in failed), failed
    assert any("did you mean 'model'?" in m for m in failed), failed
    assert any(c["name"] == "git" and c["status"] == "ok" for c in checks)  # the other checks ran too
    human = corral("doctor")
    assert human.returncode == 1 and "not valid TOML" in human.stdout
    # config show: the readable settings, and every problem
    shown = corral("config", "show")
    no_traceback(shown)
    assert shown.returncode == 2
    assert 'model = "haiku"' in shown.stdout  # what could be read is shown
    assert "not valid TOML: line 2, column 1" in shown.stderr and "did you mean 'model'?" in shown.stderr
    err = json_error(corral("config", "show", "--json"), 2, "config-invalid")
    assert "1 more problem" in (err["hint"] or "")
    assert corral("config", "get", "model").stdout == "haiku\n"
    corral.ok("config", "path")
    # the same command fixes the user file
    corral.ok("config", "unset", "modle")


def test_an_environment_variable_that_nearly_names_a_setting_is_reported_not_fatal(corral) -> None:
    env = {"CORRAL_WATCHDOG_TIMOUT": "5"}
    corral.ok("list", env=env)  # the environment is shared with other programs: never fatal
    unknown = corral.json("config", "show", env=env)["unknown"]
    assert unknown == [
        "CORRAL_WATCHDOG_TIMOUT in the environment is not a setting; did you mean CORRAL_WATCHDOG_TIMEOUT?"
    ]
    doctor = corral.json("doctor", env=env)
    assert any("CORRAL_WATCHDOG_TIMEOUT?" in c["message"] for c in doctor["checks"])


@pytest.mark.slow
def test_on_a_terminal_a_bad_edit_is_reopened(
    corral, repo: Path, isolated_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.cli.test_pair_terminal import Pty

    path = user_file(isolated_env)
    path.write_text('model = "a"\n')
    monkeypatch.setenv("EDITOR", _editor(tmp_path, "model = \n", 'model = "fixed"\n'))
    term = Pty([sys.executable, "-m", "corral", "config", "edit"], repo)
    shown = term.read_until("Edit it again? [Y/n]")
    assert "line 1, column 9" in shown
    term.write(b"y\n")
    assert term.finish() == 0, term.out
    assert (tmp_path / "edits").read_text() == "2"  # the editor opened again, on the bad draft
    assert (tmp_path / "seen").read_text() == "model = \n"
    assert path.read_text() == 'model = "fixed"\n'
    assert not (isolated_env / "user-config.toml.rejected").exists()
