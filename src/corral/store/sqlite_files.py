"""The SQLite database's files as the file system sees them: what a coded store error names as the cause.

A SQLite failure says little ("disk I/O error", "attempt to write a readonly database"); the
SQLite store (:mod:`corral.store.sqlite`) asks these probes what is true of its file, its
``-wal`` and ``-shm``: a full disk, a read-only mount, an immutable or append-only file, a log
deleted while a process still holds it open.
"""

from __future__ import annotations

import os

#: Free bytes below which the database's file system counts as full (a transaction needs room).
MIN_FREE_BYTES = 1024 * 1024

#: ``FS_IOC_GETFLAGS`` and the inode flags it reports (linux/fs.h): immutable and append-only files.
_FS_IOC_GETFLAGS = 0x80086601
FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20


def sidecars(path: str) -> tuple[str, str]:
    """The write-ahead log and the shared-memory index beside a database: part of it while it is open."""
    return path + "-wal", path + "-shm"


def inode_flags(path: str) -> int:
    """The file's inode flags (``lsattr``), 0 when they cannot be read."""
    return probe(path)[0]


def probe(path: str) -> tuple[int, bool | None]:
    """(inode flags, opens read-write) of ``path``, found by a child process.

    Closing any descriptor of a file releases every POSIX lock this process holds on it, and
    SQLite's locks on the database, its -wal and its -shm are such locks: a connection that
    lost them lets the next process that closes the database take itself for the last one and
    delete the -wal under it. So this process never opens those files itself; a forked child
    (which holds no locks to lose) opens them, and answers through a pipe.
    """
    import fcntl
    import struct

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then _exit (no cleanup of the parent's objects)
        try:
            os.close(read_end)
            flags, writable = 0, "-"
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except FileNotFoundError:
                fd = None
            except OSError:
                fd = None
                writable = "0"
            if fd is not None:
                try:
                    flags = int(struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("l", 0)))[0])
                except OSError:
                    pass
                os.close(fd)
                try:
                    os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
                    writable = "1"
                except OSError:
                    writable = "0"
            os.write(write_end, f"{flags} {writable}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        answer = b""
        while chunk := os.read(read_end, 64):
            answer += chunk
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    try:
        flags_text, writable_text = answer.decode().split()
        return int(flags_text), None if writable_text == "-" else writable_text == "1"
    except ValueError:
        return 0, None


def free_bytes(directory: str) -> int | None:
    try:
        info = os.statvfs(directory)
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


def read_only_mount(directory: str) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def holders_of_deleted(path: str) -> list[int]:
    """Pids of processes that hold ``path`` open although it was deleted (``/proc/*/fd``)."""
    wanted = f"{os.path.realpath(path)} (deleted)"
    found: list[int] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def file_size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None
