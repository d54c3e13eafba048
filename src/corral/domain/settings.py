"""Every setting corral has, in one typed schema: its name, type, default, help, trust and range.

Each :class:`Setting` has a name, a type, a default, a one-line help and a :class:`Trust`
that says which sources may set it. This is the only place a default is written: code
that needs one asks :func:`default` (``default("watchdog_timeout", float)``), and the
engine's loader (``corral.engine.config``) reads the environment and the settings files
against this schema. ``corral config show`` writes values back with :mod:`corral.domain.toml_text`.

It is also the one home of what a value may be: every number has a range (``least`` and
``most``, both included, finite, whole for a whole-number setting), the remote is never a word
git reads as an option, and a delay, a time limit or the text cap is marked as one a
repository may raise but never lower. :meth:`Setting.coerce` refuses a value outside them (a
person's own, from their file, the environment, ``config set`` or a task's ``--set``);
the loader ignores and reports one from a repository's ``corral.toml`` (:meth:`Setting.refusal`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple, TypeVar, overload

from corral.errors import ConfigError

#: A setting's value once read: the schema's types, a list of strings, or None for "not set".
SettingValue = str | int | float | bool | list[str] | None
#: A default as the schema keeps it: lists are tuples, so the schema cannot be changed by a caller.
Default = str | int | float | bool | tuple[str, ...] | None

_T = TypeVar("_T")


class Trust(StrEnum):
    """Which sources may set a setting.

    A repository's ``corral.toml`` was written by anyone who can push to the repository,
    so two kinds of setting are taken only from the user's own file (its top level, or
    its table for that repository) or the environment:

    - ``USER_ONLY``: it widens what an agent may do (the permission mode, the tools, the
      sandbox claim). A value in ``corral.toml`` is ignored and reported.
    - ``EXECUTES``: it makes corral execute something (a command, a harness binary, a
      harness turn). A value in ``corral.toml`` is never adopted, only reported as a
      proposal that the person may adopt into their own file for that repository.
    """

    ANYWHERE = "anywhere"  # the environment, the user's file or corral.toml
    USER_ONLY = "user_only"  # widens what an agent may do: never corral.toml
    EXECUTES = "executes"  # makes corral execute something: corral.toml may only propose it


# A NamedTuple rather than a frozen dataclass: every process builds the schema at start-up,
# and a dataclass costs several times more to create.
class Setting(NamedTuple):
    name: str
    kind: type  # str, int, float, bool, or list (of strings)
    default: Default  # None: not set unless a source sets it
    help: str
    trust: Trust = Trust.ANYWHERE
    #: The values it may take (empty: any value of its type).
    choices: tuple[str, ...] = ()
    #: For a ``USER_ONLY`` setting, the values a repository's ``corral.toml`` may still set
    #: because they only narrow what an agent may do (``sandbox = "bwrap"``); any other value
    #: there is ignored and reported like the setting itself.
    narrowing: tuple[str, ...] = ()
    #: Why a ``USER_ONLY`` setting is not a repository's to set (what a refusal and a report say).
    because: str = "it widens what an agent may do"
    #: For a number, the least and the most it may be, both included; a number is also finite, and whole
    #: for an ``int`` setting. Every number has both, so no source can make corral wait forever, never
    #: wait, or take a text no memory holds (``corral config show`` and docs/cli.md#ranges say them).
    least: float | None = None
    most: float | None = None
    #: False for a limit a repository's ``corral.toml`` may raise but never lower (a delay, a time limit,
    #: the text cap): lowered, it would break corral in that repository (``git_timeout = 1`` stops its git
    #: commands), so a value there below the one it would replace is ignored and reported.
    repository_may_lower: bool = True
    #: A name corral passes to git (the remote): it may not begin with ``-``, where git reads an option.
    git_name: bool = False
    #: Files a harness loads by path (Pi's extensions): a local one must be absolute or in the person's home
    #: (``~/``), since the harness resolves any other against its working directory, the task's worktree,
    #: whose files the agent writes. A package source (``npm:``, ``git:``, …) is the harness's to fetch.
    absolute_paths: bool = False

    @property
    def optional(self) -> bool:
        return self.default is None

    @property
    def repository_may_set(self) -> bool:
        return self.trust is Trust.ANYWHERE

    def repository_may_set_value(self, value: SettingValue) -> bool:
        """Whether ``corral.toml`` may give this setting ``value``: any value of a setting it may
        set, or one of the narrowing values of a user-only one."""
        return self.repository_may_set or (self.trust is Trust.USER_ONLY and value in self.narrowing)

    @property
    def repository_may_propose(self) -> bool:
        """A value in ``corral.toml`` is a proposal the person may adopt, never a value corral uses."""
        return self.trust is Trust.EXECUTES

    @property
    def env_var(self) -> str:
        return f"CORRAL_{self.name.upper()}"

    def default_value(self) -> SettingValue:
        """The default as a value: a fresh list for a list setting, so callers may keep it."""
        return list(self.default) if isinstance(self.default, tuple) else self.default

    def coerce(self, raw: object, where: str) -> SettingValue:
        """``raw`` (a TOML value, or the text of an environment variable) as this setting's type, in its range.

        ``where`` names the source in the error (a file or a variable): a value of another type
        (:meth:`typed`) or outside the setting's range (:meth:`refusal`) is a :class:`ConfigError`.
        """
        return self.check(self.typed(raw, where), where)

    def check(self, value: SettingValue, where: str) -> SettingValue:
        """``value`` itself when the setting may take it; else a :class:`ConfigError` naming the range."""
        why = self.refusal(value)
        if why is None:
            return value
        raise ConfigError(
            f"{where}: '{self.name}' is {value!r}, but it {why}.", hint=f"{self.name}: {self.help}; {self.takes()}."
        )

    def refusal(self, value: SettingValue) -> str | None:
        """Why the setting may not take ``value`` of its type (a number out of its range, a name git
        would read as an option), or None. A repository's value refused here is ignored and reported."""
        if self._out_of_range(value):
            return f"must be {self.range_words()}"
        if self.git_name and isinstance(value, str) and value.startswith("-"):
            return "must be a remote's name, which never begins with '-': git reads that as an option"
        if self.absolute_paths and isinstance(value, list | tuple):
            for entry in value:
                if _relative_local_path(str(entry)):
                    return (
                        f"names {entry!r}, a path relative to the task's worktree (where the harness runs), whose "
                        "files the agent writes"
                    )
        return None

    def _out_of_range(self, value: SettingValue) -> bool:
        if self.kind not in (int, float) or not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        return (
            (self.kind is int and not isinstance(value, int))
            or value != value  # NaN
            or value in (_INFINITY, -_INFINITY)
            or (self.least is not None and value < self.least)
            or (self.most is not None and value > self.most)
        )

    def range_words(self) -> str:
        """A number's range as a person reads it: ``a whole number from 1 to 1000``."""
        words = _KIND_NAMES[self.kind] if self.kind in (int, float) else "a value"
        if self.least is not None and self.most is not None:
            return f"{words} from {_number(self.least)} to {_number(self.most)}"
        if self.least is not None:
            return f"{words} of at least {_number(self.least)}"
        if self.most is not None:
            return f"{words} of at most {_number(self.most)}"
        return words

    def takes(self) -> str:
        """What the setting takes, for a hint: its range (or its rule) and its default."""
        shown = "not set" if self.default is None else repr(self.default_value())
        if self.git_name:
            return f"it takes the name of a remote that `git remote` lists (default {shown})"
        if self.absolute_paths:
            return f"it takes absolute paths (or ~/…) or package sources such as npm:NAME (default {shown})"
        return f"it takes {self.range_words()} (default {shown})"

    def typed(self, raw: object, where: str) -> SettingValue:
        """``raw`` as this setting's type, not yet checked against its range (:meth:`refusal` does that).

        Text converts to any type, in a file as in the environment (a list is comma-separated);
        any other TOML value must already have the type, except that a whole number is a valid
        float, and any number is taken here for a whole-number setting: ``nan`` or ``2.5`` there
        is out of its range, said with the range.
        """
        if raw is None and self.optional:
            return None
        kind = self.kind
        if isinstance(raw, str) and kind is not str:
            text = raw.strip()
            if kind is bool:
                if text.lower() in _TRUE:
                    return True
                if text.lower() in _FALSE:
                    return False
                raise self._wrong_type(raw, where)
            if kind is list:
                return [part.strip() for part in text.split(",") if part.strip()]
            if kind is int:
                try:
                    return int(text)
                except ValueError:
                    pass
            try:
                return float(text)  # for a whole-number setting, a number its range refuses ("nan", "2.5")
            except ValueError:
                raise self._wrong_type(raw, where) from None
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            raise self._wrong_type(raw, where)
        if kind is list:
            if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
                return [str(x) for x in raw]
            raise self._wrong_type(raw, where)
        if kind is int:
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                return raw
            raise self._wrong_type(raw, where)
        if kind is float:
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                try:
                    return float(raw)
                except OverflowError:  # a whole number past any float: out of every range
                    return _INFINITY if raw > 0 else -_INFINITY
            raise self._wrong_type(raw, where)
        if isinstance(raw, str):
            if self.choices and raw not in self.choices:
                raise ConfigError(
                    f"{where}: '{self.name}' must be one of {', '.join(self.choices)}, not {raw!r}.",
                    hint=f"{self.name}: {self.help}.",
                )
            return raw
        raise self._wrong_type(raw, where)

    def _wrong_type(self, raw: object, where: str) -> ConfigError:
        return ConfigError(
            f"{where}: '{self.name}' must be {_KIND_NAMES.get(self.kind, 'a string')}, not {raw!r}.",
            hint=f"{self.name}: {self.help}" + (f"; {self.takes()}." if self.kind in (int, float) else "."),
        )


_INFINITY = float("inf")


def _number(value: float) -> str:
    """A bound as a person types it: ``86400``, not ``86400.0``."""
    return str(int(value)) if float(value).is_integer() else repr(value)


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
_KIND_NAMES: dict[type, str] = {
    int: "a whole number",
    float: "a number",
    bool: "true or false",
    list: "a list of strings",
}

_USER = Trust.USER_ONLY
_EXEC = Trust.EXECUTES

#: The harnesses' own configuration and CI's workflows, in a task's worktree: what Claude Code,
#: Codex, Pi and CI run when a person (or a push) runs them there. Protected unless a person removes
#: them (``protected_defaults``); patterns match as ``fnmatch`` does, ``*`` across ``/`` too.
PROTECTED_DEFAULTS: tuple[str, ...] = (
    ".claude/settings*.json",
    ".mcp.json",
    ".codex/**",
    ".pi/**",
    ".github/workflows/**",
)

#: Bounds of the numeric settings (seconds, and how many times a thing may be tried).
_HOUR = 3600
_DAY = 24 * _HOUR
_WEEK = 7 * _DAY
_COUNT = 1000
#: The shortest a turn's wait may be (a millisecond: what a test sets them to), and why a repository may not.
_SHORTEST = 0.001
_PACES = "it paces your turns: a repository's value could kill your agents early or retry a provider without pause"

SETTINGS: tuple[Setting, ...] = (
    Setting("harness", str, "claude", "default harness for new tasks (claude, pi, codex, command)"),
    Setting("model", str, None, "default model passed to the harness"),
    # A delay: a repository may lengthen it, never shorten it (its turns would be killed while working).
    Setting(
        "watchdog_timeout",
        float,
        1800.0,
        "seconds without progress before the watchdog kills a turn",
        least=1,
        most=_DAY,
        repository_may_lower=False,
    ),
    Setting(
        "protected",
        list,
        (),
        "path patterns an agent may not change without a decision, besides protected_defaults",
    ),
    # User-only: a person's later unconfined run of a harness in the worktree, or CI, executes what
    # these files say, so taking one away widens what an agent may do; any source may add patterns.
    Setting(
        "protected_defaults",
        list,
        PROTECTED_DEFAULTS,
        "patterns protected unless you remove them: the harnesses' settings and CI's workflows,"
        " which a harness you run in the worktree, or CI, executes; your value replaces this list",
        _USER,
        because="taking one away lets an agent rewrite what a harness you run, or CI, executes",
    ),
    Setting("post_turn_check", str, None, "command run in the worktree after each work phase", _EXEC),
    Setting(
        "post_turn_check_timeout",
        float,
        300.0,
        "seconds the post-turn check may run",
        least=1,
        most=_DAY,
        repository_may_lower=False,
    ),
    # User-only: the check runs the agent's code (a Makefile, conftest.py), so outside the sandbox it
    # is an escape; a toolchain in the home is something a person lets the sandbox read.
    Setting(
        "post_turn_check_unconfined",
        bool,
        False,
        "run the post-turn check outside the sandbox (it runs code the agent could have written)",
        _USER,
        because="it runs code the agent could have written outside the sandbox",
    ),
    Setting(
        "sandbox_read_paths",
        list,
        (),
        "more paths a confined turn and its check may read (toolchains in your home: ~/.cargo, ~/.nvm)",
        _USER,
        because="it shows a confined agent more of your machine",
    ),
    Setting("auto_resume", bool, True, "resume a crashed turn automatically, under the circuit breaker"),
    Setting("breaker_threshold", int, 3, "consecutive interruptions that stop auto-resume", least=1, most=_COUNT),
    Setting(
        "breaker_same_cause",
        int,
        2,
        "interruptions in a row with one cause (same code and exit status, no new commit, within 10 min)"
        " that stop auto-resume; 0 turns it off",
        least=0,
        most=_COUNT,
    ),
    Setting(
        "auto_resume_gap",
        float,
        5.0,
        "seconds between two auto-resumes of different tasks of one project, so a provider's incident does"
        " not relaunch every task at once; 0 turns it off",
        _USER,
        because=_PACES,
        least=0,
        most=_HOUR,
    ),
    Setting(
        "grace_period",
        float,
        30.0,
        "seconds a new turn's supervisor has to be seen alive",
        least=1,
        most=_HOUR,
        repository_may_lower=False,
    ),
    # A turn's waits (corral.domain.delays): user-only, so a repository can neither shorten them (its agents
    # killed at once, a provider retried without pause) nor lengthen them (a crash loop never seen).
    Setting(
        "retry_delay_first",
        float,
        5.0,
        "seconds before the first retry of a transient failure (overload, network, unreachable);"
        " each next wait doubles, up to retry_delay_longest",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "retry_delay_unknown",
        float,
        15.0,
        "seconds before the first retry of an unclassified failure; each next wait doubles, up to retry_delay_longest",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "retry_delay_longest",
        float,
        60.0,
        "the longest wait between two attempts of a turn (seconds)",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_DAY,
    ),
    Setting(
        "crash_loop_window",
        float,
        10.0,
        "an unclassified failure's attempt that ran fewer seconds than this is fast; three fast ones in a row"
        " are a crash loop, which stops the turn",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "term_grace",
        float,
        5.0,
        "seconds an agent corral stops (the watchdog, a stop) has between SIGTERM and SIGKILL",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "reap_grace",
        float,
        1.0,
        "seconds a process an agent left running has between SIGTERM and SIGKILL when its attempt ends",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "heartbeat_interval",
        float,
        2.0,
        "seconds between a turn's supervisor's heartbeats; ten missed and it is taken for frozen or gone",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=60,
    ),
    Setting(
        "drain_quiet",
        float,
        2.0,
        "seconds of quiet after an agent exits before corral stops reading output a process it left holds open",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "drain_longest",
        float,
        10.0,
        "the most seconds corral reads output a process an exited agent left holds open",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "usage_limit_poll",
        float,
        1.0,
        "seconds between looks of a turn waiting behind the first task through its account's usage-limit reset",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "usage_limit_nap",
        float,
        30.0,
        "the longest a turn waiting for its account's usage-limit reset sleeps before it looks again (seconds)",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    # This process's own waits (corral.domain.delays.HostWaits): user-only like a turn's, resolved once when a
    # project opens; a repository's value could make every command give up on a busy store at once, or hang.
    Setting(
        "store_busy_timeout",
        float,
        10.0,
        "seconds a write waits for another process's hold on corral's records before it is refused as busy",
        _USER,
        because="it paces your commands: a repository's value could refuse your writes at once or hang them",
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting(
        "stop_wait",
        float,
        15.0,
        "seconds corral stop waits for the turn's supervisor (or the host that runs it) to end the turn",
        _USER,
        because=_PACES,
        least=_SHORTEST,
        most=_HOUR,
    ),
    # Usage windows last 5 h, so an overloaded provider is retried for longer than that.
    Setting("budget_overload", float, 6 * 3600.0, "seconds of retrying transient_overload", least=1, most=_WEEK),
    Setting("budget_network", float, 3600.0, "seconds of retrying transient_network", least=1, most=_WEEK),
    Setting("budget_unreachable", int, 12, "attempts for transient_unreachable", least=1, most=_COUNT),
    Setting("budget_unknown", int, 6, "attempts for an unclassified failure", least=1, most=_COUNT),
    # A cap on what corral holds in memory and stores; a repository may raise it, never lower it (its
    # prompts and comments would be refused).
    Setting(
        "text_cap",
        int,
        100 * 1024,
        "largest text (bytes) corral takes at intake",
        least=1024,
        most=16 * 1024 * 1024,
        repository_may_lower=False,
    ),
    # Where git reads it as a remote (push, fetch, ls-remote): never an option (corral.engine.git_remote checks
    # it names a remote the repository has).
    Setting("remote", str, "origin", "remote that `corral submit` pushes to", git_name=True),
    # The forge (docs/forge.md): it makes corral run gh, so a repository may only propose it; a review comment
    # delivered by itself would make a stranger's words an agent's prompt, so that is the person's alone.
    Setting("forge", str, None, "the forge that submit and accept go through (gh)", _EXEC, choices=("gh",)),
    Setting(
        "forge_auto_deliver",
        bool,
        False,
        "deliver a pull request's review comments and failed checks to the agent without an unblock",
        _USER,
        because="it makes a stranger's review comment an agent's prompt",
    ),
    Setting(
        "forge_poll",
        float,
        30.0,
        "seconds between two looks at a project's pending pull requests",
        least=5,
        most=_HOUR,
        repository_may_lower=False,
    ),
    Setting("pre_accept_prompt", str, None, "a last turn run before every accept's merge", _EXEC),
    Setting("notify_command", str, None, "command run with each notice as JSON on its stdin", _EXEC),
    # Time limits: lowered by a repository, every git command there would be stopped (never lowered by one).
    Setting(
        "git_timeout",
        float,
        60.0,
        "seconds a git plumbing command may run before corral stops it",
        least=1,
        most=_HOUR,
        repository_may_lower=False,
    ),
    Setting(
        "git_hook_timeout",
        float,
        300.0,
        "seconds a git command that runs hooks or touches many files (commit, merge, checkout, push) may run",
        least=1,
        most=_DAY,
        repository_may_lower=False,
    ),
    Setting("permission_mode", str, "acceptEdits", "Claude Code permission mode for work turns", _USER),
    Setting(
        "allowed_tools",
        list,
        ("Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "TodoWrite"),
        "tools the agent may use without asking",
        _USER,
    ),
    Setting("is_sandbox", bool, False, "tell the harness it runs inside a real sandbox", _USER),
    # User-only, since "off" widens what an agent may do; a repository may require "bwrap" (it narrows).
    Setting(
        "sandbox",
        str,
        "auto",
        "confine each turn's agent with bubblewrap: auto (where it works), bwrap (required), off",
        _USER,
        choices=("auto", "bwrap", "off"),
        narrowing=("bwrap",),
    ),
    # User-only: corral's tools let an agent create and run tasks, which a repository may not grant.
    Setting("agent_tools", bool, True, "give each turn's agent corral's MCP tools for its own subtasks", _USER),
    # User-only: a repository must not send a person's task history to a server it names.
    Setting(
        "database_url",
        str,
        None,
        "PostgreSQL URL for corral's records (postgresql://user:password@host:5432/db); unset: SQLite",
        _USER,
        because="it says where your own records go",
    ),
    # Team scale (docs/workers.md): which hosts run a person's turns is theirs to say, never a repository's.
    Setting(
        "dispatch",
        str,
        "local",
        "where turns run: local (this host) or workers (queued in PostgreSQL for `corral worker` on any host)",
        _USER,
        choices=("local", "workers"),
        because="it says which machines run your agents",
    ),
    Setting(
        "worker_projects",
        list,
        (),
        "the clones this host's `corral worker` serves (paths); it claims turns of these projects only",
        _USER,
        because="it says which machines run your agents",
    ),
    Setting(
        "worker_host",
        str,
        None,
        "the name this host's worker shows in list, show and watch (default: its host name)",
        _USER,
        because="it names your host to the team (two hosts given one name by a repository would read as one)",
    ),
    Setting(
        "worker_turns",
        int,
        2,
        "turns one `corral worker` runs at once",
        _USER,
        because="it sizes your host's load",
        least=1,
        most=64,
    ),
    Setting(
        "lease_seconds",
        float,
        30.0,
        "seconds without a worker's heartbeat before another worker takes its turns over",
        _USER,
        because="it decides when your turns move to another host",
        least=1,
        most=_DAY,
    ),
    Setting(
        "wip_push_interval",
        float,
        180.0,
        "seconds between a worker's pushes of a running turn's uncommitted work to the remote",
        least=1,
        most=_DAY,
        repository_may_lower=False,  # a delay: shortened by a repository, its pushes would load every worker
    ),
    Setting(
        "worker_settle_interval",
        float,
        2.0,
        "seconds between a worker's passes over its projects (lost workers' turns taken over, auto-resume)",
        _USER,
        because="it paces your worker: a repository's value could load the shared store or leave lost turns waiting",
        least=_SHORTEST,
        most=_HOUR,
    ),
    Setting("claude_bin", str, "claude", "the Claude Code executable", _EXEC),
    Setting("pi_bin", str, "pi", "the Pi executable", _EXEC),
    Setting("pi_provider", str, None, "the Pi provider (--provider)"),
    Setting(
        "pi_extensions",
        list,
        (),
        "Pi extensions (paths) loaded in corral's Pi turns beside corral's own",
        _EXEC,
        absolute_paths=True,
    ),
    Setting("codex_bin", str, "codex", "the Codex executable", _EXEC),
    Setting("command", str, None, "the command run by the `command` harness", _EXEC),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

#: Sources a harness fetches itself rather than reading from a path (Pi's ``isLocalPath`` tells them so).
_PACKAGE_SOURCES = ("npm:", "git:", "github:", "http:", "https:", "ssh:")


def _relative_local_path(entry: str) -> bool:
    """Whether ``entry`` is a local path a harness would resolve against its working directory."""
    text = entry.strip()
    if text.startswith(_PACKAGE_SOURCES):
        return False
    return not (text.startswith("/") or text == "~" or text.startswith("~/"))


#: The settings a task keeps as its own (``corral edit T --set KEY=VALUE``, and the environment a
#: person launched its turn with): what its turns run with, so a later auto-resume, redelivery or
#: resume runs the same. The harness, model and protected paths are the task's own fields already.
TASK_SCOPED: frozenset[str] = frozenset(
    {
        "watchdog_timeout",
        "post_turn_check",
        "post_turn_check_timeout",
        "auto_resume",
        "breaker_threshold",
        "breaker_same_cause",
        "budget_overload",
        "budget_network",
        "budget_unreachable",
        "budget_unknown",
        "permission_mode",
        "allowed_tools",
        "is_sandbox",
        "sandbox",
        "claude_bin",
        "pi_bin",
        "pi_provider",
        "codex_bin",
        "command",
    }
)
#: Of those, the ones a person's launch records from its environment: what the turn runs with.
#: Whether and how often to auto-resume is the reconciling process's policy (a test or a CI job
#: turns it off in its own environment); a task has its own only through ``--set``.
TASK_RECORDED: frozenset[str] = TASK_SCOPED - {"auto_resume", "breaker_threshold", "breaker_same_cause"}


def host_owned(name: str) -> bool:
    """A setting a worker takes from its own user file only, never from a task queued on another host
    (docs/workers.md): one that widens what an agent may do, or makes corral execute something."""
    return BY_NAME[name].trust is not Trust.ANYWHERE


def setting(name: str) -> Setting:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"corral has no setting named {name!r}") from None


def nearest_setting(name: str, most: int | None = None) -> str | None:
    """The setting whose name ``name`` most likely misspells (``watchdog_timout``), or None.

    The fewest single-letter edits, at most ``most`` (default: a third of the name's length, or two).
    """
    wanted = name.strip().lower().replace("-", "_")
    if wanted in BY_NAME:
        return wanted
    best, best_cost = None, (max(2, len(wanted) // 3) if most is None else most) + 1
    for candidate in BY_NAME:
        cost = _edits(wanted, candidate, best_cost)
        if cost < best_cost:
            best, best_cost = candidate, cost
    return best


def _edits(a: str, b: str, limit: int) -> int:
    """Levenshtein distance of ``a`` and ``b``, or ``limit`` once it is sure to reach it."""
    if abs(len(a) - len(b)) >= limit:
        return limit
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        if min(row) >= limit:
            return limit
    return min(row[-1], limit)


def unknown_setting(name: str, where: str) -> ConfigError:
    """The error for a key that names no setting: where it was found and the nearest name."""
    near = nearest_setting(name)
    return ConfigError(
        f"{where}: '{name}' is not a setting" + (f"; did you mean '{near}'?" if near else "."),
        hint=(f"Write {near} instead. " if near else "") + "`corral config show` lists every setting.",
    )


def lookup(name: str, where: str) -> Setting:
    """The setting ``name`` as a person typed it; a name that is none is a :class:`ConfigError` naming the nearest."""
    found = BY_NAME.get(name)
    if found is None:
        raise unknown_setting(name, where)
    return found


@overload
def default(name: str) -> SettingValue: ...
@overload
def default(name: str, kind: type[_T]) -> _T: ...
def default(name: str, kind: type[_T] | None = None) -> SettingValue | _T:
    """The default of setting ``name``; with ``kind``, checked to be of that type (typed for the caller)."""
    value = setting(name).default_value()
    if kind is not None and not isinstance(value, kind):
        raise TypeError(f"the default of {name!r} is {type(value).__name__}, not {kind.__name__}")
    return value
