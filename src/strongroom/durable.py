"""Making files durable, and reading a small settings file, one way each for every layer (the
filesystem's lower files, the client's profile, the server's PIN, token and certificate files).
It needs nothing but the OS, so any package may use it."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """A regular file's content, at most ``limit`` bytes (ValueError past it).  Opened
    non-blocking and checked before any read, so a FIFO or a device put where the file should be
    is refused (ValueError) instead of blocking the caller forever; a symlink to a regular file
    is followed, as for any setting that names a file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        os.set_blocking(fd, True)
        data = b""
        while len(data) <= limit and (more := os.read(fd, limit + 1 - len(data))):
            data += more
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"over {limit} bytes")
    return data


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (a create, a rename) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: str | os.PathLike[str], data: bytes, flags: int, mode: int = 0o600) -> None:
    """Open ``path`` with ``flags`` (plus O_WRONLY and O_CREAT), write all of ``data``, fsync, close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | flags, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically and durably: a new temporary file beside it,
    fsync'd, renamed over it (a symlink at ``path`` is replaced, not followed), and the directory
    fsync'd.  A crash leaves the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    # always a new file: whatever sits at the name (a crash's leftover, or a symlink or FIFO put
    # there by whoever else can write the directory) is removed, never opened or followed
    tmp.unlink(missing_ok=True)
    write_synced(tmp, data, os.O_EXCL | os.O_NOFOLLOW, mode)
    os.replace(tmp, path)
    fsync_dir(path.parent)
