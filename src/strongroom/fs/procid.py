"""A calling process's identity for the access checks: pid, start time, the running image's
identity (device, inode, size, mtime, ctime of /proc/PID/exe), uid and parent pid.

The checks run on every open through a mount with access rules, so this is on the request path:
procid.c (libsrproc.so, built by the package build, setup.py) reads it all in one call with the GIL
released once; without the build, the same reads in Python.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path
from typing import Any

from strongroom import helpers

LIBRARY = Path(__file__).with_name("libsrproc.so")
FIELDS = 9


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    so = helpers.load(LIBRARY)
    if so is None:
        return None
    so.sr_proc_identity.restype = ctypes.c_int
    so.sr_proc_identity.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return so


@functools.lru_cache(maxsize=1)
def _recheck() -> Any:
    """sr_proc_recheck, called holding the GIL: it takes a few µs, and dropping and retaking the GIL
    around it (as a CDLL call does) cost the daemon's request threads more than the call itself."""
    if _lib() is None:
        return None
    fn = ctypes.PyDLL(str(LIBRARY)).sr_proc_recheck
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return fn


def identity(pid: int) -> tuple[int, ...] | None:
    """The identity tuple, or None when the process is gone."""
    so = _lib()
    if so is None:
        return identity_py(pid)
    out = (ctypes.c_longlong * FIELDS)()
    if so.sr_proc_identity(pid, out) != 0:
        return None
    return tuple(out)


def identity_py(pid: int) -> tuple[int, ...] | None:
    proc = f"/proc/{pid}"
    try:
        fd = os.open(proc + "/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            stat_line = os.read(fd, 4096)
        finally:
            os.close(fd)
        # The command name may hold spaces and ')': the fields resume after the last ')'.
        fields = stat_line.rsplit(b")", 1)[1].split()
        start, ppid = int(fields[19]), int(fields[1])
        est = os.stat(proc + "/exe")
        uid = os.stat(proc).st_uid
    except (OSError, ValueError, IndexError):
        return None  # the process is gone
    return (pid, start, est.st_dev, est.st_ino, est.st_size, est.st_mtime_ns, est.st_ctime_ns, uid, ppid)


def proc_is_ours() -> bool:
    """Whether /proc shows this process's pid namespace (as it does unless the daemon was moved
    into a new one, or handed another's /proc, without mounting its own)."""
    try:
        return int(os.readlink("/proc/self")) == os.getpid()
    except (OSError, ValueError):
        return False


class Tracker:
    """Identities of the processes seen lately, re-checked cheaply.

    The first request from a pid reads its full identity (above) and opens a pidfd on it; later
    requests only check that the pidfd's process still runs (so the pid was not reused) and that
    its executable and uid are unchanged (an exec or a setuid), which skips the costly read of
    /proc/PID/stat.  Anything unexpected (no compiled helper, no pidfd for a thread id, a change)
    falls back to the full read.  At most ``limit`` pidfds are held."""

    def __init__(self, limit: int = 256) -> None:  # pidfds held: well under the default 1,024 descriptors
        self.limit = limit
        self._known: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._lock = threading.Lock()

    def identity(self, pid: int) -> tuple[int, ...] | None:
        recheck = _recheck()
        if recheck is None:
            return identity_py(pid)
        out = (ctypes.c_longlong * 6)()
        with self._lock:  # a pidfd is never closed while another thread checks it
            known = self._known.get(pid)
            if known is not None:
                known_fd, known_ident = known
                if recheck(pid, known_fd, out) == 0 and tuple(out) == known_ident[2:8]:
                    return known_ident
                del self._known[pid]
                os.close(known_fd)
        ident = identity(pid)
        if ident is None:
            return None
        fd = _pidfd(pid)
        if fd is None:  # it just exited, or a thread id on a kernel without PIDFD_THREAD
            return ident
        fresh = identity(pid)
        if fresh != ident:  # the pidfd may be another process's: no fast path for it
            os.close(fd)
            return fresh
        with self._lock:
            if len(self._known) >= self.limit:
                for old_fd, _ in self._known.values():
                    os.close(old_fd)
                self._known.clear()
            previous = self._known.pop(pid, None)
            if previous is not None:
                os.close(previous[0])
            self._known[pid] = (fd, ident)
        return ident


PIDFD_THREAD = os.O_EXCL  # linux/pidfd.h: a pidfd for one thread (Linux 6.9)


def _pidfd(pid: int) -> int | None:
    """A pidfd on ``pid``, which FUSE reports as the calling *thread*'s id: PIDFD_THREAD takes any
    thread; older kernels open only thread-group leaders."""
    for flags in (PIDFD_THREAD, 0):
        try:
            return os.pidfd_open(pid, flags)
        except OSError:
            continue
    return None
