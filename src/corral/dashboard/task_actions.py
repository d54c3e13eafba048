"""What a task page's buttons do: the engine's operations, called as the CLI's commands call them, as ``human``.

Each action answers with the flash line that says what happened (:func:`act`); an accept runs
beside the page and keeps each of its events for the task's open pages, which narrate it
(:func:`accept`), after the person confirmed it (``task_page.confirm_accept``). Which buttons a task shows,
the operations table decides (``task_page.BUTTONS``). A task is created as ``corral create`` creates it
(:func:`create`).
"""

from __future__ import annotations

from corral.dashboard import task_page, views
from corral.dashboard.html import Markup, path
from corral.dashboard.hub import ACTOR, Hub
from corral.errors import CorralError, TipMoved

#: The actions a page may post: one route per button (which of them a task shows, the operations table decides).
ACTIONS = tuple(op.value for op in task_page.BUTTONS)


def act(hub: Hub, state: str, task_id: str, action: str, form: dict[str, list[str]]) -> Markup:
    """One action, as the CLI's command does it; the flash line that says what happened."""
    from corral.engine.api import control, tasks, turns

    project = hub.homes.get(state)
    message = field(form, "message").strip()
    approve = tuple(form.get("approve") or ())
    revert = tuple(form.get("revert") or ())
    if action in ("ask", "reject", "close") and not message:
        what = {"ask": "a question", "reject": "a reason", "close": "a reason"}[action]
        return views.flash(f"{action.capitalize()} needs {what}: write it in the box first.", error=True)
    if action == "unblock" and not (message or approve or revert):
        return views.flash("Unblock needs feedback for the agent: write it in the box first.", error=True)
    if action == "start":
        started = turns.start(project, task_id, actor=ACTOR, message=message or None)
        return views.flash(f"{started.task.ref} is working.")
    if action == "unblock":
        started = turns.unblock(project, task_id, actor=ACTOR, message=message, approve=approve, revert=revert)
        return views.flash(f"{started.task.ref} is working on your feedback.")
    if action == "resume":
        started = turns.resume(project, task_id, actor=ACTOR)
        return views.flash(f"{started.task.ref} resumed.")
    if action == "ask":
        started = turns.ask(project, task_id, actor=ACTOR, question=message)
        return views.flash(f"Asked {started.task.ref}; the answer appears in the timeline.")
    if action == "stop":
        stopped = control.stop(project, task_id, actor=ACTOR)
        return views.flash(f"{stopped.ref} is {stopped.status.value}; the turn was stopped.")
    if action in ("reject", "close"):
        ended = tasks.abandon(project, task_id, reason=message, actor=ACTOR, how=action)
        return views.flash(f"{ended.task.ref} is abandoned ({'closed' if action == 'close' else 'rejected'}).")
    if action == "reopen":
        reopened = tasks.reopen(project, task_id, reason=message or None, actor=ACTOR)
        return views.flash(f"{reopened.ref} is {reopened.status.value} again.")
    raise AssertionError(action)


def field(form: dict[str, list[str]], name: str) -> str:
    """One text field of a posted form, its line breaks as typed (a browser sends CRLF)."""
    return (form.get(name) or [""])[0].replace("\r\n", "\n")


def create(hub: Hub, form: dict[str, list[str]]) -> Markup:
    """A task created as ``corral create`` creates it (``tasks.create``), in the project the form names: its goal,
    prompt, harness, target branch, ref and protected paths (one glob a line); the flash line names it, links
    to its page and says, as ``create`` warns, a harness not installed here."""
    from corral.engine.api import doctor, tasks

    state = field(form, "project").strip()
    goal = field(form, "goal").strip()
    if not state:
        return views.flash("Choose the project to create the task in.", error=True)
    if not goal:
        return views.flash("A task needs a goal: write it first.", error=True)
    project = hub.homes.get(state)
    task = tasks.create(
        project,
        goal,
        actor=ACTOR,
        ref=field(form, "ref").strip() or None,
        harness=field(form, "harness").strip() or None,
        protect=[line.strip() for line in field(form, "protect").splitlines() if line.strip()],
        prompt=field(form, "prompt").strip(),
        target=field(form, "target").strip() or None,
    )
    warning = doctor.harness_warning(project, task)
    return views.flash(
        f"Created {task.ref} in backlog.", hint=warning, link=(f"Open {task.ref}", path("p", state, "t", task.id))
    )


def accept(hub: Hub, state: str, task_id: str, tip: str | None = None, ref: str | None = None) -> None:
    """An accept, each of its events kept for the task's open pages (narrated as it runs).

    ``tip``: the commit the page's diff showed. It is the one merged; a branch that moved since is
    refused (there is no one to ask here), and the page's diff is read again to show what came."""
    from corral.engine.api import accept as accepting

    events = hub.narration[task_id] = []
    try:
        try:
            result = accepting.accept(hub.homes.get(state), task_id, actor=ACTOR, report=events.append, tip=tip)
        except TipMoved as exc:
            hub.forget_diff(task_id)
            hint = "The diff below now shows them: look, then Accept again"
            hint += f" (or: corral accept {ref} --tip {exc.tip[:12]})." if ref else "."
            events.append({"event": "error", "message": exc.message, "hint": hint})
            return
        events.append(
            {
                "event": "result",
                "ref": result.task.ref,
                "status": result.task.status.value,
                "commit": result.commit,
                "already": result.already,
            }
        )
        if result.warning:
            events.append({"event": "error", "message": result.warning, "hint": None})
    except CorralError as exc:
        events.append({"event": "error", "message": exc.message, "hint": exc.hint})
    except Exception as exc:  # shown, and logged by the caller's thread pool
        events.append({"event": "error", "message": f"{type(exc).__name__}: {exc}", "hint": None})
        raise
