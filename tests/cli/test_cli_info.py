"""`corral paths`, `corral config show` and `corral doctor`."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from corral.domain.settings import BY_NAME, SETTINGS
from corral.domain.toml_text import toml_value
from tests.cli.helpers import create, json_error, no_traceback, park, state_paths, store_of, to_working

PATH_KEYS = {
    "repository",
    "home",
    "state",
    "database",
    "tasks",
    "worktrees",
    "diagnostics",
    "daemon_log",
    "supervisor_log",
    "project_config",
    "user_config",
}


# -- paths ---------------------------------------------------------------------------------


def test_paths_live_under_corral_home_outside_the_repository(corral, repo: Path, isolated_env: Path) -> None:
    where = state_paths(corral)
    assert set(where) >= PATH_KEYS
    home = (isolated_env / "corral-home").resolve()
    assert Path(where["repository"]) == repo.resolve()
    assert Path(where["home"]) == home
    state = Path(where["state"])
    assert state.parent == home / "projects"
    assert state.name.startswith("repo--")
    assert Path(where["database"]) == state / "corral.db"
    for key in ("tasks", "worktrees", "diagnostics"):
        assert Path(where[key]).is_relative_to(state), key
    assert not state.is_relative_to(repo.resolve())
    assert Path(where["project_config"]) == repo.resolve() / "corral.toml"
    assert Path(where["user_config"]) == isolated_env / "user-config.toml"
    create(corral, "Stored somewhere", "--ref", "somewhere")
    assert Path(where["database"]).is_file()
    text = corral.ok("paths").stdout
    assert where["database"] in text and where["state"] in text


def test_corral_home_moves_the_state_directory(corral, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    moved = state_paths(corral, env={"CORRAL_HOME": str(other)})
    assert Path(moved["home"]) == other.resolve()
    assert Path(moved["database"]).is_relative_to(other.resolve())
    create(corral, "In the default home", "--ref", "default-home")
    corral.json("create", "In the other home", "--ref", "other-home", env={"CORRAL_HOME": str(other)})
    assert [t["ref"] for t in corral.json("list")["tasks"]] == ["default-home"]
    in_other = corral.json("list", env={"CORRAL_HOME": str(other)})["tasks"]
    assert [t["ref"] for t in in_other] == ["other-home"]
    assert Path(moved["database"]).is_file()


# -- config ----------------------------------------------------------------------------------


def _settings(corral, **kw) -> dict:
    return corral.json("config", "show", **kw)


def test_config_defaults(corral) -> None:
    doc = _settings(corral)
    watchdog = doc["settings"]["watchdog_timeout"]
    assert watchdog["source"] == "default" and watchdog["origin"] is None
    assert doc["ignored"] == [] and doc["unknown"] == []


def test_project_file_beats_user_file_and_environment_beats_both(corral, repo: Path, isolated_env: Path) -> None:
    user = isolated_env / "user-config.toml"
    user.write_text('watchdog_timeout = 100\nmodel = "from-user"\n')
    (repo / "corral.toml").write_text("watchdog_timeout = 4200\n")  # a repository may lengthen it, not shorten it
    doc = _settings(corral)
    assert doc["settings"]["watchdog_timeout"] == {
        **doc["settings"]["watchdog_timeout"],
        "value": 4200,
        "source": "project",
        "origin": str(repo.resolve() / "corral.toml"),
    }
    assert doc["settings"]["model"]["value"] == "from-user"
    assert doc["settings"]["model"]["source"] == "user"
    env = _settings(corral, env={"CORRAL_WATCHDOG_TIMEOUT": "7"})["settings"]["watchdog_timeout"]
    assert (env["value"], env["source"], env["origin"]) == (7, "env", "CORRAL_WATCHDOG_TIMEOUT")
    text = corral.ok("config", "show").stdout
    line = next(line for line in text.splitlines() if line.startswith("watchdog_timeout"))
    assert "4200" in line and "project" in line


def test_permission_mode_in_the_project_file_is_ignored_and_reported(corral, repo: Path, isolated_env: Path) -> None:
    (repo / "corral.toml").write_text('permission_mode = "bypassPermissions"\nis_sandbox = true\n')
    doc = _settings(corral)
    mode = doc["settings"]["permission_mode"]
    assert (mode["value"], mode["source"]) == ("acceptEdits", "default")
    assert mode["trusted_only"] is True
    assert doc["settings"]["is_sandbox"]["value"] is False
    assert any("permission_mode" in item for item in doc["ignored"])
    assert any("is_sandbox" in item for item in doc["ignored"])
    text = corral.ok("config", "show")
    assert "ignored" in text.stderr and "permission_mode" in text.stderr
    # the user's own file is trusted
    (isolated_env / "user-config.toml").write_text('permission_mode = "bypassPermissions"\n')
    trusted = _settings(corral)["settings"]["permission_mode"]
    assert (trusted["value"], trusted["source"]) == ("bypassPermissions", "user")


def test_a_misspelt_setting_is_an_error_naming_the_nearest(corral, repo: Path) -> None:
    (repo / "corral.toml").write_text("watchdog_timout = 5\n")
    err = json_error(corral("config", "show", "--json"), 2, "config-invalid")
    assert "watchdog_timout" in err["message"]
    assert "did you mean 'watchdog_timeout'" in err["message"] + (err.get("hint") or "")


def test_a_malformed_project_file_is_a_config_error_naming_it(corral, repo: Path) -> None:
    (repo / "corral.toml").write_text("watchdog_timeout = [\n")
    err = json_error(corral("config", "show", "--json"), 2, "config-invalid")
    assert str(repo.resolve() / "corral.toml") in err["message"]
    # every command that opens the project says the same
    json_error(corral("list", "--json"), 2, "config-invalid")
    text = corral("list")
    no_traceback(text)
    assert text.returncode == 2 and "corral.toml" in text.stderr


def test_a_wrongly_typed_setting_is_a_config_error(corral, repo: Path) -> None:
    (repo / "corral.toml").write_text('watchdog_timeout = "soon"\n')
    err = json_error(corral("config", "show", "--json"), 2, "config-invalid")
    assert "watchdog_timeout" in err["message"]
    bad_env = corral("config", "show", "--json", env={"CORRAL_BREAKER_THRESHOLD": "many"})
    json_error(bad_env, 2, "config-invalid")


WIDENS = {"permission_mode", "allowed_tools", "is_sandbox", "sandbox", "agent_tools", "protected_defaults"}
#: Where the post-turn check runs and what a confined turn may read are the person's to widen.
WIDENS |= {"post_turn_check_unconfined", "sandbox_read_paths"}
#: Forge feedback delivered by itself would make a stranger's review comment an agent's prompt.
WIDENS |= {"forge_auto_deliver"}
EXECUTES = {"post_turn_check", "pre_accept_prompt", "notify_command", "claude_bin", "pi_bin", "codex_bin", "command"}
#: The forge corral runs (gh), and the Pi extensions loaded beside corral's own, are programs too (docs/forge.md).
EXECUTES |= {"forge", "pi_extensions"}
#: Settings a repository may not set because they say where a person's own records go.
PRIVATE = {"database_url"}
#: Settings a repository may not set because they say which machines run a person's agents (docs/workers.md).
HOSTS = {"dispatch", "worker_projects", "worker_host", "worker_turns", "lease_seconds", "worker_settle_interval"}
#: A turn's waits (domain/delays.py): a repository's value could kill a person's agents early or retry without pause.
PACES = {
    "retry_delay_first",
    "retry_delay_unknown",
    "retry_delay_longest",
    "crash_loop_window",
    "term_grace",
    "reap_grace",
    "heartbeat_interval",
    "drain_quiet",
    "drain_longest",
    "usage_limit_poll",
    "usage_limit_nap",
    "auto_resume_gap",
    "store_busy_timeout",
    "stop_wait",
}
USER_ONLY = WIDENS | PRIVATE | HOSTS | PACES | EXECUTES
TRUST_WORDS = {
    "user_only": "(corral.toml may not set this)",
    "executes": "(corral.toml may propose this, never set it)",
}


def _another_value(kind: type, default: Any, name: str) -> Any:
    """A value of the setting's type that is not its default."""
    if kind is bool:
        return not default
    if kind is int:
        return default + 1
    if kind is float:
        return default + 0.5
    if kind is list:
        if BY_NAME[name].absolute_paths:  # a setting of paths takes absolute ones
            return [f"/opt/{name}-1", f"~/{name} 2"]
        return [f"{name}-1", f"{name} 2"]
    choices = [c for c in BY_NAME[name].choices if c != default and c not in BY_NAME[name].narrowing]
    return choices[0] if choices else f"{name} value"


def _every_setting_changed() -> tuple[str, dict[str, Any]]:
    values = {s.name: _another_value(s.kind, s.default_value(), s.name) for s in SETTINGS}
    return "".join(f"{name} = {toml_value(value)}\n" for name, value in values.items()), values


def test_config_show_is_toml_that_reads_back_as_the_values(
    corral, repo: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CORRAL_AGENT_TOOLS")  # every setting's source is the file's or the default here
    monkeypatch.delenv("CORRAL_SANDBOX")
    (isolated_env / "user-config.toml").write_text('model = "from-user"\nallowed_tools = ["Read", "Grep"]\n')
    (repo / "corral.toml").write_text('watchdog_timeout = 42\nprotected = ["secrets/*", "a \\"quoted\\" path"]\n')
    env = {"CORRAL_AUTO_RESUME": "off", "CORRAL_REMOTE": "up\tstream"}
    doc = _settings(corral, env=env)["settings"]
    shown = corral.ok("config", "show", env=env).stdout
    assert tomllib.loads(shown) == {name: s["value"] for name, s in doc.items() if s["value"] is not None}
    assert tomllib.loads(shown)["protected"] == ["secrets/*", 'a "quoted" path']
    lines = shown.splitlines()
    for s in SETTINGS:
        value = doc[s.name]
        at = next(i for i, line in enumerate(lines) if line.startswith((f"{s.name} = ", f"# {s.name} = ")))
        assert lines[at - 1].startswith(f"# {s.help}"), s.name
        words = (
            f" (corral.toml may set only {', '.join(s.narrowing)})" if s.narrowing else TRUST_WORDS.get(s.trust.value)
        )
        assert (words is not None and lines[at - 1].endswith(words)) is (s.name in USER_ONLY), s.name
        assert lines[at].startswith("#") is (value["value"] is None), s.name
        assert lines[at].endswith("# default") is (value["source"] == "default"), s.name
        if value["origin"] is not None:
            assert f"# from {value['origin']} (" in lines[at], s.name
    line = next(line for line in lines if line.startswith("auto_resume"))
    assert line == "auto_resume = false  # from CORRAL_AUTO_RESUME (environment)"
    assert next(line for line in lines if line.startswith("model")).endswith(
        f"# from {isolated_env / 'user-config.toml'} (user file)"
    )
    # the document is a settings file: as the user's file it gives every shown value back
    (repo / "corral.toml").unlink()
    (isolated_env / "user-config.toml").write_text(shown)
    again = _settings(corral)
    assert {n: s["value"] for n, s in again["settings"].items()} == {n: s["value"] for n, s in doc.items()}
    assert again["ignored"] == [] and again["unknown"] == []
    assert {n for n, s in again["settings"].items() if s["source"] == "user"} == {
        n for n, s in doc.items() if s["value"] is not None
    }


def test_config_show_json_carries_each_settings_help_default_and_trust(corral) -> None:
    doc = _settings(corral)["settings"]
    assert list(doc) == [s.name for s in SETTINGS]
    watchdog = doc["watchdog_timeout"]
    assert (watchdog["default"], watchdog["value"], watchdog["trust"]) == (1800.0, 1800.0, "anywhere")
    assert watchdog["help"] == "seconds without progress before the watchdog kills a turn"
    assert {n for n, s in doc.items() if s["trusted_only"]} == USER_ONLY
    assert {n for n, s in doc.items() if s["trust"] == "user_only"} == WIDENS | PRIVATE | HOSTS | PACES
    assert {n for n, s in doc.items() if s["trust"] == "executes"} == EXECUTES
    assert doc["model"]["default"] is None and doc["text_cap"]["default"] == 100 * 1024


def test_corral_toml_sets_only_what_a_repository_may(
    corral, repo: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CORRAL_AGENT_TOOLS")  # every setting's source is the file's or the default here
    monkeypatch.delenv("CORRAL_SANDBOX")
    text, values = _every_setting_changed()
    (repo / "corral.toml").write_text(text)
    doc = _settings(corral)
    project = str(repo.resolve() / "corral.toml")
    for s in SETTINGS:
        got = doc["settings"][s.name]
        if s.name in USER_ONLY:
            assert (got["value"], got["source"], got["origin"]) == (s.default_value(), "default", None), s.name
        else:
            assert (got["value"], got["source"], got["origin"]) == (values[s.name], "project", project), s.name
    assert sorted(item.split(" ", 1)[0] for item in doc["ignored"]) == sorted(WIDENS | PRIVATE | HOSTS | PACES)
    assert all(f"in {project} " in item for item in doc["ignored"])
    assert {p["name"]: (p["value"], p["file"], p["adopted"]) for p in doc["proposals"]} == {
        name: (values[name], project, False) for name in EXECUTES
    }
    assert doc["unknown"] == []
    # the same file as the user's own is taken whole
    (repo / "corral.toml").unlink()
    (isolated_env / "user-config.toml").write_text(text)
    mine = _settings(corral)
    assert {n: (s["value"], s["source"]) for n, s in mine["settings"].items()} == {
        n: (v, "user") for n, v in values.items()
    }
    assert mine["ignored"] == [] and mine["proposals"] == []


def test_the_environment_sets_every_setting_as_its_type(corral, repo: Path, isolated_env: Path) -> None:
    text, _ = _every_setting_changed()
    (repo / "corral.toml").write_text(text)
    (isolated_env / "user-config.toml").write_text(text)
    env = {
        "CORRAL_AUTO_RESUME": "no",
        "CORRAL_IS_SANDBOX": "yes",
        "CORRAL_BREAKER_THRESHOLD": "9",
        "CORRAL_WATCHDOG_TIMEOUT": "60",
        "CORRAL_GRACE_PERIOD": "1.5",
        "CORRAL_ALLOWED_TOOLS": "Read, Grep",
        "CORRAL_PROTECTED": "",
        "CORRAL_PERMISSION_MODE": "plan",
        "CORRAL_MODEL": "opus",
    }
    doc = _settings(corral, env=env)["settings"]
    got = {n: doc[n]["value"] for n in ("auto_resume", "is_sandbox", "breaker_threshold", "watchdog_timeout")}
    assert got == {"auto_resume": False, "is_sandbox": True, "breaker_threshold": 9, "watchdog_timeout": 60.0}
    assert type(doc["breaker_threshold"]["value"]) is int and type(doc["watchdog_timeout"]["value"]) is float
    assert doc["grace_period"]["value"] == 1.5
    assert doc["allowed_tools"]["value"] == ["Read", "Grep"] and doc["protected"]["value"] == []
    assert (doc["permission_mode"]["value"], doc["model"]["value"]) == ("plan", "opus")
    for var, name in ((v, v.removeprefix("CORRAL_").lower()) for v in env):
        assert (doc[name]["source"], doc[name]["origin"]) == ("env", var), name
    err = json_error(corral("config", "show", "--json", env={"CORRAL_IS_SANDBOX": "perhaps"}), 2, "config-invalid")
    assert "CORRAL_IS_SANDBOX" in err["message"] and "is_sandbox" in err["message"]


# -- doctor ------------------------------------------------------------------------------------


def test_doctor_is_ok_on_a_fresh_repository(corral) -> None:
    result = corral("doctor", "--json")
    no_traceback(result)
    assert result.returncode == 0, result.stdout
    doc = result.json()
    assert doc["ok"] is True
    names = {c["name"]: c["status"] for c in doc["checks"]}
    assert names["git"] == "ok" and names["database"] == "ok" and names["state"] == "ok"
    assert "fail" not in names.values()
    assert all(set(c) == {"name", "status", "message", "hint"} for c in doc["checks"])
    assert corral.ok("doctor").returncode == 0


def _mislabel(corral, ref: str) -> None:
    """A task parked blocked whose violation was recorded afterwards: it should read conflict."""
    create(corral, "Mislabelled", "--ref", ref)
    to_working(corral, ref)
    assert park(corral, ref) == "blocked"
    with store_of(corral) as store, store.write() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        tx.record_violations(task.id, ["secrets.env"])


def test_doctor_task_rederives_the_label(corral) -> None:
    _mislabel(corral, "mislabelled")
    doc = corral.json("doctor", "mislabelled")
    assert [(c["name"], c["status"]) for c in doc["checks"]] == [("park", "fixed")]
    shown = corral.json("show", "mislabelled")
    assert shown["task"]["status"] == "conflict"
    last = shown["status_changes"][-1]
    assert (last["from"], last["to"], last["actor"]) == ("blocked", "conflict", "system")
    again = corral.json("doctor", "mislabelled")
    assert [(c["name"], c["status"]) for c in again["checks"]] == [("park", "ok")]
    assert len(corral.json("show", "mislabelled")["status_changes"]) == len(shown["status_changes"])


def test_doctor_finds_and_fixes_mislabelled_tasks(corral) -> None:
    _mislabel(corral, "wrong-label")
    doc = corral.json("doctor")
    assert any(c["name"] == "park" and c["status"] == "fixed" for c in doc["checks"])
    assert corral.json("show", "wrong-label")["task"]["status"] == "conflict"


def test_doctor_of_an_unknown_task(corral) -> None:
    json_error(corral("doctor", "ghost", "--json"), 4, "task-not-found")
