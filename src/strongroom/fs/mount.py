"""Mounting a volume with libfuse3 (through mfusepy), tuned for throughput, minus the writeback
cache (see init_with_config): 1 s entry timeouts, 1 MiB requests, lower inode numbers."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.crypto.hygiene import harden_process
from strongroom.fs import fuseio, inuse, journal
from strongroom.fs.creds import CallerCredentials
from strongroom.fs.fastwrite import FastWrites
from strongroom.fs.fuse_ops import VolumeOps
from strongroom.fs.health import Health
from strongroom.fs.keys import VolumeKeys
from strongroom.fs.links import HardLinkNames
from strongroom.fs.notify import Notifier
from strongroom.fs.pagecache import PageCache

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would take libfuse2 if it were installed

FUSE_CAP_WRITEBACK_CACHE, FUSE_CAP_AUTO_INVAL_DATA = 1 << 16, 1 << 12
FUSE_CAP_DONT_MASK, FUSE_CAP_POSIX_ACL = 1 << 6, 1 << 19  # libfuse 3.14's fuse_common.h
MAX_WRITE = 1 << 20
TIMEOUT = 1.0
# On a volume with access rules: how long the kernel may answer a lookup or stat from its cache,
# unchecked.  Opens and listings always reach the check; see docs/ACL.md, "Kernel caches".
ACL_TIMEOUT = 0.1


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


def _after_mount(mountpoint: str, io_parts: int) -> None:
    """Once the mount is up (so INIT has been answered): say who clears set-id bits and who reads
    requests, and raise the readahead."""
    log = logging.getLogger("strongroom.fs")
    if io_parts & fuseio.BATON:
        log.info("requests are read by one libfuse thread at a time (reader baton)")
    else:
        log.info("requests are read by every idle libfuse thread (no reader baton)")
    took_killpriv = bool(io_parts & fuseio.SETID)
    deadline = time.monotonic() + 5
    while took_killpriv and not fuseio.patched() and time.monotonic() < deadline:
        time.sleep(0.01)  # this thread starts from init, just before the INIT reply is written
    if took_killpriv and fuseio.patched():
        log.info("set-id bits are cleared by the daemon; the kernel's own checks are off (FUSE_HANDLE_KILLPRIV_V2)")
    else:
        log.info("set-id bits are cleared by the kernel (FUSE_HANDLE_KILLPRIV_V2 not negotiated)")
    if io_parts & fuseio.DMMAP and fuseio.direct_mmap():
        log.info("files with several names are served without the page cache (shared mappings allowed)")
    else:
        log.info("files with several names keep the page cache (no FUSE_DIRECT_IO_ALLOW_MMAP before Linux 6.6)")
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
    notifier: Notifier | None = None  # sends the kernel its invalidations, apart from requests
    warm: Any = None  # a warm.KeepWarm while the mount keeps a CPU awake
    setid_shim = True  # clear set-id bits in the daemon, sparing the kernel's checks (fuseio.py)
    reader_baton = True  # one libfuse thread reads requests at a time (fuseio.py)
    io_parts = 0  # the fuseio parts installed (fuseio.SETID | fuseio.BATON)

    def init_with_config(self, conn: Any, config: Any) -> None:
        if conn is not None:
            # No writeback cache: with it the kernel keeps its own idea of a file's size and ignores
            # ours, which breaks hard links under libfuse's path-based API (each name is its own
            # kernel inode).  The low-level API (one inode per file) would allow both.
            conn.want &= ~FUSE_CAP_WRITEBACK_CACHE
            # Pages are dropped by the daemon when the lower file changed behind its back, not by
            # the kernel whenever a file's time changed, which its own writes do (pagecache.py).
            conn.want &= ~FUSE_CAP_AUTO_INVAL_DATA
            if conn.capable & FUSE_CAP_POSIX_ACL:
                # The kernel enforces POSIX ACLs and asks for them; the daemon stores them, keeps
                # modes in step and gives new entries their directory's default ACL, so it also
                # applies the umask itself (it must not apply where a default ACL does).
                conn.want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK
                self.xattrs.acls = True
                self.umask = _request_umask()
            conn.max_write = MAX_WRITE
            conn.max_readahead = MAX_WRITE  # 1 MiB read requests too: fewer round trips
            self.io_parts = fuseio.install(conn, self.setid_shim, self.reader_baton)
            if self.io_parts & fuseio.ATTRS and not self.read_only:
                self.io.fast = FastWrites.start(self.io.holes)
            if self.io_parts & fuseio.SETID:
                self.kill_requested = fuseio.kill_requested()
            if self.io_parts & fuseio.DMMAP:
                self.links_direct = fuseio.direct_mmap
            if self.io_parts & fuseio.ATTRS:
                self.serving = fuseio.serving()
        if config is not None:
            config.entry_timeout = self.entry_timeout
            # libfuse's path-based API gives each hard-link name its own kernel inode: a size cached
            # under one name is stale for up to attr_timeout after a write through another name.
            # 0 makes that exact, at a GETATTR per path component per system call.
            config.attr_timeout = self.attr_timeout
            config.negative_timeout = self.entry_timeout
            config.use_ino = 1
        self.notifier = Notifier(_invalidator())
        self.invalidate = self.notifier.post
        if conn is not None:
            self.pages = PageCache(self.notifier.post, lambda st: self.io.take_written((st.st_dev, st.st_ino)))
        if self.io_parts & fuseio.ATTRS:
            self.invalidate_attrs = fuseio.attrs_invalidator()
        self.served = True
        threading.Thread(target=_after_mount, args=(self.mountpoint, self.io_parts), daemon=True).start()
        if self.on_mounted is not None:
            self.on_mounted()


def _invalidator() -> Callable[[str], object]:
    """From the init callback: a function making the kernel drop the attributes and pages it
    caches for a plaintext path (libfuse's fuse_invalidate_path; a no-op for a path the kernel
    holds no inode for).  Called by the notifier's thread alone (notify.py), never while serving
    a request: the kernel may wait for requests on that name to be answered first.  A CDLL call:
    the GIL is released while it waits."""
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


def _request_umask() -> Callable[[], int]:
    """The umask of the FUSE request being served (libfuse's context, read holding the GIL)."""
    import ctypes

    import mfusepy

    fn = ctypes.PyDLL(mfusepy._libfuse_path).fuse_get_context
    fn.restype = ctypes.POINTER(mfusepy.fuse_context)
    fn.argtypes = []

    def umask() -> int:
        return int(fn().contents.umask)

    return umask


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
    dev: bool = False,
    setid_shim: bool = True,
    reader_baton: bool = True,
) -> None:
    """Serve the mount in this process until it is unmounted or SIGTERM/SIGINT arrives.
    ``keep_warm``: keep a CPU awake while requests flow (warm.py).  ``setid_shim``, ``reader_baton``:
    the two parts of the compiled /dev/fuse I/O (fuseio.py), each on unless switched off."""
    from strongroom.fs import acl

    # Resolved once, here: libfuse leaves the working directory once mounted, and every path
    # kept below (the volume, its rules file, the mount point) must mean what it meant now.
    volume, mountpoint = Path(os.path.realpath(volume)), Path(os.path.realpath(mountpoint))
    if not mountpoint.is_dir():
        raise MountError(f"{mountpoint} is not a directory")
    if (where := volume_mounted(volume)) is not None:
        raise MountError(f"{volume} is already mounted at {where}")
    if mounted_at(mountpoint) is not None:
        raise MountError(f"something is already mounted at {mountpoint}")
    try:  # held for the daemon's life: offline tools refuse the volume meanwhile (inuse.py)
        ops_lock = inuse.hold(volume)
    except inuse.VolumeBusy as e:
        raise MountError(str(e)) from None
    for line in journal.replay(str(volume)):  # shrinks a killed daemon left half done
        logging.getLogger("strongroom.fs").warning("%s", line)
    ops = _Ops(str(volume), keys, long_name_max, read_only, derived_tweaks, holes, bound_xattrs)
    ops.on_mounted = on_mounted
    ops.setid_shim, ops.reader_baton = setid_shim, reader_baton
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
    ops.health = Health(keys.volume_id, str(volume), str(mountpoint))
    ops.acl = acl.Enforcer(volume, keys.rules_mac, learn, reporter, floor)
    ops.acl.note = ops.health.note
    ops.health.flush()
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
    # nodev unless asked: a device node planted in the lower directory would otherwise open the
    # device it names for anyone the node's mode lets in
    options["dev" if dev else "nodev"] = True
    logging.getLogger("mfusepy").setLevel(logging.WARNING)
    _tune_malloc()
    # The kernel applied the caller's umask to the modes it sends; the daemon's own must not be
    # applied on top (its private files are all made with explicit modes).
    os.umask(0)
    for missing in harden_process():  # the daemon holds the volume's keys
        logging.getLogger("strongroom.fs").warning("%s", missing)
    from strongroom.fs import fuse_front

    if lacking := fuse_front.check_mfusepy():  # a bypassed override would change what callers see
        raise MountError(f"this mfusepy lacks what the mount needs ({', '.join(lacking)}); install the pinned version")
    if keep_warm:
        from strongroom.fs.warm import KeepWarm

        try:
            ops.warm = KeepWarm()
        except OSError as e:  # only slower without it
            logging.getLogger("strongroom.fs").warning("no keep-warm helper: %s", e.strerror or e)
    pack_stat = fuse_front.stat_packer()
    if pack_stat is None:
        logging.getLogger("strongroom.fs").warning(
            "libfuse's struct stat is not laid out as this version expects: attributes go through mfusepy (slower)"
        )
    try:
        fuse_front.Fuse(ops, str(mountpoint), pack_stat, foreground=True, nothreads=False, **options)
    except RuntimeError:
        # libfuse reports a loop ended by SIGTERM/SIGINT as a failure; after a clean unmount it is not
        if not ops.served or mounted_at(mountpoint) is not None:
            raise MountError(f"libfuse could not serve {mountpoint} (see the log)") from None
    finally:
        if ops.warm is not None:
            ops.warm.close()
        ops.health.remove()
        os.close(ops_lock)


def umount(mountpoint: Path) -> None:
    if mounted_at(mountpoint) is None:
        raise MountError(f"nothing is mounted at {mountpoint}")
    r = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, text=True)
    if r.returncode != 0:
        raise MountError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"cannot unmount {mountpoint}")
