"""The bubblewrap sandbox a turn's agent runs in: its posture, the probe, and the ``bwrap`` argv prefix.

The ``sandbox`` setting (``auto`` | ``bwrap`` | ``off``) is resolved once, at launch
(:func:`resolve`), into a :class:`SandboxSpec` that the turn's command carries; the supervisor
puts :func:`bwrap_argv` in front of each attempt's argv. Inside (docs/harnesses.md#sandbox):

- the whole filesystem read-only (``--ro-bind / /``), a fresh ``/dev`` and ``/proc``;
- writable: the task's worktree (read-only in an ask), what ``git commit`` there writes — the
  turn's own object quarantine (bound over the object store, which is seen read-only beside it:
  :mod:`corral.engine.runtime.quarantine`), the worktree's own directory under the main git directory
  (``.git/worktrees/<name>``), and the directories of the branch's ref and its reflog
  (``refs/heads/corral/`` and ``logs/refs/heads/corral/``: git writes ``<ref>.lock`` beside
  the ref and renames it, so the directory must be writable, not only the file; every other
  task's ref file there is pinned read-only, :func:`sibling_refs`). Pinned read-only as well:
  the worktree's ``.git`` file and its git directory's ``commondir``, ``gitdir``,
  ``config.worktree`` and ``HEAD`` (:func:`pinned_git_files`), so corral's own git after the
  turn reads the repository and configuration it expects. ``packed-refs`` stays
  read-only: a commit on a branch that is only packed writes a loose ref, which wins over the
  packed one; only deleting or packing refs rewrites ``packed-refs``, and an agent needs neither;
- a private ``/tmp`` (a tmpfs; ``TMPDIR`` points there), and the harness's own state directory
  (Claude Code's ``~/.claude``, ``$CODEX_HOME``, Pi's ``~/.pi/agent``) — its sessions, caches and
  credentials; never its configuration (:mod:`corral.adapters.harness_state`);
- not visible at all: corral's state directory (``$CORRAL_HOME``: other turns' tokens, logs,
  provenance, and the other tasks' worktrees, which live there), and the person's home beyond
  the harness's directories (``~/.ssh`` and every other credential), and ``$XDG_RUNTIME_DIR``
  (the sockets of the person's ssh-agent, keyring and session bus): each is an empty,
  read-only tmpfs. The git configuration (``~/.gitconfig``, ``$XDG_CONFIG_HOME/git``,
  ``$GIT_CONFIG_GLOBAL``), the directories on ``PATH`` and the harness's own executable are
  put back read-only where they were hidden, so git and the agent still run;
- the network is shared (the agent needs its model API); a PID namespace of its own
  (``--unshare-pid``: no other process, and so no other turn's environment, is visible in
  ``/proc``), no capabilities (``--cap-drop ALL``, also as root), and ``--die-with-parent``:
  when the supervisor dies, bwrap and everything inside die with it. No ``--new-session``:
  the agent stays in bwrap's process group, which is what the supervisor signals.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from msgspec import Struct, convert, to_builtins

from corral.adapters.harness_state import prepare_state, state_mounts

#: The values of the ``sandbox`` setting.
AUTO, BWRAP, OFF = "auto", "bwrap", "off"
INSTALL_HINT = 'Install bubblewrap: apt install bubblewrap (or set sandbox = "off" in your user file).'
#: How long the probe may take (a bwrap that hangs never hangs a launch).
PROBE_TIMEOUT = 10.0
#: The probe's answer kept for the host, under ``CORRAL_HOME`` (:func:`probe`).
PROBE_CACHE = "sandbox-probe.json"
#: The kernel's settings that decide whether an unprivileged user may make namespaces.
USERNS_KNOBS = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)
#: The flags every sandbox runs with, the probe's included (so the probe proves what a turn needs).
CORE_FLAGS = ("--die-with-parent", "--unshare-pid", "--cap-drop", "ALL")
#: Variables naming a temporary directory: inside, each names the private ``/tmp``.
TMP_VARS = ("TMPDIR", "TMP", "TEMP", "CLAUDE_CODE_TMPDIR")
SANDBOX_TMP = "/tmp"
#: Where the repository's shared object store is seen inside, read-only, when the turn's objects
#: go to a quarantine (in the private ``/tmp``, so bwrap can make the mount point).
SHARED_OBJECTS = "/tmp/.corral-objects"


class SandboxSpec(Struct, frozen=True):
    """A turn's sandbox, resolved once at launch and carried in its command.

    ``mode`` is ``bwrap`` or ``off``; ``reason`` says why (for ``show``). ``error``: bwrap was
    required but cannot run here — every attempt then fails ``fatal_config`` with it, nothing
    runs unconfined. ``hidden``: directories the agent must not see (corral's state). The git
    paths are the worktree's: its common git directory, its own git directory, and the branch.
    """

    mode: str
    reason: str
    bwrap: str | None = None
    error: str | None = None
    hidden: tuple[str, ...] = ()
    probe_cache: str | None = None  # where the probe's answer is kept (forgotten when a launch fails)
    git_common_dir: str | None = None
    git_dir: str | None = None
    branch: str | None = None  # the branch's full ref, refs/heads/corral/<ref>
    #: What the person lets a confined turn read beyond the defaults (``sandbox_read_paths``, user-only:
    #: toolchains in the home such as ``~/.cargo`` or ``~/.nvm``), read-only.
    read_paths: tuple[str, ...] = ()

    @property
    def confined(self) -> bool:
        return self.mode == BWRAP

    def __post_init__(self) -> None:
        """Run when a command is read, too (msgspec calls it on decode): a mode corral never resolves
        is refused, so a command naming one is refused for its shape, never run unconfined."""
        if self.mode not in (BWRAP, OFF):
            raise ValueError(f"sandbox.mode is {self.mode!r}: it must be {BWRAP} or {OFF}")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = to_builtins(self)
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SandboxSpec:
        """The spec in a command's ``sandbox`` object; a field of the wrong type raises ``ValueError``
        (msgspec's ``ValidationError``) naming it."""
        return convert(dict(data), cls)


def find_bwrap(env: Mapping[str, str] | None = None) -> str | None:
    import shutil  # only a launch that may be sandboxed looks for bwrap

    env = os.environ if env is None else env
    return shutil.which("bwrap", path=env.get("PATH", os.defpath))


def _probe_key(bwrap: str) -> list[Any]:
    """What the probe's answer depends on: this host and its kernel (with its namespace settings), and
    the bwrap binary itself (a new version is a new file: its inode, size, times, mode and owner)."""
    real = os.path.realpath(bwrap)
    st = os.stat(real)
    host = os.uname()
    knobs: list[str | None] = []
    for knob in USERNS_KNOBS:
        try:
            with open(knob, encoding="ascii") as f:
                knobs.append(f.read().strip())
        except OSError:
            knobs.append(None)
    binary = [real, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid]
    return [host.nodename, host.release, host.version, *knobs, *binary]


_probed: dict[str, str | None] = {}  # this process's answers, by key


def probe(bwrap: str, cache: Path | None = None) -> str | None:
    """Why ``bwrap`` cannot make a sandbox here, or None when it can.

    Asked once per host and bwrap (an 18 ms run of bwrap itself): the answer is kept in ``cache``
    under a key of the host, its kernel and the bwrap binary, so a new bubblewrap or kernel is
    probed again; :func:`forget_probe` drops it when a launch in the sandbox fails.
    """
    try:
        key = _probe_key(bwrap)
    except OSError as exc:
        return f"{bwrap} cannot be read: {exc}"
    memo = json.dumps(key)
    if memo in _probed:
        return _probed[memo]
    kept = _read_probe(cache, key)
    if kept is not None:
        _probed[memo] = kept[0]
        return kept[0]
    argv = [bwrap, *CORE_FLAGS, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} did not run: {exc}"  # not kept: a machine that was too busy may do better next time
    broken = None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        broken = f"{bwrap} exited {done.returncode}" + (f": {said[-1]}" if said else "")
    _probed[memo] = broken
    _keep_probe(cache, key, broken)
    return broken


def _read_probe(cache: Path | None, key: list[Any]) -> tuple[str | None] | None:
    """The answer kept for ``key`` (a 1-tuple), or None when none is kept for it."""
    if cache is None:
        return None
    try:
        with open(cache, "rb") as f:
            doc = json.loads(f.read(65536))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    broken = doc.get("broken")
    return (broken,) if broken is None or isinstance(broken, str) else None


def _keep_probe(cache: Path | None, key: list[Any], broken: str | None) -> None:
    if cache is None:
        return
    from corral.adapters.files import write_atomic

    try:
        write_atomic(cache, json.dumps({"key": key, "broken": broken}).encode() + b"\n", durable=False)
    except OSError:
        pass  # a cache that cannot be written costs the next launch a probe, nothing more


def forget_probe(spec: SandboxSpec) -> None:
    """Drop the probe's answer a launch in this sandbox relied on (it failed): the next launch probes again."""
    _probed.clear()
    if spec.probe_cache:
        try:
            os.unlink(spec.probe_cache)
        except OSError:
            pass


def resolve(
    setting: str,
    *,
    env: Mapping[str, str] | None = None,
    hidden: Sequence[str] = (),
    git_common_dir: str | None = None,
    git_dir: str | None = None,
    branch: str | None = None,
    read_paths: Sequence[str] = (),
    probe_cache: Path | None = None,
) -> SandboxSpec:
    """The sandbox a turn gets from the ``sandbox`` setting: ``auto`` is bwrap where it works, else off.

    ``probe_cache``: where this host's probe of bwrap is kept (:func:`probe`).

    ``bwrap`` where bubblewrap is missing or does not work is a spec with ``error`` (the turn
    fails ``fatal_config`` with the install hint), never an unconfined turn.
    """
    paths = {
        "hidden": tuple(hidden),
        "git_common_dir": git_common_dir,
        "git_dir": git_dir,
        "branch": branch,
        "read_paths": tuple(os.path.expanduser(p) for p in read_paths),
    }
    if setting == OFF:
        return SandboxSpec(OFF, "sandbox = off in the settings")
    found = find_bwrap(env)
    broken = probe(found, probe_cache) if found is not None else None
    paths["probe_cache"] = str(probe_cache) if probe_cache is not None else None
    if setting == AUTO:
        if found is None:
            return SandboxSpec(OFF, "sandbox = auto, and bubblewrap (bwrap) is not installed")
        if broken is not None:
            return SandboxSpec(OFF, f"sandbox = auto, and bubblewrap does not work here: {broken}")
        return SandboxSpec(BWRAP, "sandbox = auto: bubblewrap works here", bwrap=found, **paths)  # type: ignore[arg-type]
    if found is None:
        error = f"The sandbox is bwrap, but bubblewrap (bwrap) is not on PATH. {INSTALL_HINT}"
    elif broken is not None:
        error = f"The sandbox is bwrap, but bubblewrap does not work here ({broken}). {INSTALL_HINT}"
    else:
        error = None
    return SandboxSpec(BWRAP, "sandbox = bwrap in the settings", bwrap=found, error=error, **paths)  # type: ignore[arg-type]


def prepare(spec: SandboxSpec, harness: str, env: Mapping[str, str]) -> None:
    """Create what a bind needs that is missing: the harness's state directories (a home hidden
    read-only would refuse its own ``mkdir``), the configuration placeholders and private
    directories in them (:func:`corral.adapters.harness_state.prepare_state`), and the branch's
    ref and reflog directories (``git pack-refs --prune`` removes them)."""
    prepare_state(harness, env)
    paths: list[Path] = []
    if spec.git_common_dir and spec.branch:
        ref_dir = os.path.dirname(spec.branch)
        paths += [Path(spec.git_common_dir, ref_dir), Path(spec.git_common_dir, "logs", ref_dir)]
    for path in paths:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # the bind is skipped (``--bind-try``) and what needed it fails, saying so
    if spec.git_dir and spec.git_dir != spec.git_common_dir:
        # An empty config.worktree is read only with extensions.worktreeConfig, and then it adds
        # nothing; made here, it can be pinned read-only, so the agent cannot create one.
        try:
            Path(spec.git_dir, "config.worktree").touch(exist_ok=True)
        except OSError:
            pass
    _loosen_packed_siblings(spec)


def _siblings_dir(spec: SandboxSpec) -> tuple[Path, Path] | None:
    """The directory of the branch's ref (``refs/heads/corral``) and the branch's own ref file."""
    if not spec.git_common_dir or not spec.branch:
        return None
    own = Path(spec.git_common_dir, spec.branch)
    return own.parent, own


def _loosen_packed_siblings(spec: SandboxSpec) -> None:
    """Give every other branch beside the task's that is only packed a loose ref of the same value,
    so :func:`sibling_refs` can pin it: an agent could otherwise write a loose ref that wins."""
    found = _siblings_dir(spec)
    if found is None or spec.git_common_dir is None:
        return
    where, own = found
    prefix = os.path.relpath(where, spec.git_common_dir).replace(os.sep, "/") + "/"
    try:
        packed = Path(spec.git_common_dir, "packed-refs").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for line in packed.splitlines():
        sha, _, name = line.partition(" ")
        if not name.startswith(prefix) or len(sha) < 40 or line.startswith(("#", "^")):
            continue
        loose = Path(spec.git_common_dir, name)
        if loose == own or loose.exists():
            continue
        try:
            loose.parent.mkdir(parents=True, exist_ok=True)
            tmp = loose.with_name(f".{loose.name}.corral-tmp")
            tmp.write_text(sha + "\n")
            os.replace(tmp, loose)  # the value it has packed: git reads the same either way
        except OSError:
            continue


def sibling_refs(spec: SandboxSpec) -> list[str]:
    """The other branches' ref files beside the task's own (``refs/heads/corral/*``): pinned
    read-only inside the sandbox, since their directory must be writable for the task's own
    branch (git writes ``<ref>.lock`` beside it). A pinned file can be neither rewritten nor removed."""
    found = _siblings_dir(spec)
    if found is None:
        return []
    where, own = found
    out = []
    # The reflogs beside the branch's own too (``logs/refs/heads/corral/*``): their directory is
    # writable for the same reason, and another task's reflog is not this agent's to touch.
    logs = Path(spec.git_common_dir or "", "logs", os.path.relpath(where, spec.git_common_dir or "/"))
    for base, mine in ((where, own), (logs, logs / own.name)):
        for root, _dirs, files in os.walk(base):
            for name in files:
                path = Path(root, name)
                if path != mine and not name.endswith(".lock") and not name.startswith(".") and not path.is_symlink():
                    out.append(str(path))
    return sorted(out)


def _hidden_roots(spec: SandboxSpec, env: Mapping[str, str]) -> list[str]:
    home, runtime = env.get("HOME"), env.get("XDG_RUNTIME_DIR")
    # The runtime directory holds the person's agent sockets (ssh-agent, the keyring, the session bus).
    roots = [SANDBOX_TMP, *([home] if home and home != "/" else []), *([runtime] if runtime else []), *spec.hidden]
    found = {os.path.normpath(r) for r in roots if os.path.isdir(r)}  # a mount point needs a directory
    return sorted(found, key=lambda r: (r.count("/"), r))


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


#: In a worktree's own git directory (``.git/worktrees/<name>``): the files git reads to find the
#: repository and its configuration, and ``HEAD`` (which branch corral's own git acts on after the
#: turn: a commit moves the branch, never HEAD); never the index or the logs git writes committing.
PINNED_GIT_FILES = ("commondir", "gitdir", "config.worktree", "HEAD")


def pinned_git_files(spec: SandboxSpec, worktree: str) -> list[str]:
    """The files that point git at the repository and its configuration: the worktree's ``.git``
    file and, in its own git directory, :data:`PINNED_GIT_FILES` (made by :func:`prepare` where
    missing, so no agent can create one)."""
    paths = [os.path.join(worktree, ".git")]
    if spec.git_dir and spec.git_dir != spec.git_common_dir:
        paths += [os.path.join(spec.git_dir, name) for name in PINNED_GIT_FILES]
    return paths


def program_paths(program: str, env: Mapping[str, str]) -> list[str]:
    """What running ``program`` needs to see: where it is, where its link points, and for a Node
    package the directory that holds its ``node_modules`` (its dependencies)."""
    import shutil

    found = shutil.which(program, path=env.get("PATH", os.defpath)) if "/" not in program else program
    if not found:
        return []
    found = os.path.abspath(found)
    real = os.path.realpath(found)
    # The files themselves, for when their directory may not be shown (it holds a hidden one).
    out = [found, real, os.path.dirname(found)]
    parts = Path(real).parts
    if "node_modules" in parts:
        out.append(str(Path(*parts[: parts.index("node_modules")])))
    else:
        out.append(os.path.dirname(real))
    return out


def bwrap_argv(
    spec: SandboxSpec,
    *,
    worktree: str,
    program: str,
    harness: str,
    read_only: bool,
    env: Mapping[str, str],
    read_paths: Sequence[str] = (),
    write_paths: Sequence[str] = (),
    quarantine: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The ``bwrap … --`` prefix for one attempt, and the variables to change inside.

    ``program`` is the harness's executable (argv[0]); ``read_paths`` are what the launch hands
    the agent that may lie in a hidden directory (its prompt file, the ref guard's hooks), and
    ``write_paths`` what it must write there (the ref guard's log of the agent's ref moves).
    ``quarantine``: the turn's private object directory (:mod:`corral.engine.runtime.quarantine`),
    bound over the repository's ``objects``; the shared store is then only read, at
    :data:`SHARED_OBJECTS`. Without one (an ask) the objects are read-only as all else.
    """
    assert spec.bwrap is not None
    hidden = _hidden_roots(spec, env)
    argv = [spec.bwrap, *CORE_FLAGS, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for root in hidden:
        argv += ["--tmpfs", root]
    reads: list[str] = []
    home = env.get("HOME")
    if home:
        reads += [f"{home}/.gitconfig", f"{home}/.config/git"]
    for var in ("GIT_CONFIG_GLOBAL", "XDG_CONFIG_HOME"):
        value = env.get(var)
        if value:
            reads.append(value if var == "GIT_CONFIG_GLOBAL" else f"{value}/git")
    reads += [d for d in env.get("PATH", "").split(":") if d]
    reads += program_paths(program, env)
    if spec.git_common_dir:
        reads.append(spec.git_common_dir)
        if os.path.basename(spec.git_common_dir) == ".git":  # the main checkout: seen, never written
            reads.append(os.path.dirname(spec.git_common_dir))
    reads += list(read_paths)
    writes: list[str] = []
    if not read_only:
        if spec.git_common_dir:
            common = spec.git_common_dir
            if spec.branch:
                ref_dir = os.path.dirname(spec.branch)
                writes += [f"{common}/{ref_dir}", f"{common}/logs/{ref_dir}"]
        if spec.git_dir and spec.git_dir != spec.git_common_dir:
            writes.append(spec.git_dir)
    writes += list(write_paths)
    mounts: dict[str, str] = {}
    for path in reads:
        path = os.path.normpath(os.path.abspath(path))
        # Visible already where nothing hides it; never a hidden directory or one above it.
        if _under(path, hidden) and not any(_under(root, [path]) for root in hidden):
            mounts.setdefault(path, "--ro-bind-try")
    for path in writes:
        mounts[os.path.normpath(os.path.abspath(path))] = "--bind-try"
    # The harness's state: writable, its configuration pinned read-only (what an unconfined run of
    # the harness later executes is the person's), its shell snapshots private.
    for flag, path in state_mounts(harness, env):
        mounts[path] = flag
    worktree = os.path.normpath(os.path.abspath(worktree))
    mounts[worktree] = "--ro-bind" if read_only else "--bind"
    for path in sorted(mounts, key=lambda p: (p.count("/"), p)):
        argv += [mounts[path], path] if mounts[path] == "--tmpfs" else [mounts[path], path, path]
    changes: dict[str, str] = {}
    if not read_only and quarantine and spec.git_common_dir:
        objects = os.path.join(spec.git_common_dir, "objects")
        info = os.path.join(quarantine, "info")
        # The turn's objects land in its quarantine; the shared store is only read, beside it. The
        # quarantine's info/ (alternates) is read-only: the agent names no alternate of its own.
        argv += ["--bind", quarantine, objects, "--ro-bind", quarantine, quarantine]
        argv += ["--ro-bind", objects, SHARED_OBJECTS]
        argv += ["--ro-bind", info, os.path.join(objects, "info"), "--ro-bind", info, info]
        alternates = [SHARED_OBJECTS, *[a for a in env.get("GIT_ALTERNATE_OBJECT_DIRECTORIES", "").split(":") if a]]
        changes["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = ":".join(alternates)
    if not read_only:
        # What tells git where the repository is stays read-only inside writable places: corral runs
        # git in this worktree after the turn, unconfined, and a repointed .git, commondir or gitdir
        # (or a config.worktree) would hand that git a configuration of the agent's (fsmonitor, hooks).
        for path in [*pinned_git_files(spec, worktree), *sibling_refs(spec)]:
            argv += ["--ro-bind-try", path, path]
    for root in hidden:
        if root != SANDBOX_TMP:
            argv += ["--remount-ro", root]
    changes.update({var: SANDBOX_TMP for var in TMP_VARS if var == "TMPDIR" or env.get(var)})
    for var, value in changes.items():
        argv += ["--setenv", var, value]
    argv += ["--chdir", worktree, "--"]
    return argv, changes
