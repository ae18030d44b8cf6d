"""New lower entries owned by the caller: a request that creates an entry (a file, directory,
symlink, FIFO, device node or socket) runs its lower system calls under the caller's file-system
user and group ids, on the serving thread only.

Linux keeps credentials per thread, and setfsuid(2)/setfsgid(2) and capset(2) change only the
calling thread's (glibc broadcasts setuid/setgroups to every thread, but not these), so the
daemon's other requests in flight keep running as root.  The lower file system then makes the
entry exactly as it would for the caller: owner = fsuid; group = the parent's when the parent is
set-group-ID (and a new directory inherits that bit), fsgid otherwise.  No chown follows, so there
is no moment in which the entry exists under another owner.

Changing the fsuid away from 0 drops the file-system capabilities (DAC_OVERRIDE, FOWNER, FSETID,
MKNOD, ...) from the thread's effective set; they are raised again from the permitted set at
once.  The kernel already decided, on the mount (``default_permissions``), whether the caller may
make the entry, with the caller's full credentials (supplementary groups included); the lower
checks would repeat that with fewer groups, and the lower mode stripping (set-group-ID in a
set-group-ID directory) was already applied to the mode the kernel sent.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_CAP_VERSION_3 = 0x20080522
_PROBE_UID = 65534


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class CallerCredentials:
    """Runs a function under a caller's fsuid/fsgid on the calling thread.  Inactive (runs the
    function as it is) when the daemon is not root: it could not give an entry away then anyway."""

    def __init__(self) -> None:
        self.uid, self.gid = os.geteuid(), os.getegid()
        self.active = self.uid == 0
        # PyDLL: these calls take a microsecond and keep the GIL; a CDLL call would hand the GIL to
        # another request thread around each of the seven and wait to get it back.
        self._libc = ctypes.PyDLL(None, use_errno=True)
        self._caps = (_CapData * 2)()
        if self.active:
            header = _CapHeader(_CAP_VERSION_3, 0)
            self.active = self._libc.capget(ctypes.byref(header), self._caps) == 0 and self._can_switch()

    def _can_switch(self) -> bool:
        """Whether this thread can take another fsuid and come back (a root without CAP_SETUID,
        in some containers, cannot): then new entries keep belonging to the daemon."""
        try:
            return bool(self.run_as(_PROBE_UID, _PROBE_UID, lambda: True))
        except OSError:
            return False

    def run_as(self, uid: int, gid: int, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        if not self.active or (uid == self.uid and gid == self.gid):
            return fn(*args, **kwargs)
        libc = self._libc
        try:
            libc.setfsgid(gid)
            libc.setfsuid(uid)
            # setfsuid/setfsgid report no error; asking with an invalid id returns the current one
            if libc.setfsuid(-1) != uid or libc.setfsgid(-1) != gid:
                raise OSError(errno.EPERM, "cannot act as the caller")
            header = _CapHeader(_CAP_VERSION_3, 0)
            if libc.capset(ctypes.byref(header), self._caps) != 0:
                raise OSError(ctypes.get_errno(), "cannot keep the daemon's capabilities")
            return fn(*args, **kwargs)
        finally:
            libc.setfsuid(self.uid)  # back to 0: the kernel raises the file-system capabilities again
            libc.setfsgid(self.gid)


_CAP_FSETID = 4  # linux/capability.h


def drop_setid(fd: int) -> None:
    """Clear set-user-ID, and set-group-ID on a group-executable file, as the kernel does when a
    caller without CAP_FSETID writes or truncates a file."""
    mode = os.fstat(fd).st_mode
    drop = stat.S_ISUID | (stat.S_ISGID if mode & stat.S_IXGRP else 0)
    if mode & drop:
        os.fchmod(fd, stat.S_IMODE(mode) & ~drop)


def lacks_fsetid(pid: int) -> bool:
    """Whether process ``pid`` lacks CAP_FSETID.  Asked only when the kernel has kept the clearing
    of set-id bits (no set-id shim, fuseio.py): it then clears them for writes and truncates, but
    not for an open with O_TRUNC, which libfuse's atomic O_TRUNC leaves to the file system.  A
    caller that cannot be read (gone) lacks it."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"CapEff:"):
                    return not int(line.split()[1], 16) & (1 << _CAP_FSETID)
    except (OSError, ValueError, IndexError):
        pass
    return True
