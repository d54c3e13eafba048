"""`corral paths`, `corral config show` and `corral doctor`."""

from __future__ import annotations

from pathlib import Path

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
    (repo / "corral.toml").write_text("watchdog_timeout = 42\n")
    doc = _settings(corral)
    assert doc["settings"]["watchdog_timeout"] == {
        **doc["settings"]["watchdog_timeout"],
        "value": 42,
        "source": "project",
        "origin": str(repo.resolve() / "corral.toml"),
    }
    assert doc["settings"]["model"]["value"] == "from-user"
    assert doc["settings"]["model"]["source"] == "user"
    env = _settings(corral, env={"CORRAL_WATCHDOG_TIMEOUT": "7"})["settings"]["watchdog_timeout"]
    assert (env["value"], env["source"], env["origin"]) == (7, "env", "CORRAL_WATCHDOG_TIMEOUT")
    text = corral.ok("config", "show").stdout
    line = next(line for line in text.splitlines() if line.startswith("watchdog_timeout"))
    assert "42" in line and "project" in line


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


def test_unknown_settings_are_reported(corral, repo: Path) -> None:
    (repo / "corral.toml").write_text("watchdog_timout = 5\n")
    doc = _settings(corral)
    assert any("watchdog_timout" in item for item in doc["unknown"])


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
