"""Lower paths reached beneath the volume root with no symlink on the way (docs/FILESYSTEM.md).

Whoever can write the lower directory could replace a lower directory by a symlink to
somewhere else; a daemon that follows joined paths would then chmod, write or unlink outside
the volume on their behalf.  Here the parent directory of a lower entry is opened with
openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) from a descriptor of the
root (component by component with O_NOFOLLOW on kernels without openat2; one step below a
directory already kept, from that descriptor with O_NOFOLLOW, trusted no longer than it), and the
entry is then named by (that descriptor, its name) in the *at system calls: the parent is pinned, so no later
swap of a path component can redirect the call.  The final component is each caller's to treat
without following (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, lchown), as fuse_ops does.  Calls that take
no directory descriptor (the xattr ones) name it as /proc/self/fd/<parent>/<name>, which costs a
walk through procfs on each call.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

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


def _walk(root_fd: int, rel: str) -> int:
    """openat2's guarantee without it: one component at a time, never following a symlink."""
    fd = os.dup(root_fd)
    try:
        for part in rel.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), rel)
            nxt = _open_child(fd, part)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child(dir_fd: int, name: str) -> int:
    """The directory ``name`` in ``dir_fd``, never a symlink (ELOOP, as openat2 answers)."""
    try:
        return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except NotADirectoryError:
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


_STEP = 3072  # bytes of a relative path opened in one step (PATH_MAX is 4096)


def fits(path: str) -> bool:
    """Whether the kernel takes ``path`` in one call (shorter than PATH_MAX, with room to join
    a name to it)."""
    return len(path) < 768 or len(os.fsencode(path)) < _STEP


def _normal(path: str) -> bool:
    """Whether an absolute path is already in abspath's form (the daemon's own joins are)."""
    return "//" not in path and "/./" not in path and "/../" not in path and not path.endswith(("/.", "/..", "/"))


DIR_CACHE = 128  # parent directories kept open (a tar or rm -rf works in a few at a time; a
# deep tree's walk returns to a directory after more than a few dozen others)
DIR_CACHE_S = 1.0  # how long one is trusted without looking again


class Beneath:
    """Lower entries reached beneath ``root``.  Parent directories just reached are kept open
    for DIR_CACHE_S (as gocryptfs's dirCache does), since one file's creation is followed by its
    chown, times and mode in the same directory: ``forget`` must be called whenever the daemon
    removes or moves a lower directory, so no descriptor outlives the path it was found at.
    Someone else moving a lower directory is noticed within DIR_CACHE_S; until then a held
    descriptor still names that directory (never a symlink, never outside what was beneath the
    root when it was opened)."""

    def __init__(self, root: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = os.path.abspath(root)
        self._prefix = self.root.rstrip("/") + "/"
        self.root_fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}  # in the order opened
        self._gen = 0  # bumped by forget: a directory opened before it is not kept

    def close(self) -> None:
        self.forget()
        os.close(self.root_fd)

    def forget(self, lower_dir: str | None = None) -> None:
        """Drop the kept descriptors of ``lower_dir`` and the directories below it (of every
        directory if None); each is closed once no call is using it."""
        rel = None if lower_dir is None else self._relative(lower_dir)
        with self._lock:
            self._gen += 1
            for key in list(self._held):
                if rel is None or key == rel or key.startswith(rel + "/"):
                    self._held.pop(key).drop()

    def _relative(self, lower: str) -> str:
        """``lower`` relative to the root ("" for the root); EXDEV outside it."""
        if not _normal(lower):
            lower = os.path.abspath(lower)
        if lower == self.root:
            return ""
        if not lower.startswith(self._prefix):
            raise OSError(errno.EXDEV, "outside the volume", lower)
        return lower[len(self._prefix) :]

    def _open_rel(self, rel: str) -> int:
        """The directory ``rel`` below the root: deeper than one path may name (PATH_MAX), in
        steps, each from the descriptor the one before opened."""
        fd = self.root_fd
        try:
            while not fits(rel):
                cut = rel.rfind("/", 0, _STEP)
                if cut <= 0:  # a component no directory can have (names are at most 255 bytes)
                    raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
                step = self._open_from(fd, rel[:cut])
                if fd != self.root_fd:
                    os.close(fd)
                fd, rel = step, rel[cut + 1 :]
            step = self._open_from(fd, rel)
        finally:
            if fd != self.root_fd:
                os.close(fd)
        return step

    @staticmethod
    def _open_from(dir_fd: int, rel: str) -> int:
        global _has_openat2
        if _has_openat2 is not False:
            try:
                return _openat2(dir_fd, rel)
            except OSError as e:
                if e.errno != errno.ENOSYS:
                    raise
                _has_openat2 = False
        return _walk(dir_fd, rel)

    def call(self, lower: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(a path naming lower, *args, **kwargs)``: ``lower`` itself when the kernel takes it
        (shorter than PATH_MAX), else the entry named through its parent's descriptor (path),
        so a tree of any depth is reached.  For the calls that follow no symlink by themselves
        (lstat, scandir, readlink and the like) on paths the daemon has just resolved."""
        if fits(lower):
            return fn(lower, *args, **kwargs)
        with self.path(lower) as entry:
            return fn(entry.path, *args, **kwargs)

    def path(self, lower: str) -> Entry:
        """The lower entry ``lower`` as (a pinned directory, a name in it), valid inside the
        ``with`` block.  An entry in the root needs no descriptor of its own; the root itself is
        named by its absolute path (it was chosen by the mount)."""
        return Entry(*self._reach(lower))

    def at(self, lower: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(name, *args, dir_fd=parent, **kwargs)`` on the lower entry ``lower``, its parent
        pinned for the call: ``path`` in one call, for the changes made on most requests
        (open, mode, owner, times)."""
        dir_fd, name, held = self._reach(lower)
        try:
            return fn(name, *args, dir_fd=dir_fd, **kwargs)
        finally:
            if held is not None:
                held.release()

    def _reach(self, lower: str) -> tuple[int, str, _Held | None]:
        """(parent descriptor, name, the kept parent to release after the call, if any)."""
        # On every change the daemon makes: the common case (a normal path below the root, its
        # parent kept) makes no further call.
        if lower.startswith(self._prefix) and "/." not in lower and "//" not in lower and lower[-1] != "/":
            rel = lower[len(self._prefix) :]
        else:
            rel = self._relative(lower)
            if not rel:
                return self.root_fd, self.root, None
        parent, _, name = rel.rpartition("/")
        if not parent:
            return self.root_fd, name, None
        now = self._clock()
        with self._lock:
            held = self._held.get(parent)
            if held is not None and now - held.born < DIR_CACHE_S:
                held.users += 1
                return held.fd, name, held
        held = self._hold(parent, now)
        return held.fd, name, held

    def _hold(self, rel: str, now: float) -> _Held:
        """The directory ``rel`` opened now (replacing an expired one), with one user."""
        up, _, last = rel.rpartition("/")
        with self._lock:
            old = self._held.pop(rel, None)
            if old is not None:
                old.drop()
            gen = self._gen
            above = self._held.get(up) if up else None
            if above is not None and now - above.born < DIR_CACHE_S:
                above.users += 1
            else:
                above = None
        if above is not None:
            # One step below a kept directory (a new directory's first entry, most often): the
            # kept one is trusted as it is, so the new one is trusted no longer than it.
            try:
                held = _Held(_open_child(above.fd, last), above.born, self._lock)
            finally:
                above.release()
        elif not up:
            held = _Held(_open_child(self.root_fd, last), now, self._lock)
        else:
            held = _Held(self._open_rel(rel), now, self._lock)
        with self._lock:
            if gen != self._gen:  # a directory was moved or removed while this one was opened
                held.dropped = True
                return held
            old = self._held.pop(rel, None)
            if old is not None:
                old.drop()
            self._held[rel] = held
            while len(self._held) > DIR_CACHE:  # the first opened goes first; all expire within DIR_CACHE_S
                self._held.pop(next(iter(self._held))).drop()
        return held

    def open(self, lower: str, flags: int, mode: int = 0o600) -> int:
        """os.open of the lower entry ``lower`` itself (ELOOP if it is a symlink)."""
        return self.at(lower, os.open, flags | os.O_NOFOLLOW, mode)

    def directory(self, lower_dir: str) -> _Pinned:
        """A name for the lower directory itself (no symlink anywhere, its own name included),
        for reaching the entries inside it: ``<name>/<entry>``."""
        rel = self._relative(lower_dir)
        if not rel:
            return _Pinned(-1, f"/proc/self/fd/{self.root_fd}")
        fd = self._open_rel(rel)
        return _Pinned(fd, f"/proc/self/fd/{fd}")


class _Held:
    """A kept directory descriptor and the calls using it: closed when it has been dropped from
    the cache and its last user is done, never while a call may still pass it to the kernel
    (a number closed early could name another file by then)."""

    __slots__ = ("fd", "born", "users", "dropped", "_lock")

    def __init__(self, fd: int, born: float, lock: threading.Lock) -> None:
        self.fd = fd
        self.born = born
        self.users = 1
        self.dropped = False
        self._lock = lock

    def drop(self) -> None:
        """Out of the cache (the caller holds the lock)."""
        self.dropped = True
        if self.users == 0:
            os.close(self.fd)

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users == 0 and self.dropped:
                os.close(self.fd)


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


class Entry:
    """``name`` in the directory ``dir_fd``, for the *at calls (``dir_fd=``), valid inside the
    ``with`` block."""

    __slots__ = ("dir_fd", "name", "_held")

    def __init__(self, dir_fd: int, name: str, held: _Held | None) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self._held = held

    @property
    def path(self) -> str:
        """One string naming the entry, for calls that take no directory descriptor."""
        return self.name if self.name.startswith("/") else f"/proc/self/fd/{self.dir_fd}/{self.name}"

    def __enter__(self) -> Entry:
        return self

    def __exit__(self, *exc: object) -> None:
        held = self._held
        if held is not None:
            self._held = None
            held.release()
