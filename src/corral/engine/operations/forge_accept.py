"""accept through the forge: a pull request pinned to the reviewed head, and the ``merging`` that waits on it.

A project with ``forge = "gh"`` (a trusted setting: the person's own) accepts its root tasks through a pull
request (docs/forge.md); subtasks merge into their parent's branch and accept locally as before. The phases:

1. push the task's branch, with a lease on what the remote holds (a commit not reviewed here is refused);
2. open the pull request, or update the one open from that branch (title and body from the goal and the
   agent's last answer);
3. ask the forge to squash-merge it pinned to the reviewed tip (``sha``; auto-merge's ``expectedHeadOid``),
   with corral's trailers in the squash message, so nothing pushed after the review is merged.

Merged at once: the target is fetched, the merge is verified to carry exactly the reviewed change (the squash's
tree is what merging the reviewed tip onto the squash's parent makes, whatever the base did meanwhile), the
local target follows when it is clean with nothing unpushed, and the task completes and is archived as a local
accept is. Checks pending or a review owed: the task stays ``merging`` in its forge form — a ``forge`` record and
no in-flight marker, which the stranded-merge sweep leaves alone (``recovery/merges``) — and a later accept or
remote sync (:func:`sync`) asks the forge what happened. Checks failed, changes requested, the pull request
closed, or its head moved past the reviewed commit: ``blocked``, the pull request left open, the reason named.

The ``forge`` record says how far an accept got (``stage``): written before each step, so an accept that dies
leaves remote sync knowing whether the forge was asked to merge (then it is asked what happened) or not (then
the task goes back to the status it had, the pull request left open for the next accept).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral import crashpoints
from corral.adapters.gh_forge import GhForge, PullState, parse_remote
from corral.domain import gittext
from corral.domain.actors import Actor
from corral.domain.operations_table import Op, may
from corral.domain.records import RestingCause, Task
from corral.domain.sanitize import one_line, sanitize_prose
from corral.domain.status import Status
from corral.engine.git_remote import remote_name
from corral.engine.operations import reviewed
from corral.engine.operations.accept_phases import (
    PREFLIGHT,
    Accepted,
    Confirm,
    Narrator,
    Phase,
    Steps,
    forge_applies,
    worktree_on,
)
from corral.engine.project import Project
from corral.engine.recovery import removals
from corral.engine.recovery.in_flight import ACCEPT, MARKER, mark_in_flight, without_flight
from corral.errors import AcceptRefused, CorralError, ForgeBlocked, ForgeRefused, ForgeUnavailable, GitError

#: The task-metadata key of a forge accept's record.
RECORD = "forge"
#: Stages of the record, in order: a stage at or past ``ASKED`` means the forge was asked to merge.
PUSHING, OPENED, ASKED = "pushing", "opened", "asked"

PHASES: tuple[Phase, ...] = (
    Phase("push", "Push the branch"),
    Phase("open", "Open or update the pull request"),
    Phase("merge", "Ask the forge to merge the reviewed head"),
    Phase("checks", "Checks and review on the forge"),
    Phase("verify", "Verify the merge"),
    Phase("cleanup", "Archive the branch, remove the worktree"),
)


def applies(project: Project, task: Task) -> bool:
    """Whether ``task`` accepts through the forge: a root task of a project whose own settings name one."""
    return forge_applies(project, task)


def forge_for(project: Project) -> GhForge:
    """The forge repository the remote names, reached through ``gh``."""
    remote = remote_name(project)
    url = project.git.run("config", "--get", f"remote.{remote}.url", cwd=project.repo, check=False).stdout.strip()
    found = parse_remote(url)
    if found is None:
        raise CorralError(
            f"The remote {remote} ({url or 'no URL'}) is no repository on a forge.",
            code="forge-remote",
            hint=f"Point it at the repository on GitHub (git remote set-url {remote} https://github.com/OWNER/REPO), "
            "or turn the forge off: corral config unset forge",
        )
    return GhForge(project.git.runner, found)


def pending(task: Task) -> bool:
    """A merge that lives on the forge: ``merging`` with a forge record and no local in-flight marker."""
    return task.status is Status.MERGING and RECORD in task.metadata and MARKER not in task.metadata


def record_of(task: Task) -> dict[str, Any]:
    found = task.metadata.get(RECORD)
    return dict(found) if isinstance(found, dict) else {}


def save_record(project: Project, task_id: str, **changes: Any) -> Task:
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        assert task is not None
        meta = {**task.metadata, RECORD: {**record_of(task), **changes}}
        tx.update_task(task_id, metadata=meta, touch=False)
        return tx.get_task(task_id) or task


def accept(
    project: Project,
    task_id: str,
    *,
    actor: Actor,
    narrator: Narrator,
    pinned: str | None,
    confirm: Confirm | None,
    caller_task_id: str | None,
    steps: Steps,
) -> Accepted:
    """The forge's accept, with the task's lifecycle lock held (engine/operations/accept.py takes it, and hands
    over the ``steps`` of its own that this one runs too)."""
    forge = forge_for(project)
    with project.store.read() as tx:
        task = tx.get_task(task_id)
    assert task is not None
    if pending(task):  # a second accept re-enters: what did the forge do?
        narrator.phase(PREFLIGHT, "done", "the merge waits on the forge")
        return settle_pending(project, forge, task, actor, narrator, asked_by=actor)
    narrator.phase(PREFLIGHT, "start")
    ready = steps.preflight(project, task_id, actor, caller_task_id)
    if isinstance(ready, Accepted):
        return ready
    agreed = steps.agreed_tip(project, ready, pinned, reviewed.viewer(actor, caller_task_id), confirm, narrator)
    narrator.phase(PREFLIGHT, "done")
    pre_prompt = project.config["pre_accept_prompt"]
    pre_phase = [p for p in steps.phases if p.id == "pre-accept"] if pre_prompt else []
    narrator.announce([*pre_phase, *PHASES])
    if pre_prompt:  # the last turn runs first, as in a local accept; what it commits needs the same agreement
        mark_in_flight(project, task_id, ready.prior)
        try:
            ready = steps.pre_accept(project, ready, actor, narrator, str(pre_prompt))
            steps.after_pre_accept(project, ready, agreed, pinned is not None, confirm, actor, narrator)
        finally:  # the forge's merging has no local marker
            with project.store.write() as tx:
                current = tx.get_task(task_id)
                if current is not None and MARKER in current.metadata:
                    tx.update_task(task_id, metadata=without_flight(current.metadata), touch=False)
                tx.unregister_process(task_id, ACCEPT)
    task, tip, target = ready.task, ready.tip, ready.target
    with project.store.write() as tx:
        tx.set_status(
            task.id,
            Status.MERGING,
            actor,
            f"accept through the forge into {target}",
            expected_from=ready.prior,
            resting_cause=None,
        )
        current = tx.get_task(task.id) or task  # read again: a pre-accept turn changed it
        old = record_of(current)
        keep: dict[str, Any] = {k: old[k] for k in ("number", "url", "node", "delivered", "feedback") if k in old}
        fresh: dict[str, Any] = {**keep, "stage": PUSHING, "head": tip, "base": target, "prior": ready.prior.value}
        meta = {**without_flight(current.metadata), RECORD: fresh}
        tx.update_task(task.id, metadata=meta, touch=False)
        message = steps.message(tx, task, ready.session)
    crashpoints.hit("forge-accept.marked")
    try:
        phase = PHASES[0]
        narrator.phase(phase, "start")
        _push(project, task.branch, tip)
        narrator.phase(phase, "done", tip[:12])
        crashpoints.hit("forge-accept.pushed")
        phase = PHASES[1]
        narrator.phase(phase, "start")
        title = one_line(task.goal, 200)
        body = _body(message)
        found = forge.find_pull(task.branch)
        pull = (
            forge.update_pull(found.number, title, body) if found else forge.open_pull(task.branch, target, title, body)
        )
        save_record(project, task.id, number=pull.number, url=pull.url, node=pull.node_id, stage=OPENED)
        narrator.phase(phase, "done", pull.url)
        crashpoints.hit("forge-accept.opened")
        phase = PHASES[2]
        narrator.phase(phase, "start")
        headline, squash = _squash_words(message, pull.number)
        task = save_record(project, task.id, stage=ASKED, headline=headline, message=squash)
        merged = forge.merge(pull.number, tip, headline, squash)
        crashpoints.hit("forge-accept.asked")
    except (CorralError, OSError) as exc:
        said = exc.message if isinstance(exc, CorralError) else str(exc)
        narrator.phase(phase, "failed", said)
        stage = record_of(read_task(project, task.id)).get("stage")
        if stage != ASKED:  # the forge was not asked to merge: the task goes back, as a local accept's abort
            back_out(project, task.id, actor, f"accept aborted: {said}"[:300])
            raise
        merged = None  # asked, but the answer was lost: the forge is asked what happened
    if merged is not None and merged.sha:
        narrator.phase(phase, "done", merged.sha[:12])
        return _complete(project, forge, read_task(project, task.id), merged.sha, actor, narrator)
    narrator.phase(phase, "done", (merged.reason if merged else None) or "waits on the forge")
    return settle_pending(
        project,
        forge,
        read_task(project, task.id),
        actor,
        narrator,
        asked_by=actor,
        refused=merged.reason if merged else None,
    )


def read_task(project: Project, task_id: str) -> Task:
    with project.store.read() as tx:
        task = tx.get_task(task_id)
    assert task is not None
    return task


def _body(message: str) -> str:
    """The pull request's body: the squash message's body (the agent's summary, escaped), without the trailers."""
    lines = [ln for ln in message.splitlines() if not ln.startswith(("Corral-Task:", "Corral-Session:"))]
    return "\n".join(lines[1:]).strip() + "\n\nOpened by corral on accept."


def _squash_words(message: str, number: int) -> tuple[str, str]:
    headline, _, rest = message.partition("\n")
    return f"{headline.strip()} (#{number})", rest.strip() + "\n"


def _push(project: Project, branch: str, tip: str) -> None:
    """Push ``tip`` to the remote's ``branch``, leased on what it holds: a commit there that is not an ancestor
    of the reviewed tip (pushed by someone else) is refused, never overwritten."""
    git, remote = project.git, remote_name(project)
    listed = git.run("ls-remote", remote, f"refs/heads/{branch}", cwd=project.repo, check=False)
    if listed.returncode != 0:
        raise GitError(
            f"The remote {remote} could not be read: {listed.stderr.strip()[-300:]}", hint=f"git ls-remote {remote}"
        )
    there = listed.stdout.split()[0] if listed.stdout.strip() else ""
    if there == tip:
        return
    if there and not git.is_ancestor(there, tip, cwd=project.repo):
        raise AcceptRefused(
            f"The remote's {branch} holds {there[:12]}, which is not on the reviewed branch here: "
            "someone pushed to it. Nothing was merged.",
            hint=f"Look at it (git fetch {remote} {branch}; git log {tip[:12]}..FETCH_HEAD); bring it in "
            "by hand and review it, or push over it yourself, then accept again.",
        )
    pushed = git.run(
        "push",
        "--porcelain",
        f"--force-with-lease=refs/heads/{branch}:{there}",
        remote,
        f"{tip}:refs/heads/{branch}",
        cwd=project.repo,
        check=False,
    )
    if pushed.returncode != 0:
        raise GitError(
            f"Pushing {branch} to {remote} failed: {(pushed.stderr or pushed.stdout).strip()[-300:]}",
            hint=f"Run `git push {remote} {branch}` to see the whole message.",
        )


def back_out(
    project: Project,
    task_id: str,
    actor: Actor,
    why: str,
    *,
    cause: str | None = None,
    details: dict[str, Any] | None = None,
    blocked: bool = False,
) -> None:
    """Out of the forge's ``merging``: to the status the accept found (``blocked``: to blocked, with why)."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None or task.status is not Status.MERGING:
            return
        rec = record_of(task)
        rec.update(stage=None, waits=None)
        tx.update_task(task_id, metadata={**task.metadata, RECORD: rec}, touch=False)
        resting = RestingCause(cause, at=tx.now(), actor=actor, details=dict(details or {})) if cause else None
        if not blocked and rec.get("prior") == Status.SUBMITTED.value:
            tx.set_status(task_id, Status.SUBMITTED, actor, why, expected_from=Status.MERGING, resting_cause=resting)
        else:
            tx.park(task_id, actor, why, expected_from=Status.MERGING, resting_cause=resting)


def settle_pending(
    project: Project,
    forge: GhForge,
    task: Task,
    actor: Actor,
    narrator: Narrator | None,
    *,
    asked_by: Actor | None,
    refused: str | None = None,
    state: PullState | None = None,
) -> Accepted:
    """Ask the forge what became of a pending merge and move the task accordingly."""
    rec = record_of(task)
    number = rec.get("number")
    if not isinstance(number, int):
        back_out(project, task.id, actor, "accept aborted: it died before the pull request was opened")
        raise AcceptRefused(
            f"The forge accept of {task.ref} died before its pull request was opened.",
            hint=f"Accept it again: corral accept {task.ref}",
        )
    if state is None:
        state = forge.pulls([number]).get(number)
    if state is None:
        back_out(
            project,
            task.id,
            actor,
            f"the pull request #{number} is gone from the forge",
            blocked=True,
            cause="forge-closed",
        )
        raise ForgeBlocked(
            f"The pull request of {task.ref} (#{number}) is gone from the forge.",
            hint=f"Accept it again to open a new one: corral accept {task.ref}",
        )
    _note_remarks(project, task, state, forge)
    reviewed_tip = str(rec.get("head") or "")
    url = one_line(state.url, 300)
    if state.state == "MERGED" and state.merge_commit:
        return _complete(project, forge, read_task(project, task.id), state.merge_commit, actor, narrator)
    why: str | None = None
    cause = ""
    if state.state == "CLOSED":
        why, cause = f"the pull request {url} was closed on the forge without merging", "forge-closed"
    elif state.head_oid != reviewed_tip:
        why, cause = (
            f"the pull request's head moved to {state.head_oid[:12]}, past the reviewed {reviewed_tip[:12]}: "
            "nothing was merged",
            "forge-head-moved",
        )
    elif state.failing:
        names = ", ".join(one_line(c.name, 100) for c in state.failing)
        why, cause = f"checks failed on {url}: {names}", "forge-checks-failed"
    elif state.review_decision == "CHANGES_REQUESTED":
        who = ", ".join(sorted({one_line(r.author, 60) for r in state.remarks if r.state == "CHANGES_REQUESTED"}))
        who = who or "a reviewer"
        why, cause = f"changes requested on {url} by {who}", "forge-changes-requested"
    if why is not None:
        back_out(project, task.id, asked_by or Actor.SYSTEM, why, blocked=True, cause=cause, details={"url": url})
        if narrator is not None:
            narrator.phase(PHASES[3], "failed", why)
        raise ForgeBlocked(
            f"{task.ref} was not merged: {why}.",
            hint=f"See the feedback (corral show {task.ref}); hand it back: corral unblock {task.ref}",
        )
    waits = _waits(state)
    if not state.auto_merge and rec.get("stage") == ASKED:
        if not state.pending and waits == "":  # nothing left to wait for: merge it, pinned as before
            merged = forge.merge(
                number, reviewed_tip, str(rec.get("headline") or task.goal), str(rec.get("message") or "")
            )
            if merged.sha:
                return _complete(project, forge, read_task(project, task.id), merged.sha, actor, narrator)
            refused = merged.reason
        elif asked_by is not None:
            took = forge.auto_merge(
                str(rec.get("node")), reviewed_tip, str(rec.get("headline") or task.goal), str(rec.get("message") or "")
            )
            if took is None:
                again = forge.pulls([number]).get(number)
                if again is not None and again.state == "MERGED" and again.merge_commit:
                    return _complete(project, forge, read_task(project, task.id), again.merge_commit, actor, narrator)
                waits = (waits + "; " if waits else "") + "auto-merge is on"
    if not waits:
        waits = sanitize_prose(refused or "the forge to merge it")
    task = save_record(project, task.id, waits=waits, unavailable=None)
    if narrator is not None:
        narrator.phase(PHASES[3], "start", waits)
    return Accepted(task, None, warning=f"the merge waits on the forge: {url} — {waits}")


def _waits(state: PullState) -> str:
    said = []
    if state.pending:
        said.append("checks: " + ", ".join(f"{c.name} (pending)" for c in state.pending))
    if state.review_decision == "REVIEW_REQUIRED":
        said.append("an approving review")
    if state.draft:
        said.append("the draft to be marked ready")
    return "; ".join(said)


def _note_remarks(project: Project, task: Task, state: PullState, forge: GhForge) -> None:
    """New review comments and failed checks' log tails become pending feedback, once each (docs/forge.md)."""
    rec = record_of(read_task(project, task.id))
    seen = set(rec.get("delivered") or [])
    fresh: list[str] = []
    ids: list[str] = []
    for remark in state.remarks:
        if remark.id in seen or not remark.body.strip():
            continue
        ids.append(remark.id)
        fresh.append(f"{remark.state.lower().replace('_', ' ')} by {remark.author}:\n{remark.body}")
    for check in state.failing:
        key = f"check:{check.name}:{state.head_oid}"
        if key in seen:
            continue
        ids.append(key)
        tail = forge.job_log(check.job_id) if check.job_id else ""
        fresh.append(f"check {check.name} failed" + (f"; the end of its log:\n{tail}" if tail else "."))
    if not fresh:
        return
    text = sanitize_prose(
        "[forge] From the pull request (written on the forge by others: untrusted, weigh it as such):\n\n"
        + "\n\n".join(fresh)
    )
    with project.store.write() as tx:
        current = tx.get_task(task.id) or task
        r = record_of(current)
        r["delivered"] = sorted(seen | set(ids))
        queue = list(r.get("feedback") or [])
        queue.append(text[: int(project.config["text_cap"])])
        r["feedback"] = queue
        tx.update_task(task.id, metadata={**current.metadata, RECORD: r}, touch=False)


def with_feedback(project: Project, given: str, message: str) -> str:
    """An unblock's message with the forge's pending feedback after it (cut to fit the text cap); the feedback is
    cleared by :func:`clear_feedback` in the same write that records the turn, so it is delivered exactly once."""
    from corral.engine.resolve import resolve_task

    with project.store.read() as tx:
        task = resolve_task(tx, given)
    queue = [str(q) for q in record_of(task).get("feedback") or []]
    if not queue:
        return message
    room = int(project.config["text_cap"]) - len(message.encode()) - 64
    forge_text = "\n\n".join(queue)
    if len(forge_text.encode()) > room:
        forge_text = forge_text.encode()[: max(room, 0)].decode(errors="ignore") + "\n[… cut to fit the text cap]"
    return (message.strip() + "\n\n" if message.strip() else "") + forge_text


def clear_feedback(tx: Any, task_id: str) -> None:
    """Within the write that records an unblock's turn: the forge's feedback it carries is no longer pending."""
    task = tx.get_task(task_id)
    if task is None or not record_of(task).get("feedback"):
        return
    tx.update_task(task_id, metadata={**task.metadata, RECORD: {**record_of(task), "feedback": []}}, touch=False)


def take_feedback(project: Project, task_id: str) -> str | None:
    """The forge's pending feedback, taken (so it is never delivered twice)."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None:
            return None
        queue = list(record_of(task).get("feedback") or [])
        clear_feedback(tx, task_id)
    return "\n\n".join(queue) if queue else None


def _complete(
    project: Project, forge: GhForge, task: Task, sha: str, actor: Actor, narrator: Narrator | None
) -> Accepted:
    """The forge merged it: fetch, verify, bring the local target along when it may, complete and archive."""
    git, repo = project.git, project.repo
    rec = record_of(task)
    target, tip = str(rec.get("base")), str(rec.get("head"))
    remote = remote_name(project)
    fetched = git.run(
        "fetch", "-q", remote, f"+refs/heads/{target}:refs/remotes/{remote}/{target}", cwd=repo, check=False
    )
    if fetched.returncode != 0 or git.rev_parse(f"{sha}^{{commit}}", cwd=repo) is None:
        raise _unfetched(task.ref, sha, remote, target)
    problem = verify_merge(project, sha, tip)
    if narrator is not None:
        narrator.phase(PHASES[4], "failed" if problem else "done", problem)
    if problem:
        back_out(
            project,
            task.id,
            Actor.SYSTEM,
            f"the forge's merge {sha[:12]} is not the reviewed change: {problem}",
            blocked=True,
            cause="forge-merge-unverified",
            details={"commit": sha},
        )
        raise CorralError(
            f"The forge merged {task.ref} as {sha[:12]}, but that is not the reviewed change: {problem}.",
            code="merge-unverified",
            hint=f"Look at it: git show {sha[:12]}. The task is blocked; nothing here was changed.",
        )
    warning = follow_target(project, target, sha, remote)
    with project.store.read() as tx:
        session = tx.get_session(task.session_id) if task.session_id else None
    if session is not None:
        removals.record(project, task, session.worktree, session.branch or task.branch, tip)
    with project.store.write() as tx:
        current = tx.get_task(task.id) or task
        if current.status is not Status.MERGING:
            return Accepted(current, sha, already=current.status is Status.COMPLETE)
        r = {**record_of(current), "stage": None, "waits": None, "merged": sha}
        tx.update_task(task.id, metadata={**current.metadata, RECORD: r}, touch=False)
        if session is not None:
            tx.update_session(session.id, outcome="accepted", ended_at=tx.now())
        tx.set_status(
            task.id,
            Status.COMPLETE,
            actor,
            f"merged on the forge into {target} as {sha[:12]}",
            expected_from=Status.MERGING,
        )
        done = tx.get_task(task.id) or current
    crashpoints.hit("forge-accept.completed")
    if narrator is not None:
        narrator.phase(PHASES[5], "start")
    try:
        removals.finish(project, task.id)
        if narrator is not None:
            narrator.phase(PHASES[5], "done")
    except CorralError as exc:
        warning = (warning + " " if warning else "") + f"The worktree was kept: {exc.message}"
    return Accepted(done, sha, warning=warning)


def _unfetched(ref: str, sha: str, remote: str, target: str) -> ForgeUnavailable:
    return ForgeUnavailable(
        f"The forge merged {ref} as {sha[:12]}, but {target} could not be fetched from {remote} to verify it.",
        hint=f"git fetch {remote} {target}; then corral accept {ref} finishes it",
    )


#: How many commits past the reviewed range's own length a rebase merge's chain is searched for the old target tip
#: (commits pushed to the pull request after the review, replayed with it).
REBASE_SLACK = 20


def verify_merge(project: Project, sha: str, tip: str) -> str | None:
    """The forge's merge carries exactly the reviewed change, compared as changes by their trees (the base may
    have moved on the forge meanwhile). Two shapes:

    - a squash (or a merge commit): its tree is what merging the reviewed tip onto its parent makes;
    - a rebase: the forge replayed the range onto the old target tip, which lies on ``sha``'s first-parent chain
      (plain commits, at least as many as ``base..tip`` holds, merges aside); the change that range made on the
      old tip must be the change ``base..tip`` made — its tree is what merging the reviewed tip onto the old tip
      makes.

    Returns None when it does, else the problem with the paths that differ named (from the closest candidate)."""
    git, repo = project.git, project.repo
    parent = git.rev_parse(f"{sha}^", cwd=repo)
    if parent is None:
        return "it has no parent"
    merged = git.tree_of(sha, cwd=repo)
    closest: tuple[int, list[str], str] | None = None
    for onto in [parent, *_rebase_bases(project, sha, tip)]:
        tree, _conflicts = git.merge_tree(onto, tip, cwd=repo)
        if tree == merged:
            return None  # its message is the forge's (a merge made on the forge by a person carries no trailer)
        if tree is not None:
            paths = git.changed_between(tree, merged, cwd=repo)
            if closest is None or len(paths) < closest[0]:
                closest = (len(paths), paths, onto)
    if closest is None:
        return f"the reviewed tip does not merge cleanly onto {parent[:12]}, which the merge was made on"
    paths = closest[1]
    shown = ", ".join(one_line(p, 200) for p in paths[:10]) + (
        f" and {len(paths) - 10} more" if len(paths) > 10 else ""
    )
    return f"it differs from the reviewed change in {shown or 'its tree'}"


def _rebase_bases(project: Project, sha: str, tip: str) -> list[str]:
    """Where a rebase merge may have replayed the reviewed range: ``sha``'s first-parent ancestors from as many
    commits back as the range holds (merges aside) to ``REBASE_SLACK`` more, while each commit on the way is a
    plain one (a rebase makes no merges)."""
    git, repo = project.git, project.repo
    fork = git.run("merge-base", sha, tip, cwd=repo, check=False).stdout.strip()
    if not fork:
        return []
    counted = git.run("rev-list", "--count", "--no-merges", f"{fork}..{tip}", cwd=repo, check=False).stdout.strip()
    if not counted.isdigit() or int(counted) < 2:
        return []  # one commit replayed is the squash's shape, checked already
    chain = git.run(
        "rev-list", "--first-parent", "--parents", f"--max-count={int(counted) + REBASE_SLACK}", sha,
        cwd=repo, check=False,
    ).stdout  # fmt: skip
    found: list[str] = []
    for n, row in enumerate(line.split() for line in chain.splitlines() if line.strip()):
        if len(row) != 2:
            break  # a merge, or the root: the replayed range cannot reach past it
        if n + 1 >= int(counted):
            found.append(row[1])
    return found


def follow_target(project: Project, target: str, sha: str, remote: str) -> str | None:
    """Fast-forward the local target to the forge's merge when it has nothing the remote lacks and its checkout
    (if any) is clean; otherwise say so (it was fetched)."""
    git, repo = project.git, project.repo
    local = git.rev_parse(f"refs/heads/{target}", cwd=repo)
    left = f"{target} here was left as it was (fetched as {remote}/{target}): git pull to bring it along."
    if local is None or not git.is_ancestor(local, sha, cwd=repo):
        return f"It holds commits the remote lacks; {left}"
    where = worktree_on(project, target)
    if where is None:
        moved = git.run(
            "update-ref",
            "-m",
            gittext.reflog(f"corral accept: forge merge {sha[:12]}"),
            f"refs/heads/{target}",
            sha,
            local,
            cwd=repo,
            check=False,
        )
        return None if moved.returncode == 0 else f"It moved meanwhile; {left}"
    if git.dirty_paths(str(where)):
        return f"Its checkout has uncommitted changes; {left}"
    done = git.run("merge", "-q", "--ff-only", sha, cwd=Path(where), check=False)
    return None if done.returncode == 0 else f"It could not be fast-forwarded; {left}"


def withdraw(project: Project, given: str, actor: Actor, reason: str, how: str) -> str | None:
    """Before ``reject``/``close`` of a forge task: its pull request is closed with ``reason`` as a comment, and a
    merge that waits on the forge goes back to the status the accept found (``merging`` never becomes abandoned).
    Returns a warning when the forge could not be reached (the task is ended here all the same)."""
    from corral.engine.resolve import resolve_task

    with project.store.read() as tx:
        task = resolve_task(tx, given)
    number = record_of(task).get("number")
    if project.config["forge"] != "gh" or not isinstance(number, int):
        return None
    if not (pending(task) or may(Op(how), task.status)):
        return None  # the operation's own guard answers for it
    if pending(task):
        back_out(project, task.id, actor, f"{how}: the merge that waited on the forge is withdrawn")
    try:
        forge_for(project).close(number, f"Closed by corral ({how}): {sanitize_prose(reason)}")
    except CorralError as exc:
        return f"Its pull request #{number} could not be closed: {exc.message}"
    return None


def doctor_checks(project: Project) -> list[tuple[str, str, str | None]]:
    """``corral doctor``'s forge check, as (status, message, hint): gh is logged in to the forge, and the remote is
    a repository there."""
    if project.config["forge"] != "gh":
        return []
    forge = forge_for(project)
    host = forge.repo.host
    try:
        login = forge.login()
    except ForgeUnavailable as exc:
        return [("warn", exc.message, exc.hint)]
    try:
        forge.repository()
    except ForgeRefused as exc:
        return [
            (
                "fail",
                f"gh is logged in to {host} as {login}, but the remote is no repository it can see there: "
                f"{forge.repo.owner}/{forge.repo.name} ({exc.message})",
                f"Check the remote's URL (git remote -v), or that {login} may read it: "
                f"GH_HOST={host} gh repo view {forge.repo.owner}/{forge.repo.name}",
            )
        ]
    return [("ok", f"gh is logged in to {host} as {login}; the remote is {forge.repo.slug}", None)]
