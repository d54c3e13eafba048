"""The merged-branch sweep: a resting task whose work is already on its target completes (zombie → complete)."""

from __future__ import annotations

from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.recovery.merges import complete_merged
from corral.engine.runtime import protocol as proto
from corral.engine.workspace import target_branch


def sweep_merged_branches(project: Project) -> int:
    """Seed 002 sweep 4: a resting task whose work is already on its target → zombie → complete.

    Merged means: the branch has commits beyond its session's base and the target contains
    the tip, or the target carries a commit whose trailers name this task and its current
    session. (Upstream is merged into a task branch with ``--no-ff``, so a branch that
    only took in its target never looks merged: its merge commit is not on the target.)
    Only resting tasks are looked at, and only when their branch or target moved since the
    last look (remembered in the state directory), so a pass stays cheap.
    """

    resting = (Status.BLOCKED, Status.CONFLICT, Status.INTERRUPTED, Status.SUBMITTED)
    with project.store.read() as tx:
        candidates = [(t, tx.get_session(t.session_id)) for t in tx.tasks(resting) if t.session_id]
        targets = {t.id: target_branch(tx, t) for t, _ in candidates}
    if not candidates:
        return 0
    git, repo = project.git, project.repo
    tips: dict[str, str] = {}
    out = git.run("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", cwd=repo, check=False).stdout
    for line in out.splitlines():
        name, _, sha = line.partition(" ")
        tips[name.removeprefix("refs/heads/")] = sha
    seen_path = project.paths.root / "merged-sweep.json"
    seen = proto.read(seen_path) or {}
    before = dict(seen)
    trailers: dict[str, set[tuple[str, str]]] = {}
    completed = 0
    for task, session in candidates:
        if session is None or not session.base_commit:
            continue
        target, tip = targets[task.id], tips.get(task.branch)
        target_tip = tips.get(target)
        if target_tip is None:
            continue
        key = f"{target_tip}:{tip}"
        if seen.get(task.id) == key:
            continue
        merged = tip is not None and tip != session.base_commit and git.is_ancestor(tip, target_tip, cwd=repo)
        if not merged:
            if target not in trailers:
                trailers[target] = {(t["task"], t["session"]) for t in git.trailers(target_tip, cwd=repo, limit=500)}
            merged = (task.id, session.id) in trailers[target]
        if merged:
            complete_merged(project, task, session, "its work is on its target")
            completed += 1
        else:
            seen[task.id] = key
    if seen != before:  # an unchanged pass writes nothing
        proto.write_json(seen_path, {k: v for k, v in seen.items() if k != "protocol_version"}, durable=False)
    return completed
