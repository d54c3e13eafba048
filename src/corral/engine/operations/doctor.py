"""``corral doctor``: checks of the machine, the harnesses, the state directory and the tasks, with repairs.

Each check says what it found and, when something is wrong, what to do. ``doctor`` also lists
every project state under ``CORRAL_HOME`` whose repository moved or is gone (to reattach or
archive). ``doctor T`` re-derives a paused task's label, and takes an interrupted task whose
failed upstream merge was resolved by hand to blocked.

``doctor`` also checks the repository's objects (:func:`check_objects`): an agent that could
write the object store can delete or rewrite what a task's branch, or ``main``, is made of.

Outside a repository ``doctor`` checks the install instead (:func:`run_install`): git, corral's home,
the agent CLIs and their logins, bubblewrap, the daemon and the team's engine, the first thing a new
user runs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import msgspec
from msgspec import Struct

from corral.adapters.harness import NAMES, make_harness
from corral.adapters.process import Runner
from corral.domain.actors import Actor
from corral.domain.records import Task
from corral.domain.sanitize import sanitize_field
from corral.domain.status import PAUSED, TERMINAL, Status
from corral.engine.config import Config, harness_settings, proposals
from corral.engine.operations.preflight import HarnessReport, harness_hint, report, report_one
from corral.engine.orphan_states import orphans
from corral.engine.placement import chooses_shared_store
from corral.engine.private_state import private_mode_findings
from corral.engine.project import Project, backups, backups_dir, restore_hint
from corral.engine.recovery import hand_merged
from corral.engine.resolve import resolve_task
from corral.errors import CorralError
from corral.store.sqltx import reset_value

MIN_GIT = (2, 38)  # merge-tree --write-tree
#: How many bad objects doctor names one by one (the count after them is whole).
OBJECTS_SHOWN = 10
_OID = r"[0-9a-f]{40}(?:[0-9a-f]{24})?"
#: A loose object's path (``objects/d0/e0fd…``): the name git stores it under.
_OBJECT_PATH = re.compile(r"objects/([0-9a-f]{2})/([0-9a-f]{38}(?:[0-9a-f]{24})?)\b")
_MISSING = re.compile(rf"^missing (\w+) ({_OID})(?: \((.*)\))?$")
_MISSING_OBJECT = re.compile(rf"missing (\w+) object '?({_OID})")
_POINTER = re.compile(rf"^error: (\S+): invalid sha1 pointer ({_OID})")
_LOOSE = re.compile(rf"loose object ({_OID})")
_BROKEN_TO = re.compile(rf"\bto +(\w+) ({_OID})(?: \((.*)\))?")
_ANY_OID = re.compile(rf"\b({_OID})\b")


class Check(Struct, frozen=True):
    name: str
    status: str  # ok | warn | fail | fixed
    message: str
    hint: str | None = None

    def to_json(self) -> dict[str, str | None]:
        """The check as --json gives it: its fields by name."""
        doc: dict[str, str | None] = msgspec.to_builtins(self)
        return doc


def check_git(project: Project) -> Check:
    if shutil.which(project.git.executable) is None:
        return Check("git", "fail", "git is not on PATH.", "Install git 2.38 or newer.")
    return _git_version(project.git.version())


def _git_version(version: str) -> Check:
    found = re.search(r"(\d+)\.(\d+)", version)
    numbers = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    if numbers < MIN_GIT:
        return Check("git", "fail", f"{version} is too old.", "corral needs git 2.38 or newer.")
    return Check("git", "ok", version)


def check_state_dir(project: Project) -> Check:
    root = project.paths.root
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".doctor-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return Check(
            "state",
            "fail",
            f"{root} is not writable: {exc.strerror}.",
            "Point CORRAL_HOME at a writable local directory.",
        )
    return Check("state", "ok", str(root))


def _fault(name: str, exc: CorralError) -> Check:
    """A coded error as a failed check: its code leads the message, its hint is the check's."""
    return Check(name, "fail", f"{exc.code}: {exc.message}", exc.hint)


def check_store(project: Project) -> list[Check]:
    """The database: it opens, its schema, then every fault its health finds (each coded, with a hint)."""
    try:
        store = project.store
        version = store.schema_version()
        faults = store.health()
    except CorralError as exc:
        return [_fault("database", exc)]
    if faults:
        return [_fault("database", fault) for fault in faults]
    if project.placement.over_network():
        # PostgreSQL: the connection answered, the project's schema is there at this corral's version.
        return [Check("database", "ok", f"PostgreSQL {store.location}, schema version {version} (connected)")]
    return [Check("database", "ok", f"{store.location} (schema {version})")]


def check_task_rows(project: Project) -> list[Check]:
    """Task rows that do not decode: every read of many tasks skips them (the project works on), so
    only here does a person learn of them, with the statement that makes one readable again."""
    with project.store.read() as tx:
        bad = tx.unreadable_tasks()
    out = []
    for task_id, ref, fault in bad:
        reset = reset_value(fault)
        if reset is not None and not project.placement.over_network():
            column, value = reset
            sql = f"UPDATE tasks SET {column} = {value} WHERE id = '{task_id.replace(chr(39), chr(39) * 2)}'"
            typed = f'"{sql}"' if re.fullmatch(r"[\w{}\[\]' =-]+", sql) else shlex.quote(sql)
            fix = (
                f"Back it up first (corral backup), then reset that column (the rest of the task stays): "
                f"sqlite3 {shlex.quote(str(project.paths.db))} {typed}"
            )
        else:
            fix = f"{restore_hint(project.paths)}; or rewrite that row's column by hand."
        message = sanitize_field(
            f"task-row-unreadable: {ref} ({task_id}): {fault}; lists and sweeps skip it, every other task reads."
        )
        out.append(Check("task-row", "fail", message, sanitize_field(fix)))
    return out


def check_backups(project: Project) -> Check:
    found = backups(project.paths)
    if not found:
        return Check(
            "backups",
            "warn",
            f"no backup in {backups_dir(project.paths)}",
            "Make one now and then: corral backup (online; a daemon may run meanwhile).",
        )
    return Check("backups", "ok", f"{len(found)}, newest {found[-1]}")


def check_worktrees(project: Project) -> list[Check]:
    """A live task whose worktree was removed by hand: its branch still holds every commit."""
    out = []
    with project.store.read() as tx:
        for task in tx.tasks():
            if task.status in TERMINAL or not task.session_id:
                continue
            session = tx.get_session(task.session_id)
            if session is None or not session.worktree or os.path.isdir(session.worktree):
                continue
            branch = session.branch or task.branch
            out.append(
                Check(
                    "worktree",
                    "fail",
                    f"worktree-missing: {task.ref}'s worktree {session.worktree} is gone (removed by hand?).",
                    f"Its branch {branch} still holds every commit: see them with `git log {branch}`. "
                    "Uncommitted files that were only in that directory cannot come back from corral. "
                    "Run `git worktree prune` so git forgets the directory.",
                )
            )
    return out


def check_config(project: Project) -> list[Check]:
    out = []
    for item in project.config.unknown:
        out.append(Check("config", "warn", f"unknown setting {item}", "See `corral config show` for the names."))
    for item in project.config.ignored:
        out.append(Check("config", "warn", f"ignored {item}"))
    for proposal in proposals(project.config):
        if not proposal.adopted:
            out.append(Check("config", "warn", proposal.message(), f"Adopt it: {proposal.adopt_command}"))
    out += _unknown_harness(project.config)
    return out or [Check("config", "ok", "settings are valid")]


def _unknown_harness(config: Config) -> list[Check]:
    """A ``harness`` setting no harness answers to (a file edited by hand): every start would be refused."""
    name = str(config["harness"])
    if name in NAMES:
        return []
    value = config.values.get("harness")
    where = f" (from {value.origin})" if value is not None and value.origin else ""
    return [Check("config", "fail", f"harness = {name!r}{where} is not a harness corral knows.", harness_hint(name))]


def check_tasks(project: Project) -> list[Check]:
    out = []
    with project.store.read() as tx:
        merging = tx.tasks([Status.MERGING])
        paused = tx.tasks(sorted(PAUSED))
        mislabelled = [t for t in paused if (t.status is Status.CONFLICT) != bool(tx.pending_paths(t.id))]
    for task in merging:
        out.append(
            Check(
                "merging",
                "warn",
                f"{task.ref} is merging.",
                f"If no accept is running, the reconciler restores it; see corral show {task.ref}",
            )
        )
    for task in mislabelled:
        out.append(repark(project, task.ref))
    return out


def repark(project: Project, given: str) -> Check:
    """Re-derive a paused task's label from its pending violations (blocked ⇄ conflict)."""
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        if task.status not in PAUSED:
            return Check("park", "ok", f"{task.ref} is {task.status.value}; nothing to re-derive.")
        change = tx.park(task.id, Actor.SYSTEM, "doctor re-derived the label", expected_from=task.status)
    if change is None:
        return Check("park", "ok", f"{task.ref} is {task.status.value}, as its violations say.")
    return Check("park", "fixed", f"{task.ref} was {change.from_status}, now {change.to_status.value}.")


def check_checkouts(project: Project) -> list[Check]:
    """Each checked-out branch's index and worktree against its ref, and stashes an accept kept."""
    from corral.engine.read.checkout import check

    found = check(project)
    return [Check("checkout", "warn", f.message, f.hint) for f in found] or [
        Check("checkout", "ok", "every checked-out branch matches its ref")
    ]


def check_private(project: Project) -> list[Check]:
    """corral's state is the user's alone: a file or directory others may read is named with its fix."""
    wide = private_mode_findings(project.paths)
    shown = [Check("private", "warn", f.message, f.fix) for f in wide[:20]]
    if len(wide) > 20:
        shown.append(Check("private", "warn", f"and {len(wide) - 20} more", f"chmod -R go-rwx '{project.paths.root}'"))
    return shown or [Check("private", "ok", f"{project.paths.root} is private to you")]


#: Toolchains people keep in their home, which a confined turn (and its post-turn check) cannot see
#: unless ``sandbox_read_paths`` names them: the home is hidden inside the sandbox.
HOME_TOOLCHAINS = (".cargo", ".rustup", ".nvm", ".pyenv", ".local/bin", ".deno", ".bun", ".volta", "go", ".sdkman")


def check_sandbox_reads(project: Project, home: str | None = None) -> list[Check]:
    """The usual toolchains found in the home that a confined turn would not see."""
    if project.config["sandbox"] == "off":
        return []
    where = Path(home or os.environ.get("HOME") or "/")
    given = [os.path.expanduser(str(p)) for p in project.config["sandbox_read_paths"] or ()]
    found = [where / name for name in HOME_TOOLCHAINS if (where / name).is_dir()]
    missing = [str(p) for p in found if not any(str(p) == g or str(p).startswith(g.rstrip("/") + "/") for g in given)]
    if not missing:
        return [Check("sandbox", "ok", "no toolchain in your home that a confined turn lacks")]
    listed = ", ".join(f"'{m}'" for m in missing)
    return [
        Check(
            "sandbox",
            "warn",
            f"a confined turn and its post-turn check cannot see {', '.join(missing)} (your home is hidden)",
            f'If they need it: corral config set sandbox_read_paths "[{listed}]"',
        )
    ]


def check_harnesses(project: Project) -> list[Check]:
    """Every configured harness: found, its version, whether it can tell it is logged in, how it is held read-only.

    A harness that cannot run is a warning, not a failure: the state is sound, and ``start``
    refuses it at once with the same hint.
    """
    return _harness_checks(report(project), project.config)


def _harness_checks(
    reports: list[HarnessReport], config: Config, optional: frozenset[str] = frozenset()
) -> list[Check]:
    """One check per harness report; a harness in ``optional`` (not the one the settings choose) that is not
    installed is said plainly, not warned of: only a task that names it needs it."""
    out = []
    for found in reports:
        read_only = f"; read-only: {found.read_only}" if found.read_only else ""
        if not found.ok and found.name in optional and not found.found:
            out.append(
                Check(
                    "harness", "ok", f"{found.name}: not installed (only a task with --harness {found.name} needs it)"
                )
            )
            continue
        if not found.ok:
            problem = (found.problem or "cannot run").rstrip(".")  # it names the executable it looked for
            out.append(Check("harness", "warn", f"{found.name}: {problem}{read_only}", found.hint))
            continue
        if found.logged_in is True:
            login = f"logged in ({found.login_source})" if found.login_source else "logged in"
        elif found.logged_in is False:
            login = "not logged in"
        else:
            login = "cannot tell whether it is logged in" + (f" ({found.login_source})" if found.login_source else "")
        tools = _agent_tools(config, found.name)
        message = f"{found.name}: {found.version or 'version unknown'} at {found.path}; {login}{read_only}; {tools}"
        if found.logged_in is False:
            out.append(Check("harness", "warn", message, f"Log in to {found.name} (run `{found.executable}` once)."))
        else:
            out.append(Check("harness", "ok", message))
    return out


def _agent_tools(config: Config, name: str) -> str:
    """Whether a turn's agent on this harness gets corral's tools (docs/mcp.md), in a few words."""
    if not bool(config["agent_tools"]):
        return "no corral tools for its agents (agent_tools is off)"
    try:
        harness = make_harness(name, harness_settings(config))
    except CorralError as exc:
        return f"corral tools unknown: {exc.message}"
    if harness.takes_agent_tools:
        return f"its agents get corral's tools {harness.agent_tools_door}"
    return f"no corral tools for its agents: {harness.agent_tools_absent}"


def hand_merge(project: Project, task: Task) -> Check:
    """``doctor T`` of an interrupted task: its failed upstream merge, if resolved by hand, makes it blocked."""
    answer = hand_merged.settle(project, task)
    if answer.moved:
        return Check("merge", "fixed", f"{task.ref} was interrupted, now blocked: {hand_merged.REASON}.")
    cause = task.resting_cause.code if task.resting_cause else None
    if cause == hand_merged.CAUSE:
        return Check(
            "merge",
            "warn",
            f"{task.ref} stays interrupted: {answer.why_not}.",
            f"Resolve the merge in its worktree and commit, then run `corral doctor {task.ref}` "
            f"(or `corral resume {task.ref}` to let the agent try again).",
        )
    return Check("merge", "ok", f"{answer.why_not or task.ref}; doctor changes nothing.", None)


def check_projects(project: Project) -> list[Check]:
    """This checkout's project, then every state under CORRAL_HOME whose repository moved or is gone."""
    ident = project.identity
    who = f"project {ident.project}, root commit {ident.root_commit[:12]}" if ident else "no commit yet: keyed by path"
    moved = f"; moved from {project.moved_from}, its tasks followed" if project.moved_from else ""
    out = [Check("project", "ok", f"{project.paths.root.name} ({who}{moved})")]
    for orphan in orphans(project.paths.home):
        if orphan.state == project.paths.root:
            continue  # this checkout's own state (a repository with no commit yet has no identity to record)
        out.append(Check("project", "warn", orphan.message, orphan.hint))
    return out


def check_workers(project: Project) -> list[Check]:
    """With the shared store: the workers it has heard from, and whether queued turns have one to run them."""
    from corral.domain.team import LeaseState, WorkerState

    if project.placement.queue_url() is None:
        return []
    with project.store.read() as tx:
        known = tx.workers()
        queued = tx.leases([LeaseState.QUEUED])
        now = tx.now()
    alive = [w for w in known if w.state is not WorkerState.STOPPED and not w.lost(now)]
    lost = [w for w in known if w.state is not WorkerState.STOPPED and w.lost(now)]
    out = []
    if lost:
        names = ", ".join(sorted(w.host for w in lost))
        out.append(Check("workers", "warn", f"lost (no heartbeat within their lease): {names}", "corral workers"))
    if queued and not alive:
        out.append(
            Check(
                "workers",
                "warn",
                f"{len(queued)} turn(s) queued and no worker running for this project",
                "Start one on a host with a clone: corral worker (with the clone in its worker_projects).",
            )
        )
    if not out and (alive or project.placement.goes_to_workers(project)):
        out.append(
            Check("workers", "ok", f"{len(alive)} running: {', '.join(sorted(w.host for w in alive)) or 'none'}")
        )
    return out


class _Bad(Struct):
    """One missing or corrupt object, and what reaches it."""

    oid: str
    what: str  # "missing blob", "corrupt object" …
    names: set[str]  # refs (and paths below them) that reach it


def _bad_objects(text: str, bad: dict[str, _Bad]) -> None:
    """Add what git's fsck or rev-list output names as missing or corrupt to ``bad``."""

    def add(oid: str, what: str, name: str | None = None) -> None:
        if name and "@{" in name:
            name = None  # a reflog entry, not a ref that reaches it now
        found = bad.setdefault(oid, _Bad(oid, what, set()))
        if _rank(what) > _rank(found.what):  # corrupt says more than missing, missing more than a bare mention
            found.what = what
        if name:
            found.names.add(name)

    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("?") and re.fullmatch(_OID, line[1:]):
            add(line[1:], "missing object")  # rev-list --missing=print
        elif m := _MISSING.match(line):
            add(m.group(2), f"missing {m.group(1)}", m.group(3))
        elif m := _POINTER.match(line):
            add(m.group(2), "missing object", m.group(1))
        elif line.startswith("broken link") and (m := _BROKEN_TO.search(line)):
            add(m.group(2), f"missing {m.group(1)}", m.group(3))
        elif "hash-path mismatch" in line and (p := _OBJECT_PATH.search(line)):
            add(p.group(1) + p.group(2), "rewritten object (its content does not match its name)")
        elif m := _LOOSE.search(line):
            add(m.group(1), "corrupt object")
        elif m := _MISSING_OBJECT.search(line):
            add(m.group(2), f"missing {m.group(1)}")
        elif line.startswith(("error:", "fatal:")) and "reflog" not in line:
            if p := _OBJECT_PATH.search(line):
                add(p.group(1) + p.group(2), "corrupt object")
            elif m := _ANY_OID.search(line):
                add(m.group(1), "object")


def _rank(what: str) -> int:
    if what.startswith(("corrupt", "rewritten")):
        return 3
    if what.startswith("missing"):
        return 1 if what == "missing object" else 2  # "missing blob" names its type
    return 0


def _task_of(name: str) -> str | None:
    """The task ref whose corral ref ``name`` (``refs/heads/corral/<ref>~2:src/a.py``) is, if any."""
    ref = re.split(r"[~^:@]", name, maxsplit=1)[0]
    for prefix in ("refs/heads/corral/", "refs/corral/archive/", "refs/corral/verified/", "refs/corral/kept/"):
        if ref.startswith(prefix):
            return ref.removeprefix(prefix).split("/", 1)[0] or None
    return None


def check_objects(project: Project) -> list[Check]:
    """Every object the refs reach is present and readable, and every loose object matches its name.

    Two reads of the repository: ``git rev-list --objects --all --missing=print --quiet`` walks
    every ref's commits and trees and prints only what is missing (on git.git's 850,000 objects:
    6.4 s of CPU, against 7.9 s for ``git fsck --connectivity-only`` and 14 s with
    ``--name-objects``); ``git fsck --no-full`` hashes the loose objects only — where a turn's
    objects land, and where a rewrite in place would otherwise pass unseen without reading
    every blob.
    Only when something is wrong does doctor pay for ``git fsck --connectivity-only
    --name-objects``, to say which refs (and paths) reach each bad object.
    """
    git, repo = project.git, project.repo
    limit = git.hook_timeout  # the whole history: the longer limit
    bad: dict[str, _Bad] = {}
    reach = git.run(
        "rev-list", "--objects", "--all", "--missing=print", "--quiet", cwd=repo, check=False, timeout=limit
    )
    _bad_objects(reach.stdout, bad)
    if reach.returncode != 0:
        _bad_objects(reach.stderr, bad)
    loose = git.run("fsck", "--no-full", "--no-dangling", "--name-objects", cwd=repo, check=False, timeout=limit)
    if loose.returncode != 0:
        _bad_objects(loose.stdout + "\n" + loose.stderr, bad)
    if not bad:
        if reach.returncode != 0:
            said = (reach.stderr or reach.stdout).strip().splitlines()
            return [
                Check(
                    "objects",
                    "fail",
                    f"git rev-list could not walk the repository: {said[-1] if said else reach.returncode}",
                    f"Run `git fsck --name-objects` in {repo} to see what is wrong.",
                )
            ]
        return [Check("objects", "ok", "every object the refs reach is present; loose objects match their names")]
    named = git.run(
        "fsck", "--connectivity-only", "--no-dangling", "--name-objects", cwd=repo, check=False, timeout=limit
    )
    _bad_objects(named.stdout + "\n" + named.stderr, bad)
    tips = git.run("for-each-ref", "--format=%(objectname) %(refname)", cwd=repo, check=False).stdout
    refs: dict[str, str] = {}
    for line in tips.splitlines():
        oid, _, ref = line.partition(" ")
        refs[ref] = oid
        if oid in bad:
            bad[oid].names.add(ref)
    stopped = reach.returncode != 0 or "fatal:" in loose.stderr or "fatal:" in named.stderr
    found = sorted(bad.values(), key=lambda b: (not b.names, b.oid))
    out = [_object_check(b, refs, repo) for b in found[:OBJECTS_SHOWN]]
    more = len(found) - OBJECTS_SHOWN
    if more > 0 or stopped:
        said = [f"and {more} more missing or corrupt objects"] if more > 0 else []
        said += ["git stopped at the first bad object it met, so there may be more"] if stopped else []
        out.append(
            Check("objects", "fail", "; ".join(said), f"Run `git fsck --name-objects` in {repo} to see every one.")
        )
    return out


def _object_check(bad: _Bad, refs: dict[str, str], repo: Path) -> Check:
    names = sorted(bad.names)
    where = f", reached from {', '.join(names[:3])}" + (" …" if len(names) > 3 else "") if names else ""
    message = f"{bad.what} {bad.oid[:12]}{where}"
    tasks = sorted({t for t in (_task_of(n) for n in names) if t})
    steps = []
    for task in tasks[:3]:
        kept = [r for r in (f"refs/corral/verified/{task}", f"refs/corral/archive/{task}") if r in refs]
        if kept:
            steps.append(
                f"task {task}: if {kept[0]} reaches no bad object (`git rev-list --objects {kept[0]}`), "
                f"put its branch back there: git update-ref refs/heads/corral/{task} {kept[0]}"
            )
    steps.append(
        f"an object another clone or the remote holds comes back with `git fetch` there; "
        f"`git fsck --name-objects` in {repo} lists every problem"
    )
    return Check("objects", "fail", sanitize_field(message), sanitize_field("; ".join(steps) + "."))


def _guarded(name: str, check: Callable[[], Check | list[Check]]) -> list[Check]:
    """A check that fails reports as a failed check: doctor itself never crashes."""
    try:
        found = check()
    except CorralError as exc:
        return [_fault(name, exc)]
    except Exception as exc:  # doctor reports what it cannot check, it does not stop
        return [Check(name, "fail", f"internal-error: {type(exc).__name__}: {exc}", "Report this with the message.")]
    return found if isinstance(found, list) else [found]


def run(project: Project, task: str | None = None) -> list[Check]:
    if task is not None:
        with project.store.read() as tx:
            found = resolve_task(tx, task)
        if found.status is Status.INTERRUPTED:
            return [hand_merge(project, found)]
        return [repark(project, task)]
    checks = [
        *_guarded("git", lambda: check_git(project)),
        *_guarded("state", lambda: check_state_dir(project)),
        *_guarded("config", lambda: check_config(project)),
    ]
    store_checks = _guarded("database", lambda: check_store(project))
    checks += store_checks
    checks += _guarded("backups", lambda: check_backups(project))
    if all(c.status != "fail" for c in store_checks):
        checks += _guarded("task-row", lambda: check_task_rows(project))
        checks += _guarded("tasks", lambda: check_tasks(project))
        checks += _guarded("worktree", lambda: check_worktrees(project))
        checks += _guarded("checkout", lambda: check_checkouts(project))
        checks += _guarded("workers", lambda: check_workers(project))
    checks += _guarded("objects", lambda: check_objects(project))
    checks += _guarded("private", lambda: check_private(project))
    checks += _guarded("project", lambda: check_projects(project))
    checks += _guarded("harness", lambda: check_harnesses(project))
    checks += _guarded("sandbox", lambda: check_sandbox_reads(project))
    from corral.engine.operations.forge_accept import doctor_checks  # gh's login and the remote (docs/forge.md)

    checks += _guarded("forge", lambda: [Check("forge", *found) for found in doctor_checks(project)])
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    checks.append(
        Check(
            "editor",
            "ok" if editor else "warn",
            editor or "no $EDITOR set",
            None if editor else "Set $EDITOR, or always pass -m, to write feedback.",
        )
    )
    return checks


def harness_warning(project: Project, task: Task) -> str | None:
    """What ``create`` warns of when the task's harness is not installed on this host (``start`` refuses it
    then, with the same install line), or None; None too when the project's turns run on the workers."""
    from corral.engine.operations.preflight import not_installed

    own = {name: entry.get("value") for name, entry in task.settings.items() if isinstance(entry, dict)}
    missing = not_installed(project, task.harness, own)
    if missing is None:
        return None
    return f"{missing.message} `corral start {task.ref}` will refuse until it is: {missing.hint}"


def run_install() -> list[Check]:
    """``doctor`` where no repository is: whether this install can do corral's work at all.

    git, the agent CLIs (found, their versions, logged in), bubblewrap, the daemon, corral's home and the
    person's own settings; a warning says what a task would meet, a failure what nothing can work without.
    """
    from corral.adapters.process import SubprocessRunner
    from corral.engine.config import lenient, load_config
    from corral.engine.paths import corral_home, user_config_file

    with lenient():
        config = load_config(user_file=user_config_file(), project_file=None)
    checks = [Check("config", "fail", f"{p.code}: {p.message}", p.hint) for p in config.problems]
    runner = SubprocessRunner()
    checks += _guarded("git", lambda: _install_git(runner))
    checks += _guarded("home", lambda: _install_home(corral_home()))
    settings_checks = _unknown_harness(config) + [
        Check("config", "warn", f"unknown setting {item}", "See `corral config show` for the names.")
        for item in config.unknown
    ]
    checks += settings_checks or (
        [] if config.problems else [Check("config", "ok", f"settings are valid ({user_config_file()})")]
    )
    chosen = str(config["harness"])
    names = [chosen] if chosen in NAMES else []
    names += [n for n in NAMES if n not in names and n != "command"]
    optional = frozenset(n for n in names if n != chosen)
    checks += _guarded(
        "harness",
        lambda: _harness_checks(_reports(names, harness_settings(config), runner), config, optional),
    )
    checks += _guarded("sandbox", lambda: _install_sandbox(str(config["sandbox"])))
    checks += _guarded("daemon", _install_daemon)
    checks += _guarded("team", lambda: _install_team(chooses_shared_store(config)))
    return checks


def _reports(names: list[str], values: dict[str, object], runner: object) -> list[HarnessReport]:
    from concurrent.futures import ThreadPoolExecutor  # doctor only

    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        return list(pool.map(lambda name: report_one(name, values, runner), names))  # type: ignore[arg-type]


def _install_git(runner: Runner) -> Check:
    git = shutil.which("git")
    if git is None:
        return Check("git", "fail", "git is not on PATH.", "Install git 2.38 or newer.")
    done = runner.run([git, "--version"], timeout=20)
    return _git_version(done.stdout.strip() or done.stderr.strip())


def _install_home(home: Path) -> Check:
    """corral's home (``CORRAL_HOME``): where every project's state will live, writable by this user."""
    where = home if home.exists() else next((p for p in home.parents if p.exists()), home)
    if not os.access(where, os.W_OK | os.X_OK):
        return Check(
            "home",
            "fail",
            f"{where} is not writable: corral cannot keep its state in {home}.",
            "Point CORRAL_HOME at a writable local directory.",
        )
    return Check("home", "ok", f"{home}" + ("" if home.exists() else " (made at the first task)"))


def _install_sandbox(setting: str) -> Check:
    """bubblewrap: found and able to make a sandbox here, as the ``sandbox`` setting needs it."""
    from corral.adapters.sandbox import INSTALL_HINT, find_bwrap, probe

    if setting == "off":
        return Check("sandbox", "ok", "sandbox = off: turns run unconfined, as you")
    found = find_bwrap()
    broken = probe(found) if found is not None else "bubblewrap (bwrap) is not installed"
    if broken is None:
        return Check("sandbox", "ok", f"bubblewrap works here ({found}): each turn's agent runs confined")
    if setting == "bwrap":
        return Check("sandbox", "fail", f"sandbox = bwrap, but {broken}: every turn would be refused.", INSTALL_HINT)
    return Check("sandbox", "warn", f"{broken}: turns would run unconfined (sandbox = auto).", INSTALL_HINT)


def _install_daemon() -> Check:
    """The daemon of this home: running, or when it starts by itself."""
    from corral.engine.daemons import state

    current = state()
    if current.running:
        return Check("daemon", "ok", f"running (pid {current.pid}, since {current.started_at})")
    return Check(
        "daemon",
        "ok",
        "not running; it starts by itself when a turn's agent needs corral's tools (start, resume, unblock) "
        "or corral dashboard needs it (or: corral daemon start)",
    )


def _install_team(wanted: bool) -> Check:
    """The team's engine (the ``corral[team]`` extra): needed only with a shared store (``database_url``)."""
    from corral.store.team_extra import install_line, missing

    gone = missing()
    if not gone:
        return Check("team", "ok", "the team's engine is installed (corral[team]: PostgreSQL store, workers)")
    if wanted:
        return Check(
            "team",
            "fail",
            f"database_url is set, but the team's engine is not installed ({', '.join(gone)}).",
            install_line(),
        )
    return Check("team", "ok", f"not installed (only a team's shared store and workers need it: {install_line()})")
