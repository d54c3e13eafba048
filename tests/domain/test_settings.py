"""The settings schema: every default in one place, typed, read as values and written back as TOML."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from corral.domain import settings as schema
from corral.domain.failures import Budgets
from corral.domain.sanitize import DEFAULT_TEXT_CAP
from corral.domain.settings import BY_NAME, SETTINGS, Trust, default, setting
from corral.domain.toml_text import toml_comment, toml_value
from corral.errors import ConfigError

#: Written out by hand: a default that changes must change here too, on purpose.
DEFAULTS: dict[str, Any] = {
    "harness": "claude",
    "model": None,
    "watchdog_timeout": 1800.0,
    "protected": [],
    "protected_defaults": [".claude/settings*.json", ".mcp.json", ".codex/**", ".pi/**", ".github/workflows/**"],
    "post_turn_check": None,
    "post_turn_check_timeout": 300.0,
    "post_turn_check_unconfined": False,
    "sandbox_read_paths": [],
    "auto_resume": True,
    "breaker_threshold": 3,
    "breaker_same_cause": 2,
    "auto_resume_gap": 5.0,
    "grace_period": 30.0,
    "retry_delay_first": 5.0,
    "retry_delay_unknown": 15.0,
    "retry_delay_longest": 60.0,
    "crash_loop_window": 10.0,
    "term_grace": 5.0,
    "reap_grace": 1.0,
    "heartbeat_interval": 2.0,
    "drain_quiet": 2.0,
    "drain_longest": 10.0,
    "usage_limit_poll": 1.0,
    "usage_limit_nap": 30.0,
    "store_busy_timeout": 10.0,
    "stop_wait": 15.0,
    "budget_overload": 6 * 3600.0,
    "budget_network": 3600.0,
    "budget_unreachable": 12,
    "budget_unknown": 6,
    "text_cap": 100 * 1024,
    "remote": "origin",
    "forge": None,
    "forge_auto_deliver": False,
    "forge_poll": 30.0,
    "pre_accept_prompt": None,
    "notify_command": None,
    "git_timeout": 60.0,
    "git_hook_timeout": 300.0,
    "permission_mode": "acceptEdits",
    "allowed_tools": ["Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "TodoWrite"],
    "is_sandbox": False,
    "sandbox": "auto",
    "agent_tools": True,
    "database_url": None,
    "dispatch": "local",
    "worker_projects": [],
    "worker_host": None,
    "worker_turns": 2,
    "lease_seconds": 30.0,
    "wip_push_interval": 180.0,
    "worker_settle_interval": 2.0,
    "claude_bin": "claude",
    "pi_bin": "pi",
    "pi_provider": None,
    "pi_extensions": [],
    "codex_bin": "codex",
    "command": None,
}
#: Settings that widen what an agent may do: never from corral.toml, which may not even propose them
#: (``protected_defaults``: taking a default protection away lets an agent change what a harness runs).
WIDENS = {"permission_mode", "allowed_tools", "is_sandbox", "sandbox", "agent_tools", "protected_defaults"}
#: Where the post-turn check runs and what a confined turn may read are the person's to widen.
WIDENS |= {"post_turn_check_unconfined", "sandbox_read_paths"}
#: Settings that make corral execute something: never from corral.toml, which may only propose them.
EXECUTES = {"post_turn_check", "pre_accept_prompt", "notify_command", "claude_bin", "pi_bin", "codex_bin", "command"}
EXECUTES |= {"pi_extensions"}
#: The forge makes corral run gh; its comments delivered by themselves would make a stranger's words a prompt.
EXECUTES |= {"forge"}
WIDENS |= {"forge_auto_deliver"}
#: Settings a repository may not set because they say where a person's own records go.
PRIVATE = {"database_url"}
#: Which machines run a person's agents is theirs to say (docs/workers.md).
HOSTS = {"dispatch", "worker_projects", "worker_host", "worker_turns", "lease_seconds", "worker_settle_interval"}
#: The gap between two tasks' auto-resumes: a repository's 0 would relaunch every task at once.
SPACING = {"auto_resume_gap"}
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
    "store_busy_timeout",
    "stop_wait",
}
USER_ONLY = WIDENS | PRIVATE | HOSTS | PACES | SPACING | EXECUTES
KINDS = {str, int, float, bool, list}
#: Every number's range, both bounds included, written out by hand (docs/cli.md#ranges lists the same).
RANGES: dict[str, tuple[float, float]] = {
    "watchdog_timeout": (1, 86400),
    "post_turn_check_timeout": (1, 86400),
    "breaker_threshold": (1, 1000),
    "breaker_same_cause": (0, 1000),  # 0 turns that breaker off
    "auto_resume_gap": (0, 3600),  # 0 turns the gap off
    "forge_poll": (5, 3600),
    "grace_period": (1, 3600),
    "retry_delay_first": (0.001, 3600),
    "retry_delay_unknown": (0.001, 3600),
    "retry_delay_longest": (0.001, 86400),
    "crash_loop_window": (0.001, 3600),
    "term_grace": (0.001, 3600),
    "reap_grace": (0.001, 3600),
    "heartbeat_interval": (0.001, 60),
    "drain_quiet": (0.001, 3600),
    "drain_longest": (0.001, 3600),
    "usage_limit_poll": (0.001, 3600),
    "usage_limit_nap": (0.001, 3600),
    "store_busy_timeout": (0.001, 3600),
    "stop_wait": (0.001, 3600),
    "budget_overload": (1, 7 * 86400),
    "budget_network": (1, 7 * 86400),
    "budget_unreachable": (1, 1000),
    "budget_unknown": (1, 1000),
    "text_cap": (1024, 16 * 1024 * 1024),
    "git_timeout": (1, 3600),
    "git_hook_timeout": (1, 86400),
    "worker_turns": (1, 64),
    "lease_seconds": (1, 86400),
    "wip_push_interval": (1, 86400),
    "worker_settle_interval": (0.001, 3600),
}
#: Limits a repository's corral.toml may raise but never lower: the delays, the time limits, the text cap.
NEVER_LOWERED = {
    "watchdog_timeout",
    "post_turn_check_timeout",
    "grace_period",
    "git_timeout",
    "git_hook_timeout",
    "wip_push_interval",
    "text_cap",
    "forge_poll",
}


# -- the schema --------------------------------------------------------------------------------


def test_every_default_is_in_the_schema_once() -> None:
    assert [s.name for s in SETTINGS] == list(DEFAULTS)
    assert {s.name: s.default_value() for s in SETTINGS} == DEFAULTS
    assert {name: type(value) for name, value in DEFAULTS.items()} == {
        s.name: type(s.default_value()) for s in SETTINGS
    }
    assert set(BY_NAME) == set(DEFAULTS) and len(BY_NAME) == len(SETTINGS)


def test_each_default_has_its_settings_type() -> None:
    for s in SETTINGS:
        assert s.kind in KINDS, s.name
        assert s.help and "\n" not in s.help, s.name
        value = s.default_value()
        if value is None:
            assert s.optional, s.name
            continue
        assert not s.optional, s.name
        assert type(value) is s.kind, s.name  # exactly: a bool is no int, an int no float
        if isinstance(value, list):
            assert all(isinstance(item, str) for item in value), s.name


def test_trust_says_which_settings_a_repository_may_set() -> None:
    assert {s.name for s in SETTINGS if s.trust is Trust.USER_ONLY} == WIDENS | PRIVATE | HOSTS | PACES | SPACING
    assert {s.name for s in SETTINGS if s.trust is Trust.EXECUTES} == EXECUTES
    assert {s.name for s in SETTINGS if s.trust is Trust.ANYWHERE} == set(DEFAULTS) - USER_ONLY
    assert {s.name for s in SETTINGS if not s.repository_may_set} == USER_ONLY
    assert {s.name for s in SETTINGS if s.repository_may_propose} == EXECUTES
    assert setting("watchdog_timeout").env_var == "CORRAL_WATCHDOG_TIMEOUT"
    assert setting("breaker_same_cause").env_var == "CORRAL_BREAKER_SAME_CAUSE"


def test_the_accessor() -> None:
    assert default("watchdog_timeout") == 1800.0
    assert default("breaker_threshold", int) == 3
    assert default("breaker_same_cause", int) == 2
    assert default("permission_mode", str) == "acceptEdits"
    assert default("model") is None
    with pytest.raises(TypeError, match="breaker_threshold"):
        default("breaker_threshold", str)
    with pytest.raises(KeyError, match="no setting named 'watchdog'"):
        default("watchdog")
    # a list default is the caller's own copy: changing it changes nothing for the next caller
    tools = default("allowed_tools", list)
    tools.append("Everything")
    assert default("allowed_tools") == DEFAULTS["allowed_tools"]


def test_the_domain_reads_its_defaults_from_the_schema() -> None:
    assert Budgets() == Budgets(
        overload_seconds=DEFAULTS["budget_overload"],
        network_seconds=DEFAULTS["budget_network"],
        unreachable_attempts=DEFAULTS["budget_unreachable"],
        unknown_attempts=DEFAULTS["budget_unknown"],
    )
    assert DEFAULTS["text_cap"] == DEFAULT_TEXT_CAP


def test_the_schema_is_pure() -> None:
    tree = ast.parse(Path(schema.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert imported == {"__future__", "enum", "typing", "corral.errors"}
    # and importing it loads nothing of corral beyond the errors
    code = "import sys, corral.domain.settings; print(sorted(m for m in sys.modules if m.startswith('corral')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(["corral", "corral.domain", "corral.domain.settings", "corral.errors"])


# -- reading a value ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("auto_resume", "off", False),
        ("auto_resume", " Yes ", True),
        ("is_sandbox", "1", True),
        ("is_sandbox", "", False),
        ("breaker_threshold", " 7 ", 7),
        ("watchdog_timeout", "7", 7.0),
        ("grace_period", "2.5", 2.5),
        ("allowed_tools", "Read, Grep,,", ["Read", "Grep"]),
        ("protected", "", []),
        ("model", "opus", "opus"),
        ("model", "", ""),
        ("claude_bin", " /opt/claude ", " /opt/claude "),
    ],
)
def test_text_from_the_environment_becomes_the_settings_type(name: str, text: str, value: object) -> None:
    got = setting(name).coerce(text, setting(name).env_var)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("auto_resume", "maybe"),
        ("breaker_threshold", "many"),
        ("breaker_threshold", "7 times"),
        ("grace_period", "soon"),
    ],
)
def test_text_that_is_not_the_settings_type_is_a_config_error(name: str, text: str) -> None:
    var = setting(name).env_var
    with pytest.raises(ConfigError) as caught:
        setting(name).coerce(text, var)
    assert caught.value.code == "config-invalid"
    assert var in caught.value.message and f"'{name}'" in caught.value.message and repr(text) in caught.value.message
    # a number's hint says its range too
    takes = f"; {setting(name).takes()}" if setting(name).kind in (int, float) else ""
    assert caught.value.hint == f"{name}: {setting(name).help}{takes}."


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("watchdog_timeout", 42, 42.0),
        ("watchdog_timeout", 4.5, 4.5),
        ("breaker_threshold", 5, 5),
        ("auto_resume", False, False),
        ("protected", ["a/*", "b"], ["a/*", "b"]),
        ("remote", "upstream", "upstream"),
        # text is read as the environment's text is, in a file too
        ("protected", "a/*, b", ["a/*", "b"]),
        ("watchdog_timeout", "42", 42.0),
    ],
)
def test_a_toml_value_of_the_right_type_is_taken(name: str, raw: object, value: object) -> None:
    got = setting(name).coerce(raw, "corral.toml")
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("breaker_threshold", True),
        ("breaker_threshold", 3.0),
        ("watchdog_timeout", True),
        ("auto_resume", 1),
        ("protected", ["a", 1]),
        ("remote", 5),
        ("model", ["opus"]),
    ],
)
def test_a_toml_value_of_another_type_is_refused(name: str, raw: object) -> None:
    with pytest.raises(ConfigError, match=f"corral.toml: '{name}' (must be|is 3.0, but it must be a whole number)"):
        setting(name).coerce(raw, "corral.toml")


# -- ranges ------------------------------------------------------------------------------------


def test_every_number_has_a_range_and_its_default_is_in_it() -> None:
    numbers = {s.name: s for s in SETTINGS if s.kind in (int, float)}
    assert {n: (s.least, s.most) for n, s in numbers.items()} == RANGES
    for s in numbers.values():
        assert s.refusal(s.default_value()) is None, s.name
        assert s.least is not None and s.most is not None and 0 <= s.least < s.most, s.name
    # a timeout is more than 0, a count at least 1 (breaker_same_cause's and auto_resume_gap's 0 turns it off,
    # as their help says)
    off = {"breaker_same_cause", *SPACING}
    waits = PACES | {"worker_settle_interval"}  # a worker's pass over its projects is a wait as a turn's are
    assert all(s.least >= 1 for n, s in numbers.items() if n not in off and n not in waits)  # type: ignore[operator]
    assert "0 turns it off" in setting("auto_resume_gap").help
    # a turn's wait is at least a millisecond (what a test sets it to), never none
    assert all(numbers[n].least == 0.001 and numbers[n].kind is float for n in waits)
    assert "0 turns it off" in setting("breaker_same_cause").help
    assert {s.name for s in SETTINGS if not s.repository_may_lower} == NEVER_LOWERED
    assert all(s.least is None and s.most is None for s in SETTINGS if s.kind not in (int, float))


@pytest.mark.parametrize("name", list(RANGES))
def test_a_number_out_of_its_range_is_refused_naming_the_range(name: str) -> None:
    s = setting(name)
    least, most = RANGES[name]
    words = f"from {least} to {most}"
    outside: list[object] = [least - 1, most + 1, math.nan, math.inf, -math.inf, 10**30, 10**400, -(10**400)]
    if s.kind is int:
        outside += [2.5, float(least + 1)]  # a whole-number setting takes no fraction, nor a float
    for raw in outside:
        with pytest.raises(ConfigError) as caught:
            s.coerce(raw, "corral.toml")
        assert caught.value.code == "config-invalid"
        assert caught.value.message.startswith(f"corral.toml: '{name}' is "), caught.value.message
        assert words in caught.value.message and words in (caught.value.hint or ""), caught.value.message
        assert s.refusal(s.typed(raw, "corral.toml")) is not None, raw  # typed alone takes it: the range refuses it
    texts = ["nan", "inf", "-inf", "1e30", str(least - 1), str(most + 1)] + ([f"{least}.5"] if s.kind is int else [])
    for text in texts:
        with pytest.raises(ConfigError, match=words):
            s.coerce(text, s.env_var)
    # both bounds are in the range
    assert s.coerce(least, "corral.toml") == least and s.coerce(str(most), s.env_var) == most


def test_the_docs_say_each_range_and_which_a_repository_may_only_raise() -> None:
    text = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    start = text.index("### Ranges")
    section = text[start : text.index("\n#", start + 1)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    for name, (least, most) in RANGES.items():
        (row,) = [line for line in rows if f"`{name}`" in line]
        assert f"| {least} to {most}" in row, row
        assert ("raise it only" in row) is (name in NEVER_LOWERED), row


@given(hs.one_of(hs.floats(), hs.integers()), hs.sampled_from(sorted(RANGES)))
def test_a_number_is_taken_exactly_when_it_is_in_range(number: float, name: str) -> None:
    s = setting(name)
    least, most = RANGES[name]
    fits = not math.isnan(number) and least <= number <= most and (s.kind is float or isinstance(number, int))
    try:
        got = s.coerce(number, "corral.toml")
    except ConfigError:
        assert not fits
    else:
        assert fits and got == number and type(got) is s.kind


def test_the_remote_is_never_a_word_git_reads_as_an_option() -> None:
    remote = setting("remote")
    for name in ("--upload-pack=touch /tmp/x", "-oProxyCommand=x", "-"):
        with pytest.raises(ConfigError) as caught:
            remote.coerce(name, "CORRAL_REMOTE")
        assert "option" in caught.value.message and repr(name) in caught.value.message
        assert "git remote" in (caught.value.hint or "")
    assert remote.coerce("upstream", "corral.toml") == "upstream"
    assert remote.coerce("my-fork", "corral.toml") == "my-fork"
    assert setting("model").refusal("-opus") is None  # only a name corral passes to git is checked so


# -- writing a value back as TOML --------------------------------------------------------------

_TEXT = hs.text(hs.characters(blacklist_categories=("Cs",)))


def _round_trip(value: object) -> object:
    return tomllib.loads(f"x = {toml_value(value)}  # {toml_comment('a comment')}\n")["x"]  # type: ignore[arg-type]


@given(_TEXT)
def test_any_text_reads_back_equal(text: str) -> None:
    assert _round_trip(text) == text


@given(hs.lists(_TEXT))
def test_any_list_of_text_reads_back_equal(items: list[str]) -> None:
    assert _round_trip(items) == items


@given(hs.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_any_whole_number_reads_back_equal(number: int) -> None:
    got = _round_trip(number)
    assert got == number and type(got) is int


@given(hs.floats())
def test_any_number_reads_back_equal(number: float) -> None:
    got = _round_trip(number)
    assert type(got) is float
    assert math.isnan(got) if math.isnan(number) else got == number


def test_toml_literals() -> None:
    assert [toml_value(v) for v in (True, False, 3, 1800.0, 'a"b\\c\n', [], ["x", "y"])] == [
        "true",
        "false",
        "3",
        "1800.0",
        '"a\\"b\\\\c\\n"',
        "[]",
        '["x", "y"]',
    ]
    assert toml_value("tab\tnul\x00del\x7f") == '"tab\\tnul\\u0000del\\u007F"'
    # an undecodable byte from the environment has no Unicode form: it shows as U+FFFD
    assert _round_trip("bin\udcff") == "bin\ufffd"
    with pytest.raises(TypeError):
        toml_value(None)  # type: ignore[arg-type]


@given(hs.text())
def test_any_text_makes_a_valid_comment(text: str) -> None:
    comment = toml_comment(text)
    assert tomllib.loads(f"# {comment}\nx = 1 # {comment}\n") == {"x": 1}
