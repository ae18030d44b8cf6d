"""The daemon's side of the write fast path (fastwrite.c, in libsrfuseio.so): which open files
the mount's I/O thread may rewrite whole blocks of, and fsync, without asking Python, each file's
content lock (shared with that path), and its key once its header has been read.

Enabled by the mount when both compiled helpers are there and the mount is writable
(``FastWrites.start``); elsewhere (tools, read-only mounts, a machine without a compiler) no file
is registered and every write is fileio.py's."""

from __future__ import annotations

import ctypes
import functools
import weakref
from typing import Any

from strongroom import helpers
from strongroom.fs import fuseio, native


@functools.lru_cache(maxsize=2)
def _lib(hold_gil: bool) -> Any:
    # two handles: calls that never wait keep the GIL (nanoseconds); a lock that may wait lets go of it
    so = helpers.load(fuseio.LIBRARY, ("sr_fuseio_abi_version", fuseio.ABI), hold_gil=hold_gil)
    if so is None:
        return None
    so.sr_file_new.restype = ctypes.c_void_p
    so.sr_file_new.argtypes = [ctypes.c_int]
    for name in ("sr_file_free", "sr_file_lock", "sr_file_unlock"):
        getattr(so, name).restype = None
        getattr(so, name).argtypes = [ctypes.c_void_p]
    for name in ("sr_file_trylock", "sr_file_take_written"):
        getattr(so, name).restype = ctypes.c_int
        getattr(so, name).argtypes = [ctypes.c_void_p]
    so.sr_file_key.restype = None
    so.sr_file_key.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    so.sr_fast_add.restype = ctypes.c_int
    so.sr_fast_add.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p]
    so.sr_fast_remove.restype = None
    so.sr_fast_remove.argtypes = [ctypes.c_uint64]
    so.sr_fast_enable.restype = None
    so.sr_fast_enable.argtypes = [ctypes.c_void_p]
    return so


class NativeFile:
    """One open lower file's state in fastwrite.c: its content lock (reentrant, as the
    threading.RLock it replaces) and its published key.  Freed when no longer referenced; by
    then no handle of it is registered (FileIO unregisters a handle before dropping its file)."""

    __slots__ = ("ptr", "_try", "_wait", "_unlock", "_so", "__weakref__")

    def __init__(self, holes: bool) -> None:
        so, waits = _lib(True), _lib(False)
        ptr = so.sr_file_new(int(holes))
        if not ptr:
            raise MemoryError("fastwrite: no memory for a file's state")
        self.ptr: int = ptr
        self._so = so
        self._try, self._wait, self._unlock = so.sr_file_trylock, waits.sr_file_lock, so.sr_file_unlock
        weakref.finalize(self, so.sr_file_free, ptr)

    def __enter__(self) -> NativeFile:
        if not self._try(self.ptr):
            self._wait(self.ptr)  # the GIL is let go while another thread holds the file
        return self

    def __exit__(self, *_: object) -> None:
        self._unlock(self.ptr)

    def publish(self, key: bytes | None, file_id: bytes = b"") -> None:
        """The file's key and id (from its header), or None once they no longer hold; with the
        lock held."""
        self._so.sr_file_key(self.ptr, key, file_id if key is not None else None)

    def take_written(self) -> bool:
        """Whether fastwrite.c rewrote blocks of the file since the last call."""
        return bool(self._so.sr_file_take_written(self.ptr))


class FastWrites:
    def __init__(self, so: Any, holes: bool) -> None:
        self._so = so
        self._remove = _lib(False).sr_fast_remove  # waits, GIL let go, for a write in flight
        self.holes = holes

    @classmethod
    def start(cls, holes: bool) -> FastWrites | None:
        """Switch the fast path on for this process's mount; None where a helper is missing."""
        so, blocks = _lib(True), native.lib()
        if so is None or blocks is None:
            return None
        so.sr_fast_enable(ctypes.cast(blocks.sr_seal_blocks, ctypes.c_void_p))
        return cls(so, holes)

    def new_file(self) -> NativeFile:
        return NativeFile(self.holes)

    def add(self, fh: int, fd: int, file: NativeFile) -> bool:
        return self._so.sr_fast_add(fh, fd, file.ptr) == 0  # type: ignore[no-any-return]

    def remove(self, fh: int) -> None:
        self._remove(fh)
