"""The tests' first repository, made once per test process and copied for each test.

Nearly every test starts from the same git repository: ``main`` with one commit of ``README.md``.
Making it takes three git processes (``init``, ``add``, ``commit``), about a tenth of a second on
a loaded machine, for thousands of tests; a copy of a repository made once takes a few
milliseconds and no process.

A copy alone is not the same repository to git: the index records each tracked file's inode,
device and change time, which a copy cannot keep, so git would take the copy's files for changed
until something refreshed the index (``git diff-index`` does not, ``git status`` would rewrite
the index). :func:`copy` therefore writes the copy's own stat data into its index, exactly what
``git update-index --refresh`` writes there, and the copy is what ``init``, ``add`` and
``commit`` would have left: the same objects, refs, config, hooks and a clean, fresh index.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
from collections.abc import Mapping
from pathlib import Path

_ENTRY = struct.Struct(">10I20sH")  # ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size, object id, flags
_U32 = 0xFFFFFFFF


def make(path: Path, env: Mapping[str, str]) -> Path:
    """The repository at ``path``, made as a test would make it, with git run in ``env`` alone."""
    path.mkdir(parents=True)

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=path, env=dict(env), check=True, capture_output=True, text=True)
        return out.stdout

    git("init", "-q", "-b", "main")
    (path / "README.md").write_text("# demo\n")
    git("add", "README.md")
    git("commit", "-q", "-m", "initial")
    if git("status", "--porcelain", "--untracked-files=all").strip():
        raise AssertionError(f"the template repository at {path} is not clean")
    return path


def copy(template: Path, path: Path) -> Path:
    """A copy of ``template`` at ``path`` whose index describes the copy's own files."""
    shutil.copytree(template, path, symlinks=True)
    if not _restat(path):
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=path, check=True, capture_output=True)
    return path


def _restat(repo: Path) -> bool:
    """Write each index entry's stat data from the copy's file, as a refresh would; False for an
    index this does not read (a version other than 2, an extended entry), left for git to refresh.

    Only a copy of a clean template is restated: its files hold what the index names, so the
    entry's size is the file's (an entry git smudged as racily clean is made whole again)."""
    index = repo / ".git" / "index"
    data = bytearray(index.read_bytes())
    signature, version, count = struct.unpack_from(">4sII", data, 0)
    if signature != b"DIRC" or version != 2:
        return False
    offset = 12
    for _ in range(count):
        fields = _ENTRY.unpack_from(data, offset)
        flags = fields[11]
        if flags & 0x4000:  # an extended entry: not in version 2, but never guessed at
            return False
        length = flags & 0x0FFF
        name = bytes(data[offset + _ENTRY.size : offset + _ENTRY.size + length])
        st = os.lstat(os.path.join(os.fsencode(repo), name))
        _ENTRY.pack_into(
            data,
            offset,
            (st.st_ctime_ns // 1_000_000_000) & _U32,
            st.st_ctime_ns % 1_000_000_000,
            (st.st_mtime_ns // 1_000_000_000) & _U32,
            st.st_mtime_ns % 1_000_000_000,
            st.st_dev & _U32,
            st.st_ino & _U32,
            fields[6],
            st.st_uid & _U32,
            st.st_gid & _U32,
            st.st_size & _U32,
            fields[10],
            flags,
        )
        offset += (_ENTRY.size + length + 8) // 8 * 8  # the name ends with 1 to 8 NULs
    data[-20:] = hashlib.sha1(data[:-20]).digest()
    index.write_bytes(data)
    return True
