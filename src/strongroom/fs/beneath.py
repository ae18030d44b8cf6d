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

import ctypes
import errno
import os

_SYS_OPENAT2 = 437  # x86-64 and arm64 alike
_RESOLVE = 0x02 | 0x04 | 0x08  # NO_MAGICLINKS | NO_SYMLINKS | BENEATH


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


# PyDLL: the call holds the GIL.  It takes microseconds; a CDLL call drops the GIL and, with the
# daemon's request threads all waiting for it, can take far longer to get it back.
_libc = ctypes.PyDLL(None, use_errno=True)
_has_openat2: bool | None = None


_HOW = _OpenHow(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, _RESOLVE)
_HOW_REF = ctypes.byref(_HOW)
_HOW_SIZE = ctypes.sizeof(_HOW)


def _openat2(root_fd: int, rel: str) -> int:
    """An O_PATH descriptor of the directory ``rel`` under ``root_fd``, resolved without symlinks."""
    path = os.fsencode(rel)
    for _ in range(8):  # EAGAIN: a rename elsewhere raced the lookup; it is safe to look again
        fd = int(_libc.syscall(_SYS_OPENAT2, root_fd, path, _HOW_REF, _HOW_SIZE))
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


def _normal(path: str) -> bool:
    """Whether an absolute path is already in abspath's form (the daemon's own joins are)."""
    return "//" not in path and "/./" not in path and "/../" not in path and not path.endswith(("/.", "/..", "/"))


class Beneath:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self._prefix = self.root.rstrip("/") + "/"
        self.root_fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.root_fd)

    def _relative(self, lower: str) -> str:
        """``lower`` relative to the root ("" for the root); EXDEV outside it."""
        if not _normal(lower):
            lower = os.path.abspath(lower)
        if lower == self.root:
            return ""
        if not lower.startswith(self._prefix):
            raise OSError(errno.EXDEV, "outside the volume", lower)
        return lower[len(self._prefix) :]

    def open_dir(self, lower_dir: str) -> int:
        """An O_PATH descriptor of the lower directory ``lower_dir`` (a path under the root)."""
        return self._open_rel(self._relative(lower_dir) or ".")

    def _open_rel(self, rel: str) -> int:
        global _has_openat2
        if _has_openat2 is not False:
            try:
                return _openat2(self.root_fd, rel)
            except OSError as e:
                if e.errno != errno.ENOSYS:
                    raise
                _has_openat2 = False
        return _walk(self.root_fd, rel, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def path(self, lower: str) -> _Pinned:
        """A name for the lower entry ``lower`` that no symlink above it can redirect, valid
        inside the ``with`` block.  The root itself is named as it is (it was chosen by the mount)."""
        rel = self._relative(lower)
        if not rel:
            return _Pinned(-1, self.root)
        parent, _, name = rel.rpartition("/")
        fd = self._open_rel(parent or ".")
        return _Pinned(fd, f"/proc/self/fd/{fd}/{name}")

    def directory(self, lower_dir: str) -> _Pinned:
        """A name for the lower directory itself (no symlink anywhere, its own name included),
        for reaching the entries inside it: ``<name>/<entry>``."""
        rel = self._relative(lower_dir)
        if not rel:
            return _Pinned(-1, f"/proc/self/fd/{self.root_fd}")
        fd = self._open_rel(rel)
        return _Pinned(fd, f"/proc/self/fd/{fd}")


class _Pinned:
    """The name ``path`` while the descriptor ``fd`` it goes through is open (closed on exit)."""

    __slots__ = ("fd", "name")

    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.name = name

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
