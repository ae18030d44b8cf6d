"""Mounting a volume with libfuse3 (through mfusepy), tuned for throughput, minus the writeback
cache (see init_with_config): 1 s entry timeouts, 1 MiB requests, lower inode numbers."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.crypto.hygiene import harden_process
from strongroom.fs import fuseio
from strongroom.fs.creds import CallerCredentials
from strongroom.fs.fuse_ops import VolumeOps
from strongroom.fs.keys import VolumeKeys
from strongroom.fs.links import HardLinkNames

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would take libfuse2 if it were installed

FUSE_CAP_WRITEBACK_CACHE = 1 << 16
MAX_WRITE = 1 << 20
TIMEOUT = 1.0
# On a volume with access rules: how long the kernel may answer a lookup or stat from its cache,
# unchecked.  Opens and listings always reach the check; see docs/ACL.md, "Kernel caches".
ACL_TIMEOUT = 0.1
# Big reads and writes do not wake the keep-warm helper (warm.py): they come many at a time, in
# parallel, and the helper competing with their threads halved sequential reads in some runs.
WARM_IO_MAX = 256 << 10
_BULK = frozenset({"read", "write"})
PINNED_THREADS = 16  # libfuse threads whose Python thread state is kept (see Fuse._wrapper)


class MountError(Exception):
    pass


def mounted_at(mountpoint: Path) -> str | None:
    """The source of what is mounted at ``mountpoint``, if anything."""
    target = os.path.realpath(mountpoint)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mp = fields[4].encode().decode("unicode_escape")
        if mp == target:
            sep = fields.index("-")
            return fields[sep + 2]
    return None


def volume_mounted(volume: Path) -> str | None:
    """Where the volume is mounted already, if it is."""
    name = f"strongroom:{os.path.realpath(volume)}"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        if fields[sep + 2].encode().decode("unicode_escape") == name:
            return fields[4].encode().decode("unicode_escape")
    return None


def _mount_device(mountpoint: str) -> str | None:
    """The "major:minor" of the mount at ``mountpoint`` (a resolved path), from mountinfo alone."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4].encode().decode("unicode_escape") == mountpoint:
            return fields[2]
    return None


def _after_mount(mountpoint: str, took_killpriv: bool) -> None:
    """Once the mount is up (so INIT has been answered): say who clears set-id bits, and raise
    the readahead."""
    log = logging.getLogger("strongroom.fs")
    deadline = time.monotonic() + 5
    while took_killpriv and not fuseio.patched() and time.monotonic() < deadline:
        time.sleep(0.01)  # this thread starts from init, just before the INIT reply is written
    if took_killpriv and fuseio.patched():
        log.info("set-id bits are cleared by the daemon; the kernel's own checks are off (FUSE_HANDLE_KILLPRIV_V2)")
    else:
        log.info("set-id bits are cleared by the kernel (FUSE_HANDLE_KILLPRIV_V2 not negotiated)")
    _raise_readahead(mountpoint)


def _raise_readahead(mountpoint: str) -> None:
    """The kernel caps a FUSE mount's readahead at its default 128 KiB whatever max_readahead
    says; raise it on the mount's backing device so sequential reads arrive as 1 MiB requests.

    The daemon never stats its own mount: that is a request to itself, and if the daemon is
    killed once a libfuse thread has taken the request, the stat waits for an answer
    uninterruptibly, holding the dying daemon's /dev/fuse open, so the mount is never released
    (a test that killed the daemon right after it mounted hung that way)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        device = _mount_device(mountpoint)
        if device is not None:
            path = Path(f"/sys/class/bdi/{device}/read_ahead_kb")
            try:
                path.write_text(str(MAX_WRITE // 1024))
            except OSError as e:
                logging.getLogger("strongroom.fs").info("readahead stays at the kernel's default: %s", e.strerror)
            return
        time.sleep(0.01)


class _Ops(VolumeOps):
    on_mounted: Callable[[], None] | None = None
    # Listings carry attributes (READDIRPLUS) except on volumes with access rules, where every
    # lookup is checked at most acl_timeout after an allowed one (docs/ACL.md).
    plus_listings = True
    mountpoint = ""
    attr_timeout = TIMEOUT
    entry_timeout = TIMEOUT
    served = False
    warm: Any = None  # a warm.KeepWarm while the mount keeps a CPU awake
    take_killpriv = True  # clear set-id bits in the daemon, sparing the kernel's checks (fuseio.py)
    took_killpriv = False

    def init_with_config(self, conn: Any, config: Any) -> None:
        if conn is not None:
            # No writeback cache: with it the kernel keeps its own idea of a file's size and ignores
            # ours, which breaks hard links under libfuse's path-based API (each name is its own
            # kernel inode).  The low-level API (one inode per file) would allow both.
            conn.want &= ~FUSE_CAP_WRITEBACK_CACHE
            conn.max_write = MAX_WRITE
            conn.max_readahead = MAX_WRITE  # 1 MiB read requests too: fewer round trips
            if self.take_killpriv and fuseio.install(conn):
                self.kill_requested = fuseio.kill_requested()
                self.took_killpriv = True
        if config is not None:
            config.entry_timeout = self.entry_timeout
            # libfuse's path-based API gives each hard-link name its own kernel inode: a size cached
            # under one name is stale for up to attr_timeout after a write through another name.
            # 0 makes that exact, at a GETATTR per path component per system call.
            config.attr_timeout = self.attr_timeout
            config.negative_timeout = self.entry_timeout
            config.use_ino = 1
        self.invalidate = _invalidator()
        self.served = True
        threading.Thread(target=_after_mount, args=(self.mountpoint, self.took_killpriv), daemon=True).start()
        if self.on_mounted is not None:
            self.on_mounted()


def _invalidator() -> Callable[[str], object]:
    """From the init callback: a function making the kernel drop the attributes and pages it
    caches for a plaintext path (libfuse's fuse_invalidate_path; a no-op for a path the kernel
    holds no inode for).  A CDLL call: the GIL is released while the kernel waits, if it must, for
    a request on that name to be answered by another thread."""
    import ctypes

    import mfusepy

    lib = ctypes.CDLL(mfusepy._libfuse_path)
    fn = lib.fuse_invalidate_path
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    fuse = lib.fuse_get_context
    fuse.restype = ctypes.POINTER(mfusepy.fuse_context)
    handle = fuse().contents.fuse

    def invalidate(path: str) -> object:
        return fn(handle, os.fsencode(path))

    return invalidate


def _tune_malloc() -> None:
    """Keep 1 MiB request buffers in the heap: glibc otherwise maps and unmaps them each time, and
    the page faults of fresh mappings cost more than the decryption.  Freed memory above 64 MiB
    is still returned to the system."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD
        libc.mallopt(-2, 16 << 20)  # M_TOP_PAD
    except (OSError, AttributeError):
        pass


def _request_context() -> Callable[[], tuple[int, int, int]]:
    """(uid, gid, pid) of the FUSE request being served, read without releasing the GIL.

    mfusepy's fuse_get_context goes through a ctypes.CDLL function, which drops and retakes the GIL
    around a call that only reads a thread-local pointer; on a mount with access rules it runs on
    every checked request, and retaking the GIL from the daemon's other threads cost more than the
    call: 20 rules cost ~1.16x the no-rules open+read+close with it, ~1.03x without (one run, the
    ACL benchmark's loop)."""
    import ctypes

    import mfusepy

    try:
        fn = ctypes.PyDLL(mfusepy._libfuse_path).fuse_get_context
        fn.restype = ctypes.POINTER(mfusepy.fuse_context)
        fn.argtypes = []
    except (AttributeError, OSError):  # another mfusepy layout: its own (slower) reader still works
        return mfusepy.fuse_get_context  # type: ignore[no-any-return]

    def context() -> tuple[int, int, int]:
        c = fn().contents
        return int(c.uid), int(c.gid), int(c.pid)

    return context


StatPacker = Callable[[Any, os.stat_result, int], None]


def _stat_packer() -> StatPacker | None:
    """A function filling libfuse's struct stat from a lower stat and the plaintext size in one
    struct.pack_into (pad bytes zeroed), laid out from mfusepy's own c_stat fields: ~1.7 us where
    a dict of attributes set field by field through ctypes (mfusepy's set_st_attrs) took ~8.4 us,
    on every GETATTR, and on every entry of a listing.  It is checked against set_st_attrs once;
    None (use mfusepy's way) if they disagree."""
    import ctypes
    import struct

    import mfusepy

    from strongroom.fs.fuse_ops import BLKSIZE, VolumeOps

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


def _fuse_class() -> Any:
    """mfusepy's FUSE, with read and write handing our operations views of libfuse's own buffers
    (no copy into or out of a Python bytes object per request)."""
    import ctypes

    import mfusepy

    # A view of libfuse's buffer (writable, unsigned bytes), valid for the duration of the call
    # only.  PyMemoryView_FromMemory makes it cheaply; a ctypes array over the buffer would make
    # a new array type for each new request size (and leave the garbage collector to clear those
    # types away).
    _view = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)(
        ("PyMemoryView_FromMemory", ctypes.pythonapi)
    )  # its own prototype: ctypes.pythonapi's function objects are shared with other code
    PYBUF_WRITE = 0x200

    import itertools

    FUSE_READDIR_PLUS = 1  # libfuse 3: readdir's flags
    FUSE_FILL_DIR_PLUS = 2  # libfuse 3: the filler's flags
    _DIRENT_NAME = 24  # offsetof(struct fuse_dirent, name)
    _DIRENTPLUS_NAME = 152  # offsetof(struct fuse_direntplus, dirent.name): fuse_entry_out is 128 bytes
    _READDIR_BUDGET = os.sysconf("SC_PAGESIZE")
    _dir_handles = itertools.count(1 << 48)  # apart from file handles, which fgetattr looks up

    ensure_thread_state = ctypes.pythonapi.PyGILState_Ensure
    ensure_thread_state.restype = ctypes.c_int
    ensure_thread_state.argtypes = []
    pack_stat = _stat_packer()
    pinned: set[int] = set()
    pin_lock = threading.Lock()

    class Fuse(mfusepy.FUSE):  # type: ignore[misc]
        _listings: dict[int, list[tuple[str, str, int, int]]] = {}  # open directory handle -> its listing

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
            if ident not in pinned and len(pinned) < PINNED_THREADS:
                with pin_lock:
                    if ident not in pinned and len(pinned) < PINNED_THREADS:
                        ensure_thread_state()
                        pinned.add(ident)
            # mfusepy's own wrapper, minus a frame, for the common cases: a result, or an OSError
            # (ENOENT for every negative lookup) answered with its errno.  Anything else goes
            # through mfusepy's wrapper, which logs it and answers as it always has.
            try:
                return func(*args, **kwargs) or 0
            except OSError as e:
                if type(e.errno) is int and e.errno > 0 and func.__name__ != "init":
                    return -e.errno
                failure: BaseException = e
            except BaseException as e:  # noqa: BLE001 - handed to mfusepy's handling below
                failure = e

            def reraise(*_: Any, **__: Any) -> Any:
                raise failure

            reraise.__name__ = func.__name__
            return super()._wrapper(reraise)

        def getattr_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
            if pack_stat is None:
                return int(super().getattr_fuse_3(path, buf, fip))
            st, size = self.operations.plain_stat(
                None if path is None else path.decode(self.encoding, self.errors), fip.contents.fh if fip else None
            )
            pack_stat(buf.contents, st, size)
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
            # Only user.* attributes are stored (xattrs.py).  The kernel asks for
            # security.capability before every write and ls -l for system.posix_acl_access on
            # every entry: answered here, not through an exception raised and logged per request.
            # The answer is the same for every path, so it skips no access check that matters.
            if not name.startswith(b"user."):
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
            if self.operations.direct_io(fh):
                fi.direct_io = 1
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
                    if pack_stat is not None:
                        pack_stat(st, *found)
                    else:
                        ctypes.memset(ctypes.byref(st), 0, ctypes.sizeof(st))
                        mfusepy.set_st_attrs(st, self.operations.attrs(*found), use_ns=self.use_ns)
                else:
                    ctypes.memset(ctypes.byref(st), 0, ctypes.sizeof(st))
                    st.st_ino, st.st_mode = ino, mode
                if filler(buf, raw, st, i + 1, fill_flags) != 0:
                    break
            return 0

    return Fuse


def run(
    volume: Path,
    mountpoint: Path,
    keys: VolumeKeys,
    long_name_max: int,
    allow_other: bool = False,
    read_only: bool = False,
    on_mounted: Callable[[], None] | None = None,
    attr_timeout: float = TIMEOUT,
    report_to: Callable[[], Any] | None = None,
    acl_timeout: float = ACL_TIMEOUT,
    derived_tweaks: bool = True,
    holes: bool = True,
    bound_xattrs: bool = True,
    keep_warm: bool = True,
) -> None:
    """Serve the mount in this process until it is unmounted or SIGTERM/SIGINT arrives.
    ``keep_warm``: keep a CPU awake while requests flow (warm.py)."""
    from strongroom.fs import acl

    if not mountpoint.is_dir():
        raise MountError(f"{mountpoint} is not a directory")
    if (where := volume_mounted(volume)) is not None:
        raise MountError(f"{volume} is already mounted at {where}")
    if mounted_at(mountpoint) is not None:
        raise MountError(f"something is already mounted at {mountpoint}")
    ops = _Ops(str(volume), keys, long_name_max, read_only, derived_tweaks, holes, bound_xattrs)
    ops.on_mounted = on_mounted
    ops.context = _request_context()
    ops.creds = CallerCredentials()
    if os.geteuid() == 0 and not ops.creds.active:
        logging.getLogger("strongroom.fs").warning(
            "cannot take callers' file-system ids (no CAP_SETUID?): new entries will belong to the daemon's user"
        )
    ops.links = HardLinkNames()
    ops.mountpoint = os.path.realpath(mountpoint)
    ops.attr_timeout = attr_timeout
    # Every mount watches for rules, so rules added to a live mount that had none are enforced;
    # a volume that has rules (the config's record) mounts only with rules at least that new.
    try:
        floor = acl.required_serial(volume, keys.rules_mac)
        acl.check_rules(acl.load_rules(volume, keys.rules_mac), floor)
    except acl.AclError as e:
        raise MountError(f"refusing to mount: {e}") from None
    learn: Path | None = acl.learn_log_path(keys.volume_id)
    spool_dir = acl.learn_log_path(keys.volume_id).parent
    try:
        spool_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:  # a mount by a user who cannot write /run: denials are only logged
        logging.getLogger("strongroom.acl").warning("%s: denials will not be kept for 'acl learn' (%s)", spool_dir, e.strerror)
        learn = None
    reporter = None
    if report_to is not None:  # a volume keyed by the server: denials go to its audit log too
        from strongroom.fs.acl_report import DenialReporter
        from strongroom.fs.names import b64u

        vid = b64u(keys.volume_id)
        reporter = DenialReporter(vid, report_to, spool_dir / f"acl-{vid}.spool.jsonl")
    ops.acl = acl.Enforcer(volume, keys.rules_mac, learn, reporter, floor)
    if ops.acl.active:
        ops.plus_listings = False
        # The kernel answers cached lookups and attributes without asking the daemon: on a volume
        # with access rules they are cached for acl_timeout at most (0: every one is checked).
        ops.attr_timeout = min(attr_timeout, acl_timeout)
        ops.entry_timeout = acl_timeout
    options: dict[str, Any] = {
        "fsname": f"strongroom:{os.path.realpath(volume)}",
        "subtype": "strongroom",
        "default_permissions": True,  # the kernel checks modes and owners: the daemon runs as root
    }
    if allow_other:
        options["allow_other"] = True
    if read_only:
        options["ro"] = True
    logging.getLogger("mfusepy").setLevel(logging.WARNING)
    _tune_malloc()
    # The kernel applied the caller's umask to the modes it sends; the daemon's own must not be
    # applied on top (its private files are all made with explicit modes).
    os.umask(0)
    for missing in harden_process():  # the daemon holds the volume's keys
        logging.getLogger("strongroom.fs").warning("%s", missing)
    if keep_warm:
        from strongroom.fs.warm import KeepWarm

        try:
            ops.warm = KeepWarm()
        except OSError as e:  # only slower without it
            logging.getLogger("strongroom.fs").warning("no keep-warm helper: %s", e.strerror or e)
    try:
        _fuse_class()(ops, str(mountpoint), foreground=True, nothreads=False, **options)
    except RuntimeError:
        # libfuse reports a loop ended by SIGTERM/SIGINT as a failure; after a clean unmount it is not
        if not ops.served or mounted_at(mountpoint) is not None:
            raise MountError(f"libfuse could not serve {mountpoint} (see the log)") from None
    finally:
        if ops.warm is not None:
            ops.warm.close()


def umount(mountpoint: Path) -> None:
    if mounted_at(mountpoint) is None:
        raise MountError(f"nothing is mounted at {mountpoint}")
    r = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, text=True)
    if r.returncode != 0:
        raise MountError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"cannot unmount {mountpoint}")
