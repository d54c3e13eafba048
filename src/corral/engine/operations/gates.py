"""Who is calling, and what a task agent may touch: the caller from its token, and the agent's gates.

docs/mcp.md#gates. A person (the CLI) and a builder (``corral mcp``)
are unrestricted. A task agent is known by the bearer token its turn was given, never by
what a request says: the token's grant names its task (:mod:`corral.engine.runtime.agent_tokens`),
and it holds only while that turn is the task's current command on a working task. The agent
may then act on its own task or a direct subtask of it; it may accept a direct subtask only,
never its own task (accepting is "merge upward and mark complete", which would skip the review
its task exists for); what it creates is a subtask of its own task; and what it lists is its
own task and its direct subtasks (``queries.list_page(subtree_of=…)``).

An agent whose turn a worker runs under a lease (docs/workers.md) is fenced as its worker is
(``operations/turn_fence``).

The gates are correct attribution and guard rails, not a security boundary: an agent that is
not confined can still act as its user by other means (docs/mcp.md#what-the-gates-are).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct

from corral.domain.actors import Actor
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.resolve import Resolved, resolve_for, resolve_task
from corral.errors import AgentTokenInvalid, OutOfScope, UsageError

if TYPE_CHECKING:
    # A person's command (the CLI's gate, every accept) never reads a token: the tokens' module (hashing,
    # the turn's protocol records) loads only when one is presented (:func:`grant_of`).
    from corral.engine.runtime.agent_tokens import Grant
    from corral.engine.runtime.protocol import Fence

#: Tools (and CLI commands) an agent may aim at its direct subtasks only, never at its own task:
#: accepting itself would skip its review, and editing itself would change what it was asked to do
#: and under which protections (its protected paths) — both the person's.
CHILD_ONLY = frozenset({"accept", "edit"})


class Caller(Struct, frozen=True):
    """Who a call comes from. ``task_id`` is the agent's own task (None for a person or a builder)."""

    actor: Actor
    task_id: str | None = None
    task_ref: str | None = None
    command_id: str | None = None
    #: The lease a worker runs the agent's turn under (None: a local turn, a person, a builder).
    fence: Fence | None = None

    @property
    def is_agent(self) -> bool:
        return self.task_id is not None


def person(actor: Actor) -> Caller:
    return Caller(actor)


def agent(project: Project, grant: Grant) -> Caller:
    """The agent a grant stands for, once its turn is seen still running; refused otherwise."""
    if Path(grant.state) != project.paths.root:
        raise AgentTokenInvalid(
            f"This token belongs to a turn of another project ({grant.repo}).",
            hint="Each turn's agent acts in its own project only.",
        )
    with project.store.read() as tx:
        task = tx.get_task(grant.task_id)
        current = tx.current_command_ids([grant.task_id]).get(grant.task_id) if task is not None else None
    if task is None or task.status is not Status.WORKING or current != grant.command_id:
        raise AgentTokenInvalid(
            f"The turn this token was minted for ({grant.task_ref}) has ended; its token is revoked.",
            hint="A token lives as long as its turn: the next turn of the task gets a new one.",
        )
    return Caller(Actor.AGENT, task.id, task.ref, grant.command_id, grant.fence)


def grant_of(home: Path, token: str | None) -> Grant:
    """The grant of a presented token (refused for none, an unknown or a revoked one)."""
    from corral.engine.runtime import agent_tokens

    grant = agent_tokens.find(home, token) if token else None
    if grant is None:
        raise AgentTokenInvalid(
            "This token is not one corral minted, or its turn has ended.",
            hint="A token lives as long as its turn: the next turn of the task gets a new one.",
        )
    return grant


def agent_of_token(project: Project, token: str) -> Caller:
    """The agent whose turn ``token`` was minted for (refused for an unknown or revoked token)."""
    return agent(project, grant_of(project.paths.home, token))


def target(project: Project, caller: Caller, tool: str, given: str) -> Task:
    """The task ``given`` names, once ``caller`` may aim ``tool`` at it (``OutOfScope`` otherwise)."""
    return aim(project, caller, tool, given).task


def aim(project: Project, caller: Caller, tool: str, given: str) -> Resolved:
    """:func:`target`, with the rule for a prefix of the task's ref (``resolve.resolve_for``): refused for a
    command that ends or merges a task, said (``Resolved.prefix``) for one that changes it."""
    with project.store.read() as tx:
        found = resolve_for(tx, given, tool)
    task = found.task
    if not caller.is_agent:
        return found
    own = task.id == caller.task_id
    child = task.parent_id is not None and task.parent_id == caller.task_id
    if tool in CHILD_ONLY and own:
        raise OutOfScope(
            f"An agent may not {tool} its own task ({task.ref}): that is for the person who reviews it.",
            hint=f"Finish your turn and say what should change; the person who reviews {task.ref} decides.",
        )
    if child or (own and tool not in CHILD_ONLY):
        return found
    scope = "its direct subtasks" if tool in CHILD_ONLY else f"its own task ({caller.task_ref}) and its direct subtasks"
    raise OutOfScope(
        f"An agent may {tool} {scope}; {task.ref} is not one of them.",
        hint="Create a subtask of your own task (the create tool), or ask the person who runs you.",
    )


def parent_for_create(caller: Caller, parent: str | None, project: Project) -> str | None:
    """The parent a new task gets: an agent's subtasks are always its own task's."""
    if not caller.is_agent:
        return parent
    if parent is not None:
        with project.store.read() as tx:
            named = resolve_task(tx, parent)
        if named.id != caller.task_id:
            raise OutOfScope(
                f"An agent creates subtasks of its own task ({caller.task_ref}) only, not of {named.ref}.",
                hint="Leave out the parent: a subtask of your own task is made.",
            )
    return caller.task_id


def require_agent(caller: Caller, tool: str) -> str:
    """The caller's own task id for a tool only an agent may call (``update_progress``)."""
    if caller.task_id is None:
        raise UsageError(
            f"{tool} is a task agent's tool: it reports on the caller's own running turn.",
            code="agent-only",
            hint="A builder or a person reads progress with show; only a turn's agent posts it.",
        )
    return caller.task_id
