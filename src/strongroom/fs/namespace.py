"""A volume's entries by plaintext path: make, remove, move and link lower entries, list
directories, set modes, owners and times, read symlinks.  Names are encrypted through the
resolver (resolver.py, names.py), every lower entry is reached without following symlinks
(beneath.py), and an entry is created through ``as_caller`` so that it gets its caller's owner
(creds.py on a mount).  Every failure is an OSError with ext4's errno.  Access rules, read-only
mounts, hard-link cache invalidation and libfuse's hidden names are the FUSE front's business
(fuse_ops.py), not this layer's.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from strongroom.fs import content, durable, keys, names, sidecar
from strongroom.fs.beneath import Beneath, fits
from strongroom.fs.config import CONFIG
from strongroom.fs.fileio import os_error
from strongroom.fs.keys import VolumeKeys
from strongroom.fs.resolver import Resolver
from strongroom.fs.volume import write_diriv

# utimensat(2)'s special nanosecond values, which libfuse passes through in a SETATTR's times
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
_AT_SYMLINK_NOFOLLOW = 0x100
# What mknod may make: regular files, FIFOs, sockets, and device nodes (the kernel lets only
# callers with CAP_MKNOD ask for those, as on ext4)
_MKNOD_TYPES = frozenset({stat.S_IFREG, stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK})
# The longest symlink target a lower file system takes (PATH_MAX less its NUL)
_LINK_MAX = 4095

_SYS_FCHMODAT2 = 452  # Linux 6.6+, x86-64 and arm64 alike
_fchmodat2: Any = ctypes.PyDLL(None, use_errno=True).syscall  # microseconds: holds the GIL (see utimensat)
_has_fchmodat2 = True


def _chmod_nofollow(name: str, mode: int, *, dir_fd: int) -> None:
    """chmod of the lower entry itself, never of what a symlink there points to: fchmodat2 with
    AT_SYMLINK_NOFOLLOW (a symlink answers EOPNOTSUPP, as on ext4), or on older kernels the
    entry pinned by an O_PATH descriptor and changed through it (a symlink answers ELOOP)."""
    global _has_fchmodat2
    if _has_fchmodat2:
        if _fchmodat2(_SYS_FCHMODAT2, dir_fd, os.fsencode(name), mode, _AT_SYMLINK_NOFOLLOW) == 0:
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


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


# utimensat is called holding the GIL: it takes microseconds, and a CDLL call would drop and retake
# the GIL around it (a tar extract sets the times of every file it makes)
_utimensat = ctypes.PyDLL(None, use_errno=True).utimensat
_utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Timespec), ctypes.c_int]


def entry_kind(entry: os.DirEntry[str]) -> int:
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


def _direct(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


class Namespace:
    """The entries of one volume, addressed by plaintext path."""

    def __init__(
        self,
        root: str,
        keys: VolumeKeys,
        paths: Resolver,
        beneath: Beneath,
        damage: Callable[[str, int | None, str], None],
        as_caller: Callable[..., Any] = _direct,
    ) -> None:
        self.root = root
        self.keys = keys
        self.paths = paths
        self.beneath = beneath
        # Format version 2: a new directory's tweak is derived, not stored (FORMAT.md §6).
        self.tweaks = paths.tweaks
        self._damage = damage
        # (fn, *args) -> fn(*args) run as the request's caller, for a call that makes an entry
        self.as_caller = as_caller

    # -- lower names ---------------------------------------------------------------------
    def new_entry(self, path: str) -> tuple[str, str]:
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

    # -- attributes ----------------------------------------------------------------------
    def reported_size(self, st: os.stat_result, lower: str) -> int:
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
                return len(self.read_link(lower))
            except OSError:
                return 0
        return st.st_size

    def set_mode(self, node: str | int, is_fd: bool, mode: int) -> None:
        """chmod of a lower entry (its path, or a descriptor of it), never through a symlink."""
        if is_fd:
            os.chmod(node, mode)
        else:
            self.beneath.at(str(node), _chmod_nofollow, mode)

    def set_owner(self, node: str | int, is_fd: bool, uid: int, gid: int) -> None:
        if is_fd:
            os.chown(node, uid, gid)
        else:
            self.beneath.at(str(node), os.chown, uid, gid, follow_symlinks=False)

    def set_times(self, node: str | int, is_fd: bool, atime: tuple[int, int], mtime: tuple[int, int]) -> None:
        """utimensat(2) on the lower entry with (seconds, nanoseconds) pairs as the caller gave
        them: a nanosecond value of UTIME_NOW or UTIME_OMIT means what it means there."""
        if atime[1] not in (UTIME_NOW, UTIME_OMIT) and mtime[1] not in (UTIME_NOW, UTIME_OMIT):
            # the common case (tar, cp -p, rsync) needs no ctypes call: os.utime takes nanoseconds
            ns = (atime[0] * 1_000_000_000 + atime[1], mtime[0] * 1_000_000_000 + mtime[1])
            if is_fd:
                os.utime(node, ns=ns)
            else:
                self.beneath.at(str(node), os.utime, ns=ns, follow_symlinks=False)
            return
        times = (_Timespec * 2)(_Timespec(*atime), _Timespec(*mtime))
        if is_fd:
            done = _utimensat(node, None, times, 0)
        else:
            with self.beneath.path(str(node)) as at:
                done = _utimensat(at.dir_fd, os.fsencode(at.name), times, _AT_SYMLINK_NOFOLLOW)
        if done != 0:
            raise os_error(ctypes.get_errno())

    # -- directories ---------------------------------------------------------------------
    def listing(self, path: str) -> Iterator[tuple[str, os.DirEntry[str], str]]:
        """(plain name, lower entry, lower dir) for each entry of a directory; an entry whose
        name does not decrypt is logged as damage and left out."""
        lower_dir, iv = self.paths.dir(path)
        # a directory deeper than one path can name is listed through a descriptor of its own
        with contextlib.ExitStack() as deep:
            where = lower_dir if fits(lower_dir) else deep.enter_context(self.beneath.directory(lower_dir))
            yield from self._entries(where, lower_dir, iv)

    def _entries(self, where: str, lower_dir: str, iv: bytes) -> Iterator[tuple[str, os.DirEntry[str], str]]:
        with os.scandir(where) as it:
            for entry in it:
                n = entry.name
                if names.is_reserved(n) or (lower_dir == self.root and n.startswith(CONFIG)):
                    continue
                try:
                    if names.is_long(n):
                        raw = sidecar.read_bounded(f"{where}/{n}{names.LONG_SUFFIX}", names.LONG_SIDECAR_MAX)
                        plain = self.paths.plain(names.sidecar_text(n, raw), iv, long=True)
                    else:
                        plain = self.paths.plain(n, iv)
                except (names.BadName, OSError) as e:
                    self._damage(os.path.join(lower_dir, n), None, f"name does not decrypt ({e})")
                    continue
                yield os.fsdecode(plain), entry, lower_dir

    def dots(self, path: str) -> tuple[os.stat_result, os.stat_result]:
        """The lower stats of a directory and of its parent (the root's parent is the root)."""
        lower_dir = self.paths.lower(path)
        here = self.beneath.call(lower_dir, os.lstat)
        return here, self.beneath.call(os.path.dirname(lower_dir), os.lstat) if lower_dir != self.root else here

    def mkdir(self, path: str, mode: int) -> None:
        lower_parent, parent_iv, name, full = self.paths.locate(path)
        if full is not None:
            self._write_sidecar(lower_parent, name, full)
        lower = f"{lower_parent}/{name}"
        if self.tweaks.derived:
            # The tweak is a function of the parent's and this entry's name: durable with the entry.
            with self.beneath.path(lower) as at:
                self.as_caller(os.mkdir, at.name, mode, dir_fd=at.dir_fd)
            iv = self.tweaks.derive(parent_iv, name)
        else:
            with self.beneath.path(lower) as at:  # a daemon not run as root must write the tweak
                self.as_caller(os.mkdir, at.name, mode | 0o300, dir_fd=at.dir_fd)
            with self.beneath.directory(lower) as inside:
                iv = write_diriv(inside)  # durable before anything is created inside
            if mode & 0o300 != 0o300:  # keeping a set-group-ID bit inherited from the parent
                with self.beneath.path(lower) as at:
                    now = stat.S_IMODE(os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False).st_mode)
                    _chmod_nofollow(at.name, now & ~0o300 | mode & 0o300, dir_fd=at.dir_fd)
        self.paths.forget(path)
        self.paths.remember_dir(path, lower, iv)

    def rmdir(self, path: str) -> None:
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
                own = (names.DIRIV, names.DIRIV + ".tmp")  # its tweak, and a replacement a crash left
                with self.beneath.directory(lower) as inside:
                    if [n for n in os.listdir(inside) if n not in own]:
                        raise os_error(errno.ENOTEMPTY) from None
                    kept = self.paths.stored_diriv(inside)
                    for n in own:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(inside, n))
                try:
                    with self.beneath.path(lower) as at:
                        os.rmdir(at.name, dir_fd=at.dir_fd)
                except OSError:
                    if kept is not None:
                        with self.beneath.directory(lower) as inside:
                            write_diriv(inside, kept)  # put the same tweak back: the directory stays usable
                    raise
        finally:
            self.paths.forget(path)
            self.beneath.forget(lower)
        self._remove_sidecar(lower_parent, name)

    def fsyncdir(self, path: str) -> None:
        self.beneath.call(self.paths.lower(path), durable.fsync_dir)

    # -- entries -------------------------------------------------------------------------
    def unlink(self, path: str) -> None:
        lower_parent, name, _ = self.paths.entry(path)
        with self.beneath.path(f"{lower_parent}/{name}") as at:
            os.unlink(at.name, dir_fd=at.dir_fd)
        self._remove_sidecar(lower_parent, name)

    def rename(self, old: str, new: str) -> None:
        old_parent, old_name, _ = self.paths.entry(old)
        new_parent, new_name = self.new_entry(new)
        old_lower = f"{old_parent}/{old_name}"
        moves_dir = stat.S_ISDIR(self.beneath.call(old_lower, os.lstat).st_mode)
        new_lower = f"{new_parent}/{new_name}"
        moved = moves_dir and (old_parent, old_name) != (new_parent, new_name)
        if moved:
            self._keep_tweak(old, old_lower, new)
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
        except OSError:
            if moved and self.tweaks.keyed:  # it stayed: valid at its old place alone again
                self.paths.forget()
                self._store_tweak(old_lower, self._tweak_record(old))
            raise
        finally:
            if moves_dir:  # every directory below moved too (and one may have been replaced)
                self.paths.forget()
                self.beneath.forget()
        if moved and self.tweaks.keyed:  # valid at the new place alone from now on
            self._store_tweak(new_lower, self._tweak_record(new))
        if (old_parent, old_name) != (new_parent, new_name):
            self._remove_sidecar(old_parent, old_name)

    def _rename_lower(self, old_lower: str, new_lower: str) -> None:
        with self.beneath.path(old_lower) as old, self.beneath.path(new_lower) as new:
            os.rename(old.name, new.name, src_dir_fd=old.dir_fd, dst_dir_fd=new.dir_fd)

    def _keep_tweak(self, path: str, lower: str, new: str) -> None:
        """Before a directory moves: a derived tweak would change with its name, so it is stored
        in the directory (durably) first, and every name inside stays readable.  From version 5
        the stored tweak is bound to its place: until the move is done it holds a tag for the
        old place and one for the new, so a crash on either side of the rename leaves it valid."""
        if not self.tweaks.keyed:
            if self.paths.stored_diriv(lower) is None:
                self._store_tweak(lower, self.paths.dir(path)[1], replace=False)
            return
        self._store_tweak(lower, self._tweak_record(path, also=new))

    def _tweak_record(self, path: str, also: str | None = None) -> bytes:
        iv = self.paths.dir(path)[1]
        _, parent_iv, name, _ = self.paths.locate(path)
        there = None
        if also is not None:
            _, new_parent_iv, new_name, _ = self.paths.locate(also)
            there = (new_parent_iv, new_name)
        return self.tweaks.record(iv, parent_iv, name, there)

    def _store_tweak(self, lower: str, record: bytes, replace: bool = True) -> None:
        def store(inside: str) -> None:
            if replace:
                durable.replace_file(Path(inside) / names.DIRIV, record, 0o400)
            else:
                write_diriv(inside, record)

        with self.beneath.directory(lower) as inside:
            try:
                store(inside)
            except PermissionError:  # a directory without owner write access (a daemon not run as root)
                mode = stat.S_IMODE(os.stat(inside).st_mode)
                os.chmod(inside, mode | 0o300)
                try:
                    store(inside)
                finally:
                    os.chmod(inside, mode)

    def link(self, target: str, source: str) -> str:
        """ln SOURCE TARGET; returns TARGET's lower path."""
        new_parent, new_name = self.new_entry(target)
        lower = f"{new_parent}/{new_name}"
        with self.beneath.path(self.paths.lower(source)) as src, self.beneath.path(lower) as dst:
            # a lower symlink is never followed
            os.link(src.name, dst.name, src_dir_fd=src.dir_fd, dst_dir_fd=dst.dir_fd, follow_symlinks=False)
        return lower

    def symlink(self, target: str, source: str) -> None:
        """ln -s SOURCE TARGET: the link TARGET holds SOURCE, encrypted as a file (FORMAT.md §5)."""
        header = content.FileHeader.fresh(self.keys.kind(keys.SYMLINK))
        plain = os.fsencode(source)
        sealed = header.encode(self.keys.kek, self.keys.volume_id) + content.FileCipher(header).seal(0, plain)
        encoded = base64.urlsafe_b64encode(sealed).rstrip(b"=")
        if len(encoded) > _LINK_MAX:
            raise os_error(errno.ENAMETOOLONG)
        new_parent, new_name = self.new_entry(target)
        with self.beneath.path(f"{new_parent}/{new_name}") as at:
            self.as_caller(os.symlink, encoded, at.name, dir_fd=at.dir_fd)

    def read_link(self, lower: str) -> bytes:
        """A lower symlink's plaintext target (EIO if it does not decrypt)."""
        raw = self.beneath.call(lower, os.readlink)
        try:
            sealed = names.unb64u(raw)
            header = content.FileHeader.decode(
                sealed[: content.HEADER], self.keys.kek, self.keys.volume_id, self.keys.kind(keys.SYMLINK)
            )
            return content.FileCipher(header).open(0, sealed[content.HEADER :])
        except (ValueError, content.DamagedFile) as e:
            self._damage(lower, None, f"symlink target does not decrypt ({e})")
            raise os_error(errno.EIO) from None

    def mknod(self, path: str, mode: int, dev: int) -> None:
        if stat.S_IFMT(mode) not in _MKNOD_TYPES:
            raise os_error(errno.EINVAL)
        lower_parent, name = self.new_entry(path)
        with self.beneath.path(f"{lower_parent}/{name}") as at:
            self.as_caller(os.mknod, at.name, mode, dev, dir_fd=at.dir_fd)
