"""Extended attributes of a volume's lower entries: names and values sealed by xattrs.py and
kept as the lower entry's own ``user.sr.*`` attributes; each value bound (format version 4) to
the file it belongs to, read from the lower entry when it is set or read.  Entries are given as
the FUSE front reaches them (fuse_ops.py): a lower path made safe by beneath.py, or a
descriptor of a file unlinked while open.  Every failure is an OSError with ext4's errno.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from strongroom.fs import content, names, posix_acl, xattrs
from strongroom.fs.beneath import fits
from strongroom.fs.fileio import os_error
from strongroom.fs.resolver import Resolver

Node = str | int  # a lower path, or a descriptor
SetMode = Callable[[int], None]  # chmod of the entry at hand


class XattrStore:
    def __init__(
        self, cipher: xattrs.XattrCipher, paths: Resolver, bound: bool, damage: Callable[[str, int | None, str], None]
    ) -> None:
        self.cipher = cipher
        self.paths = paths
        # Format version 4: an extended attribute's value is bound to its file (FORMAT.md §6).
        self.bound = bound
        self._damage = damage
        self._defaults: dict[str, posix_acl.Entries | None] = {}  # directory -> its default ACL
        self.acls = False  # POSIX ACLs kept (the kernel negotiated FUSE_POSIX_ACL: mount.py)
        self._acl_lower = {name: cipher.lower_name(name) for name in posix_acl.NAMES}  # made once

    def binding(self, path: str, node: Node, is_fd: bool) -> bytes | None:
        """What the entry's attribute values are bound to (None before format version 4)."""
        if not self.bound:
            return None
        st = os.fstat(node) if is_fd else os.lstat(node)  # type: ignore[arg-type]
        if stat.S_ISDIR(st.st_mode):
            return xattrs.dir_binding(self.paths.dir(path)[1])
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return xattrs.EMPTY  # (the lower file system keeps user attributes off the others)
        if is_fd:
            raw = os.pread(node, content.HEADER, 0)  # type: ignore[arg-type]
        else:
            fd = os.open(str(node), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                raw = os.pread(fd, content.HEADER, 0)
            finally:
                os.close(fd)
        try:
            return xattrs.header_binding(raw)
        except content.DamagedFile as e:
            self._damage(path, None, str(e))
            raise os_error(errno.EIO) from None

    def rebind(self, fd: int, old: bytes, new: bytes) -> None:
        """Seal the file's attribute values to ``new`` (it gained or lost its file id)."""
        for lower_name in os.listxattr(fd):
            if not lower_name.startswith(xattrs.PREFIX):
                continue
            try:
                value = self.cipher.open_value(lower_name, os.getxattr(fd, lower_name), old)
            except Exception:  # noqa: BLE001, S112 - a value that did not open stays damaged
                continue
            os.setxattr(fd, lower_name, self.cipher.seal_value(lower_name, value, new))

    def lower_name(self, name: str, refused: int) -> str:
        """A plaintext attribute name's lower name; OSError ``refused`` for a name outside user.*
        (and the POSIX ACL names, where the kernel lets the mount take ACLs)."""
        if name in posix_acl.NAMES:
            if not self.acls:
                raise os_error(refused)
            return self._acl_lower[name]
        try:
            return self.cipher.lower_name(name)
        except names.BadName:
            raise os_error(refused) from None

    def set(self, path: str, node: Node, is_fd: bool, lower_name: str, value: bytes, options: int) -> None:
        sealed = self.cipher.seal_value(lower_name, value, self.binding(path, node, is_fd))
        os.setxattr(node, lower_name, sealed, options, follow_symlinks=is_fd)

    def get(self, path: str, node: Node, is_fd: bool, lower_name: str) -> bytes:
        sealed = os.getxattr(node, lower_name, follow_symlinks=is_fd)
        binding = self.binding(path, node, is_fd)
        for _ in range(2):  # again if a first write or a truncation rebound it meanwhile
            try:
                return self.cipher.open_value(lower_name, sealed, binding)
            except Exception:  # noqa: BLE001 - any failure to open is damage
                again = self.binding(path, node, is_fd)
                if again == binding:
                    break
                sealed, binding = os.getxattr(node, lower_name, follow_symlinks=is_fd), again
        self._damage(path, None, f"attribute {lower_name} does not open here (damaged, or moved from another file)")
        raise os_error(errno.EIO)

    def list(self, node: Node, is_fd: bool) -> list[str]:
        out = []
        for lower_name in os.listxattr(node, follow_symlinks=is_fd):
            if lower_name.startswith(xattrs.PREFIX):
                try:
                    out.append(self.cipher.plain_name(lower_name))
                except names.BadName:
                    continue
        return out

    def remove(self, node: Node, is_fd: bool, lower_name: str) -> None:
        os.removexattr(node, lower_name, follow_symlinks=is_fd)

    # -- POSIX ACLs (posix_acl.py): the kernel enforces them; they are kept here, encrypted --------
    def has(self, node: Node, is_fd: bool, name: str) -> bool:
        """Whether the entry carries the ACL ``name``: one lower call, asked before the careful
        path (beneath.py) since most entries have none.  Through a lower path someone swapped,
        it answers for another file, which can only send the caller the careful way or to
        "no ACL", never reveal a value."""
        if not is_fd and not fits(str(node)):
            return True  # deeper than one path can name: the careful path will tell
        try:
            os.getxattr(node, self._acl_lower[name], follow_symlinks=is_fd)
        except OSError:
            return False
        return True

    def read_acl(self, path: str, node: Node, is_fd: bool, name: str) -> posix_acl.Entries | None:
        try:
            return posix_acl.parse(self.get(path, node, is_fd, self.cipher.lower_name(name)))
        except OSError as e:
            if e.errno == errno.ENODATA:
                return None
            raise

    def write_acl(self, path: str, node: Node, is_fd: bool, name: str, entries: posix_acl.Entries | None) -> None:
        """Store an ACL (None, or one no more than a mode: none stored)."""
        if name == posix_acl.DEFAULT:
            self._defaults.pop(path, None)
        lower_name = self.cipher.lower_name(name)
        if entries is None or not entries or (name == posix_acl.ACCESS and posix_acl.is_minimal(entries)):
            try:
                self.remove(node, is_fd, lower_name)
            except OSError as e:
                if e.errno != errno.ENODATA:
                    raise
            return
        self.set(path, node, is_fd, lower_name, posix_acl.serialize(entries), 0)

    def set_acl(self, path: str, node: Node, is_fd: bool, name: str, value: bytes, set_mode: SetMode) -> None:
        """setfacl: the ACL stored, and for an access ACL the mode brought in step with it (the
        group class bits are its mask)."""
        entries = posix_acl.parse(value)
        st = os.fstat(node) if is_fd else os.lstat(node)  # type: ignore[arg-type]
        if name == posix_acl.DEFAULT and not stat.S_ISDIR(st.st_mode):
            raise os_error(errno.EACCES)
        if name == posix_acl.ACCESS and entries:
            mode = stat.S_IMODE(st.st_mode) & ~0o777 | posix_acl.mode_of(entries)
            if mode != stat.S_IMODE(st.st_mode):
                set_mode(mode)
        self.write_acl(path, node, is_fd, name, entries)

    def chmod_acl(self, path: str, node: Node, is_fd: bool, mode: int) -> None:
        """After a chmod: the access ACL, if there is one, says the new mode too."""
        entries = self.read_acl(path, node, is_fd, posix_acl.ACCESS)
        if entries:
            self.write_acl(path, node, is_fd, posix_acl.ACCESS, posix_acl.with_mode(entries, mode))

    def default_acl(self, directory: str) -> posix_acl.Entries | None:
        """A directory's default ACL (kept a while: asked at every create in it)."""
        if directory in self._defaults:
            return self._defaults[directory]
        lower = self.paths.lower(directory)
        try:
            found = self.read_acl(directory, lower, False, posix_acl.DEFAULT)
        except OSError:
            found = None
        if len(self._defaults) >= 4096:
            self._defaults.clear()
        self._defaults[directory] = found
        return found

    def forget_defaults(self) -> None:
        """Directories moved or removed: their default ACLs are read again."""
        self._defaults.clear()

    def new_entry_mode(self, path: str, mode: int, umask: Callable[[], int]) -> tuple[int, bool, posix_acl.Entries | None]:
        """(the mode a new entry gets, whether its directory has a default ACL, the access ACL it
        inherits, None if no more than a mode): the default ACL, or else the caller's umask (the
        kernel leaves both to the file system when it takes ACLs)."""
        default = self.default_acl(path.rpartition("/")[0] or "/")
        if not default:
            return mode & ~umask(), False, None
        access, inherited = posix_acl.inherit(default, mode)
        return inherited, True, None if posix_acl.is_minimal(access) else access

    def inherit(self, path: str, node: Node, access: posix_acl.Entries | None, directory: bool) -> None:
        """Give a new entry the ACLs its directory's default ACL says."""
        if access is not None:
            self.write_acl(path, node, False, posix_acl.ACCESS, access)
        if directory:
            self.write_acl(path, node, False, posix_acl.DEFAULT, self.default_acl(path.rpartition("/")[0] or "/"))
