"""The FUSE front end's libfuse side: mfusepy's FUSE class, tuned (fuse_ops.py has the
operations).  mfusepy's private members are used here (``_wrapper``, ``c_stat``'s layout), so
pyproject pins mfusepy to the tested series, and the stat layout is checked at start
(``stat_packer``: None, and mfusepy's slower way, when it does not match)."""

from __future__ import annotations

import ctypes
import errno
import itertools
import logging
import os
import struct
import threading
from collections.abc import Callable
from typing import Any

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would take libfuse2 if it were installed

import mfusepy  # noqa: E402 - after the library choice above

from strongroom.fs.fuse_ops import BLKSIZE, VolumeOps  # noqa: E402
from strongroom.fs.ratelog import RateLimitedLog  # noqa: E402

# Big reads and writes do not wake the keep-warm helper (warm.py): they come many at a time, in
# parallel, and the helper competing with their threads halved sequential reads in some runs.
WARM_IO_MAX = 256 << 10
_BULK = frozenset({"read", "write"})
PINNED_THREADS = 16  # libfuse threads whose Python thread state is kept (see Fuse._wrapper)
# What the front end logs itself (failures no operation expected), once a minute per kind at most
_ratelog = RateLimitedLog(logging.getLogger("strongroom.fs"))

# A view of libfuse's buffer (writable, unsigned bytes), valid for the duration of the call
# only.  PyMemoryView_FromMemory makes it cheaply; a ctypes array over the buffer would make
# a new array type for each new request size (and leave the garbage collector to clear those
# types away).
_view = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)(
    ("PyMemoryView_FromMemory", ctypes.pythonapi)
)  # its own prototype: ctypes.pythonapi's function objects are shared with other code
PYBUF_WRITE = 0x200

FUSE_READDIR_PLUS = 1  # libfuse 3: readdir's flags
FUSE_FILL_DIR_PLUS = 2  # libfuse 3: the filler's flags
_DIRENT_NAME = 24  # offsetof(struct fuse_dirent, name)
_DIRENTPLUS_NAME = 152  # offsetof(struct fuse_direntplus, dirent.name): fuse_entry_out is 128 bytes
_READDIR_BUDGET = os.sysconf("SC_PAGESIZE")
_dir_handles = itertools.count(1 << 48)  # apart from file handles, which fgetattr looks up

_ensure_thread_state = ctypes.pythonapi.PyGILState_Ensure
_ensure_thread_state.restype = ctypes.c_int
_ensure_thread_state.argtypes = []
_pinned: set[int] = set()
_pin_lock = threading.Lock()


StatPacker = Callable[[Any, os.stat_result, int], None]


def stat_packer() -> StatPacker | None:
    """A function filling libfuse's struct stat from a lower stat and the plaintext size in one
    struct.pack_into (pad bytes zeroed), laid out from mfusepy's own c_stat fields: several times
    cheaper than a dict of attributes set field by field through ctypes (mfusepy's set_st_attrs),
    on every GETATTR and every entry of a listing.  It is checked against set_st_attrs once; None
    (use mfusepy's way) if they disagree."""
    c_stat = mfusepy.c_stat
    fields = {f[0]: f[1] for f in c_stat._fields_}

    def code(t: Any) -> str:
        c = {8: "q", 4: "i", 2: "h"}[ctypes.sizeof(t)]
        return c.upper() if t._type_.isupper() else c

    try:
        slots = [
            (getattr(c_stat, k).offset, code(fields[k]))
            for k in ("st_ino", "st_nlink", "st_mode", "st_uid", "st_gid", "st_rdev", "st_size", "st_blksize", "st_blocks")
        ]
        for k in ("st_atimespec", "st_mtimespec", "st_ctimespec"):
            ts = fields[k]
            sub = dict(ts._fields_)
            slots += [
                (getattr(c_stat, k).offset + ts.tv_sec.offset, code(sub["tv_sec"])),
                (getattr(c_stat, k).offset + ts.tv_nsec.offset, code(sub["tv_nsec"])),
            ]
    except (AttributeError, KeyError, TypeError):
        return None
    if [o for o, _ in slots] != sorted(o for o, _ in slots):  # pack() passes values in this order
        return None
    fmt, pos = "=", 0
    for offset, c in slots:
        if offset < pos:  # overlapping fields: not the layout this was written for
            return None
        fmt += "x" * (offset - pos) + c
        pos = offset + struct.calcsize("=" + c)
    layout = struct.Struct(fmt + "x" * (ctypes.sizeof(c_stat) - pos))
    pack_into = layout.pack_into
    billion = 1_000_000_000

    def pack(buf: Any, st: os.stat_result, size: int) -> None:
        a, an = divmod(st.st_atime_ns, billion)
        m, mn = divmod(st.st_mtime_ns, billion)
        c, cn = divmod(st.st_ctime_ns, billion)
        pack_into(
            buf,
            0,
            st.st_ino,
            st.st_nlink,
            st.st_mode,
            st.st_uid,
            st.st_gid,
            st.st_rdev,
            size,
            BLKSIZE,
            st.st_blocks,
            a,
            an,
            m,
            mn,
            c,
            cn,
        )

    sample = os.stat(os.path.dirname(__file__))
    ours, theirs = c_stat(), c_stat()
    ctypes.memset(ctypes.byref(ours), 0xFF, ctypes.sizeof(ours))  # pad bytes must come out zero
    try:
        pack(ours, sample, 12345)
    except struct.error:
        return None
    mfusepy.set_st_attrs(theirs, VolumeOps.attrs(sample, 12345), use_ns=True)
    return pack if bytes(ours) == bytes(theirs) else None


# What this front end takes from mfusepy: FUSE methods it overrides (mfusepy calls them from its
# libfuse callbacks; a renamed one would be bypassed silently, and utimens_fuse_3 is what keeps
# UTIME_NOW and UTIME_OMIT exact) and module members it reads (here and in mount.py).
_OVERRIDES = (
    "_wrapper",
    "getattr_fuse_3",
    "utimens_fuse_3",
    "getxattr",
    "create",
    "open",
    "read",
    "write",
    "opendir",
    "releasedir",
    "readdir_fuse_3",
)
_MEMBERS = ("FUSE", "c_stat", "set_st_attrs", "fuse_context", "_libfuse_path")


def check_mfusepy(module: Any = mfusepy) -> list[str]:
    """What this front end needs from mfusepy and ``module`` lacks (empty: all there)."""
    missing = [m for m in _MEMBERS if not hasattr(module, m)]
    fuse = getattr(module, "FUSE", None)
    return missing + [f"FUSE.{m}" for m in _OVERRIDES if not callable(getattr(fuse, m, None))]


class Fuse(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy's FUSE, with read and write handing our operations views of libfuse's own buffers
    (no copy into or out of a Python bytes object per request), stat filled by ``pack_stat``
    (None: mfusepy's own way), listings with attributes, and requests kept on pinned threads.
    Constructing it mounts and serves until unmounted (mfusepy's way)."""

    _listings: dict[int, list[tuple[str, str, int, int]]] = {}  # open directory handle -> its listing

    def __init__(self, operations: Any, mountpoint: str, pack_stat: StatPacker | None, **options: Any) -> None:
        self._pack_stat = pack_stat
        super().__init__(operations, mountpoint, **options)

    def _wrapper(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        # Each request reaches Python through a ctypes callback on one of libfuse's threads,
        # which Python does not know: ctypes makes a thread state for the call and destroys
        # it on return (a new frame stack mapped and unmapped, and every threading.local
        # value gone, so the per-thread 1 MiB crypto buffers were allocated afresh for each
        # read and write).  One extra PyGILState_Ensure, never released, keeps the thread's
        # state for the thread's life.  libfuse 3.14 keeps its threads (idle ones are not
        # destroyed by default), so these are the <= 10 threads of its pool; the cap bounds
        # what a pool that did replace threads could pin (each keeps its buffers).
        warm = self.operations.warm
        # read and write get (path, buf, size, offset, fip): args[2] is the request's size
        if warm is not None and (func.__name__ not in _BULK or args[2] < WARM_IO_MAX):
            warm.active()
        ident = threading.get_ident()
        if ident not in _pinned and len(_pinned) < PINNED_THREADS:
            with _pin_lock:
                if ident not in _pinned and len(_pinned) < PINNED_THREADS:
                    _ensure_thread_state()
                    _pinned.add(ident)
        # mfusepy's own wrapper, minus a frame, for the common cases: a result, or an OSError
        # (ENOENT for every negative lookup) answered with its errno.  Anything else goes
        # through mfusepy's wrapper, which logs it and answers as it always has.
        try:
            return func(*args, **kwargs) or 0
        except OSError as e:
            if type(e.errno) is int and e.errno > 0 and func.__name__ != "init":
                return -e.errno
            failure: BaseException = e
        except MemoryError:
            # ENOMEM, as the kernel answers when it runs out: never mfusepy's EINVAL, which would
            # tell the caller its request was wrong
            _ratelog(logging.ERROR, ("ENOMEM", func.__name__), "out of memory serving %s: answered ENOMEM", func.__name__)
            return -errno.ENOMEM
        except Exception as e:  # noqa: BLE001 - a bug or a state nothing expected: EIO, logged
            if func.__name__ == "init":
                raise
            health = getattr(self.operations, "health", None)
            if health is not None:
                health.note("unexpected failure", f"{func.__name__}: {type(e).__name__}")
            _ratelog(
                logging.ERROR,
                (func.__name__, type(e).__name__),
                "unexpected %s serving %s: answered EIO",
                type(e).__name__,
                func.__name__,
                exc_info=True,
            )
            return -errno.EIO
        except BaseException as e:  # noqa: BLE001 - handed to mfusepy's handling below
            failure = e

        def reraise(*_: Any, **__: Any) -> Any:
            raise failure

        reraise.__name__ = func.__name__
        return super()._wrapper(reraise)

    def getattr_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
        if self._pack_stat is None:
            return int(super().getattr_fuse_3(path, buf, fip))
        st, size = self.operations.plain_stat(
            None if path is None else path.decode(self.encoding, self.errors), fip.contents.fh if fip else None
        )
        self._pack_stat(buf.contents, st, size)
        return 0

    def utimens_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
        # mfusepy reads the times as plain numbers; UTIME_NOW and UTIME_OMIT (which libfuse
        # passes in tv_nsec) must reach utimensat as they are.
        if not buf:
            return int(self.operations.utimens(None if path is None else path.decode(self.encoding, self.errors)))
        a, m = buf.contents.actime, buf.contents.modtime
        return int(
            self.operations.set_times(
                None if path is None else path.decode(self.encoding, self.errors),
                (a.tv_sec, a.tv_nsec),
                (m.tv_sec, m.tv_nsec),
            )
        )

    def getxattr(self, path: bytes, name: bytes, value: Any, size: int, *args: Any) -> int:
        # Only user.* attributes and POSIX ACLs are stored (xattrs.py).  The kernel asks for
        # security.capability before every write: answered here, not through an exception
        # raised and logged per request.  The answer is the same for every path, so it skips
        # no access check that matters.
        if not name.startswith((b"user.", b"system.posix_acl_")):
            return -errno.ENODATA
        return int(super().getxattr(path, name, value, size, *args))

    def create(self, path: bytes, mode: int, fip: Any) -> int:
        # mfusepy's own create asks inspect.signature of the operation on every call (~2 % of
        # the daemon's busy time in a tar extract); ours always takes the open flags.
        fi = fip.contents
        fi.fh = self.operations.create(path.decode(self.encoding, self.errors), mode, fi.flags)
        return 0

    def lseek(self, path: bytes | None, offset: int, whence: int, fip: Any) -> int:
        return int(
            self.operations.lseek(
                None if path is None else path.decode(self.encoding, self.errors), offset, whence, fip.contents.fh
            )
        )

    def open(self, path: bytes, fip: Any) -> int:
        fi = fip.contents
        fi.fh = fh = self.operations.open(path.decode(self.encoding, self.errors), fi.flags)
        fi.direct_io, fi.keep_cache = self.operations.cache_mode(fh)
        return 0

    def read(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
        dest = _view(buf, size, PYBUF_WRITE)
        n: int = self.operations.read_into(
            None if path is None else path.decode(self.encoding, self.errors), dest, offset, fip.contents.fh
        )
        return n

    def write(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
        data = _view(buf, size, PYBUF_WRITE)
        n: int = self.operations.write(
            None if path is None else path.decode(self.encoding, self.errors), data, offset, fip.contents.fh
        )
        return n

    # Listings with attributes (READDIRPLUS).  mfusepy fills names and types only, so every
    # name then costs a LOOKUP round trip (ls -l, rm -r, find).  libfuse 3.14's path API keeps
    # a listing's attributes only when entries carry offsets (filled with offset 0, it tells
    # the kernel to ignore them), and it counts each entry's lookup before checking that the
    # entry fits the reply: an entry that does not fit would stay counted forever (a node
    # never freed).  So entries are sent with offsets, at most one page of them per reply (the
    # kernel's smallest readdir buffer): none is ever refused, nothing leaks.
    def opendir(self, path: bytes, fip: Any) -> int:
        self.operations.opendir(path.decode(self.encoding, self.errors))
        fip.contents.fh = next(_dir_handles)
        return 0

    def releasedir(self, path: bytes | None, fip: Any) -> int:
        self._listings.pop(fip.contents.fh, None)
        return 0

    def readdir_fuse_3(self, path: bytes | None, buf: Any, filler: Any, offset: int, fip: Any, flags: int) -> int:
        ops = self.operations
        if not ops.plus_listings or (ops.acl is not None and ops.acl.active):  # rules may appear live
            return int(super().readdir_fuse_3(path, buf, filler, offset, fip, flags))
        fh = fip.contents.fh
        entries = self._listings.get(fh) if offset else None
        if entries is None:  # offset 0: (re)read the directory, as rewinddir(3) requires
            entries = self.operations.readdir_entries(None if path is None else path.decode(self.encoding, self.errors))
            self._listings[fh] = entries
        plus = bool(flags & FUSE_READDIR_PLUS)
        base_path = "" if path is None else path.decode(self.encoding, self.errors).rstrip("/") + "/"
        base, fill_flags = (_DIRENTPLUS_NAME, FUSE_FILL_DIR_PLUS) if plus else (_DIRENT_NAME, 0)
        st = mfusepy.c_stat()
        used = 0
        for i in range(offset, len(entries)):
            name, lower, ino, mode = entries[i]
            raw = name.encode(self.encoding, self.errors)
            used += (base + len(raw) + 7) & ~7
            if used > _READDIR_BUDGET:
                break
            if plus:
                found = self.operations.entry_stat(lower, (base_path + name) if path is not None else name)
                if found is None:
                    continue  # removed since the listing was read
                if self._pack_stat is not None:
                    self._pack_stat(st, *found)
                else:
                    ctypes.memset(ctypes.byref(st), 0, ctypes.sizeof(st))
                    mfusepy.set_st_attrs(st, self.operations.attrs(*found), use_ns=self.use_ns)
            else:
                ctypes.memset(ctypes.byref(st), 0, ctypes.sizeof(st))
                st.st_ino, st.st_mode = ino, mode
            if filler(buf, raw, st, i + 1, fill_flags) != 0:
                break
        return 0
