"""The mount's operations: plaintext paths and requests translated onto the lower volume
through the layers below: names (resolver.py, names.py), file content (fileio.py), extended
attributes (xattrs.py), lower entries reached without symlinks (beneath.py), access rules
(acl.py) and callers' credentials (creds.py).  Path-based (mfusepy on libfuse3); every failure
leaves as an OSError carrying ext4's errno, which the front end (fuse_front.py) answers with.

Concurrency: libfuse calls in from several threads; fileio.py holds a file's lock around every
operation on its content.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator
from typing import Any

from strongroom.fs import content, durable, names
from strongroom.fs import xattrs as xattrs_mod
from strongroom.fs.beneath import Beneath
from strongroom.fs.config import CONFIG
from strongroom.fs.creds import CallerCredentials
from strongroom.fs.fileio import MAX_FILE_SIZE, MAX_REQUEST, FileIO, os_error
from strongroom.fs.keys import VolumeKeys
from strongroom.fs.links import HardLinkNames, Key
from strongroom.fs.resolver import CACHE_ENTRIES, Resolver
from strongroom.fs.volume import write_diriv
from strongroom.fs.xattrs import XattrCipher

log = logging.getLogger("strongroom.fs")

# The preferred I/O size programs read from stat: cp and stdio size their buffers by it, and each
# write through FUSE is a round trip (no writeback cache here).  With the lower file's 4 KiB, cp
# copied in 128 KiB writes; the largest request the mount takes makes the fewest round trips.
BLKSIZE = MAX_REQUEST
# utimensat(2)'s special nanosecond values, which libfuse passes through in a SETATTR's times
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
# What mknod may make: regular files, FIFOs, sockets, and device nodes (the kernel lets only
# callers with CAP_MKNOD ask for those, as on ext4)
_MKNOD_TYPES = frozenset({stat.S_IFREG, stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK})
# The name libfuse's path-based API moves a file to when it is unlinked (or renamed over) while
# open, so it can still address it by path (fuse.c, hidden_name).  The daemon unlinks the lower
# file at once instead, as ext4 would, and serves that name from a descriptor (see rename).
_HIDDEN = re.compile(r"\.fuse_hidden[0-9a-f]{16}")


_SYS_FCHMODAT2 = 452  # Linux 6.6+, x86-64 and arm64 alike
_AT_FDCWD_ = -100
_AT_SYMLINK_NOFOLLOW_ = 0x100
_fchmodat2: Any = ctypes.PyDLL(None, use_errno=True).syscall  # microseconds: holds the GIL (see utimensat)
_has_fchmodat2 = True


def _chmod_nofollow(dir_fd: int, name: str, mode: int) -> None:
    """chmod of the lower entry itself, never of what a symlink there points to: fchmodat2 with
    AT_SYMLINK_NOFOLLOW (a symlink answers EOPNOTSUPP, as on ext4), or on older kernels the
    entry pinned by an O_PATH descriptor and changed through it (a symlink answers ELOOP)."""
    global _has_fchmodat2
    if _has_fchmodat2:
        if _fchmodat2(_SYS_FCHMODAT2, dir_fd, os.fsencode(name), mode, _AT_SYMLINK_NOFOLLOW_) == 0:
            return
        err = ctypes.get_errno()
        if err != errno.ENOSYS:
            raise os_error(err)
        _has_fchmodat2 = False
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise os_error(errno.ELOOP)
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


def _never() -> int:
    return 0


def _ignore(_: str) -> None:
    return None


def _drop_setid(fd: int) -> None:
    """Clear set-user-ID, and set-group-ID on a group-executable file, as the kernel does when a
    caller without CAP_FSETID writes or truncates a file."""
    mode = os.fstat(fd).st_mode
    drop = stat.S_ISUID | (stat.S_ISGID if mode & stat.S_IXGRP else 0)
    if mode & drop:
        os.fchmod(fd, stat.S_IMODE(mode) & ~drop)


_CAP_FSETID = 4  # linux/capability.h


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


# utimensat is called holding the GIL: it takes microseconds, and a CDLL call would drop and retake
# the GIL around it (a tar extract sets the times of every file it makes)
_utimensat = ctypes.PyDLL(None, use_errno=True).utimensat
_utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Timespec), ctypes.c_int]


def _kind(entry: os.DirEntry[str]) -> int:
    """A listed entry's file type, from its directory entry (a stat only for special files)."""
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    if entry.is_symlink():
        return stat.S_IFLNK
    if entry.is_file(follow_symlinks=False):
        return stat.S_IFREG
    try:
        return stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return stat.S_IFREG  # gone since it was listed: the lookup that follows says so


class VolumeOps:
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
        self.keys = keys
        self.read_only = read_only
        # Format version 2: a new directory's tweak is derived, not stored (FORMAT.md §6).
        self.derived_tweaks = derived_tweaks
        # Format version 3: blocks never written are holes in the lower file (FORMAT.md §5).
        self.holes = holes
        # Format version 4: an extended attribute's value is bound to its file (FORMAT.md §6).
        self.bound_xattrs = bound_xattrs
        self.names = names.NameCipher(keys.names, long_name_max)
        self.xattrs = XattrCipher(keys.xattr_names, keys.xattr_values)
        self.paths = Resolver(self.root, self.names, derived_tweaks, self._damage)
        self.io = FileIO(keys, holes, self._damage, self._rebind_xattrs if bound_xattrs else None)
        self._logged: set[tuple[str, int | None]] = set()
        self._unsupported_logged: set[str] = set()
        self.acl: Any = None  # an acl.Enforcer on mounts with access rules
        self.context: Any = None  # () -> (uid, gid, pid) of the FUSE request being served
        # Entries a request creates are made under the caller's uid and gid (creds.py); set by
        # the mount, where requests have a caller.
        self.creds: CallerCredentials | None = None
        # On a mount: the names of hard-linked files the kernel caches (links.py), and how to make
        # the kernel drop what it caches for one name.
        self.links: HardLinkNames | None = None
        self.invalidate: Callable[[str], object] = _ignore
        # libfuse's hidden name of an open, unlinked file -> the daemon's descriptor of it
        self._hidden: dict[str, int] = {}
        # () -> whether the kernel asked, with the request being served, for set-id bits to be
        # cleared; it asks only when the mount took that job over from it (fuseio.py)
        self.kill_requested: Callable[[], int] = _never
        self._self_pid = os.getpid()

    # -- access control ------------------------------------------------------------------
    def _check(self, path: str | None, write: bool = False) -> None:
        """EACCES unless the calling process may reach ``path`` (see acl.py)."""
        acl = self.acl
        if acl is None or path is None or self.context is None or not acl.active:
            return
        pid = self.context()[2]
        if pid in (0, self._self_pid):  # the kernel's own requests, the daemon's
            return
        if not acl.allowed(pid, path.lstrip("/"), write):
            raise os_error(errno.EACCES)

    def _as_caller(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a lower call that creates an entry as the caller (owner and group as ext4 gives
        them), on this thread only."""
        creds = self.creds
        if creds is None or self.context is None:
            return fn(*args, **kwargs)
        uid, gid, _ = self.context()
        return creds.run_as(uid, gid, fn, *args, **kwargs)

    # -- names: plaintext paths to lower ones (resolver.py) --------------------------------
    def _node(self, path: str) -> tuple[str | int, bool]:
        """(what a call addressed by path works on, whether that is a descriptor): the lower
        entry's path (a symlink itself, not followed), or, for a file unlinked while open, the
        daemon's descriptor of it."""
        if self._hidden:
            fd = self._hidden.get(path)
            if fd is not None:
                return fd, True
        return self.paths.lower(path), False

    @contextlib.contextmanager
    def _reach(self, path: str) -> Iterator[tuple[str | int, bool]]:
        """_node's answer, a lower path made safe to use (beneath.py) for the block's length."""
        node, is_fd = self._node(path)
        if is_fd:
            yield node, True
            return
        with self.beneath.path(str(node)) as entry:
            yield entry.path, False

    def _new_entry(self, path: str) -> tuple[str, str]:
        """(lower parent dir, lower name) for an entry about to be created; a long name's sidecar
        is written (and fsync'd) first, so the entry never exists without it."""
        lower_parent, name, full = self.paths.entry(path)
        if full is not None:
            self._write_sidecar(lower_parent, name, full)
        return lower_parent, name

    def _write_sidecar(self, lower_parent: str, name: str, full: str) -> None:
        with self.beneath.path(os.path.join(lower_parent, name + names.LONG_SUFFIX)) as at:
            fd = os.open(at.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400, dir_fd=at.dir_fd)
        try:
            os.write(fd, full.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def _remove_sidecar(self, lower_parent: str, name: str) -> None:
        if names.is_long(name):
            try:
                with self.beneath.path(os.path.join(lower_parent, name + names.LONG_SUFFIX)) as at:
                    os.unlink(at.name, dir_fd=at.dir_fd)
            except FileNotFoundError:
                pass

    def _damage(self, what: str, block: int | None, reason: str) -> None:
        key = (what, block)
        if key not in self._logged:
            if len(self._logged) >= CACHE_ENTRIES:  # memory stays bounded on a badly damaged volume
                self._logged.clear()
            self._logged.add(key)
            where = f" block {block}" if block is not None else ""
            log.error("damaged: %s%s: %s", what, where, reason)

    # -- attributes ----------------------------------------------------------------------
    def _reported_size(self, st: os.stat_result, lower: str) -> int:
        """The size a stat of the plaintext reports, from the lower entry's stat."""
        if stat.S_ISREG(st.st_mode):
            try:
                return content.plain_size(st.st_size)
            except content.DamagedFile as e:
                # A size no valid file has: reported as the lower size, so a reader's requests
                # reach the daemon and fail with EIO (size 0 would read as an empty file).
                self._damage(lower, e.block, str(e))
                return st.st_size
        if stat.S_ISLNK(st.st_mode):
            try:
                return len(self._read_link(lower))
            except OSError:
                return 0
        return st.st_size

    def plain_stat(self, path: str, fh: int | None = None) -> tuple[os.stat_result, int]:
        """(the lower entry's stat, the plaintext size) of a path or an open file: what getattr
        reports, in the form the mount packs straight into libfuse's struct stat."""
        if fh is None and path != "/":
            self._check(path)
        if fh is not None and fh in self.io.handles:
            h = self.io.handles[fh]
            st = os.fstat(h.fd)
            return st, self._reported_size(st, h.path)
        if self._hidden and path in self._hidden:
            st = os.fstat(self._hidden[path])
            return st, self._reported_size(st, path)
        lower = self.paths.lower(path)
        st = os.lstat(lower)
        if st.st_nlink > 1 and self.links is not None and not stat.S_ISDIR(st.st_mode):
            self.links.seen((st.st_dev, st.st_ino), path)
        return st, self._reported_size(st, lower)

    def _changed(self, key: Key | None, *through: str | None) -> None:
        """A file changed through the names ``through``: the kernel drops what it caches for its
        other names (hard links).  Called holding no lock: the kernel may wait for a request on
        one of those names to be answered first."""
        links = self.links
        if links is None or key is None or key not in links.files:  # one name: nothing to tell
            return
        for other in links.others(key, *(p for p in through if p is not None)):
            self.invalidate(other)

    def _changed_path(self, path: str) -> None:
        if self.links is not None:
            self._changed(self.links.key_of(path), path)

    @staticmethod
    def attrs(st: os.stat_result, size: int) -> dict[str, Any]:
        return {
            "st_mode": st.st_mode,
            "st_ino": st.st_ino,
            "st_nlink": st.st_nlink,
            "st_uid": st.st_uid,
            "st_gid": st.st_gid,
            "st_size": size,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
            "st_blocks": st.st_blocks,
            "st_blksize": BLKSIZE,
            "st_rdev": st.st_rdev,
        }

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        return self.attrs(*self.plain_stat(path, fh))

    def access(self, path: str, amode: int) -> int:
        self._check(path, write=bool(amode & os.W_OK))
        if amode & os.W_OK and self.read_only:
            raise os_error(errno.EROFS)
        if not os.access(self.paths.lower(path), amode, follow_symlinks=False):
            raise os_error(errno.EACCES)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._check(path, write=True)
        self._writable()
        node, is_fd = self._node(path)
        if is_fd:
            os.chmod(node, mode)
        else:
            with self.beneath.path(str(node)) as at:
                _chmod_nofollow(at.dir_fd, at.name, mode)
        self._changed_path(path)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._check(path, write=True)
        self._writable()
        node, is_fd = self._node(path)
        if is_fd:
            os.chown(node, uid, gid)
        else:
            with self.beneath.path(str(node)) as at:
                os.chown(at.name, uid, gid, dir_fd=at.dir_fd, follow_symlinks=False)
        self._changed_path(path)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        """Set (atime, mtime) in nanoseconds; None sets both to now."""
        if times is None:
            return self.set_times(path, (0, UTIME_NOW), (0, UTIME_NOW))
        return self.set_times(path, divmod(times[0], 1_000_000_000), divmod(times[1], 1_000_000_000))

    def set_times(self, path: str, atime: tuple[int, int], mtime: tuple[int, int]) -> int:
        """utimensat(2) on the lower entry with (seconds, nanoseconds) pairs as the caller gave
        them: a nanosecond value of UTIME_NOW or UTIME_OMIT means what it means there."""
        self._check(path, write=True)
        self._writable()
        node, is_fd = self._node(path)
        if atime[1] not in (UTIME_NOW, UTIME_OMIT) and mtime[1] not in (UTIME_NOW, UTIME_OMIT):
            # the common case (tar, cp -p, rsync) needs no ctypes call: os.utime takes nanoseconds
            ns = (atime[0] * 1_000_000_000 + atime[1], mtime[0] * 1_000_000_000 + mtime[1])
            if is_fd:
                os.utime(node, ns=ns)
            else:
                with self.beneath.path(str(node)) as at:
                    os.utime(at.name, ns=ns, dir_fd=at.dir_fd, follow_symlinks=False)
        else:
            times = (_Timespec * 2)(_Timespec(*atime), _Timespec(*mtime))
            if is_fd:
                done = _utimensat(node, None, times, 0)
            else:
                with self.beneath.path(str(node)) as at:
                    done = _utimensat(at.dir_fd, os.fsencode(at.name), times, _AT_SYMLINK_NOFOLLOW)
            if done != 0:
                raise os_error(ctypes.get_errno())
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
        lower_dir, iv = self.paths.dir(path)
        with os.scandir(lower_dir) as it:
            for entry in it:
                n = entry.name
                if names.is_reserved(n) or (lower_dir == self.root and n.startswith(CONFIG)):
                    continue
                try:
                    if names.is_long(n):
                        with open(os.path.join(lower_dir, n + names.LONG_SUFFIX)) as f:
                            full = f.read()
                        if names.long_name(full) != n:
                            raise names.BadName("long-name sidecar does not match")
                        plain = self.paths.plain(full, iv)
                    else:
                        plain = self.paths.plain(n, iv)
                except (names.BadName, OSError) as e:
                    self._damage(os.path.join(lower_dir, n), None, f"name does not decrypt ({e})")
                    continue
                yield os.fsdecode(plain), entry, lower_dir

    def _dots(self, path: str) -> tuple[os.stat_result, os.stat_result]:
        lower_dir = self.paths.lower(path)
        here = os.lstat(lower_dir)
        return here, os.lstat(os.path.dirname(lower_dir)) if lower_dir != self.root else here

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        """Names with inode and type (from the lower dirents, no stat): with use_ino, an entry
        without an inode number would be hidden by readdir(3)."""
        out = []
        for plain, entry, _ in self._listing(path):
            out.append((plain, {"st_ino": entry.inode(), "st_mode": _kind(entry)}, 0))
        here, parent = self._dots(path)
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
            out.append((plain, f"{lower_dir}/{entry.name}", entry.inode(), _kind(entry)))
        lower_dir = self.paths.lower(path)
        parent = os.path.dirname(lower_dir) if lower_dir != self.root else lower_dir
        here, up = self._dots(path)
        return [(".", lower_dir, here.st_ino, here.st_mode), ("..", parent, up.st_ino, up.st_mode), *out]

    def entry_stat(self, lower: str, path: str) -> tuple[os.stat_result, int] | None:
        """A listed entry's (lower stat, plaintext size), as plain_stat gives them; None if it is
        gone since.  ``path``: its plaintext path, which the kernel caches from the listing."""
        try:
            st = os.lstat(lower)
        except FileNotFoundError:
            return None
        if st.st_nlink > 1 and self.links is not None and not stat.S_ISDIR(st.st_mode):
            self.links.seen((st.st_dev, st.st_ino), path)
        return st, self._reported_size(st, lower)

    def opendir(self, path: str) -> int:
        self._check(path)
        if not os.path.isdir(self.paths.lower(path)):
            raise os_error(errno.ENOTDIR)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._check(path, write=True)
        self._writable()
        lower_parent, parent_iv, name, full = self.paths.locate(path)
        if full is not None:
            self._write_sidecar(lower_parent, name, full)
        lower = f"{lower_parent}/{name}"
        if self.derived_tweaks:
            # The tweak is a function of the parent's and this entry's name: durable with the entry.
            with self.beneath.path(lower) as at:
                self._as_caller(os.mkdir, at.name, mode, dir_fd=at.dir_fd)
            iv = names.derived_diriv(parent_iv, name)
        else:
            with self.beneath.path(lower) as at:  # a daemon not run as root must write the tweak
                self._as_caller(os.mkdir, at.name, mode | 0o300, dir_fd=at.dir_fd)
            with self.beneath.directory(lower) as inside:
                iv = write_diriv(inside)  # durable before anything is created inside
            if mode & 0o300 != 0o300:  # keeping a set-group-ID bit inherited from the parent
                with self.beneath.path(lower) as at:
                    now = stat.S_IMODE(os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False).st_mode)
                    _chmod_nofollow(at.dir_fd, at.name, now & ~0o300 | mode & 0o300)
        self.paths.forget(path)
        self.paths.remember_dir(path, lower, iv)
        return 0

    def rmdir(self, path: str) -> int:
        self._check(path, write=True)
        self._writable()
        lower_parent, name, _ = self.paths.entry(path)
        lower = f"{lower_parent}/{name}"
        try:
            try:
                with self.beneath.path(lower) as at:
                    os.rmdir(at.name, dir_fd=at.dir_fd)
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                # A stored tweak is the only lower entry an empty plaintext directory may hold.
                with self.beneath.directory(lower) as inside:
                    if [n for n in os.listdir(inside) if n != names.DIRIV]:
                        raise os_error(errno.ENOTEMPTY) from None
                    iv = self.paths.stored_diriv(inside)
                    os.unlink(os.path.join(inside, names.DIRIV))
                try:
                    with self.beneath.path(lower) as at:
                        os.rmdir(at.name, dir_fd=at.dir_fd)
                except OSError:
                    if iv is not None:
                        with self.beneath.directory(lower) as inside:
                            write_diriv(inside, iv)  # put the same tweak back: the directory stays usable
                    raise
        finally:
            self.paths.forget(path)
            self.beneath.forget(lower)
        self._remove_sidecar(lower_parent, name)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        durable.fsync_dir(self.paths.lower(path))
        return 0

    # -- namespace -----------------------------------------------------------------------
    def unlink(self, path: str) -> int:
        self._check(path, write=True)
        self._writable()
        if self._hidden and path in self._hidden:  # the last close of a file unlinked while open
            os.close(self._hidden.pop(path))
            return 0
        lower_parent, name, _ = self.paths.entry(path)
        with self.beneath.path(f"{lower_parent}/{name}") as at:
            os.unlink(at.name, dir_fd=at.dir_fd)
        self._remove_sidecar(lower_parent, name)
        if self.links is not None:
            self._changed(self.links.removed(path))  # the other names' link count and ctime
        return 0

    def rename(self, old: str, new: str) -> int:
        self._check(old, write=True)
        self._check(new, write=True)
        self._writable()
        if self._hidden and old in self._hidden:
            raise os_error(errno.ENOENT)  # an unlinked file has no name to move
        if _HIDDEN.fullmatch(new.rpartition("/")[2]) and self._hide(old, new):
            return 0
        old_parent, old_name, _ = self.paths.entry(old)
        new_parent, new_name = self._new_entry(new)
        old_lower = f"{old_parent}/{old_name}"
        moves_dir = stat.S_ISDIR(os.lstat(old_lower).st_mode)
        new_lower = f"{new_parent}/{new_name}"
        if moves_dir and (old_parent, old_name) != (new_parent, new_name):
            self._keep_tweak(old, old_lower)
        try:
            try:
                self._rename_lower(old_lower, new_lower)
            except OSError as e:
                # An empty plaintext directory still holds its tweak, so the lower rename over it
                # fails (ENOTEMPTY on ext4, EEXIST on xfs): remove it as rmdir would (ENOTEMPTY if
                # it has entries), then move the source into its place, as gocryptfs does.
                if not moves_dir or e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                self.rmdir(new)
                self._rename_lower(old_lower, new_lower)
        finally:
            if moves_dir:  # every directory below moved too (and one may have been replaced)
                self.paths.forget()
                self.beneath.forget()
        if (old_parent, old_name) != (new_parent, new_name):
            self._remove_sidecar(old_parent, old_name)
        if self.links is not None:
            replaced = self.links.removed(new) if old != new else None
            self.links.renamed(old, new)
            self._changed(replaced)
        return 0

    def _rename_lower(self, old_lower: str, new_lower: str) -> None:
        with self.beneath.path(old_lower) as old, self.beneath.path(new_lower) as new:
            os.rename(old.name, new.name, src_dir_fd=old.dir_fd, dst_dir_fd=new.dir_fd)

    def _hide(self, path: str, hidden: str) -> bool:
        """libfuse moving an open file out of the way of an unlink (or of a rename over it):
        unlink the lower file now, as ext4 would (its listing, its directory's emptiness and its
        link count change at once), and serve ``hidden`` from a descriptor until libfuse's own
        unlink of that name at the last close.  False if ``path`` is no open file (a caller's own
        rename to such a name, done as asked)."""
        lower_parent, name, _ = self.paths.entry(path)
        lower = f"{lower_parent}/{name}"
        try:
            st = os.lstat(lower)
        except FileNotFoundError:
            return False
        key = (st.st_dev, st.st_ino)
        fd = self.io.descriptor_of(key)
        if fd is None:
            return False
        with self.beneath.path(lower) as at:
            os.unlink(at.name, dir_fd=at.dir_fd)
        self._remove_sidecar(lower_parent, name)
        self._hidden[hidden] = fd
        if self.links is not None:
            self._changed(self.links.removed(path))
        return True

    def _keep_tweak(self, path: str, lower: str) -> None:
        """Before a directory moves: a derived tweak would change with its name, so it is stored
        in the directory (durably) first, and every name inside stays readable."""
        if self.paths.stored_diriv(lower) is not None:
            return
        iv = self.paths.dir(path)[1]
        with self.beneath.directory(lower) as inside:
            try:
                write_diriv(inside, iv)
            except PermissionError:  # a directory without owner write access (a daemon not run as root)
                mode = stat.S_IMODE(os.stat(inside).st_mode)
                os.chmod(inside, mode | 0o300)
                try:
                    write_diriv(inside, iv)
                finally:
                    os.chmod(inside, mode)

    def link(self, target: str, source: str) -> int:
        """ln SOURCE TARGET."""
        self._check(target, write=True)
        self._check(source, write=True)
        self._writable()
        if self._hidden and source in self._hidden:
            raise os_error(errno.ENOENT)
        new_parent, new_name = self._new_entry(target)
        lower = f"{new_parent}/{new_name}"
        with self.beneath.path(self.paths.lower(source)) as src, self.beneath.path(lower) as dst:
            # a lower symlink is never followed
            os.link(src.name, dst.name, src_dir_fd=src.dir_fd, dst_dir_fd=dst.dir_fd, follow_symlinks=False)
        if self.links is not None:
            st = os.lstat(lower)
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
        header = content.FileHeader.fresh()
        plain = os.fsencode(source)
        sealed = header.encode(self.keys.kek, self.keys.volume_id) + content.FileCipher(header).seal(0, plain)
        encoded = base64.urlsafe_b64encode(sealed).rstrip(b"=")
        if len(encoded) > 4095:
            raise os_error(errno.ENAMETOOLONG)
        new_parent, new_name = self._new_entry(target)
        with self.beneath.path(f"{new_parent}/{new_name}") as at:
            self._as_caller(os.symlink, encoded, at.name, dir_fd=at.dir_fd)
        return 0

    def _read_link(self, lower: str) -> bytes:
        raw = os.readlink(lower)
        try:
            sealed = names.unb64u(raw)
            header = content.FileHeader.decode(sealed[: content.HEADER], self.keys.kek, self.keys.volume_id)
            return content.FileCipher(header).open(0, sealed[content.HEADER :])
        except (ValueError, content.DamagedFile) as e:
            self._damage(lower, None, f"symlink target does not decrypt ({e})")
            raise os_error(errno.EIO) from None

    def readlink(self, path: str) -> str:
        self._check(path)
        return os.fsdecode(self._read_link(self.paths.lower(path)))

    def mknod(self, path: str, mode: int, dev: int) -> int:
        self._check(path, write=True)
        self._writable()
        if stat.S_IFMT(mode) not in _MKNOD_TYPES:
            raise os_error(errno.EINVAL)
        lower_parent, name = self._new_entry(path)
        with self.beneath.path(f"{lower_parent}/{name}") as at:
            self._as_caller(os.mknod, at.name, mode, dev, dir_fd=at.dir_fd)
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

    def open(self, path: str, flags: int) -> int:
        self._check(path, write=flags & os.O_ACCMODE != os.O_RDONLY or bool(flags & os.O_TRUNC))
        node, is_fd = self._node(path)
        lower = f"/proc/self/fd/{node}" if is_fd else str(node)  # reopened through /proc when unlinked
        fd = self._open_lower(lower, flags, follow=is_fd)  # /proc/self/fd/N is a (trusted) magic link
        st = os.fstat(fd)
        fh = self.io.add(fd, lower, st, append=bool(flags & os.O_APPEND))
        if flags & os.O_APPEND and st.st_nlink > 1:
            self.io.handles[fh].direct_io = True
        if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
            if self.kill_requested is _never and st.st_mode & (stat.S_ISUID | stat.S_ISGID) and self._caller_lacks_fsetid():
                _drop_setid(fd)
            self.truncate(path, 0, fh)
        return fh

    def _caller_lacks_fsetid(self) -> bool:
        """Whether the process behind the request being served lacks CAP_FSETID.  Asked only when
        the kernel has kept the clearing of set-id bits (no set-id shim, fuseio.py): it then clears
        them for writes and truncates, but not for an open with O_TRUNC, which libfuse's atomic
        O_TRUNC leaves to the file system.  A caller that cannot be read (gone) lacks it."""
        if self.context is None:
            return False
        pid = self.context()[2]
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"CapEff:"):
                        return not int(line.split()[1], 16) & (1 << _CAP_FSETID)
        except (OSError, ValueError, IndexError):
            pass
        return True

    def direct_io(self, fh: int) -> bool:
        """Whether the kernel should serve this open file without its page cache."""
        h = self.io.handles.get(fh)
        return h is not None and h.direct_io

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        self._check(path, write=True)
        self._writable()
        lower_parent, name = self._new_entry(path)
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
        if made:
            self.io.files[st.st_dev, st.st_ino].no_xattrs = True
        if st.st_size:  # create on an existing file truncates it (O_TRUNC semantics)
            self.truncate(path, 0, fh)
        return fh

    def release(self, path: str, fh: int) -> int:
        self.io.release(fh)
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
            _drop_setid(h.fd)
        n = self.io.write(h, memoryview(data), offset)
        self._changed(h.key, path)
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
            _drop_setid(h.fd)
        self.io.truncate(h, length)
        self._changed(h.key, path)
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
        self._changed(h.key, path)
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
        if what not in self._unsupported_logged:
            if len(self._unsupported_logged) >= 256:  # bounded, whatever callers try
                self._unsupported_logged.clear()
            self._unsupported_logged.add(what)
            log.warning("%s is not supported (answered with an error; logged once)", what)

    # -- extended attributes -------------------------------------------------------------
    def _xattr_binding(self, path: str, node: str | int, is_fd: bool) -> bytes | None:
        """What the entry's attribute values are bound to (None before format version 4)."""
        if not self.bound_xattrs:
            return None
        st = os.fstat(node) if is_fd else os.lstat(node)  # type: ignore[arg-type]
        if stat.S_ISDIR(st.st_mode):
            return xattrs_mod.dir_binding(self.paths.dir(path)[1])
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return xattrs_mod.EMPTY  # (the lower file system keeps user attributes off the others)
        if is_fd:
            raw = os.pread(node, content.HEADER, 0)  # type: ignore[arg-type]
        else:
            fd = os.open(str(node), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                raw = os.pread(fd, content.HEADER, 0)
            finally:
                os.close(fd)
        try:
            return xattrs_mod.header_binding(raw)
        except content.DamagedFile as e:
            self._damage(path, None, str(e))
            raise os_error(errno.EIO) from None

    def _rebind_xattrs(self, fd: int, old: bytes, new: bytes) -> None:
        """Seal the file's attribute values to ``new`` (it gained or lost its file id)."""
        for lower_name in os.listxattr(fd):
            if not lower_name.startswith(xattrs_mod.PREFIX):
                continue
            try:
                value = self.xattrs.open_value(lower_name, os.getxattr(fd, lower_name), old)
            except Exception:  # noqa: BLE001, S112 - a value that did not open stays damaged
                continue
            os.setxattr(fd, lower_name, self.xattrs.seal_value(lower_name, value, new))

    def setxattr(self, path: str, name: str, value: bytes, options: int, position: int = 0) -> int:
        self._check(path, write=True)
        self._writable()
        try:
            lower_name = self.xattrs.lower_name(name)
        except names.BadName:
            raise os_error(errno.ENOTSUP) from None
        self.io.attributes_changed()  # rare: every file's first write looks for values again
        with self._reach(path) as (node, is_fd):
            sealed = self.xattrs.seal_value(lower_name, value, self._xattr_binding(path, node, is_fd))
            os.setxattr(node, lower_name, sealed, options, follow_symlinks=is_fd)
        self._changed_path(path)
        return 0

    def getxattr(self, path: str, name: str, position: int = 0) -> bytes:
        self._check(path)
        try:
            lower_name = self.xattrs.lower_name(name)
        except names.BadName:
            raise os_error(errno.ENODATA) from None
        with self._reach(path) as (node, is_fd):
            sealed = os.getxattr(node, lower_name, follow_symlinks=is_fd)
            binding = self._xattr_binding(path, node, is_fd)
            for _ in range(2):  # again if a first write or a truncation rebound it meanwhile
                try:
                    return self.xattrs.open_value(lower_name, sealed, binding)
                except Exception:  # noqa: BLE001 - any failure to open is damage
                    again = self._xattr_binding(path, node, is_fd)
                    if again == binding:
                        break
                    sealed, binding = os.getxattr(node, lower_name, follow_symlinks=is_fd), again
        self._damage(path, None, f"attribute {lower_name} does not open here (damaged, or moved from another file)")
        raise os_error(errno.EIO)

    def listxattr(self, path: str) -> list[str]:
        self._check(path)
        out = []
        with self._reach(path) as (node, is_fd):
            lower_names = os.listxattr(node, follow_symlinks=is_fd)
        for lower_name in lower_names:
            if lower_name.startswith("user.sr."):
                try:
                    out.append(self.xattrs.plain_name(lower_name))
                except names.BadName:
                    continue
        return out

    def removexattr(self, path: str, name: str) -> int:
        self._check(path, write=True)
        self._writable()
        try:
            lower_name = self.xattrs.lower_name(name)
        except names.BadName:
            raise os_error(errno.ENODATA) from None
        with self._reach(path) as (node, is_fd):
            os.removexattr(node, lower_name, follow_symlinks=is_fd)
        self._changed_path(path)
        return 0
