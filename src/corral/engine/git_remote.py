"""The git remote corral pushes to and fetches from: the ``remote`` setting (``origin`` by default), checked.

A task's branch reaches a forge (``submit``) and a team's hosts (docs/workers.md#branches) through it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from corral.adapters.ref_files import common_dir
from corral.domain.settings import setting
from corral.engine.project import Project
from corral.errors import CorralError

#: What a file's ``os.stat`` says of it here: None when it is not there.
_Stat = tuple[int, int, int, int, int] | None

#: The remotes ``git remote`` listed, per repository and name, with the configuration files as they were then
#: (:func:`_config_files`): a worker asks for the remote several times a turn, and each ``git remote`` is a process.
_VERIFIED: dict[tuple[str, str], tuple[_Stat, ...]] = {}
_VERIFIED_LOCK = threading.Lock()


def remote_name(project: Project) -> str:
    """The ``remote`` setting, checked here, where every push, fetch and ls-remote corral makes takes it:
    a remote this repository has (``git remote`` lists it), never a word git would read as an option
    (``--upload-pack=…``). The schema refuses such a value from any source; this is the last word
    before git's argv, whatever the configuration in memory says.

    A remote ``git remote`` listed is taken as listed again while every configuration file git read for it
    is unchanged (:func:`_unchanged`): a remote removed or renamed rewrites one, and is asked of git again."""
    name = str(project.config["remote"])
    origin = project.config.values["remote"].origin
    where = f" (set in {origin})" if origin else ""
    why = setting("remote").refusal(name)
    if why is not None:
        raise CorralError(
            f"The remote setting {name!r}{where} is not a remote's name: it would reach git as an option.",
            code="bad-remote",
            hint="Name a remote that `git remote` lists: corral config set remote origin",
        )
    key = (str(project.repo), name)
    if _unchanged(project.repo, _VERIFIED.get(key)):
        return name
    files = _config_files(project.repo)
    before = _stats(files) if files is not None else None
    listed = project.git.run("remote", cwd=project.repo, check=False)
    if name not in listed.stdout.splitlines():
        with _VERIFIED_LOCK:
            _VERIFIED.pop(key, None)
        raise CorralError(
            f"The repository has no remote named {name}{where}.",
            code="no-remote",
            hint=(
                f"Set `remote` to one the repository has: corral config set remote {listed.stdout.split()[0]}"
                if listed.stdout.split()
                else f"Add it with its URL (git -C {project.repo} remote add {name} and the URL), then run this again."
            ),
        )
    # Remembered only when no file changed while git read them, and none includes another (whose changes
    # no stat here would see).
    if files is not None and before is not None and _stats(files) == before and not _includes(files):
        with _VERIFIED_LOCK:
            _VERIFIED[key] = before
    return name


def _config_files(repo: Path) -> list[Path] | None:
    """Every file git reads the configuration of ``repo`` from, as git finds them (``GIT_CONFIG_GLOBAL``,
    ``GIT_CONFIG_SYSTEM`` and ``GIT_CONFIG_NOSYSTEM`` followed); None where that is not plain to say (no
    ``.git`` read, a ``GIT_DIR`` or configuration given in the environment): then git is asked each time."""
    env = os.environ
    if any(k in env for k in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT")):
        return None
    common = common_dir(repo)
    if common is None:
        return None
    # The remotes of old (a file each in ``remotes/`` or ``branches/``), which git may read for a name: each directory's
    # times change when one is added or removed.
    files = [common / "config", common / "config.worktree", common / "remotes", common / "branches"]
    if env.get("GIT_CONFIG_NOSYSTEM", "").lower() not in ("1", "true", "yes", "on"):
        files.append(Path(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"))
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(Path(env["GIT_CONFIG_GLOBAL"]))
        return files
    home = env.get("HOME")
    xdg = env.get("XDG_CONFIG_HOME") or (f"{home}/.config" if home else None)
    files += [Path(xdg) / "git" / "config"] if xdg else []
    files += [Path(home) / ".gitconfig"] if home else []
    return files


def _stats(files: list[Path]) -> tuple[_Stat, ...] | None:
    """Each file's identity, size and times (None: not there); None when one cannot be looked at."""
    found: list[_Stat] = []
    for path in files:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            found.append(None)
            continue
        except OSError:
            return None
        found.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(found)


def _unchanged(repo: Path, seen: tuple[_Stat, ...] | None) -> bool:
    """Whether the configuration files are as they were when git last listed the remote (never: not seen)."""
    if seen is None:
        return False
    files = _config_files(repo)
    return files is not None and _stats(files) == seen


def _includes(files: list[Path]) -> bool:
    """Whether any of the files includes another (``[include]``, ``[includeIf …]``), or cannot be read."""
    for path in files:
        if path.is_dir():
            continue  # the remotes of old hold no configuration to include
        try:
            if b"include" in path.read_bytes().lower():
                return True
        except FileNotFoundError:
            continue
        except OSError:
            return True
    return False
