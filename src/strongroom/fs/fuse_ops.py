"""The mount's operations, as mfusepy calls them: each checks what the FUSE front decides
(access rules, a read-only mount, set-id clearing), maps libfuse's hidden names to descriptors
(hidden.py), tells the kernel what changed under a file's other names (hard links), and hands the
work to the layer that owns it: entries (namespace.py), content (fileio.py), extended attributes
and ACLs (fuse_xattr_ops.py, xattr_store.py).  Every failure leaves as an OSError carrying ext4's errno, which the
front end (fuse_front.py) answers with.  libfuse calls in from several threads; fileio.py holds a
file's lock around every operation on its content."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any

from strongroom.fs import names, posix_acl
from strongroom.fs.beneath import Beneath
from strongroom.fs.creds import CallerCredentials, drop_setid, lacks_fsetid
from strongroom.fs.fileio import MAX_FILE_SIZE, MAX_REQUEST, FileIO, os_error
from strongroom.fs.fuse_xattr_ops import XattrOps
from strongroom.fs.health import Health
from strongroom.fs.hidden import HiddenFiles, is_hidden_name
from strongroom.fs.journal import Journal
from strongroom.fs.keys import VolumeKeys
from strongroom.fs.links import HardLinkNames, Key
from strongroom.fs.namespace import UTIME_NOW, Namespace, entry_kind
from strongroom.fs.notify import drop_nothing
from strongroom.fs.pagecache import PageCache
from strongroom.fs.ratelog import RateLimitedLog
from strongroom.fs.resolver import CACHE_ENTRIES, Resolver
from strongroom.fs.xattr_store import XattrStore
from strongroom.fs.xattrs import XattrCipher

log = logging.getLogger("strongroom.fs")

# The preferred I/O size programs read from stat: cp and stdio size their buffers by it, and each
# write through FUSE is a round trip (no writeback cache here).  With the lower file's 4 KiB, cp
# copied in 128 KiB writes; the largest request the mount takes makes the fewest round trips.
BLKSIZE = MAX_REQUEST


def _never() -> int:
    return 0


_RENAMES = (12, 45)  # FUSE_RENAME, FUSE_RENAME2


class VolumeOps(XattrOps):
    """The mfusepy Operations of one mounted volume."""

    use_ns = True

    def __init__(
        self,
        lower_root: str,
        keys: VolumeKeys,
        long_name_max: int = names.LONG_NAME_MAX,
        read_only: bool = False,
        derived_tweaks: bool = True,
        holes: bool = True,
        bound_xattrs: bool = True,
    ) -> None:
        self.root = os.path.abspath(lower_root)
        if self.root == "/":  # lower paths are joined as parent + "/" + name below
            raise ValueError("the root directory cannot be a volume")
        self.beneath = Beneath(self.root)  # every lower entry a change reaches, reached without symlinks
        self.read_only = read_only
        # The format version's features (FORMAT.md §5, §6): derived directory tweaks (version 2),
        # holes (3), attribute values bound to their file (4); the layers below keep them.
        self.names = names.NameCipher(keys.names, long_name_max)
        tweaks = names.Tweaks(keys.version if derived_tweaks else 1, keys.dir_ids, keys.volume_id)
        self.paths = Resolver(self.root, self.names, tweaks, self._damage, self.beneath)
        self.entries = Namespace(self.root, keys, self.paths, self.beneath, self._damage, self._as_caller)
        self.xattrs = XattrStore(
            XattrCipher(keys.xattr_names, keys.xattr_values, keys.salted), self.paths, bound_xattrs, self._damage
        )
        self.io = FileIO(keys, holes, self._damage, self.xattrs.rebind if bound_xattrs else None, Journal(self.root))
        self._logged: set[tuple[str, int | None]] = set()
        self._unsupported_log = RateLimitedLog(log, interval=3600)  # bounded, whatever callers try
        self.acl: Any = None  # an acl.Enforcer on mounts with access rules
        self.context: Any = None  # () -> (uid, gid, pid) of the FUSE request being served
        # Entries a request creates are made under the caller's uid and gid (creds.py); set by
        # the mount, where requests have a caller.
        self.creds: CallerCredentials | None = None
        # On a mount: the names of hard-linked files the kernel caches (links.py), and how to make
        # the kernel drop one name's attributes at once (None without fuseio.c: then queued with
        # the pages) and its pages, queued for notify.py's thread (the kernel waits for their locks)
        self.links: HardLinkNames | None = None
        self.pages: PageCache | None = None  # when the kernel may keep a file's pages (pagecache.py)
        self.invalidate_attrs: Callable[[str], object] | None = None
        self.invalidate: Callable[[str], object] = drop_nothing
        self.hidden = HiddenFiles()  # libfuse's hidden names of open files -> descriptors
        self.health = Health()  # what it met that it did not expect (a mount's is read by fs status)
        # () -> whether the kernel asked, with the request being served, for set-id bits to be
        # cleared; it asks only when the mount took that job over from it (fuseio.py)
        self.kill_requested: Callable[[], int] = _never
        # () -> the opcode of the request being served (fuseio.py; 0 when unknown)
        self.serving: Callable[[], int] = _never
        self.umask: Callable[[], int] = _never  # () -> the caller's umask (the kernel leaves it to us with ACLs)
        # () -> whether files with several names may skip the page cache (fuseio.py's direct_mmap)
        self.links_direct: Callable[[], int] = _never
        self._self_pid = os.getpid()

    # -- access control ------------------------------------------------------------------
    def _check(self, path: str | None, write: bool = False) -> None:
        """EACCES unless the calling process may reach ``path`` (see acl.py)."""
        acl = self.acl
        if acl is None or path is None or self.context is None or not acl.active:
            return
        pid = self.context()[2]
        if pid == self._self_pid:  # the daemon's own requests
            return
        # pid 0 (a caller outside the mount's pid namespace) is the Enforcer's to refuse
        if not acl.allowed(pid, path.lstrip("/"), write):
            raise os_error(errno.EACCES)

    def _as_caller(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a lower call that creates an entry as the caller (owner and group as ext4 gives
        them), on this thread only."""
        creds = self.creds
        if creds is None or self.context is None:
            return fn(*args, **kwargs)
        uid, gid, _ = self.context()
        if uid == creds.uid and gid == creds.gid:  # the daemon's own user: nothing to switch
            return fn(*args, **kwargs)
        return creds.run_as(uid, gid, fn, *args, **kwargs)

    # -- names: plaintext paths to lower ones (resolver.py) --------------------------------
    @contextlib.contextmanager
    def _node(self, path: str) -> Iterator[tuple[str | int, bool]]:
        """(what a call addressed by path works on, whether that is a descriptor): the lower
        entry's path (a symlink itself, not followed), or, for a file unlinked while open, the
        daemon's descriptor of it, kept open for the block's length."""
        if self.hidden.fds:
            with self.hidden.use(path) as fd:
                if fd is not None:
                    yield fd, True
                    return
        yield self.paths.lower(path), False

    @contextlib.contextmanager
    def _reach(self, path: str) -> Iterator[tuple[str | int, bool]]:
        """_node's answer, a lower path made safe to use (beneath.py) for the block's length."""
        with self._node(path) as (node, is_fd):
            if is_fd:
                yield node, True
                return
        with self.beneath.path(str(node)) as entry:
            yield entry.path, False

    def _damage(self, what: str, block: int | None, reason: str) -> None:
        key = (what, block)
        if key not in self._logged:
            if len(self._logged) >= CACHE_ENTRIES:  # memory stays bounded on a badly damaged volume
                self._logged.clear()
            self._logged.add(key)
            where = f" block {block}" if block is not None else ""
            log.error("damaged: %s%s: %s", what, where, reason)
            self.health.note("damaged block" if block is not None else reason.split(" (")[0].split(":")[0], what + where)

    # -- attributes ----------------------------------------------------------------------
    def plain_stat(self, path: str, fh: int | None = None) -> tuple[os.stat_result, int]:
        """(the lower entry's stat, the plaintext size) of a path or an open file: what getattr
        reports, in the form the mount packs straight into libfuse's struct stat."""
        if fh is None and path != "/":
            self._check(path)
        st: os.stat_result | None = None
        if fh is not None and fh in self.io.handles:
            h = self.io.handles[fh]
            st, lower = os.fstat(h.fd), h.path
        elif self.hidden.fds and path in self.hidden.fds:
            with self.hidden.use(path) as fd:
                if fd is not None:
                    st, lower = os.fstat(fd), path
        if st is None:
            lower = self.paths.lower(path)
            try:
                st = self.beneath.call(lower, os.lstat)
            except FileNotFoundError:
                raise self._gone(path) from None
            if st.st_nlink > 1 and self.links is not None and not stat.S_ISDIR(st.st_mode):
                self.links.seen((st.st_dev, st.st_ino), path)
        if self.pages is not None:
            self.pages.seen(path, st)
        return st, self.entries.reported_size(st, lower)

    def _changed(self, key: Key | None, *through: str | None, content: bool = False) -> None:
        """A file changed through the names ``through`` (its ``content`` too, or only its
        attributes): the kernel drops what it caches for its other names (hard links).
        Attributes are dropped before this request is answered, so stat through any name is
        exact at once; pages only through the notifier's queue, because the kernel waits for
        their locks and writeback, which may wait on this very request (notify.py)."""
        if self.pages is not None:
            self.pages.changed(*through)
        links = self.links
        if links is None or key is None or key not in links.files:  # one name: nothing to tell
            return
        attrs = self.invalidate_attrs
        for other in links.others(key, *(p for p in through if p is not None)):
            if attrs is not None:
                attrs(other)
            if content or attrs is None:
                self.invalidate(other)

    def _changed_path(self, path: str) -> None:
        if self.pages is not None:
            self.pages.changed(path)
        links = self.links
        if links is not None:
            key = links.key_of(path)
            if key is not None:
                self._changed(key, path)

    @staticmethod
    def attrs(st: os.stat_result, size: int) -> dict[str, Any]:
        """mfusepy's form of the attributes (fuse_front.py packs struct stat itself where it can)."""
        names = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_blocks", "st_rdev")
        out: dict[str, Any] = {n: getattr(st, n) for n in names}
        out.update(st_size=size, st_blksize=BLKSIZE, st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        return self.attrs(*self.plain_stat(path, fh))

    def access(self, path: str, amode: int) -> int:
        self._check(path, write=bool(amode & os.W_OK))
        if amode & os.W_OK and self.read_only:
            raise os_error(errno.EROFS)
        if not self.beneath.call(self.paths.lower(path), os.access, amode, follow_symlinks=False):
            raise os_error(errno.EACCES)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._check(path, write=True)
        self._writable()
        self._set_mode(path, mode)
        with self._node(path) as node:
            acl = self.xattrs.acls and self.xattrs.has(*node, posix_acl.ACCESS)  # it says the mode too
        if acl:
            with self._reach(path) as (node, is_fd):
                self.xattrs.chmod_acl(path, node, is_fd, mode)
        self._changed_path(path)
        return 0

    def _set_mode(self, path: str, mode: int) -> None:
        with self._node(path) as node:
            self.entries.set_mode(*node, mode)

    def _new_mode(self, path: str, mode: int) -> tuple[int, bool, Any]:
        return self.xattrs.new_entry_mode(path, mode, self.umask) if self.xattrs.acls else (mode, False, None)

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._check(path, write=True)
        self._writable()
        with self._node(path) as node:
            self.entries.set_owner(*node, uid, gid)
        self._changed_path(path)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        """Set (atime, mtime) in nanoseconds; None sets both to now."""
        if times is None:
            return self.set_times(path, (0, UTIME_NOW), (0, UTIME_NOW))
        return self.set_times(path, divmod(times[0], 1_000_000_000), divmod(times[1], 1_000_000_000))

    def set_times(self, path: str, atime: tuple[int, int], mtime: tuple[int, int]) -> int:
        """utimensat(2)'s (seconds, nanoseconds) pairs, UTIME_NOW and UTIME_OMIT included."""
        self._check(path, write=True)
        self._writable()
        with self._node(path) as node:
            self.entries.set_times(*node, atime, mtime)
        self._changed_path(path)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        sv = os.statvfs(self.root)
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")
        out = {k: getattr(sv, k) for k in keys}
        out["f_namemax"] = 255
        return out

    def _writable(self) -> None:
        if self.read_only:
            raise os_error(errno.EROFS)

    # -- directories ---------------------------------------------------------------------
    def _listing(self, path: str) -> Iterator[tuple[str, os.DirEntry[str], str]]:
        """(plain name, lower entry, lower dir) for each entry of a directory, after the access check."""
        self._check(path)
        return self.entries.listing(path)

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        """Names with inode and type (from the lower dirents, no stat): with use_ino, an entry
        without an inode number would be hidden by readdir(3)."""
        out = []
        for plain, entry, _ in self._listing(path):
            out.append((plain, {"st_ino": entry.inode(), "st_mode": entry_kind(entry)}, 0))
        here, parent = self.entries.dots(path)
        return [
            (".", {"st_ino": here.st_ino, "st_mode": here.st_mode}, 0),
            ("..", {"st_ino": parent.st_ino, "st_mode": parent.st_mode}, 0),
            *out,
        ]

    def readdir_entries(self, path: str) -> list[tuple[str, str, int, int]]:
        """(name, lower path, inode, type) of every entry, dots included, for listings sent in
        pieces (READDIRPLUS): names only, so a huge directory costs what libfuse's own listing
        did; each entry's attributes are read when it is sent (``entry_stat``)."""
        out = []
        for plain, entry, lower_dir in self._listing(path):
            out.append((plain, f"{lower_dir}/{entry.name}", entry.inode(), entry_kind(entry)))
        lower_dir = self.paths.lower(path)
        parent = os.path.dirname(lower_dir) if lower_dir != self.root else lower_dir
        here, up = self.entries.dots(path)
        return [(".", lower_dir, here.st_ino, here.st_mode), ("..", parent, up.st_ino, up.st_mode), *out]

    def entry_stat(self, lower: str, path: str) -> tuple[os.stat_result, int] | None:
        """A listed entry's (lower stat, plaintext size), as plain_stat gives them; None if it is
        gone since.  ``path``: its plaintext path, which the kernel caches from the listing."""
        try:
            st = self.beneath.call(lower, os.lstat)
        except FileNotFoundError:
            return None
        if st.st_nlink > 1 and self.links is not None and not stat.S_ISDIR(st.st_mode):
            self.links.seen((st.st_dev, st.st_ino), path)
        if self.pages is not None:
            self.pages.seen(path, st)
        return st, self.entries.reported_size(st, lower)

    def opendir(self, path: str) -> int:
        self._check(path)
        if not self.beneath.call(self.paths.lower(path), os.path.isdir):
            raise os_error(errno.ENOTDIR)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._check(path, write=True)
        self._writable()
        mode, inherits, access = self._new_mode(path, mode)
        self.entries.mkdir(path, mode)
        if inherits:
            with self._reach(path) as (node, _):
                self.xattrs.inherit(path, node, access, directory=True)
        return 0

    def rmdir(self, path: str) -> int:
        self._check(path, write=True)
        self._writable()
        self.entries.rmdir(path)
        self.xattrs.forget_defaults()
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self.entries.fsyncdir(path)
        return 0

    # -- namespace -----------------------------------------------------------------------
    def unlink(self, path: str) -> int:
        self._check(path, write=True)
        self._writable()
        if self.hidden.fds and self.hidden.release(path):  # the last close of a file unlinked while open
            return 0
        self.entries.unlink(path)
        if self.pages is not None:
            self.pages.removed(path)
        if self.links is not None:
            self._changed(self.links.removed(path))  # the other names' link count and ctime
        return 0

    def rename(self, old: str, new: str) -> int:
        self._check(old, write=True)
        self._check(new, write=True)
        self._writable()
        if self.hidden.fds and old in self.hidden.fds:
            raise os_error(errno.ENOENT)  # an unlinked file has no name to move
        if is_hidden_name(new) and self._hide(old, new):
            return 0
        self.entries.rename(old, new)
        self.xattrs.forget_defaults()
        if self.pages is not None:
            self.pages.renamed(old, new)
        if self.links is not None:
            replaced = self.links.removed(new) if old != new else None
            self.links.renamed(old, new)
            self._changed(replaced)
        return 0

    def _hide(self, path: str, hidden: str) -> bool:
        """libfuse moving an open file out of the way of an unlink or of a rename over it
        (hidden.py); False if ``path`` is no open file (a caller's own rename to such a name)."""
        lower_parent, name, _ = self.paths.entry(path)
        done = self.hidden.hide(f"{lower_parent}/{name}", hidden, self.serving() in _RENAMES, self.io, self.beneath)
        if done == "unlink":  # as ext4 would: its listing, its directory's emptiness, its link count at once
            self.entries.unlink(path)
            if self.links is not None:
                self._changed(self.links.removed(path))
        return done is not None

    def link(self, target: str, source: str) -> int:
        """ln SOURCE TARGET."""
        self._check(target, write=True)
        self._check(source, write=True)
        self._writable()
        if self.hidden.fds and source in self.hidden.fds:
            raise os_error(errno.ENOENT)
        lower = self.entries.link(target, source)
        if self.links is not None:
            st = self.beneath.call(lower, os.lstat)
            key = (st.st_dev, st.st_ino)
            self.links.seen(key, source, target)
            # The new name's attributes come with this reply; every other name's link count changed
            # (the source's too: under the path-based API it is another kernel inode).
            self._changed(key, target)
        return 0

    def symlink(self, target: str, source: str) -> int:
        """ln -s SOURCE TARGET: the link TARGET holds SOURCE, encrypted as a file (FORMAT.md §5)."""
        self._check(target, write=True)
        self._writable()
        self.entries.symlink(target, source)
        return 0

    def readlink(self, path: str) -> str:
        self._check(path)
        return os.fsdecode(self.entries.read_link(self.paths.lower(path)))

    def mknod(self, path: str, mode: int, dev: int) -> int:
        self._check(path, write=True)
        self._writable()
        self.entries.mknod(path, self._new_mode(path, mode)[0], dev)  # (no attributes on special files)
        return 0

    # -- files ---------------------------------------------------------------------------
    def _open_lower(self, lower: str, flags: int, mode: int = 0o600, follow: bool = False) -> int:
        access = flags & os.O_ACCMODE
        if access != os.O_RDONLY:
            self._writable()
        # O_NOFOLLOW always: the kernel resolves the caller's symlinks before asking the daemon,
        # so a lower symlink where a file should be was put there by someone writing the lower
        # directory, and following it would let them aim the daemon at any file (ELOOP instead)
        opener = os.open if follow else self.beneath.open
        try:
            # read-modify-write of partial blocks needs read access even for write-only opens
            both = os.O_RDONLY if self.read_only else os.O_RDWR
            return opener(lower, both | flags & (os.O_CREAT | os.O_EXCL) | os.O_CLOEXEC, mode)
        except PermissionError:
            if access != os.O_RDONLY:
                raise
            return opener(lower, os.O_RDONLY | os.O_CLOEXEC, mode)

    def _gone(self, path: str) -> OSError:
        """The error for a path whose lower entry is missing (hidden.py: ESTALE or ENOENT)."""
        return os_error(self.hidden.missing_errno(path, self.serving()))

    def open(self, path: str, flags: int) -> int:
        self._check(path, write=flags & os.O_ACCMODE != os.O_RDONLY or bool(flags & os.O_TRUNC))
        try:
            return self._open(path, flags)
        except FileNotFoundError:
            raise self._gone(path) from None

    def _open(self, path: str, flags: int) -> int:
        with self._node(path) as (node, is_fd):
            lower = f"/proc/self/fd/{node}" if is_fd else str(node)  # reopened through /proc when unlinked
            fd = self._open_lower(lower, flags, follow=is_fd)  # /proc/self/fd/N is a (trusted) magic link
            st = os.fstat(fd)
            fh = self.io.add(fd, lower, st, append=bool(flags & os.O_APPEND))
            if is_fd:  # the kernel stats an open file by its name: served until this one is released
                self.hidden.opened(path, fh)
        # A file with several names is served without the page cache, which the kernel keeps per
        # name: each read then sees what a write through another name left, at once (the pages
        # an earlier open left are dropped by the notifier, a moment later).  Without shared
        # mappings of such files (kernels before 6.6), only its appends are.
        if st.st_nlink > 1 and (flags & os.O_APPEND or self.links_direct()):
            self.io.handles[fh].direct_io = True
        elif self.pages is not None:
            self.io.handles[fh].keep_cache = self.pages.keep(path, st)
        if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
            if (
                self.kill_requested is _never
                and st.st_mode & (stat.S_ISUID | stat.S_ISGID)
                and self.context is not None
                and lacks_fsetid(self.context()[2])
            ):
                drop_setid(fd)
            self.truncate(path, 0, fh)
        return fh

    def cache_mode(self, fh: int) -> tuple[bool, bool]:
        """Whether the kernel should serve this open file without its page cache, and whether it
        may keep the pages it already holds for it."""
        h = self.io.handles.get(fh)
        return (h.direct_io, h.keep_cache) if h is not None else (False, False)

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        self._check(path, write=True)
        self._writable()
        mode, inherits, access = self._new_mode(path, mode)
        lower_parent, name = self.entries.new_entry(path)
        lower = f"{lower_parent}/{name}"
        made = True
        try:
            fd = self._as_caller(self._open_lower, lower, (flags | os.O_CREAT | os.O_EXCL) & ~os.O_TRUNC, mode)
        except FileExistsError:  # the kernel thought the name free; someone made it meanwhile
            if flags & os.O_EXCL:
                raise
            made = False
            fd = self._as_caller(self._open_lower, lower, (flags | os.O_CREAT) & ~os.O_TRUNC, mode)
        st = os.fstat(fd)
        fh = self.io.add(fd, lower, st, append=bool(flags & os.O_APPEND))
        if made and inherits and access is not None:
            self.xattrs.write_acl(path, fd, True, posix_acl.ACCESS, access)
        elif made:
            self.io.files[st.st_dev, st.st_ino].no_xattrs = True
        if st.st_size:  # create on an existing file truncates it (O_TRUNC semantics)
            self.truncate(path, 0, fh)
        return fh

    def release(self, path: str, fh: int) -> int:
        h = self.io.handles.get(fh)
        if h is not None and self.pages is not None and self.io.take_written(h.key):
            self.pages.changed(path)  # rewritten by the fast path (fastwrite.py)
        self.io.release(fh)
        if self.hidden.opened_through:
            self.hidden.closed(fh)
        return 0

    # No flush: writes go straight to the lower file, so a close has nothing to report, and with
    # no flush operation libfuse answers FLUSH itself (the kernel then stops sending it) instead
    # of a round trip into Python for every close.

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        h = self.io.get(fh)
        (os.fdatasync if datasync else os.fsync)(h.fd)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        out = bytearray(size)
        n = self.read_into(path, memoryview(out), offset, fh)
        return bytes(out[:n])

    def read_into(self, path: str, dest: memoryview, offset: int, fh: int) -> int:
        """Read into ``dest`` (FUSE's own buffer on the mount's read path); returns bytes read."""
        return self.io.read_into(self.io.get(fh), dest, offset)

    def write(self, path: str, data: bytes | memoryview, offset: int, fh: int) -> int:
        self._writable()
        h = self.io.get(fh)
        if self.kill_requested():
            drop_setid(h.fd)
        n = self.io.write(h, memoryview(data), offset)
        self._changed(h.key, path, content=True)
        return n

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        self._check(path, write=True)
        self._writable()
        if length > MAX_FILE_SIZE:
            raise os_error(errno.EFBIG)
        if fh is None:
            fh = self.open(path, os.O_WRONLY)
            try:
                return self.truncate(path, length, fh)
            finally:
                self.release(path, fh)
        h = self.io.get(fh)
        if self.kill_requested():  # a truncate, or an open with O_TRUNC
            drop_setid(h.fd)
        self.io.truncate(h, length)
        self._changed(h.key, path, content=True)
        return 0

    def fallocate(self, path: str, mode: int, offset: int, length: int, fh: int) -> int:
        """fallocate(2) as fileio.FileIO.allocate serves it; collapsing, inserting and unsharing
        ranges would move blocks to new numbers: EOPNOTSUPP (logged once)."""
        self._writable()
        if not self.io.supports(mode):
            self._unsupported(f"fallocate mode {mode:#x}")
            raise os_error(errno.EOPNOTSUPP)
        h = self.io.get(fh)
        self.io.allocate(h, mode, offset, length)
        self._changed(h.key, path, content=True)
        return 0

    def lseek(self, path: str, offset: int, whence: int, fh: int) -> int:
        """SEEK_DATA and SEEK_HOLE (the kernel answers the other whences itself)."""
        return self.io.seek(self.io.get(fh), offset, whence)

    def ioctl(self, path: str, cmd: int, arg: Any, fh: int, flags: int, data: Any) -> int:
        """No ioctl is supported (file attributes, FIEMAP and the like would describe the lower
        file): ENOTTY, as ext4 answers an ioctl it does not know."""
        self._unsupported(f"ioctl {cmd:#x}")
        raise os_error(errno.ENOTTY)

    def _unsupported(self, what: str) -> None:
        self._unsupported_log(logging.WARNING, what, "%s is not supported (answered with an error)", what)
