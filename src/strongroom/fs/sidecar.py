"""Reading the volume's own small files (directory tweaks, long-name sidecars, the config, the
rules, journals) from a lower directory that someone else may be able to write.

Such a file may have been replaced by a symlink (to /dev/zero, a FIFO, anything), a FIFO, a device
node, a directory or a huge file.  Opened naively, a FIFO blocks the reader forever, /dev/zero
never ends, and a device's driver runs its open.  Here the entry is first opened as a path only
(O_PATH | O_NOFOLLOW: nothing of the target runs, a symlink is not followed), its type and size
checked on that descriptor, and only a regular file within the format's size is then reopened
for reading (through /proc/self/fd, so the same inode), non-blocking, and read no further than
that size.
"""

from __future__ import annotations

import errno
import os
import stat

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeFile(OSError):
    """The entry is not a regular file within its size: answered as EIO (damage), never read."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(errno.EIO, f"{why}: not read", path)
        self.why = why


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: str | os.PathLike[str], flags: int, limit: int | None, dir_fd: int | None) -> int | None:
    shown = os.fspath(path)
    try:
        pfd = os.open(path, _PATH_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(pfd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(shown, f"is {_kind(st.st_mode)}")
        if limit is not None and st.st_size > limit:
            raise UnsafeFile(shown, f"is {st.st_size} bytes, more than the {limit} it may be")
        flags |= os.O_NONBLOCK | os.O_CLOEXEC
        try:  # the magic link is followed to the inode pfd holds, whatever the name holds now
            fd = os.open(f"/proc/self/fd/{pfd}", flags)
        except FileNotFoundError:  # no /proc: open by name, then make sure it is the same file
            fd = os.open(path, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
            again = os.fstat(fd)
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                os.close(fd)
                raise UnsafeFile(shown, "was replaced while being opened") from None
    finally:
        os.close(pfd)
    os.set_blocking(fd, True)
    return fd


def read_bounded(path: str | os.PathLike[str], limit: int, dir_fd: int | None = None) -> bytes | None:
    """The content of the regular file ``path`` (at most ``limit`` bytes), None if there is no such
    entry; UnsafeFile if it is anything else or larger."""
    fd = _open_regular(path, os.O_RDONLY, limit, dir_fd)
    if fd is None:
        return None
    try:
        data = os.read(fd, limit + 1)
        while len(data) <= limit and (more := os.read(fd, limit + 1 - len(data))):
            data += more
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew since the check
        raise UnsafeFile(os.fspath(path), f"is more than the {limit} bytes it may be")
    return data


def open_regular(path: str | os.PathLike[str], flags: int) -> int:
    """A descriptor of the lower regular file ``path`` for an offline tool (rotate, reencrypt,
    move): never through a symlink, never a FIFO's or a device's open; FileNotFoundError if it is
    gone, UnsafeFile for anything but a regular file."""
    fd = _open_regular(path, flags, None, None)
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(path))
    return fd
