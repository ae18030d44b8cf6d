"""The mount's extended-attribute operations (VolumeOps inherits them): user.* values and POSIX
ACLs, stored encrypted on the lower entry (xattr_store.py), reached like every other operation's
entry (fuse_ops.py's _node and _reach: a lower path, or the descriptor of a file unlinked while
open)."""

from __future__ import annotations

import errno
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from strongroom.fs import posix_acl
from strongroom.fs.fileio import FileIO, os_error
from strongroom.fs.xattr_store import XattrStore


class XattrOps:
    xattrs: XattrStore
    io: FileIO

    if TYPE_CHECKING:  # VolumeOps's

        def _check(self, path: str | None, write: bool = False) -> None: ...
        def _writable(self) -> None: ...
        def _node(self, path: str) -> AbstractContextManager[tuple[str | int, bool]]: ...
        def _reach(self, path: str) -> AbstractContextManager[tuple[str | int, bool]]: ...
        def _set_mode(self, path: str, mode: int) -> None: ...
        def _changed_path(self, path: str) -> None: ...

    # -- extended attributes -------------------------------------------------------------
    def setxattr(self, path: str, name: str, value: bytes, options: int, position: int = 0) -> int:
        self._check(path, write=True)
        self._writable()
        lower_name = self.xattrs.lower_name(name, errno.ENOTSUP)
        self.io.attributes_changed()  # rare: every file's first write looks for values again
        with self._reach(path) as (node, is_fd):
            if name in posix_acl.NAMES:
                self.xattrs.set_acl(path, node, is_fd, name, value, lambda m: self._set_mode(path, m))
            else:
                self.xattrs.set(path, node, is_fd, lower_name, value, options)
        self._changed_path(path)
        return 0

    def getxattr(self, path: str, name: str, position: int = 0) -> bytes:
        self._check(path)
        lower_name = self.xattrs.lower_name(name, errno.ENODATA)
        with self._node(path) as (node, is_fd):
            none = name in posix_acl.NAMES and not self.xattrs.has(node, is_fd, name)
        if none:
            raise os_error(errno.ENODATA)  # the common answer (ls -l asks of every entry), cheaply
        with self._reach(path) as (node, is_fd):
            return self.xattrs.get(path, node, is_fd, lower_name)

    def listxattr(self, path: str) -> list[str]:
        self._check(path)
        with self._reach(path) as (node, is_fd):
            return self.xattrs.list(node, is_fd)

    def removexattr(self, path: str, name: str) -> int:
        self._check(path, write=True)
        self._writable()
        lower_name = self.xattrs.lower_name(name, errno.ENODATA)
        with self._reach(path) as (node, is_fd):
            if name in posix_acl.NAMES:
                self.xattrs.write_acl(path, node, is_fd, name, None)
            else:
                self.xattrs.remove(node, is_fd, lower_name)
        self._changed_path(path)
        return 0
