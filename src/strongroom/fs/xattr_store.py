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

from strongroom.fs import content, names, xattrs
from strongroom.fs.fileio import os_error
from strongroom.fs.resolver import Resolver

Node = str | int  # a lower path, or a descriptor


class XattrStore:
    def __init__(
        self, cipher: xattrs.XattrCipher, paths: Resolver, bound: bool, damage: Callable[[str, int | None, str], None]
    ) -> None:
        self.cipher = cipher
        self.paths = paths
        # Format version 4: an extended attribute's value is bound to its file (FORMAT.md §6).
        self.bound = bound
        self._damage = damage

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
        """A plaintext attribute name's lower name; OSError ``refused`` for a name outside user.*."""
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
