"""Lower paths reached beneath the volume root with no symlink on the way (docs/FILESYSTEM.md).

Whoever can write the lower directory could replace a lower directory by a symlink to
somewhere else; a daemon that follows joined paths would then chmod, write or unlink outside
the volume on their behalf.  Here the parent directory of a lower entry is opened with
openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) from a descriptor of the
root (component by component with O_NOFOLLOW on kernels without openat2), and the entry is then
named as /proc/self/fd/<parent>/<name>: the parent is pinned, so no later swap of a path
component can redirect the call.  The final component is each caller's to treat without
following (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, lchown), as fuse_ops does.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Iterator

_SYS_OPENAT2 = 437  # x86-64 and arm64 alike
_RESOLVE = 0x02 | 0x04 | 0x08  # NO_MAGICLINKS | NO_SYMLINKS | BENEATH


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


# PyDLL: the call holds the GIL.  It takes microseconds; a CDLL call drops the GIL and, with the
# daemon's request threads all waiting for it, can take far longer to get it back.
_libc = ctypes.PyDLL(None, use_errno=True)
_has_openat2: bool | None = None


def _openat2(root_fd: int, rel: str, flags: int) -> int:
    how = _OpenHow(flags, 0, _RESOLVE)
    for _ in range(8):  # EAGAIN: a rename elsewhere raced the lookup; it is safe to look again
        fd = int(_libc.syscall(_SYS_OPENAT2, root_fd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), rel)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), rel)


def _walk(root_fd: int, rel: str, flags: int) -> int:
    """openat2's guarantee without it: one component at a time, never following a symlink."""
    fd = os.dup(root_fd)
    try:
        for part in rel.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), rel)
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


class Beneath:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.root_fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.root_fd)

    def open_dir(self, lower_dir: str) -> int:
        """An O_PATH descriptor of the lower directory ``lower_dir`` (a path under the root)."""
        global _has_openat2
        rel = os.path.relpath(lower_dir, self.root)
        if rel.startswith(".."):
            raise OSError(errno.EXDEV, "outside the volume", lower_dir)
        flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
        if _has_openat2 is not False:
            try:
                return _openat2(self.root_fd, rel, flags)
            except OSError as e:
                if e.errno != errno.ENOSYS:
                    raise
                _has_openat2 = False
        return _walk(self.root_fd, rel, flags)

    @contextlib.contextmanager
    def path(self, lower: str) -> Iterator[str]:
        """A name for the lower entry ``lower`` that no symlink above it can redirect, valid
        inside the block.  The root itself is named as it is (it was chosen by the mount)."""
        lower = os.path.abspath(lower)
        if lower == self.root:
            yield lower
            return
        parent, name = os.path.split(lower)
        fd = self.open_dir(parent)
        try:
            yield f"/proc/self/fd/{fd}/{name}"
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def directory(self, lower_dir: str) -> Iterator[str]:
        """A name for the lower directory itself (no symlink anywhere, its own name included),
        for reaching the entries inside it: ``<name>/<entry>``."""
        lower_dir = os.path.abspath(lower_dir)
        if lower_dir == self.root:
            yield f"/proc/self/fd/{self.root_fd}"
            return
        fd = self.open_dir(lower_dir)
        try:
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
