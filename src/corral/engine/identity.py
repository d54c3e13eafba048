"""A project's identity, and which state directory a checkout of it uses.

A project is its repository's **root commit** plus its **normalized remote URL** (``origin``;
the root commit alone where there is no remote). Where history has several root commits
(unrelated histories merged), the lowest SHA of those reachable from ``HEAD`` is taken, so
every clone computes the same one whatever order git walks them in. The URL is normalized so
that the ways of spelling one remote agree: the scheme and the user (``git@``, ``https://me@``)
are dropped, as are the port, a trailing ``/`` and ``.git``, and the host is lower-cased;
``git@github.com:o/r.git`` and ``https://GitHub.com/o/r`` are both ``github.com/o/r``. A local
path remote is its absolute path. Workers on other hosts will match clones by this identity.

How it is kept (``.git/corral/identity.json`` and each state directory's ``repository.json``) is
``engine/identity_files``; which state directory a checkout uses, a move and a copy told apart,
``engine/state_location``; state whose repository is gone, ``engine/orphan_states``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from corral.adapters.git import Git


class Identity(Struct, frozen=True):
    """Who a project is: its root commit, its normalized remote, and (for a copy started fresh) an instance."""

    root_commit: Annotated[str, Meta(pattern=r"^(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")]
    remote: str | None = None
    instance: str | None = None

    @property
    def project(self) -> str:
        """The project's id, the same in every clone: what workers on several hosts match."""
        return _digest(self.root_commit, self.remote or "")[:16]

    @property
    def key(self) -> str:
        """The id of this project's state on this host (a fresh copy's instance makes it its own)."""
        if not self.instance:
            return self.project
        return _digest(self.root_commit, self.remote or "", self.instance)[:16]

    def to_json(self) -> dict[str, Any]:
        """The identity as its files keep it: its fields by name, then the ``project`` and ``key`` derived from
        them (written for a reader that does not hash; :meth:`from_json` derives them again)."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return {**doc, "project": self.project, "key": self.key}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Identity | None:
        """The identity in one of its files; None without a ``root_commit`` of 40 or 64 hex digits.

        Deliberately tolerant of the rest: a ``remote`` or ``instance`` that is not a non-empty string
        (a hand-edited file) reads as None, as a file without them does.
        """
        optional = {key: value if isinstance(value := data.get(key), str) and value else None for key in _OPTIONAL}
        try:
            return msgspec.convert({**data, **optional}, cls)
        except msgspec.ValidationError:
            return None


#: The facts an identity file may lack or have damaged without losing the identity.
_OPTIONAL = ("remote", "instance")


def _digest(*parts: str) -> str:
    import hashlib  # only when an identity is first computed: a command that finds it cached never hashes

    return hashlib.sha256("\0".join(("corral-project", *parts)).encode()).hexdigest()


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.S)
_SCP = re.compile(r"^(?:[^@/]+@)?([^:/]+):(?!//)(.*)$", re.S)


def normalize_remote(url: str, base: Path | None = None) -> str | None:
    """One spelling for one remote: ``host/path`` (no scheme, user, port, ``.git``), or a local path."""
    text = url.strip()
    if not text:
        return None
    host = ""
    found = _SCHEME.match(text)
    if found and found.group(1).lower() != "file":
        authority, _, path = found.group(2).partition("/")
        host = authority.rpartition("@")[2]
        if not host.startswith("["):  # an IPv6 literal keeps its colons
            host = host.partition(":")[0]
    elif found:
        path = found.group(2)
        path = path[path.index("/") :] if "/" in path else path  # file://host/path: the host is local
    elif (scp := _SCP.match(text)) and "/" not in text.split(":", 1)[0]:
        host, path = scp.group(1), scp.group(2)
    else:
        path = text
    path = re.sub(r"/{2,}", "/", path).rstrip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")].rstrip("/")
    if host:
        return f"{host.lower()}/{path.lstrip('/')}"
    local = Path(path).expanduser()
    if not local.is_absolute() and base is not None:
        local = base / local
    return os.path.normpath(str(local))


def compute(git: Git, repo: Path) -> Identity | None:
    """The identity of the repository at ``repo``, or None while it has no commit."""
    found = git.run("rev-list", "--max-parents=0", "HEAD", cwd=repo, check=False)
    roots = sorted(line.strip() for line in found.stdout.splitlines() if line.strip())
    if found.returncode != 0 or not roots:
        return None
    remote = git.run("config", "--get", "remote.origin.url", cwd=repo, check=False)
    url = remote.stdout.strip() if remote.returncode == 0 else ""
    return Identity(roots[0], normalize_remote(url, repo) if url else None)
