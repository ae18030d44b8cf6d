"""Keeping a key-holding process's memory where it belongs: no core dumps, no ptrace or
/proc/PID/mem reads by the same user (PR_SET_DUMPABLE 0), and, where the platform allows, no
page of it written to swap (mlockall).

What this cannot do: Python keeps keys in immutable bytes objects that are never wiped, and the
allocator may leave copies behind when buffers are freed or moved; locked pages only keep them
off the disk.  Keys also pass through pyca/cryptography's and OpenSSL's own buffers.
"""

from __future__ import annotations

import ctypes
import os
import resource

_PR_SET_DUMPABLE = 4
_MCL_CURRENT, _MCL_ONFAULT = 1, 4


def harden_process(lock_memory: bool = True) -> list[str]:
    """Apply what the platform allows; returns what could not be done (one phrase each), for
    the caller to log.  Never raises: a daemon runs without what it cannot get."""
    missing: list[str] = []
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError) as e:
        missing.append(f"core dumps stay allowed ({e})")
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        missing.append(f"the process stays dumpable (prctl: errno {ctypes.get_errno()})")
    if lock_memory:
        limit = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        if os.geteuid() != 0 and limit != resource.RLIM_INFINITY:
            # every later allocation past the limit would fail: not worth a key kept off swap
            missing.append(f"memory is not locked against swapping (RLIMIT_MEMLOCK is {limit} bytes)")
        # CURRENT, not FUTURE: the pages mapped now, which hold the keys derived before this
        # call (the server's unseal key before its fork, the mount's volume keys), stay in RAM;
        # locking every later allocation too made each page fault dearer (the key server lost
        # ~20 % of its get and put rate; git show 7c4ab38:docs/BENCHMARKS.md).  ONFAULT: reserved but untouched
        # pages are not made resident.
        elif libc.mlockall(_MCL_CURRENT | _MCL_ONFAULT) != 0:
            missing.append(f"memory is not locked against swapping (mlockall: errno {ctypes.get_errno()})")
    return missing
