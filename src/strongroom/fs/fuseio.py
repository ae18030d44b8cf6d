"""The mount's /dev/fuse I/O (fuseio.c with its two parts, setid.c and baton.c, built into
libsrfuseio.so), each part switched on or off when the mount starts:

- the **set-id shim** (``setid=True``): the kernel leaves the clearing of set-id bits to the
  daemon (FUSE_HANDLE_KILLPRIV_V2, which libfuse 3.14 cannot negotiate by itself), so it stops
  sending its own privilege checks (a GETXATTR before every write, a GETATTR before every chown);
- the **reader baton** (``baton=True``): one libfuse thread reads requests at a time, so a
  stream of small requests stays on one thread instead of handing Python's GIL from thread to
  thread.

Whenever the build is there, the session's I/O is fuseio.c's, which also lets a request's thread
tell the kernel to drop a path's attributes without touching its pages (``attrs_invalidator``),
and, where the kernel speaks protocol 7.39, allows shared mappings of files served without the
page cache (``direct_mmap``).

Without the build, or with both off, libfuse does its own I/O: the mount behaves the same, a
little slower."""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom import helpers

LIBRARY = Path(__file__).with_name("libsrfuseio.so")
ABI = 5  # SR_FUSEIO_ABI in fuseio.h
SETID, BATON, DMMAP = 1, 2, 4  # SR_SETID, SR_BATON, SR_DMMAP in fuseio.h
ATTRS = 8  # not a part: the I/O is fuseio.c's, so attrs_invalidator() works
DIRECT_IO_ALLOW_MMAP_MINOR = 39  # protocol 7.39 (Linux 6.6): shared mmap of direct-I/O files
FUSE_CAP_SPLICE_READ = 1 << 9
KILLPRIV_V2_MINOR = 33  # protocol 7.33 (Linux 5.11) added FUSE_HANDLE_KILLPRIV_V2


@functools.lru_cache(maxsize=1)
def _lib() -> Any:
    # called holding the GIL: they take nanoseconds, on every write
    so = helpers.load(LIBRARY, ("sr_fuseio_abi_version", ABI), hold_gil=True)
    if so is None:
        return None
    for name in ("sr_fuseio_patched", "sr_fuseio_kill_suidgid", "sr_fuseio_direct_mmap", "sr_fuseio_serving"):
        getattr(so, name).restype = ctypes.c_int
        getattr(so, name).argtypes = []
    for name in ("sr_fuseio_install", "sr_fuseio_reset"):
        getattr(so, name).restype = ctypes.c_int
        getattr(so, name).argtypes = [ctypes.c_int]
    return so


def available() -> bool:
    return _lib() is not None


def install(conn: Any, setid: bool = True, baton: bool = True) -> int:
    """From the file system's init callback (on libfuse's thread answering INIT, before the reply
    goes out): route the session's I/O through fuseio.c with the parts asked for, where the
    kernel allows them.  Returns the parts on (SETID | BATON, 0 for none).  With SETID the INIT
    reply carries FUSE_HANDLE_KILLPRIV_V2, and the daemon must clear set-id bits whenever
    kill_requested() says so."""
    so = _lib()
    wanted = (SETID if setid and conn.proto_minor >= KILLPRIV_V2_MINOR else 0) | (BATON if baton else 0)
    if conn.proto_minor >= DIRECT_IO_ALLOW_MMAP_MINOR:
        wanted |= DMMAP
    if so is None:
        return 0
    # Spliced requests would bypass fuseio.c's read; they bring nothing here anyway, since the
    # path-based API copies every request into memory for Python.
    conn.want &= ~FUSE_CAP_SPLICE_READ
    return wanted | ATTRS if so.sr_fuseio_install(wanted) == 0 else 0


def attrs_invalidator() -> Callable[[str], int] | None:
    """A function making the kernel drop the attributes, and only those, that it caches for a
    plaintext path (0, or a negative errno); None without the build.  Safe from a thread serving
    a request, unlike libfuse's own invalidation, which also drops pages and so waits for their
    locks (notify.py).  Called through a handle that releases the GIL: the kernel may still have
    to wait for an inode being freed."""
    if _lib() is None:
        return None
    fn = ctypes.CDLL(str(LIBRARY)).sr_fuseio_invalidate_attrs
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p]
    encode = os.fsencode

    def invalidate(path: str) -> int:
        return int(fn(encode(path)))

    return invalidate


FUSE_RENAME, FUSE_RENAME2 = 12, 45  # linux/fuse.h opcodes


def serving() -> Callable[[], int]:
    """A function answering the opcode of the request the calling libfuse thread serves (0 when
    the I/O is not fuseio.c's)."""
    so = _lib()
    return _never if so is None else so.sr_fuseio_serving  # type: ignore[no-any-return]


def direct_mmap() -> bool:
    """Whether the INIT reply went out with FUSE_DIRECT_IO_ALLOW_MMAP: files served without the
    page cache can still be mapped shared."""
    so = _lib()
    return so is not None and bool(so.sr_fuseio_direct_mmap())


def patched() -> bool:
    """Whether the INIT reply went out with FUSE_HANDLE_KILLPRIV_V2."""
    so = _lib()
    return so is not None and bool(so.sr_fuseio_patched())


def _never() -> int:
    return 0


def kill_requested() -> Callable[[], int]:
    """A function answering, for the request the calling libfuse thread is serving, whether the
    kernel asked for set-id bits to be cleared (a write, truncate or O_TRUNC open by a caller
    without CAP_FSETID)."""
    so = _lib()
    return _never if so is None else so.sr_fuseio_kill_suidgid  # type: ignore[no-any-return]
