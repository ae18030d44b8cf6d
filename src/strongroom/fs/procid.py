"""A calling process's identity for the access checks: pid, start time, the running image's
identity (device, inode, size, mtime, ctime of /proc/PID/exe), uid and parent pid.

The checks run on every open through a mount with access rules, so this is on the request path:
procid.c (libsrproc.so, built by scripts/install.sh) reads it all in one call with the GIL
released once; without the build, the same reads in Python.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

LIBRARY = Path(__file__).with_name("libsrproc.so")
FIELDS = 9


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    if os.environ.get("STRONGROOM_NO_NATIVE") == "1" or not LIBRARY.exists():
        return None
    try:
        so = ctypes.CDLL(str(LIBRARY))
    except OSError:
        return None
    so.sr_proc_identity.restype = ctypes.c_int
    so.sr_proc_identity.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return so


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
