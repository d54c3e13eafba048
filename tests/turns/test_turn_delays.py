"""Every wait a turn makes is data: user-only settings with ranges, resolved once into the command's delays.

A repository's ``corral.toml`` can never set them (a shorter one would kill a person's agents
early or retry a provider without pause); the person's own file and the environment can, down
to a millisecond, which is how the tests run their turns fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from corral.domain.actors import Actor
from corral.domain.delays import NAMES, STALE_BEATS, Delays
from corral.domain.failures import FailureClass, Retry, Stop, decide
from corral.domain.settings import BY_NAME, Trust, default, host_owned
from corral.domain.status import Status
from corral.engine.config import load_config
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.setting_writes import check_scope
from corral.errors import ConfigError
from tests.cli.helpers import json_error
from tests.turns.conftest import reopen
from tests.turns.test_retry_and_watchdog import prepare

#: The waits a short-delay test sets, each a number its setting's range takes.
SHORT = {name: 0.01 for name in NAMES}


# -- the record and its settings ---------------------------------------------------------------


def test_each_delay_is_a_user_only_setting_with_a_range_and_its_default_is_the_schemas() -> None:
    for name in NAMES:
        s = BY_NAME[name]
        assert s.kind is float and s.trust is Trust.USER_ONLY and host_owned(name), name
        assert s.least == 0.001 and s.most is not None and s.most >= 60, name
        assert getattr(Delays(), name) == default(name, float), name
    assert BY_NAME["term_grace"].trust is Trust.USER_ONLY  # the watchdog's grace, carried in its own record
    assert Delays().stale_heartbeat == STALE_BEATS * default("heartbeat_interval", float) == 20.0


def test_the_ladders_double_from_their_first_step_up_to_the_longest() -> None:
    d = Delays()
    assert [d.transient_step(n) for n in range(1, 8)] == [5, 10, 20, 40, 60, 60, 60]
    assert [d.unknown_step(n) for n in range(1, 6)] == [15, 30, 60, 60, 60]
    quick = Delays(retry_delay_first=0.01, retry_delay_unknown=0.02, retry_delay_longest=0.05)
    assert [quick.transient_step(n) for n in range(1, 6)] == [0.01, 0.02, 0.04, 0.05, 0.05]
    assert [quick.unknown_step(n) for n in range(1, 4)] == [0.02, 0.04, 0.05]
    assert Delays(retry_delay_first=90.0).transient_step(1) == 60.0  # never past the longest
    assert Delays().unknown_step(10_000) == 60.0  # no overflow however long the streak


def test_the_policy_takes_its_steps_and_crash_loop_window_from_the_delays() -> None:
    quick = Delays(retry_delay_first=0.01, retry_delay_unknown=0.02, retry_delay_longest=0.05, crash_loop_window=0.5)
    assert decide(FailureClass.TRANSIENT_OVERLOAD, 2, 0.0, delays=quick) == Retry(0.02)
    assert decide(FailureClass.UNKNOWN, 1, 0.0, delays=quick) == Retry(0.02)
    # three attempts of 1 s: fast for the default window (10 s), slow for a 0.5 s one
    assert decide(FailureClass.UNKNOWN, 3, 0.0, recent_durations=[1.0] * 3) == Stop("crash-loop")
    assert decide(FailureClass.UNKNOWN, 3, 0.0, recent_durations=[1.0] * 3, delays=quick) == Retry(0.05)
    assert decide(FailureClass.UNKNOWN, 3, 0.0, recent_durations=[0.1] * 3, delays=quick) == Stop("crash-loop")


def test_delays_resolve_from_the_settings_and_cross_the_command_file(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text("".join(f"{name} = 0.01\n" for name in NAMES))
    config = load_config(user_file=user, project_file=None, env={"CORRAL_DRAIN_QUIET": "0.25"})
    delays = Delays.of(config)
    assert delays == Delays(**{**SHORT, "drain_quiet": 0.25})
    doc = msgspec.to_builtins(delays)
    assert msgspec.convert(doc, Delays) == delays
    for bad in (0, -1, 1e9, "soon", True):
        with pytest.raises(msgspec.ValidationError, match="drain_quiet"):
            msgspec.convert({**doc, "drain_quiet": bad}, Delays)
    with pytest.raises(ValueError, match=r"heartbeat_interval is 0\.0, but it must be a number from 0\.001 to 60"):
        Delays(heartbeat_interval=0.0)  # nor is one made out of range


# -- a repository's corral.toml is refused ----------------------------------------------------


def test_a_delay_from_a_repositorys_corral_toml_is_refused(proj, agent, repo: Path, corral) -> None:
    shorter = {"retry_delay_unknown": 0.001, "crash_loop_window": 3000.0, "heartbeat_interval": 0.05, "term_grace": 0.1}
    (repo / "corral.toml").write_text("".join(f"{name} = {value}\n" for name, value in shorter.items()))
    # shown as ignored, naming the setting and why; the default stays in force
    doc = corral.json("config", "show")
    for name in shorter:
        got = doc["settings"][name]
        assert (got["value"], got["source"]) == (default(name, float), "default"), name
        (said,) = [item for item in doc["ignored"] if item.startswith(f"{name} in ")]
        assert "a repository may not set it: it paces your turns" in said and f"CORRAL_{name.upper()}" in said
    # writing one there is refused with a typed error naming the setting
    err = json_error(corral("config", "set", "retry_delay_unknown", "0.001", "--scope", "project", "--json"), 2)
    assert err["code"] == "config-invalid"
    assert err["message"].startswith("retry_delay_unknown cannot be set in a repository's corral.toml")
    assert "corral config set retry_delay_unknown" in err["hint"]
    with pytest.raises(ConfigError, match=r"term_grace cannot be set in a repository's corral\.toml"):
        check_scope(BY_NAME["term_grace"], "project", 30.0)  # lengthening is refused there too
    # and the turn it launches runs with the defaults
    proj = reopen(proj)
    _task, _dir, command = prepare(proj, "Refused delays")
    assert command.delays == Delays() and command.watchdog.term_grace_seconds == 5.0
    proj.close()


# -- the person's settings reach the supervisor -------------------------------------------------


def test_the_persons_short_delays_reach_command_json_and_pace_a_real_turn(
    proj: Project, agent, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three fast unclassified failures: two ladder waits, then a crash loop. With the person's
    delays at milliseconds the turn takes a fraction of the defaults' 45 s, and the retry
    state the supervisor projected says the configured step."""
    (isolated_env / "user-config.toml").write_text("retry_delay_unknown = 0.05\nretry_delay_longest = 0.1\n")
    monkeypatch.setenv("CORRAL_TERM_GRACE", "0.5")  # the environment is the person's too
    proj = reopen(proj)
    agent.script(default=[{"init": True}, {"stderr": "fatal: lost the editor\n"}, {"exit": 3}])
    task = tasks.create(proj, "Fail fast", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    result = control.wait(proj, task.ref, timeout=30)
    assert not result.timed_out
    assert result.task.status is Status.INTERRUPTED and result.task.resting_cause.code == "crash-loop"
    assert len(agent.calls()) == 3
    kept = sorted(proj.paths.task_dir(task.id).glob("turns/*/command.json"))
    assert kept, "the turn's command stays on record beside its logs"
    command = json.loads(kept[-1].read_text())
    assert command["delays"]["retry_delay_unknown"] == 0.05 and command["delays"]["retry_delay_longest"] == 0.1
    assert command["watchdog"]["term_grace_seconds"] == 0.5
    read = proto.read_record(kept[-1], proto.Command)
    assert read is not None and read.delays.unknown_step(2) == 0.1
    proj.close()


def test_an_older_command_without_delays_reads_with_the_defaults(proj, agent) -> None:
    _task, protocol_dir, command = prepare(proj, "An older launcher")
    doc = command.to_json()
    doc.pop("delays", None)
    (protocol_dir / proto.COMMAND).write_text(json.dumps({"protocol_version": proto.PROTOCOL_VERSION, **doc}))
    older = proto.read(protocol_dir / proto.COMMAND, proto.Command)
    assert isinstance(older, proto.Command) and older.delays == Delays()
    doc["delays"] = {"drain_quiet": 0}  # a value no corral writes: the command is refused for its shape
    (protocol_dir / proto.COMMAND).write_text(json.dumps({"protocol_version": proto.PROTOCOL_VERSION, **doc}))
    refused = proto.read(protocol_dir / proto.COMMAND, proto.Command)
    assert isinstance(refused, proto.Unreadable) and refused.problem is proto.Problem.WRONG_SHAPE
    assert "drain_quiet" in refused.detail
