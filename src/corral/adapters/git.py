"""git, through its executable: the one place corral speaks to a repository.

Every call runs with ``LC_ALL=C`` (messages corral can parse) and
``GIT_TERMINAL_PROMPT=0`` (never hang on a credential prompt), and under a time limit:
a hook, merge driver or filter that hangs would otherwise hang corral with it. A
command that may run a hook or touch many files (:data:`SLOW_COMMANDS`) gets the
longer limit; plumbing gets the shorter one. Both defaults are settings
(``git_timeout``, ``git_hook_timeout``); an expiry is :class:`GitTimeout`.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from stat import S_ISDIR, S_ISREG

from corral.adapters.process import Completed, Runner, SubprocessRunner
from corral.domain import gittext
from corral.domain.settings import default
from corral.errors import GitError, GitTimeout, NotARepository, ProgramError, ProgramTimeout, UnsafeBranch

GIT_ENV = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}

#: git commands that may run a hook (every ref update runs ``reference-transaction``) or
#: read and write the whole working tree: they run under the longer limit.
SLOW_COMMANDS = frozenset(
    {
        "add",
        "am",
        "branch",
        "checkout",
        "cherry-pick",
        "clone",
        "commit",
        "diff",
        "fetch",
        "gc",
        "ls-files",
        "merge",
        "pull",
        "push",
        "read-tree",
        "rebase",
        "reset",
        "restore",
        "rm",
        "stash",
        "status",
        "switch",
        "update-ref",
        "worktree",
    }
)

#: The hooks a command may run, named in a timeout's hint (besides ``reference-transaction``).
_HOOKS = {
    "commit": ("pre-commit", "commit-msg", "post-commit"),
    "merge": ("pre-merge-commit", "commit-msg", "post-merge"),
    "checkout": ("post-checkout",),
    "switch": ("post-checkout",),
    "worktree": ("post-checkout",),
    "clone": ("post-checkout",),
    "push": ("pre-push",),
    "rebase": ("pre-rebase", "post-rewrite"),
    "am": ("applypatch-msg", "pre-applypatch", "post-applypatch"),
    "gc": ("pre-auto-gc",),
}
#: Commands that update refs, and so run the ``reference-transaction`` hook.
_UPDATES_REFS = frozenset(
    {"am", "branch", "checkout", "cherry-pick", "clone", "commit", "fetch", "merge", "pull", "push", "rebase"}
    | {"reset", "stash", "switch", "update-ref", "worktree"}
)
#: rev-parse's arguments naming the hooks directory, the common git directory and this worktree's.
_WHERE_ARGS = ("--git-path", "hooks", "--git-common-dir", "--git-dir")
#: How long the hint's own look-up of the hooks directory may take.
_HINT_LOOKUP_SECONDS = 10.0


def _locks_since(git_dirs: Sequence[str], since: float) -> list[str]:
    """The lock files in ``git_dirs`` (their own, and every ref's) made since ``since``: what a stopped git left."""
    found: set[str] = set()
    for name in dict.fromkeys(git_dirs):
        root = Path(name)
        try:
            candidates = [*root.glob("*.lock"), *(root / "refs").rglob("*.lock")]
            found |= {str(p) for p in candidates if p.stat().st_mtime >= since - 1}
        except OSError:
            continue
    return sorted(found)


def subcommand(args: Sequence[str]) -> str:
    """The git command in ``args``, past the global options (``-c name=value``, ``-C path``, ``--no-pager``)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-c", "-C"):
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg
    return args[0] if args else ""


#: The environment that changes how git finds a repository: with any of it set, git is asked.
_DISCOVERY_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)


def read_main_root(where: Path) -> Path | None:
    """The main checkout holding ``where``, read from the file system for the plain layouts, or None: ask git.

    Every command starts by finding its repository, and a ``git rev-parse`` for it is a process
    (a few ms of a read's start-up, docs/architecture.md#start-up). This reads what git's own
    discovery reads for the two layouts corral makes and meets: a checkout with a ``.git``
    directory, and a linked worktree whose ``.git`` file names its git directory and that one's
    ``commondir``. Anything else — the discovery environment set, a symbolic link, a mount
    crossed, a git directory or checkout owned by another user (``safe.directory`` is git's
    call), a bare repository, a file not in git's form — is None, and :meth:`Git.main_root`
    asks git, so the answer and every refusal stay git's.
    """
    if any(os.environ.get(name) for name in _DISCOVERY_ENV):
        return None
    try:
        here = where.resolve(strict=True)
        device = os.stat(here).st_dev
        uid = os.geteuid()
        for top in (here, *here.parents):
            dotgit = top / ".git"
            try:
                st = os.lstat(dotgit)
            except FileNotFoundError:
                if os.stat(top).st_dev != device:
                    return None
                continue
            if S_ISDIR(st.st_mode):
                common, main = dotgit, top
            elif S_ISREG(st.st_mode) and st.st_size < 4096:
                text = dotgit.read_text(encoding="utf-8")
                if not text.startswith("gitdir: ") or text.count("\n") > 1:
                    return None
                gitdir = top / text[len("gitdir: ") :].strip()
                if os.path.islink(gitdir / "commondir"):
                    return None
                named = (gitdir / "commondir").read_text(encoding="utf-8").strip()
                common = (gitdir / named).resolve(strict=True)
                main = common.parent
                if common.name != ".git" or os.lstat(main / ".git").st_ino != os.stat(common).st_ino:
                    return None
            else:
                return None
            if not (common / "HEAD").is_file() or not (common / "objects").is_dir():
                return None
            if any(os.stat(owned).st_uid != uid for owned in (common, main, top)):
                return None
            return main
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return None


class Git:
    """git commands against one repository (or any path, for discovery)."""

    def __init__(
        self,
        runner: Runner | None = None,
        executable: str = "git",
        *,
        timeout: float | None = None,
        hook_timeout: float | None = None,
    ) -> None:
        self.runner = runner or SubprocessRunner()
        self.executable = executable
        #: Seconds a plumbing command may run.
        self.timeout = default("git_timeout", float) if timeout is None else timeout
        #: Seconds a command of :data:`SLOW_COMMANDS` may run.
        self.hook_timeout = default("git_hook_timeout", float) if hook_timeout is None else hook_timeout

    def limit_for(self, args: Sequence[str]) -> float:
        """The time limit of the git command ``args``."""
        return self.hook_timeout if subcommand(args) in SLOW_COMMANDS else self.timeout

    def run(
        self,
        *args: str,
        cwd: str | Path,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = None,
        index_file: str | None = None,
        as_configured: bool = False,
        objects: str | None = None,
    ) -> Completed:
        """Run ``git args`` in ``cwd`` under ``timeout`` (default: :meth:`limit_for`); its expiry is GitTimeout.

        ``index_file``: an index of the caller's own (``GIT_INDEX_FILE``), so a snapshot of a
        worktree never touches what its agent staged. ``as_configured``: without
        :data:`UNTRUSTED_WORKTREE_ARGS`, for a question about the configuration itself (where the
        person's hooks are); never for a command that runs anything. ``objects``: the object
        directory git reads (``GIT_OBJECT_DIRECTORY``), with no alternates of its own.
        """
        if not _on_path(self.executable):
            raise GitError(
                "git is not installed or not on PATH.",
                code="git-missing",
                hint="Install git (2.38 or newer) and try again.",
            )
        limit = self.limit_for(args) if timeout is None else timeout
        started = time.time()
        try:
            env = GIT_ENV if index_file is None else {**GIT_ENV, "GIT_INDEX_FILE": index_file}
            if objects is not None:
                env = {**env, "GIT_OBJECT_DIRECTORY": objects}
            argv = [self.executable, *(() if as_configured else untrusted_worktree_args(cwd)), *args]
            result = self.runner.run(argv, cwd=str(cwd), env=env, input=input, timeout=limit)
        except ProgramTimeout:
            raise self._timed_out(args, cwd, limit, started) from None
        if check and result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise GitError(
                f"git {subcommand(args)} failed: {detail[-1] if detail else f'exit {result.returncode}'}",
                hint=f"Run `git {' '.join(args)}` in {cwd} to see the whole message.",
            )
        return result

    def out(self, *args: str, cwd: str | Path) -> str:
        return self.run(*args, cwd=cwd).stdout.strip()

    def _timed_out(self, args: Sequence[str], cwd: str | Path, limit: float, started: float) -> GitTimeout:
        name = subcommand(args)
        which = "git_hook_timeout" if name in SLOW_COMMANDS else "git_timeout"
        hooks = [*_HOOKS.get(name, ()), *(["reference-transaction"] if name in _UPDATES_REFS else [])]
        dirs = self._git_dirs(cwd)
        where = dirs[0] if dirs else "the repository's hooks directory"
        if hooks:
            cause = f"A hook that hangs is the usual cause: look at {', '.join(hooks)} in {where}"
        else:
            cause = f"A hook, merge driver or filter that hangs is the usual cause: look in {where}, .gitattributes"
        locks = _locks_since(dirs[1:], started)
        if locks:
            them = "them" if len(locks) > 1 else "it"
            left = (
                f" git was stopped mid-command and left {', '.join(locks)} behind: once no git runs in the "
                f"repository, remove {them} (rm {' '.join(shlex.quote(lock) for lock in locks)})."
            )
        else:
            left = " git was stopped mid-command: if a later git command says a `.lock` file exists, remove it."
        return GitTimeout(
            f"git {name} ran past its {limit:g} s limit in {cwd}; corral stopped it.",
            hint=f"{cause} (`git config core.hooksPath` says where hooks live), and run "
            f"`git {' '.join(args)}` there to watch it.{left} If the command is only slow, raise "
            f"{which} in your settings.",
        )

    def _git_dirs(self, cwd: str | Path) -> list[str]:
        """The hooks directory, the common git directory and this worktree's, for a hint (empty on failure)."""
        try:
            found = self.runner.run(
                [self.executable, "rev-parse", "--path-format=absolute", *_WHERE_ARGS],
                cwd=str(cwd),
                env=GIT_ENV,
                timeout=_HINT_LOOKUP_SECONDS,
            )
        except ProgramError:
            return []
        lines = found.stdout.split("\n")[:3]
        return lines if found.returncode == 0 and len(lines) == 3 and all(lines) else []

    def main_root(self, path: str | Path) -> Path:
        """The main checkout of the repository containing ``path`` (a task worktree maps back)."""
        where = Path(path)
        if not where.is_dir():
            raise NotARepository(f"{where} is not a directory.", hint="Pass --repo with a git checkout.")
        found = read_main_root(where)
        if found is not None:
            return found
        result = self.run("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=where, check=False)
        if result.returncode != 0:
            raise NotARepository(
                f"{where.resolve()} is not inside a git repository.",
                hint="Run corral inside a git checkout, or pass --repo with the checkout's path.",
            )
        common = Path(result.stdout.strip())
        if common.name != ".git":
            raise NotARepository(
                f"{common} is a bare repository; corral needs a checkout.",
                hint="Clone it to a working directory and run corral there.",
            )
        return common.parent.resolve()

    def current_branch(self, repo: str | Path) -> str | None:
        """The branch checked out in ``repo``, or None on a detached HEAD."""
        result = self.run("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repo, check=False)
        return result.stdout.strip() or None if result.returncode == 0 else None

    def version(self) -> str:
        return self.out("--version", cwd=".")

    # -- refs and commits ------------------------------------------------------------
    def rev_parse(self, rev: str, *, cwd: str | Path) -> str | None:
        """The commit ``rev`` names, or None when it names nothing."""
        result = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=cwd, check=False)
        return result.stdout.strip() or None if result.returncode == 0 else None

    def ref_exists(self, ref: str, *, cwd: str | Path) -> bool:
        return self.run("show-ref", "--verify", "--quiet", ref, cwd=cwd, check=False).returncode == 0

    def count_commits(self, base: str, tip: str, *, cwd: str | Path) -> int:
        return int(self.out("rev-list", "--count", f"{base}..{tip}", cwd=cwd) or "0")

    def is_ancestor(self, ancestor: str, descendant: str, *, cwd: str | Path) -> bool:
        result = self.run("merge-base", "--is-ancestor", ancestor, descendant, cwd=cwd, check=False)
        return result.returncode == 0

    def update_ref(
        self,
        ref: str,
        new: str,
        *,
        cwd: str | Path,
        old: str | None = None,
        message: str | None = None,
        create_reflog: bool = False,
    ) -> None:
        """Move ``ref`` to ``new`` (compare-and-swap with ``old``); ``message`` is its reflog entry, made safe.

        ``create_reflog`` keeps a log for a ref git would not log by itself (outside ``refs/heads``).
        """
        logged = ["-m", gittext.reflog(message)] if message else []
        if create_reflog:
            logged.append("--create-reflog")
        # --no-deref: a symbolic ref an agent made is replaced, never followed to the ref it names.
        args = ["update-ref", "--no-deref", *logged, ref, new] + ([old] if old is not None else [])
        self.run(*args, cwd=cwd)

    def delete_ref(self, ref: str, *, cwd: str | Path) -> None:
        self.run("update-ref", "--no-deref", "-d", ref, cwd=cwd, check=False)

    # -- worktrees ---------------------------------------------------------------------
    def worktree_add(self, path: Path, branch: str, start: str, *, cwd: str | Path, new_branch: bool) -> None:
        if new_branch:
            self.run("worktree", "add", "--quiet", "-b", branch, str(path), start, cwd=cwd)
        else:
            self.run("worktree", "add", "--quiet", str(path), branch, cwd=cwd)

    def worktree_remove(self, path: Path, *, cwd: str | Path) -> None:
        self.run("worktree", "remove", "--force", str(path), cwd=cwd, check=False)
        self.run("worktree", "prune", cwd=cwd, check=False)

    def dirty_paths(self, worktree: str | Path) -> list[str]:
        """Paths with uncommitted changes (staged, unstaged or untracked)."""
        out = self.run("status", "--porcelain=v1", "-z", "--untracked-files=all", cwd=worktree).stdout
        paths = []
        entries = out.split("\0")
        i = 0
        while i < len(entries):
            entry = entries[i]
            if len(entry) > 3:
                paths.append(entry[3:])
                if entry[0] in "RC":  # a rename carries its source as the next entry
                    i += 1
            i += 1
        return paths

    def branch_value(self, ref: str, *, cwd: str | Path) -> str | None:
        """The commit a plain branch ``ref`` (``refs/heads/…``) holds; None when it does not exist.

        Never followed as a symbolic ref: one is :class:`UnsafeBranch`, as is a ref that holds
        something other than a commit (an agent inside the sandbox can write its branch's file).
        """
        if self.run("symbolic-ref", "--quiet", ref, cwd=cwd, check=False).returncode == 0:
            raise UnsafeBranch(
                f"{ref} is a symbolic ref: corral never follows a task's branch to another ref.",
                hint="Run `corral doctor` to put the branch back at its last verified tip.",
            )
        found = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", ref, cwd=cwd, check=False)
        value = found.stdout.strip()
        if found.returncode != 0 or not value:
            return None
        kind = self.run("cat-file", "-t", value, cwd=cwd, check=False).stdout.strip()
        if kind != "commit":
            raise UnsafeBranch(
                f"{ref} holds {value[:12]}, which is {'a ' + kind if kind else 'no object'}, not a commit.",
                hint="Run `corral doctor` to put the branch back at its last verified tip.",
            )
        return value

    def save_work(self, worktree: str | Path, ref: str, message: str) -> str | None:
        """Commit every change in ``worktree`` onto the branch ``ref``; the new commit, or None when clean.

        Plumbing only, never ``git commit`` through the worktree's HEAD (which an agent could
        have pointed anywhere): a private index read from the branch's tip, ``add --all`` into
        it, ``write-tree``, ``commit-tree`` on that tip, and a compare-and-swap ``update-ref
        --no-deref`` of the named ref. A branch that is a symbolic ref or holds no commit is
        refused (:class:`UnsafeBranch`).
        """
        tip = self.branch_value(ref, cwd=worktree)
        if tip is None:
            raise GitError(f"{ref} does not exist: there is no branch to save the work in progress on.")
        if not self.dirty_paths(worktree):
            return None
        import tempfile

        with tempfile.TemporaryDirectory(prefix="corral-index-") as scratch:
            index = os.path.join(scratch, "index")
            self.run("read-tree", tip, cwd=worktree, index_file=index)
            self.run("add", "--all", "--", ".", cwd=worktree, index_file=index)
            tree = self.run("write-tree", cwd=worktree, index_file=index).stdout.strip()
        if tree == self.tree_of(tip, cwd=worktree):
            return None
        commit = self.commit_tree(tree, [tip], message, cwd=worktree)
        self.update_ref(ref, commit, cwd=worktree, old=tip, message=message.splitlines()[0] if message else None)
        return commit

    def unmerged_paths(self, worktree: str | Path) -> list[str]:
        """Paths with an unresolved merge conflict in ``worktree``'s index."""
        out = self.run("diff", "--name-only", "--diff-filter=U", "-z", cwd=worktree, check=False).stdout
        return [p for p in out.split("\0") if p]

    def merge_pending(self, worktree: str | Path) -> bool:
        """Whether ``worktree`` has a merge begun and not yet committed (or aborted)."""
        return self.run("rev-parse", "-q", "--verify", "MERGE_HEAD", cwd=worktree, check=False).returncode == 0

    # -- merging without a working tree ---------------------------------------------
    def merge_tree(self, ours: str, theirs: str, *, cwd: str | Path) -> tuple[str | None, list[str]]:
        """The tree of merging ``theirs`` into ``ours`` (None and the conflicted paths on conflict)."""
        result = self.run(
            "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", ours, theirs, cwd=cwd, check=False
        )
        fields = result.stdout.split("\0")  # -z: the tree, then each conflicted path exactly as stored
        if result.returncode == 0 and fields[0].strip():
            return fields[0].strip(), []
        if result.returncode == 1 and fields[0].strip():
            return None, list(dict.fromkeys(f for f in fields[1:] if f))
        raise GitError(f"git merge-tree failed: {(result.stderr or result.stdout).strip()[-300:]}")

    def commit_tree(self, tree: str, parents: list[str], message: str, *, cwd: str | Path) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        identity = self.identity_args(cwd)
        # Whatever text it was made from, git never gets a byte it refuses (NUL) or a terminal acts on.
        return self.run(*identity, *args, cwd=cwd, input=gittext.message(message)).stdout.strip()

    def identity_args(self, cwd: str | Path) -> list[str]:
        """``-c`` options naming corral when the repository has no identity of its own."""
        if self.run("config", "user.email", cwd=cwd, check=False).stdout.strip():
            return []
        return ["-c", "user.name=corral", "-c", "user.email=corral@localhost"]

    def tree_of(self, commit: str, *, cwd: str | Path) -> str:
        return self.out("rev-parse", f"{commit}^{{tree}}", cwd=cwd)

    def changed_between(self, a: str, b: str, *, cwd: str | Path) -> list[str]:
        """The paths that differ between two commits, exactly as git stores them (``-z``: never quoted)."""
        out = self.run("diff", "--name-only", "--no-renames", "-z", a, b, cwd=cwd).stdout
        return [p for p in out.split("\0") if p]

    def worktrees(self, *, cwd: str | Path) -> list[dict[str, str]]:
        """Every worktree of the repository: path, head, and branch (refs/heads/…) when not detached."""
        out = self.run("worktree", "list", "--porcelain", "-z", cwd=cwd).stdout
        found: list[dict[str, str]] = []
        current: dict[str, str] = {}
        for line in [*out.split("\0"), ""]:  # -z: a path git would quote is given as it is
            if not line:
                if current:
                    found.append(current)
                current = {}
                continue
            key, _, value = line.partition(" ")
            current[key] = value
        return found

    def commit_facts(self, rev: str, *, cwd: str | Path) -> tuple[str, str, str, str] | None:
        """The commit ``rev`` names, its tree, and its Corral-Task and Corral-Session trailers (each stripped; ""
        when absent), from one ``log`` that reads the objects themselves (no replace refs); None when ``rev``
        names no commit."""
        fmt = (
            "%H%x1f%T%x1f%(trailers:key=Corral-Task,valueonly,separator=%x1e)%x1f"
            "%(trailers:key=Corral-Session,valueonly,separator=%x1e)"
        )
        done = self.run("--no-replace-objects", "log", "-1", f"--format={fmt}", rev, "--", cwd=cwd, check=False)
        parts = done.stdout.strip("\n").split("\x1f")
        if done.returncode != 0 or len(parts) != 4:
            return None
        return parts[0], parts[1], parts[2].strip(), parts[3].strip()

    def trailers(self, rev_range: str, *, cwd: str | Path, limit: int = 5000) -> list[dict[str, str]]:
        """The Corral-Task / Corral-Session trailers of the commits in ``rev_range``."""
        fmt = (
            "%H%x1f%(trailers:key=Corral-Task,valueonly,separator=%x1e)%x1f"
            "%(trailers:key=Corral-Session,valueonly,separator=%x1e)%x1d"
        )
        out = self.run("log", f"-n{limit}", f"--format={fmt}", rev_range, cwd=cwd, check=False).stdout
        found = []
        for record in out.split("\x1d"):
            parts = record.strip("\n").split("\x1f")
            if len(parts) == 3 and parts[1].strip():
                found.append({"commit": parts[0], "task": parts[1].strip(), "session": parts[2].strip()})
        return found


#: What every git corral runs in a linked worktree (a task's) is given: no hooks and no fsmonitor.
#: A relative ``core.hooksPath`` (husky's ``.husky``) or ``core.fsmonitor`` resolves inside the
#: worktree, which a confined agent writes; corral's git after the turn runs unconfined.
UNTRUSTED_WORKTREE_ARGS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


def untrusted_worktree_args(cwd: str | Path) -> tuple[str, ...]:
    """:data:`UNTRUSTED_WORKTREE_ARGS` when ``cwd`` is a linked worktree (its ``.git`` is a file), else none.

    The main checkout is the person's: its hooks are theirs and still run (a
    ``reference-transaction`` hook on the target, say)."""
    try:
        linked = os.path.isfile(os.path.join(cwd, ".git"))
    except (OSError, ValueError):
        linked = False
    return UNTRUSTED_WORKTREE_ARGS if linked else ()


@cache
def _on_path(executable: str) -> bool:
    """Whether ``executable`` runs (a path, or a name on PATH); asked once per process.

    Not shutil.which: shutil loads the compression modules, a cost every command would pay.
    """
    if os.sep in executable:
        return os.access(executable, os.X_OK)
    return any(
        os.access(os.path.join(d, executable), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep) if d
    )
