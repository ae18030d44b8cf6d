"""Making files durable: one way to do it, for every layer (the filesystem's lower files, the
client's profile, ...).  It needs nothing but the OS, so any package may use it."""

from __future__ import annotations

import os
from pathlib import Path


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
    """Replace ``path`` with ``data`` atomically and durably: a temporary file beside it, fsync'd,
    renamed over it, and the directory fsync'd.  A crash leaves the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    write_synced(tmp, data, os.O_TRUNC, mode)
    os.replace(tmp, path)
    fsync_dir(path.parent)
