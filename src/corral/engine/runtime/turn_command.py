"""``command.json``: what a turn's supervisor is to do, with every setting already resolved (``protocol``'s face).

A version-1 command (flat watchdog and check fields) is read in this version's shape
(:meth:`Command.upgraded`); every later version has the shape below.
"""

from __future__ import annotations

from typing import Any, ClassVar

from corral.adapters.sandbox import SandboxSpec
from corral.domain.delays import Delays
from corral.domain.failures import Budgets
from corral.domain.posture import Posture
from corral.engine.readonly import Before
from corral.engine.runtime.wire import COMMAND, JSON, Wire


class HarnessSettings(Wire, frozen=True):
    """The trusted settings a harness adapter is made from: its executables and provider."""

    claude_bin: str
    pi_bin: str
    codex_bin: str
    pi_provider: str | None = None
    command: str | None = None
    pi_extensions: tuple[str, ...] = ()
    #: A confined Pi turn with corral's endpoint: its ``bash`` is corral's (the Pi extension's), so its
    #: log's ``bash`` calls carry intents; set by the launch, never a setting.
    pi_corral_shell: bool = False

    def as_mapping(self) -> dict[str, Any]:
        return self.to_json()


class Watchdog(Wire, frozen=True):
    """The no-progress watchdog's limits for one turn."""

    timeout_seconds: float
    relaunches: int
    term_grace_seconds: float


class CheckSpec(Wire, frozen=True):
    """The post-turn check: a command run in the worktree after the work phase, and its bound."""

    command: str | None
    timeout_seconds: float
    #: Run outside the sandbox (the person's user-only ``post_turn_check_unconfined``); by default
    #: the check runs in the turn's own sandbox, since it runs the agent's code (a Makefile, conftest.py).
    unconfined: bool = False


class AgentToolsSpec(Wire, frozen=True):
    """How a turn's agent reaches corral's tools: its token's hash and file, the daemon's MCP endpoint.

    The token itself is never written here: the launch hands it to the supervisor in its
    environment, and the supervisor to the agent (docs/mcp.md#tokens). ``url`` is None when the
    agent has no MCP endpoint (its harness takes none, or no daemon serves one): the token then
    still names it to a corral CLI it runs.
    """

    url: str | None
    token_hash: str
    token_file: str  # the grant's file, which the supervisor removes when the turn ends
    timeout_seconds: float


class Fence(Wire, frozen=True):
    """The lease a worker claimed the turn under (docs/workers.md): every write of the turn's
    results checks ``epoch`` in its own transaction, so a worker that lost the lease writes nothing."""

    epoch: int
    worker_id: str
    host: str


class Command(Wire, frozen=True, omit_defaults=True):
    """What a supervisor is to do: one turn, with every setting resolved by the launching operation."""

    FILE: ClassVar[str] = COMMAND

    command_id: str
    task_id: str
    task_ref: str
    kind: str  # start | unblock | resume | auto-resume | ask | pre-accept
    turn_id: str
    sequence: int
    log_dir: str
    harness: str
    harness_settings: HarnessSettings
    model: str | None
    posture: Posture
    prompt_body: str
    system: str | None
    resume_id: str | None
    worktree: str
    branch: str
    target: str
    sync_before_work: bool
    announce_merge: bool
    git_start_sha: str | None
    delivered: tuple[str, ...]
    watchdog: Watchdog
    budgets: Budgets
    check: CheckSpec
    protected: tuple[str, ...]
    created_at: str
    #: A read-only turn's branch and worktree before it ran (``corral.engine.readonly``), taken at launch.
    read_only_before: Before | None = None
    #: The shared usage-limit pause file of the launching ``CORRAL_HOME`` (None: the supervisor's own).
    usage_limits: str | None = None
    #: The directory of the session's failure journal (None: an older launcher's command, no journal).
    journal_dir: str | None = None
    #: The agent's door to corral's tools; None, or no url in it: ``agent_tools_absent`` says why.
    agent_tools: AgentToolsSpec | None = None
    agent_tools_absent: str | None = None
    #: The sandbox the agent runs in, resolved at launch (None: an older launcher's command, unconfined).
    sandbox: SandboxSpec | None = None
    #: The worker's lease on the turn (None: a turn launched on this host, outside any worker).
    fence: Fence | None = None
    #: Every wait the supervisor makes, resolved from the settings at launch (an older command's: the defaults).
    delays: Delays = Delays()
    #: The turn as a person counts it (domain/exchanges.py), for what the turn's incidents say (0: an older
    #: launcher's command, which says its ``sequence``).
    exchange: int = 0

    @classmethod
    def upgraded(cls, data: JSON, version: int) -> JSON:
        """A version-1 command (flat watchdog and check fields) in this version's shape.

        Version 1 carried no relaunch count or grace: those were the domain's fixed rules then.
        """
        if version >= 2:
            return data
        from corral.domain.failures import TERM_GRACE_SECONDS, WATCHDOG_RELAUNCHES

        out = dict(data)
        out["watchdog"] = {
            "timeout_seconds": data.get("watchdog_timeout"),
            "relaunches": WATCHDOG_RELAUNCHES,
            "term_grace_seconds": TERM_GRACE_SECONDS,
        }
        out["check"] = {"command": data.get("post_turn_check"), "timeout_seconds": data.get("post_turn_check_timeout")}
        return out
