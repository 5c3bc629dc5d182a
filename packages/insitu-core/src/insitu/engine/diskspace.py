"""Disk space under a persisted cache: arena blocks reserved up front, every write checked.

An arena is a memory-mapped file. Grown with ``ftruncate`` alone it is sparse,
and a store into a page the filesystem cannot back is a SIGBUS that kills the
process with nothing on stderr. So each arena's blocks are allocated when it is
opened (``posix_fallocate``): a disk without room is then an error at
construction, naming the directory and the bytes needed, and writes through
the mapping never fault for space. Files written with ``write`` (the index)
are written whole or not at all: a short write is retried until done, and the
index goes to a temporary file that replaces the old one only once complete.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from insitu.errors import CacheDiskFullError

#: errno values that mean "no room": the disk is full, or the user's quota is.
NO_SPACE = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or a quota) is full."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


def free_bytes(directory: Path) -> int | None:
    """Bytes an unprivileged writer may still use under ``directory`` (None when unknown)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def disk_full(directory: Path, what: str, needed: int | None, exc: OSError) -> CacheDiskFullError:
    """The error a user sees when ``what`` did not fit under ``directory``."""
    free = free_bytes(directory)
    need = f"; it needs {needed:,} bytes" if needed is not None else ""
    have = f", {free:,} bytes are free there" if free is not None else ""
    return CacheDiskFullError(
        exc.errno,
        f"no space left for the persisted cache in cache_dir {directory}: {what}{need}{have} "
        f"({exc.strerror}); free some space, lower cache_budget_bytes, or use another cache_dir",
    )


def reserve(fd: int, nbytes: int) -> None:
    """Allocate the blocks of ``nbytes`` of the file ``fd`` now (OSError ENOSPC when they do not fit).

    A filesystem that cannot reserve (EOPNOTSUPP, EINVAL) is left sparse, as before."""
    if nbytes <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)):
            return
        raise


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``: a short write continues where it stopped; a write
    that makes no progress is ENOSPC (nothing is left half-written unnoticed)."""
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        if done <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[done:]
