"""A hostile repository's corral.toml cannot break corral: every number outside its setting's range is
ignored and reported, the turn runs with the defaults, and a ``remote`` that looks like an option never
reaches git. A person's own out-of-range value (the user file, ``CORRAL_*``, ``config set``, ``--set``)
is refused with the range, and nothing is stored."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from corral.domain.settings import SETTINGS, Trust, default
from tests.cli.helpers import json_error, no_traceback, park, to_working
from tests.cli.test_cli_turns import OK, calls, fake_env
from tests.cli.test_task_settings import command_of, own_settings
from tests.conftest import git

#: Every setting that is a number, with the one TOML literal per hostile value.
NUMERIC = [s for s in SETTINGS if s.kind in (int, float)]
HOSTILE = {"0": 0, "-1": -1, "nan": math.nan, "inf": math.inf, "1" + "0" * 30: 10**30}
#: A value that is in range although hostile: breaker_same_cause = 0 turns that breaker off, as documented.
IN_RANGE = {("breaker_same_cause", "0")}


def _hostile_toml(literal: str, marker: Path) -> str:
    lines = [f"{s.name} = {literal}" for s in NUMERIC]
    lines.append(f'remote = "--upload-pack=touch {marker}"')
    return "\n".join(lines) + "\n"


def _commit(repo: Path, text: str) -> Path:
    (repo / "corral.toml").write_text(text)
    git(repo, "add", "corral.toml")
    git(repo, "commit", "-q", "-m", "the repository's settings")
    return repo.resolve() / "corral.toml"


@pytest.mark.parametrize("literal", list(HOSTILE))
def test_a_hostile_corral_toml_is_ignored_with_reasons_and_a_task_runs_with_the_defaults(
    corral: Any, repo: Path, tmp_path: Path, literal: str
) -> None:
    marker = tmp_path / "executed"
    project = _commit(repo, _hostile_toml(literal, marker))

    shown = corral("config", "show")
    no_traceback(shown)
    assert shown.returncode == 0, shown.stderr
    doc = corral.json("config", "show")
    ignored = {item.split(" ", 1)[0]: item for item in doc["ignored"]}
    for s in NUMERIC:
        got = doc["settings"][s.name]
        if (s.name, literal) in IN_RANGE:
            assert (got["value"], got["source"]) == (0, "project"), s.name
            assert s.name not in ignored
            continue
        assert (got["value"], got["source"], got["origin"]) == (s.default_value(), "default", None), s.name
        said = ignored[s.name]
        assert f" in {project} (" in said, said
        if s.trust is Trust.ANYWHERE:
            # the reason names the range
            assert f"it must be {s.range_words()})" in said, said
        assert f"ignored: {s.name}" in shown.stderr
    assert doc["settings"]["remote"]["value"] == "origin"
    assert "remote" in ignored and "option" in ignored["remote"], ignored.get("remote")

    # a task starts and runs, with the defaults
    env = fake_env(tmp_path, OK)
    corral.ok("create", "Hostile settings", "--ref", "hostile", env=env)
    corral.ok("start", "hostile", "--wait", env=env)
    assert len(calls(tmp_path)) == 1
    assert corral.json("show", "hostile")["task"]["status"] == "blocked"
    command = command_of(corral, "hostile")
    assert command["watchdog"]["timeout_seconds"] == default("watchdog_timeout")
    assert command["budgets"] == {
        "overload_seconds": default("budget_overload"),
        "network_seconds": default("budget_network"),
        "unreachable_attempts": default("budget_unreachable"),
        "unknown_attempts": default("budget_unknown"),
    }
    # submit pushes to the default remote, never to the option
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    corral.ok("submit", "hostile")
    assert git(bare, "rev-parse", "corral/hostile")
    assert not marker.exists()


def test_a_repository_may_lengthen_a_time_limit_but_never_shorten_it(corral: Any, repo: Path) -> None:
    project = _commit(repo, "watchdog_timeout = 60\ngit_timeout = 1\ngrace_period = 120\ntext_cap = 1024\n")
    doc = corral.json("config", "show")
    ignored = {item.split(" ", 1)[0]: item for item in doc["ignored"]}
    for name in ("watchdog_timeout", "git_timeout", "text_cap"):
        assert doc["settings"][name]["source"] == "default", name
        assert "may only raise" in ignored[name] and str(project) in ignored[name], ignored
    grace = doc["settings"]["grace_period"]
    assert (grace["value"], grace["source"]) == (120.0, "project")
    # shorter than the person's own value is shortening too; longer is taken
    user = Path(doc["user_file"])
    user.write_text("watchdog_timeout = 30\ngrace_period = 600\n")
    mine = corral.json("config", "show")
    assert (mine["settings"]["watchdog_timeout"]["value"], mine["settings"]["watchdog_timeout"]["source"]) == (
        60.0,
        "project",
    )
    assert (mine["settings"]["grace_period"]["value"], mine["settings"]["grace_period"]["source"]) == (600.0, "user")
    assert "grace_period" in {item.split(" ", 1)[0] for item in mine["ignored"]}
    # config set refuses to write a shortening into corral.toml, where it would be ignored
    err = json_error(corral("config", "set", "git_timeout", "5", "--scope", "project", "--json"), 2, "config-invalid")
    assert "git_timeout" in err["message"] and "--scope local" in (err["hint"] or "")
    assert tomllib.loads((repo / "corral.toml").read_text())["git_timeout"] == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e30", "86401"])
def test_config_set_refuses_a_watchdog_out_of_range_and_stores_nothing(
    corral: Any, isolated_env: Path, value: str
) -> None:
    user = isolated_env / "user-config.toml"
    for scope in ("user", "local", "project"):
        # "--" ends the options: a value such as -1 is the value, not an option of `config set`
        err = json_error(corral("config", "set", "--scope", scope, "--json", "watchdog_timeout", "--", value), 2)
        assert err["code"] == "config-invalid"
        assert "watchdog_timeout" in err["message"] and "from 1 to 86400" in err["message"], err
        assert "from 1 to 86400" in (err["hint"] or ""), err
    assert not user.exists()
    assert not (Path(corral.json("config", "path")["files"][0]["path"]).parent / "corral.toml").exists()
    human = corral("config", "set", "watchdog_timeout", "--", value)
    no_traceback(human)
    assert human.returncode == 2 and "from 1 to 86400" in human.stderr
    assert not user.exists()


def test_a_persons_own_value_out_of_range_is_refused_with_the_range(corral: Any, isolated_env: Path) -> None:
    err = json_error(corral("config", "show", "--json", env={"CORRAL_BREAKER_THRESHOLD": "0"}), 2, "config-invalid")
    assert "CORRAL_BREAKER_THRESHOLD" in err["message"] and "from 1 to 1000" in err["message"]
    json_error(corral("list", "--json", env={"CORRAL_GIT_TIMEOUT": "0"}), 2, "config-invalid")
    user = isolated_env / "user-config.toml"
    user.write_text("text_cap = 1000000000000000000000000000000\n")
    err = json_error(corral("list", "--json"), 2, "config-invalid")
    assert str(user) in err["message"] and "text_cap" in err["message"] and "from 1024 to 16777216" in err["message"]
    user.write_text('remote = "--upload-pack=touch x"\n')
    err = json_error(corral("list", "--json"), 2, "config-invalid")
    assert "remote" in err["message"] and "option" in err["message"]


def test_a_tasks_own_setting_out_of_range_is_refused_and_nothing_is_kept(corral: Any) -> None:
    corral.ok("create", "Task", "--ref", "t")
    err = json_error(corral("edit", "t", "--set", "watchdog_timeout=nan", "--json"), 2, "config-invalid")
    assert "--set watchdog_timeout" in err["message"] and "from 1 to 86400" in err["message"]
    assert "from 1 to 86400" in (err["hint"] or "")
    for item in ("breaker_threshold=0", "budget_unknown=-1", "post_turn_check_timeout=inf", "budget_overload=1e30"):
        edited = corral("edit", "t", "--set", item, "--json")
        json_error(edited, 2, "config-invalid")
    assert own_settings(corral, "t") == {}


def test_a_remote_that_is_not_configured_or_looks_like_an_option_never_reaches_git(
    corral: Any, repo: Path, tmp_path: Path
) -> None:
    """The one place a remote name reaches git checks it: configured (``git remote``), never an option."""
    from corral.domain.records import Task
    from corral.engine.config import Value
    from corral.engine.project import Project
    from corral.engine.shared_store import remote_branches as remote
    from corral.errors import CorralError

    marker = tmp_path / "executed"
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    corral.ok("create", "Task", "--ref", "t")
    project = Project.open(repo)
    try:
        with project.store.read() as tx:
            task = tx.task_by_ref("t")
        assert isinstance(task, Task)
        git(repo, "branch", task.branch)  # a branch to push
        assert remote.remote_name(project) == "origin"
        for name, word in ((f"--upload-pack=touch {marker}", "option"), ("upstream", "no remote named upstream")):
            project.config.values["remote"] = Value(name, "user", "a test")
            for call in (
                lambda: remote.remote_name(project),
                lambda: remote.fetch(project, task, "main"),
                lambda: remote.push_branch(project, task, None),
                lambda: remote.remote_tip(project, "refs/heads/main"),
                lambda: remote.push_target(project, "main", "0" * 40, "0" * 40),
            ):
                with pytest.raises(CorralError) as caught:
                    call()
                assert word in caught.value.message, caught.value.message
                assert caught.value.hint
    finally:
        project.close()
    assert not marker.exists()
    # submit names the missing remote the same way, and pushes nothing
    to_working(corral, "t")
    park(corral, "t")
    user = tmp_path / "submit-user.toml"
    user.write_text('remote = "upstream"\n')
    err = json_error(corral("submit", "t", "--json", env={"CORRAL_CONFIG_FILE": str(user)}), 1)
    assert "no remote named upstream" in err["message"] and err["code"] == "no-remote"
    assert corral.json("show", "t")["task"]["status"] == "blocked"
