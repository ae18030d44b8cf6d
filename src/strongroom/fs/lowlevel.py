"""The mount's front end on libfuse3's low-level, inode-based API (libfuse.py): kernel inodes
mapped to plaintext paths, each request answered by the path-based operations of fuse_ops.py.

Why not libfuse's high-level API (mfusepy): it answers each create, mkdir and attribute change
with a second call into Python (a GETATTR to fill its reply), and its multi-threaded loop hands
every request to whichever of its threads the kernel wakes, which must then take the GIL.  Here
one thread reads the requests and answers the short ones itself, without a hand-off; only those
that take long (big reads and writes, fsync, allocation, a size change) go to a pool of threads,
which reply when done, so they run in parallel (the GIL is released in OpenSSL and in system
calls) and never hold up the short ones.

Node ids: each name the kernel has looked up gets its own id (as libfuse's high-level API does),
so a node is a (parent id, name) pair and its path is found by walking up; renaming a directory
moves its whole subtree at once.  A node lives until the kernel forgets it; an unlinked node
keeps answering through its open file handles.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from strongroom.fs import libfuse as L

log = logging.getLogger("strongroom.fs")

ROOT = 1
INLINE_MAX = 64 << 10  # reads and writes up to this size are answered by the loop's own thread
WORKERS = 8  # threads for the long requests
RENAME_NOREPLACE = 1

_memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_view.restype = ctypes.py_object
_memory_view.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
_PYBUF_READ = 0x100

_ensure_thread_state = ctypes.pythonapi.PyGILState_Ensure
_ensure_thread_state.restype = ctypes.c_int
_ensure_thread_state.argtypes = []

StatPacker = Callable[[Any, os.stat_result, int], None]


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


_ATIMES = L.FUSE_SET_ATTR_ATIME | L.FUSE_SET_ATTR_ATIME_NOW
_MTIMES = L.FUSE_SET_ATTR_MTIME | L.FUSE_SET_ATTR_MTIME_NOW
_TIMES = _ATIMES | _MTIMES


class _Attrs(NamedTuple):
    """What a SETATTR asks for, copied out of libfuse's struct stat (valid only during the call)."""

    mode: int
    uid: int
    gid: int
    size: int
    atime: int
    mtime: int

    @classmethod
    def of(cls, st: Any) -> _Attrs:
        a, m = st.st_atimespec, st.st_mtimespec
        return cls(
            st.st_mode,
            st.st_uid,
            st.st_gid,
            st.st_size,
            a.tv_sec * 1_000_000_000 + a.tv_nsec,
            m.tv_sec * 1_000_000_000 + m.tv_nsec,
        )


class _Node:
    __slots__ = ("where", "lookups")

    def __init__(self, parent: int, name: str) -> None:
        self.where: tuple[int, str] | None = (parent, name)  # None once unlinked (one tuple: atomic)
        self.lookups = 0


class LowLevelMount:
    """Serves ``ops`` (a fuse_ops.VolumeOps with the mount's settings, see mount._Ops)."""

    def __init__(self, ops: Any, mountpoint: str, options: list[str], pack_stat: StatPacker | None) -> None:
        self.ops = ops
        self.mountpoint = mountpoint
        self.options = options
        self._pack = pack_stat or self._pack_slow
        self._nodes: dict[int, _Node] = {}
        self._children: dict[tuple[int, str], int] = {}
        self._ids = itertools.count(ROOT + 1)
        self._dir_handles = itertools.count(1)
        self._listings: dict[int, list[tuple[str, str, int, int]] | None] = {}
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="fuse-worker")
        self._tls = threading.local()
        self._keep: list[Any] = []  # the ctypes callbacks, alive as long as the session
        self.served = False
        self._pinned: set[int] = set()
        self._pin_lock = threading.Lock()

    # -- nodes ---------------------------------------------------------------------------
    def _path(self, ino: int) -> str:
        if ino == ROOT:
            return "/"
        parts = []
        nodes = self._nodes
        while ino != ROOT:
            node = nodes.get(ino)
            where = None if node is None else node.where
            if where is None:
                raise _err(errno.ENOENT)  # unlinked, or unknown to us
            ino, name = where
            parts.append(name)
        parts.reverse()
        return "/" + "/".join(parts)

    def _child(self, parent: int, name: bytes) -> tuple[str, str]:
        """(name, plaintext path) of an entry of directory ``parent``."""
        n = os.fsdecode(name)
        base = self._path(parent)
        return n, (base + n if base == "/" else base + "/" + n)

    def _remember(self, parent: int, name: str) -> int:
        """The node id of an entry the kernel is about to be told of, its lookup counted."""
        key = (parent, name)
        ino = self._children.get(key)
        node = None if ino is None else self._nodes.get(ino)
        if node is None or node.where != key:
            ino = next(self._ids)
            node = self._nodes[ino] = _Node(parent, name)
            self._children[key] = ino
        node.lookups += 1
        return ino  # type: ignore[return-value]

    def _forget(self, ino: int, n: int) -> None:
        node = self._nodes.get(ino)
        if node is None:
            return
        node.lookups -= n
        if node.lookups <= 0:
            del self._nodes[ino]
            if node.where is not None and self._children.get(node.where) == ino:
                del self._children[node.where]

    def _detach(self, parent: int, name: str) -> None:
        ino = self._children.pop((parent, name), None)
        node = None if ino is None else self._nodes.get(ino)
        if node is not None:
            node.where = None

    # -- replies -------------------------------------------------------------------------
    def _pack_slow(self, buf: Any, st: os.stat_result, size: int) -> None:
        import mfusepy

        ctypes.memset(ctypes.byref(buf), 0, ctypes.sizeof(buf))
        mfusepy.set_st_attrs(buf, self.ops.attrs(st, size), use_ns=True)

    def _entry(self, parent: int, name: str, st: os.stat_result, size: int) -> tuple[L.fuse_entry_param, int]:
        e = L.fuse_entry_param()
        self._pack(e.attr, st, size)
        e.attr_timeout = self.ops.attr_timeout
        e.entry_timeout = self.ops.entry_timeout
        e.ino = self._remember(parent, name)
        return e, e.ino

    def _reply_entry(self, req: int, parent: int, name: str, path: str) -> None:
        st, size = self.ops.plain_stat(path)
        e, ino = self._entry(parent, name, st, size)
        if L.lib.fuse_reply_entry(req, ctypes.byref(e)) != 0:
            self._forget(ino, 1)  # the kernel did not take it (the request was interrupted)

    def _reply_attr(self, req: int, st: os.stat_result, size: int) -> None:
        buf = L.c_stat()
        self._pack(buf, st, size)
        L.lib.fuse_reply_attr(req, ctypes.byref(buf), self.ops.attr_timeout)

    # -- the callbacks -------------------------------------------------------------------
    def _guard(self, fn: Callable[..., None]) -> Callable[..., None]:
        """A callback that always replies once: an OSError becomes its errno, anything else EIO
        (logged by type only)."""
        reply_err = L.lib.fuse_reply_err
        tls = self._tls

        pinned = self._pinned

        def run(req: int, *args: Any) -> None:
            ident = threading.get_ident()
            if ident not in pinned:
                with self._pin_lock:
                    if ident not in pinned:
                        _ensure_thread_state()
                        pinned.add(ident)
            tls.req = req
            try:
                fn(req, *args)
            except OSError as e:
                code = e.errno if isinstance(e.errno, int) and e.errno > 0 else errno.EIO
                reply_err(req, code)
            except BaseException as e:  # noqa: BLE001 - a request must always be answered
                log.error("FUSE %s failed: %s", fn.__name__, type(e).__name__)
                reply_err(req, errno.EIO)

        return run

    def context(self) -> tuple[int, int, int]:
        """(uid, gid, pid) of the request being served on this thread (for access rules)."""
        c = L.req_ctx(self._tls.req).contents
        return int(c.uid), int(c.gid), int(c.pid)

    def init(self, userdata: Any, conn: Any) -> None:
        c = conn.contents
        # No writeback cache: with it the kernel keeps its own idea of a file's size; each name of
        # a hard link is its own node here, so a size cached under one would be stale under another.
        c.want &= ~L.FUSE_CAP_WRITEBACK_CACHE
        if not self.ops.plus_listings:
            c.want &= ~(L.FUSE_CAP_READDIRPLUS | L.FUSE_CAP_READDIRPLUS_AUTO)
        c.max_write = self.ops.max_write
        c.max_readahead = self.ops.max_write
        self.served = True
        self.ops.mounted()

    def destroy(self, userdata: Any) -> None:
        pass

    def lookup(self, req: int, parent: int, name: bytes) -> None:
        n, path = self._child(parent, name)
        try:
            st, size = self.ops.plain_stat(path)
        except FileNotFoundError:
            if self.ops.entry_timeout <= 0:
                raise
            e = L.fuse_entry_param()  # ino 0: "no such entry", cached for entry_timeout
            e.entry_timeout = self.ops.entry_timeout
            L.lib.fuse_reply_entry(req, ctypes.byref(e))
            return
        e, ino = self._entry(parent, n, st, size)
        if L.lib.fuse_reply_entry(req, ctypes.byref(e)) != 0:
            self._forget(ino, 1)

    def forget(self, req: int, ino: int, nlookup: int) -> None:
        self._forget(ino, nlookup)
        L.lib.fuse_reply_none(req)

    def forget_multi(self, req: int, count: int, items: Any) -> None:
        for i in range(count):
            self._forget(items[i].ino, items[i].nlookup)
        L.lib.fuse_reply_none(req)

    def _target(self, ino: int, fi: Any) -> tuple[str, int | None]:
        """(path, open file handle) for a request on a node; an unlinked node answers through its handle."""
        fh = fi.contents.fh if fi else None
        try:
            return self._path(ino), fh
        except OSError:
            if fh is None:
                raise
            return "", fh

    def getattr(self, req: int, ino: int, fi: Any) -> None:
        path, fh = self._target(ino, fi)
        self._reply_attr(req, *self.ops.plain_stat(path, fh))

    def setattr(self, req: int, ino: int, a: _Attrs, to_set: int, fh: int | None) -> None:
        try:
            path = self._path(ino)
        except OSError:
            if fh is None:
                raise
            path = ""
        ops = self.ops
        if to_set & L.FUSE_SET_ATTR_MODE:
            ops.chmod(path, stat.S_IMODE(a.mode))
        if to_set & (L.FUSE_SET_ATTR_UID | L.FUSE_SET_ATTR_GID):
            ops.chown(path, a.uid if to_set & L.FUSE_SET_ATTR_UID else -1, a.gid if to_set & L.FUSE_SET_ATTR_GID else -1)
        if to_set & L.FUSE_SET_ATTR_SIZE:
            ops.truncate(path, a.size, fh)
        if to_set & _TIMES:
            now = time.time_ns()
            old = None
            if not (to_set & _ATIMES and to_set & _MTIMES):  # one of the two is kept as it is
                old = ops.plain_stat(path, fh)[0]
            atime = now if to_set & L.FUSE_SET_ATTR_ATIME_NOW else a.atime if to_set & L.FUSE_SET_ATTR_ATIME else old.st_atime_ns  # type: ignore[union-attr]
            mtime = now if to_set & L.FUSE_SET_ATTR_MTIME_NOW else a.mtime if to_set & L.FUSE_SET_ATTR_MTIME else old.st_mtime_ns  # type: ignore[union-attr]
            ops.utimens(path, (atime, mtime))
        self._reply_attr(req, *ops.plain_stat(path, fh))

    def readlink(self, req: int, ino: int) -> None:
        L.lib.fuse_reply_readlink(req, os.fsencode(self.ops.readlink(self._path(ino))))

    def mknod(self, req: int, parent: int, name: bytes, mode: int, rdev: int) -> None:
        n, path = self._child(parent, name)
        self.ops.mknod(path, mode, rdev)
        self._reply_entry(req, parent, n, path)

    def mkdir(self, req: int, parent: int, name: bytes, mode: int) -> None:
        n, path = self._child(parent, name)
        self.ops.mkdir(path, mode)
        self._reply_entry(req, parent, n, path)

    def unlink(self, req: int, parent: int, name: bytes) -> None:
        n, path = self._child(parent, name)
        self.ops.unlink(path)
        self._detach(parent, n)
        L.lib.fuse_reply_err(req, 0)

    def rmdir(self, req: int, parent: int, name: bytes) -> None:
        n, path = self._child(parent, name)
        self.ops.rmdir(path)
        self._detach(parent, n)
        L.lib.fuse_reply_err(req, 0)

    def symlink(self, req: int, link: bytes, parent: int, name: bytes) -> None:
        n, path = self._child(parent, name)
        self.ops.symlink(path, os.fsdecode(link))
        self._reply_entry(req, parent, n, path)

    def rename(self, req: int, parent: int, name: bytes, newparent: int, newname: bytes, flags: int) -> None:
        n, old = self._child(parent, name)
        nn, new = self._child(newparent, newname)
        if flags & ~RENAME_NOREPLACE:
            raise _err(errno.EINVAL)  # RENAME_EXCHANGE, RENAME_WHITEOUT
        if flags & RENAME_NOREPLACE:
            # Answered on the loop's own thread, so no other request runs between check and rename.
            try:
                self.ops.plain_stat(new)
            except FileNotFoundError:
                pass
            else:
                raise _err(errno.EEXIST)
        self.ops.rename(old, new)
        if (parent, n) != (newparent, nn):
            self._detach(newparent, nn)
            ino = self._children.pop((parent, n), None)
            node = None if ino is None else self._nodes.get(ino)
            if node is not None:
                node.where = (newparent, nn)
                self._children[(newparent, nn)] = ino  # type: ignore[assignment]
        L.lib.fuse_reply_err(req, 0)

    def link(self, req: int, ino: int, newparent: int, newname: bytes) -> None:
        nn, new = self._child(newparent, newname)
        self.ops.link(new, self._path(ino))
        self._reply_entry(req, newparent, nn, new)

    def open(self, req: int, ino: int, fi: Any) -> None:
        f = fi.contents
        f.fh = self.ops.open(self._path(ino), f.flags)
        if L.lib.fuse_reply_open(req, fi) != 0:
            self.ops.release("", f.fh)

    def create(self, req: int, parent: int, name: bytes, mode: int, fi: Any) -> None:
        n, path = self._child(parent, name)
        f = fi.contents
        fh = self.ops.create(path, mode, f.flags)
        try:
            st, size = self.ops.plain_stat(path, fh)
        except BaseException:
            self.ops.release(path, fh)
            raise
        f.fh = fh
        e, ino = self._entry(parent, n, st, size)
        if L.lib.fuse_reply_create(req, ctypes.byref(e), fi) != 0:
            self._forget(ino, 1)
            self.ops.release(path, fh)

    def read(self, req: int, ino: int, size: int, off: int, fh: int) -> None:
        tls = self._tls
        buf = getattr(tls, "read_buf", None)
        if buf is None or len(buf) < size:
            buf = tls.read_buf = bytearray(max(size, self.ops.max_write))
            tls.read_addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        n = self.ops.read_into("", memoryview(buf)[:size], off, fh)
        L.lib.fuse_reply_buf(req, tls.read_addr, n)

    def write(self, req: int, ino: int, buf: int, size: int, off: int, fh: int) -> None:
        data = _memory_view(buf, size, _PYBUF_READ) if size else memoryview(b"")
        L.lib.fuse_reply_write(req, self.ops.write("", data, off, fh))

    def _write_copied(self, req: int, ino: int, data: bytes, off: int, fh: int) -> None:
        L.lib.fuse_reply_write(req, self.ops.write("", memoryview(data), off, fh))

    def release(self, req: int, ino: int, fi: Any) -> None:
        self.ops.release("", fi.contents.fh)
        L.lib.fuse_reply_err(req, 0)

    def fsync(self, req: int, ino: int, datasync: int, fh: int) -> None:
        self.ops.fsync("", datasync, fh)
        L.lib.fuse_reply_err(req, 0)

    def opendir(self, req: int, ino: int, fi: Any) -> None:
        self.ops.opendir(self._path(ino))
        fh = next(self._dir_handles)
        self._listings[fh] = None
        fi.contents.fh = fh
        if L.lib.fuse_reply_open(req, fi) != 0:
            self._listings.pop(fh, None)

    def _listing(self, ino: int, off: int, fh: int) -> list[tuple[str, str, int, int]]:
        entries = self._listings.get(fh) if off else None
        if entries is None:  # offset 0: (re)read the directory, as rewinddir(3) requires
            entries = self.ops.readdir_entries(self._path(ino))
            self._listings[fh] = entries
        return entries

    def readdir(self, req: int, ino: int, size: int, off: int, fi: Any) -> None:
        entries = self._listing(ino, off, fi.contents.fh)
        buf = ctypes.create_string_buffer(size)
        addr = ctypes.addressof(buf)
        st = L.c_stat()
        used = 0
        add = L.lib.fuse_add_direntry
        for i in range(off, len(entries)):
            name, _, lower_ino, mode = entries[i]
            st.st_ino, st.st_mode = lower_ino, mode
            n = add(req, addr + used, size - used, os.fsencode(name), ctypes.byref(st), i + 1)
            if n > size - used:
                break
            used += n
        L.lib.fuse_reply_buf(req, addr, used)

    def readdirplus(self, req: int, ino: int, size: int, off: int, fi: Any) -> None:
        entries = self._listing(ino, off, fi.contents.fh)
        buf = ctypes.create_string_buffer(size)
        addr = ctypes.addressof(buf)
        used = 0
        add = L.lib.fuse_add_direntry_plus
        counted: list[int] = []
        for i in range(off, len(entries)):
            name, lower, lower_ino, mode = entries[i]
            e = L.fuse_entry_param()
            dots = name in (".", "..")
            if dots:  # the kernel makes no node for these: attributes only
                e.attr.st_ino, e.attr.st_mode = lower_ino, mode
            else:
                found = self.ops.entry_stat(lower)
                if found is None:
                    continue  # removed since the listing was read
                self._pack(e.attr, *found)
                e.attr_timeout = self.ops.attr_timeout
                e.entry_timeout = self.ops.entry_timeout
                e.ino = self._children.get((ino, name)) or 0
                if e.ino == 0 or self._nodes.get(e.ino) is None:
                    e.ino = next(self._ids)
            n = add(req, addr + used, size - used, os.fsencode(name), ctypes.byref(e), i + 1)
            if n > size - used:
                break
            used += n
            if not dots:  # the kernel now holds a lookup of it
                key = (ino, name)
                node = self._nodes.get(e.ino)
                if node is None:
                    node = self._nodes[e.ino] = _Node(ino, name)
                    self._children[key] = e.ino
                node.lookups += 1
                counted.append(e.ino)
        if L.lib.fuse_reply_buf(req, addr, used) != 0:
            for c in counted:
                self._forget(c, 1)

    def releasedir(self, req: int, ino: int, fi: Any) -> None:
        self._listings.pop(fi.contents.fh, None)
        L.lib.fuse_reply_err(req, 0)

    def fsyncdir(self, req: int, ino: int, datasync: int, fh: int) -> None:
        self.ops.fsyncdir(self._path(ino), datasync, fh)
        L.lib.fuse_reply_err(req, 0)

    def statfs(self, req: int, ino: int) -> None:
        d = self.ops.statfs("/")
        sv = L.c_statvfs()
        for k, v in d.items():
            setattr(sv, k, v)
        L.lib.fuse_reply_statfs(req, ctypes.byref(sv))

    def setxattr(self, req: int, ino: int, name: bytes, value: int, size: int, flags: int) -> None:
        self.ops.setxattr(self._path(ino), os.fsdecode(name), ctypes.string_at(value, size), flags)
        L.lib.fuse_reply_err(req, 0)

    def _reply_sized(self, req: int, data: bytes, size: int) -> None:
        if size == 0:
            L.lib.fuse_reply_xattr(req, len(data))
        elif len(data) > size:
            L.lib.fuse_reply_err(req, errno.ERANGE)
        else:
            L.lib.fuse_reply_buf(req, data, len(data))

    def getxattr(self, req: int, ino: int, name: bytes, size: int) -> None:
        # Only user.* attributes are stored (xattrs.py).  The kernel asks for security.capability
        # before every write and ls -l for system.posix_acl_access on every entry.
        if not name.startswith(b"user."):
            raise _err(errno.ENODATA)
        self._reply_sized(req, self.ops.getxattr(self._path(ino), os.fsdecode(name)), size)

    def listxattr(self, req: int, ino: int, size: int) -> None:
        names = self.ops.listxattr(self._path(ino))
        self._reply_sized(req, b"".join(os.fsencode(n) + b"\0" for n in names), size)

    def removexattr(self, req: int, ino: int, name: bytes) -> None:
        self.ops.removexattr(self._path(ino), os.fsdecode(name))
        L.lib.fuse_reply_err(req, 0)

    def access(self, req: int, ino: int, mask: int) -> None:
        self.ops.access(self._path(ino), mask)
        L.lib.fuse_reply_err(req, 0)

    def fallocate(self, req: int, ino: int, mode: int, off: int, length: int, fh: int) -> None:
        self.ops.fallocate("", mode, off, length, fh)
        L.lib.fuse_reply_err(req, 0)

    # -- the session ---------------------------------------------------------------------
    def _operations(self) -> L.fuse_lowlevel_ops:
        table = L.fuse_lowlevel_ops()
        types = dict(L.OPS)
        guard, submit = self._guard, self._pool.submit

        def install(name: str, fn: Callable[..., None]) -> None:
            cb = types[name](fn)
            self._keep.append(cb)
            setattr(table, name, cb)

        for name in [
            *("lookup", "forget", "forget_multi", "getattr", "readlink", "mknod", "mkdir", "unlink", "rmdir"),
            *("symlink", "rename", "link", "open", "create", "release", "opendir", "readdir", "readdirplus"),
            *("releasedir", "statfs", "setxattr", "getxattr", "listxattr", "removexattr", "access"),
        ]:
            install(name, guard(getattr(self, name)))
        install("init", self.init)
        install("destroy", self.destroy)

        # Requests that may take long go to the pool.  libfuse's arguments (the file info, the
        # struct stat, the write buffer) live only as long as the call: their values are copied.
        read, write, write_copied = guard(self.read), guard(self.write), guard(self._write_copied)
        fsync, fsyncdir, fallocate, set_attr = guard(self.fsync), guard(self.fsyncdir), guard(self.fallocate), guard(self.setattr)

        def on_read(req: int, ino: int, size: int, off: int, fi: Any) -> None:
            if size <= INLINE_MAX:
                read(req, ino, size, off, fi.contents.fh)
            else:
                submit(read, req, ino, size, off, fi.contents.fh)

        def on_write(req: int, ino: int, buf: int, size: int, off: int, fi: Any) -> None:
            if size <= INLINE_MAX:
                write(req, ino, buf, size, off, fi.contents.fh)
            else:
                submit(write_copied, req, ino, ctypes.string_at(buf, size), off, fi.contents.fh)

        def on_setattr(req: int, ino: int, attr: Any, to_set: int, fi: Any) -> None:
            args = (req, ino, _Attrs.of(attr.contents), to_set, fi.contents.fh if fi else None)
            if to_set & L.FUSE_SET_ATTR_SIZE:  # growing a file writes encrypted zeros
                submit(set_attr, *args)
            else:
                set_attr(*args)

        install("read", on_read)
        install("write", on_write)
        install("setattr", on_setattr)
        install("fsync", lambda req, ino, datasync, fi: submit(fsync, req, ino, datasync, fi.contents.fh))
        install("fsyncdir", lambda req, ino, datasync, fi: submit(fsyncdir, req, ino, datasync, fi.contents.fh))
        install("fallocate", lambda req, ino, mode, off, n, fi: submit(fallocate, req, ino, mode, off, n, fi.contents.fh))
        return table

    def _spin_loop(self, se: int, spin: float) -> None:
        import select

        class fuse_buf(ctypes.Structure):  # noqa: N801
            _fields_ = [("size", ctypes.c_size_t), ("flags", ctypes.c_int), ("mem", ctypes.c_void_p), ("fd", ctypes.c_int), ("pos", ctypes.c_int64)]

        lib = L.lib
        lib.fuse_session_fd.argtypes = [ctypes.c_void_p]
        lib.fuse_session_exited.argtypes = [ctypes.c_void_p]
        lib.fuse_session_receive_buf.argtypes = [ctypes.c_void_p, ctypes.POINTER(fuse_buf)]
        lib.fuse_session_process_buf.argtypes = [ctypes.c_void_p, ctypes.POINTER(fuse_buf)]
        fbuf = fuse_buf()
        fd = lib.fuse_session_fd(se)
        p = select.poll()
        p.register(fd, select.POLLIN)
        clock = time.perf_counter
        while not lib.fuse_session_exited(se):
            deadline = clock() + spin
            while not p.poll(0) and clock() < deadline:
                pass
            res = lib.fuse_session_receive_buf(se, ctypes.byref(fbuf))
            if res == -errno.EINTR:
                continue
            if res <= 0:
                break
            lib.fuse_session_process_buf(se, ctypes.byref(fbuf))

    def serve(self) -> None:
        """Mount and serve until unmounted or SIGTERM/SIGINT/SIGHUP (libfuse's handlers)."""
        table = self._operations()
        args, keep = L.make_args(["strongroom", "-o", ",".join(self.options)])
        self._keep.append(keep)
        se = L.lib.fuse_session_new(ctypes.byref(args), ctypes.byref(table), ctypes.sizeof(table), None)
        if not se:
            raise RuntimeError("libfuse refused the mount options")
        # libfuse installs its handlers only where none is set: Python has its own for SIGINT.
        old_int = signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            if L.lib.fuse_set_signal_handlers(se) != 0:
                raise RuntimeError("libfuse could not set its signal handlers")
            try:
                if L.lib.fuse_session_mount(se, os.fsencode(self.mountpoint)) != 0:
                    raise RuntimeError(f"libfuse could not mount {self.mountpoint}")
                try:
                    if os.environ.get("SR_SPIN"):
                        self._spin_loop(se, float(os.environ["SR_SPIN"]) / 1e6)
                    elif os.environ.get("SR_MT"):
                        L.lib.fuse_session_loop_mt.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
                        L.lib.fuse_session_loop_mt(se, None)
                    else:
                        L.lib.fuse_session_loop(se)
                finally:
                    self._pool.shutdown(wait=True)
                    L.lib.fuse_session_unmount(se)
            finally:
                L.lib.fuse_remove_signal_handlers(se)
        finally:
            signal.signal(signal.SIGINT, old_int)
            L.lib.fuse_session_destroy(se)


def mount_option(key: str, value: str | None = None) -> str:
    """One ``-o`` option, its value escaped for libfuse's option parser."""
    if value is None:
        return key
    return key + "=" + value.replace("\\", "\\\\").replace(",", "\\,")
