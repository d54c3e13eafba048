"""The engine's front door: everything a surface (the CLI, the dashboard, MCP, the daemon, the worker) may call.

Surfaces import the engine from here and from nowhere else; every other engine module is private to the
engine and may move or change shape without a surface noticing. tests/test_front_door.py fails when a surface
imports past this module, or opens a store transaction of its own instead of asking a query here.

What is here: the operation modules surfaces call as namespaces (``tasks.create``, ``turns.start``,
``queries.show_task``, …), the read model and the types surfaces render or pass back, and the few runtime
facts a surface needs, under names that say what they are (``STATUS_FILE``, ``find_grant``) rather than the
runtime module that keeps them.

The door is lazy (PEP 562): importing it imports nothing behind it, and each name imports its owning module
on first use. ``corral --help`` and the quick ``list`` stay as light as they were when surfaces imported
engine modules one by one; ``from corral.engine.api import X`` costs exactly what importing X's module did.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.engine import daemons as daemons
    from corral.engine import identity as identity
    from corral.engine import orphan_states as orphan_states
    from corral.engine import workspace as workspace
    from corral.engine.config import (
        PROJECTS_TABLE as PROJECTS_TABLE,
    )
    from corral.engine.config import (
        Config as Config,
    )
    from corral.engine.config import (
        Value as Value,
    )
    from corral.engine.config import (
        file_problems as file_problems,
    )
    from corral.engine.config import (
        lenient as lenient,
    )
    from corral.engine.config import (
        load_config as load_config,
    )
    from corral.engine.config import (
        parse_toml as parse_toml,
    )
    from corral.engine.config import (
        proposals as proposals,
    )
    from corral.engine.config import (
        read_toml as read_toml,
    )
    from corral.engine.daemons import (
        DaemonState as DaemonState,
    )
    from corral.engine.identity_files import (
        holds as holds,
    )
    from corral.engine.identity_files import (
        project_states as project_states,
    )
    from corral.engine.identity_files import (
        read_record as read_record,
    )
    from corral.engine.operations import accept as accept
    from corral.engine.operations import board as board
    from corral.engine.operations import control as control
    from corral.engine.operations import doctor as doctor
    from corral.engine.operations import gates as gates
    from corral.engine.operations import lookups as lookups
    from corral.engine.operations import notify as notify
    from corral.engine.operations import prune as prune
    from corral.engine.operations import queries as queries
    from corral.engine.operations import roster as roster
    from corral.engine.operations import shell as shell
    from corral.engine.operations import spares as spares
    from corral.engine.operations import tasks as tasks
    from corral.engine.operations import turns as turns
    from corral.engine.operations.board import (
        activity as activity,
    )
    from corral.engine.operations.gates import (
        Caller as Caller,
    )
    from corral.engine.operations.gates import (
        agent_of_token as agent_of_token,
    )
    from corral.engine.operations.gates import (
        person as person,
    )
    from corral.engine.operations.gates import (
        require_agent as require_agent,
    )
    from corral.engine.operations.pairing import (
        chat as chat,
    )
    from corral.engine.operations.pairing import (
        pair as pair,
    )
    from corral.engine.operations.prune import (
        prune_diagnostics as prune_diagnostics,
    )
    from corral.engine.operations.refresh import (
        settle as settle,
    )
    from corral.engine.operations.reviewed import (
        Moved as Moved,
    )
    from corral.engine.operations.submit import (
        submit as submit,
    )
    from corral.engine.operations.sync import (
        sync as sync,
    )
    from corral.engine.operations.turn_fence import (
        fenced as fenced,
    )
    from corral.engine.operations.turn_fence import (
        hold_fence as hold_fence,
    )
    from corral.engine.paths import (
        corral_home as corral_home,
    )
    from corral.engine.paths import (
        user_config_file as user_config_file,
    )
    from corral.engine.placement import (
        host_name as host_name,
    )
    from corral.engine.placement import (
        placement_for as placement_for,
    )
    from corral.engine.placement import (
        worker_id as worker_id,
    )
    from corral.engine.private_state import (
        make_private_dir as make_private_dir,
    )
    from corral.engine.project import (
        Project as Project,
    )
    from corral.engine.project import (
        default_actor as default_actor,
    )
    from corral.engine.read import log_facts as log_facts
    from corral.engine.read import log_text as log_text
    from corral.engine.read import logs as logs
    from corral.engine.read import notices as notices
    from corral.engine.read.incident_views import dismiss as dismiss_incident
    from corral.engine.read.incident_views import log_failures as log_failures
    from corral.engine.read.interleave import (
        AttemptStart as AttemptStart,
    )
    from corral.engine.read.interleave import (
        Line as Line,
    )
    from corral.engine.read.interleave import (
        TurnLog as TurnLog,
    )
    from corral.engine.read.live import (
        live_turn as live_turn,
    )
    from corral.engine.read.log_facts import (
        TurnFacts as TurnFacts,
    )
    from corral.engine.read.projection import (
        as_tree as as_tree,
    )
    from corral.engine.read.projection import (
        note_json as note_json,
    )
    from corral.engine.resolve import (
        Reach as Reach,
    )
    from corral.engine.resolve import (
        reach as reach,
    )
    from corral.engine.resolve import (
        resolve_task as resolve_task,
    )
    from corral.engine.runtime.agent_marks import (
        clear_owned as clear_owned,
    )
    from corral.engine.runtime.agent_tokens import (
        find as find_grant,
    )
    from corral.engine.runtime.liveness import (
        LiveCache as LiveCache,
    )
    from corral.engine.runtime.liveness import (
        LiveOf as LiveOf,
    )
    from corral.engine.runtime.liveness import (
        supervisor_pids as supervisor_pids,
    )
    from corral.engine.runtime.processes import (
        signal_daemon as signal_daemon,
    )
    from corral.engine.runtime.progress_line import (
        post_progress as post_progress,
    )
    from corral.engine.runtime.protocol import (
        STATUS as STATUS_FILE,
    )
    from corral.engine.runtime.protocol import (
        read_raw as read_state_file,
    )
    from corral.engine.runtime.protocol import (
        write_json as write_state_file,
    )
    from corral.engine.runtime.usage_pause import (
        share as share_usage_pauses,
    )
    from corral.engine.runtime.wait_markers import (
        track_wait as track_wait,
    )
    from corral.engine.setting_writes import (
        SCOPES as SCOPES,
    )
    from corral.engine.setting_writes import (
        adopt as adopt,
    )
    from corral.engine.setting_writes import (
        check_scope as check_scope,
    )
    from corral.engine.setting_writes import (
        scope_target as scope_target,
    )
    from corral.engine.setting_writes import (
        write_setting as write_setting,
    )
    from corral.engine.shared_store import claimed as claimed
    from corral.engine.shared_store.store_migrate import (
        migrate as migrate,
    )

#: Each public name: (the module that owns it, the name there; None when the name is that module itself).
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "AttemptStart": ("corral.engine.read.interleave", "AttemptStart"),
    "Caller": ("corral.engine.operations.gates", "Caller"),
    "Config": ("corral.engine.config", "Config"),
    "DaemonState": ("corral.engine.daemons", "DaemonState"),
    "Line": ("corral.engine.read.interleave", "Line"),
    "LiveCache": ("corral.engine.runtime.liveness", "LiveCache"),
    "LiveOf": ("corral.engine.runtime.liveness", "LiveOf"),
    "Moved": ("corral.engine.operations.reviewed", "Moved"),
    "PROJECTS_TABLE": ("corral.engine.config", "PROJECTS_TABLE"),
    "Project": ("corral.engine.project", "Project"),
    "Reach": ("corral.engine.resolve", "Reach"),
    "SCOPES": ("corral.engine.setting_writes", "SCOPES"),
    "STATUS_FILE": ("corral.engine.runtime.protocol", "STATUS"),
    "TurnFacts": ("corral.engine.read.log_facts", "TurnFacts"),
    "TurnLog": ("corral.engine.read.interleave", "TurnLog"),
    "Value": ("corral.engine.config", "Value"),
    "accept": ("corral.engine.operations.accept", None),
    "activity": ("corral.engine.operations.board", "activity"),
    "adopt": ("corral.engine.setting_writes", "adopt"),
    "agent_of_token": ("corral.engine.operations.gates", "agent_of_token"),
    "as_tree": ("corral.engine.read.projection", "as_tree"),
    "board": ("corral.engine.operations.board", None),
    "chat": ("corral.engine.operations.pairing", "chat"),
    "check_scope": ("corral.engine.setting_writes", "check_scope"),
    "dismiss_incident": ("corral.engine.read.incident_views", "dismiss"),
    "claimed": ("corral.engine.shared_store.claimed", None),
    "clear_owned": ("corral.engine.runtime.agent_marks", "clear_owned"),
    "control": ("corral.engine.operations.control", None),
    "corral_home": ("corral.engine.paths", "corral_home"),
    "daemons": ("corral.engine.daemons", None),
    "default_actor": ("corral.engine.project", "default_actor"),
    "doctor": ("corral.engine.operations.doctor", None),
    "fenced": ("corral.engine.operations.turn_fence", "fenced"),
    "file_problems": ("corral.engine.config", "file_problems"),
    "find_grant": ("corral.engine.runtime.agent_tokens", "find"),
    "gates": ("corral.engine.operations.gates", None),
    "hold_fence": ("corral.engine.operations.turn_fence", "hold_fence"),
    "holds": ("corral.engine.identity_files", "holds"),
    "host_name": ("corral.engine.placement", "host_name"),
    "identity": ("corral.engine.identity", None),
    "lenient": ("corral.engine.config", "lenient"),
    "live_turn": ("corral.engine.read.live", "live_turn"),
    "load_config": ("corral.engine.config", "load_config"),
    "log_facts": ("corral.engine.read.log_facts", None),
    "log_failures": ("corral.engine.read.incident_views", "log_failures"),
    "log_text": ("corral.engine.read.log_text", None),
    "logs": ("corral.engine.read.logs", None),
    "lookups": ("corral.engine.operations.lookups", None),
    "make_private_dir": ("corral.engine.private_state", "make_private_dir"),
    "migrate": ("corral.engine.shared_store.store_migrate", "migrate"),
    "note_json": ("corral.engine.read.projection", "note_json"),
    "notices": ("corral.engine.read.notices", None),
    "notify": ("corral.engine.operations.notify", None),
    "orphan_states": ("corral.engine.orphan_states", None),
    "pair": ("corral.engine.operations.pairing", "pair"),
    "parse_toml": ("corral.engine.config", "parse_toml"),
    "person": ("corral.engine.operations.gates", "person"),
    "placement_for": ("corral.engine.placement", "placement_for"),
    "post_progress": ("corral.engine.runtime.progress_line", "post_progress"),
    "project_states": ("corral.engine.identity_files", "project_states"),
    "proposals": ("corral.engine.config", "proposals"),
    "prune": ("corral.engine.operations.prune", None),
    "prune_diagnostics": ("corral.engine.operations.prune", "prune_diagnostics"),
    "queries": ("corral.engine.operations.queries", None),
    "roster": ("corral.engine.operations.roster", None),
    "reach": ("corral.engine.resolve", "reach"),
    "read_record": ("corral.engine.identity_files", "read_record"),
    "read_state_file": ("corral.engine.runtime.protocol", "read_raw"),
    "read_toml": ("corral.engine.config", "read_toml"),
    "require_agent": ("corral.engine.operations.gates", "require_agent"),
    "resolve_task": ("corral.engine.resolve", "resolve_task"),
    "scope_target": ("corral.engine.setting_writes", "scope_target"),
    "settle": ("corral.engine.operations.refresh", "settle"),
    "share_usage_pauses": ("corral.engine.runtime.usage_pause", "share"),
    "shell": ("corral.engine.operations.shell", None),
    "signal_daemon": ("corral.engine.runtime.processes", "signal_daemon"),
    "spares": ("corral.engine.operations.spares", None),
    "submit": ("corral.engine.operations.submit", "submit"),
    "supervisor_pids": ("corral.engine.runtime.liveness", "supervisor_pids"),
    "sync": ("corral.engine.operations.sync", "sync"),
    "tasks": ("corral.engine.operations.tasks", None),
    "track_wait": ("corral.engine.runtime.wait_markers", "track_wait"),
    "turns": ("corral.engine.operations.turns", None),
    "user_config_file": ("corral.engine.paths", "user_config_file"),
    "worker_id": ("corral.engine.placement", "worker_id"),
    "workspace": ("corral.engine.workspace", None),
    "write_setting": ("corral.engine.setting_writes", "write_setting"),
    "write_state_file": ("corral.engine.runtime.protocol", "write_json"),
}

__all__ = [
    "PROJECTS_TABLE",
    "SCOPES",
    "STATUS_FILE",
    "AttemptStart",
    "Caller",
    "Config",
    "DaemonState",
    "Line",
    "LiveCache",
    "LiveOf",
    "Moved",
    "Project",
    "Reach",
    "TurnFacts",
    "TurnLog",
    "Value",
    "accept",
    "activity",
    "adopt",
    "agent_of_token",
    "as_tree",
    "board",
    "chat",
    "check_scope",
    "claimed",
    "clear_owned",
    "control",
    "corral_home",
    "daemons",
    "default_actor",
    "dismiss_incident",
    "doctor",
    "fenced",
    "file_problems",
    "find_grant",
    "gates",
    "hold_fence",
    "holds",
    "host_name",
    "identity",
    "lenient",
    "live_turn",
    "load_config",
    "log_facts",
    "log_failures",
    "log_text",
    "logs",
    "lookups",
    "make_private_dir",
    "migrate",
    "note_json",
    "notices",
    "notify",
    "orphan_states",
    "pair",
    "parse_toml",
    "person",
    "placement_for",
    "post_progress",
    "project_states",
    "proposals",
    "prune",
    "prune_diagnostics",
    "queries",
    "reach",
    "read_record",
    "read_state_file",
    "read_toml",
    "require_agent",
    "resolve_task",
    "roster",
    "scope_target",
    "settle",
    "share_usage_pauses",
    "shell",
    "signal_daemon",
    "spares",
    "submit",
    "supervisor_pids",
    "sync",
    "tasks",
    "track_wait",
    "turns",
    "user_config_file",
    "worker_id",
    "workspace",
    "write_setting",
    "write_state_file",
]


def __getattr__(name: str) -> Any:
    """Import the owning module on first use, and keep the name so the next lookup is a plain global."""
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    owner = importlib.import_module(module)
    value = owner if attr is None else getattr(owner, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
