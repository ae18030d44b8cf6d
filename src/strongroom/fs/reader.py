"""Reading an unmounted volume: plaintext paths to plaintext bytes through the same layers the
mount uses (resolver.py for names, beneath.py to reach the lower file without symlinks,
fileio.py for content), for `strongroom fs cat` and backup scripts.  Every failure is an
OSError with the errno a read through the mount would give (ENOENT, EISDIR, ELOOP, EIO)."""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from strongroom.fs import names
from strongroom.fs.beneath import Beneath
from strongroom.fs.config import VolumeConfig
from strongroom.fs.fileio import MAX_REQUEST, FileIO, Handle
from strongroom.fs.keys import VolumeKeys
from strongroom.fs.resolver import Resolver

log = logging.getLogger("strongroom.fs")


class Unreadable(OSError):
    """A file that could be read only up to ``offset`` (a damaged block there)."""

    def __init__(self, code: int, offset: int) -> None:
        super().__init__(code, os.strerror(code))
        self.offset = offset


def _damage(what: str, block: int | None, reason: str) -> None:
    where = f" block {block}" if block is not None else ""
    log.error("damaged: %s%s: %s", what, where, reason)


class VolumeReader:
    """An unmounted volume, opened with its keys and its config (format version rules)."""

    def __init__(self, root: Path, keys: VolumeKeys, cfg: VolumeConfig) -> None:
        self.root = os.path.abspath(root)
        self._beneath = Beneath(self.root)
        cipher = names.NameCipher(keys.names, cfg.long_name_max)
        self.paths = Resolver(self.root, cipher, names.Tweaks(cfg.version, keys.dir_ids, keys.volume_id), _damage, self._beneath)
        self.io = FileIO(keys, cfg.holes, _damage)

    def close(self) -> None:
        self._beneath.close()

    def __enter__(self) -> VolumeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, path: str) -> PlainFile:
        """The regular file at plaintext ``path`` ("/dir/name"), open for reading."""
        if not path.startswith("/") or path == "/":
            raise OSError(errno.EINVAL, "a file's path inside the volume, from /", path)
        lower = self.paths.lower(path)
        fd = self._beneath.open(lower, os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
        except BaseException:
            os.close(fd)
            raise
        return PlainFile(self.io, self.io.add(fd, lower, st))


class PlainFile:
    """One open file of a VolumeReader."""

    def __init__(self, io: FileIO, fh: int) -> None:
        self._io = io
        self._fh = fh

    @property
    def _h(self) -> Handle:
        return self._io.get(self._fh)

    def size(self) -> int:
        return self._io.size(self._h)

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``offset`` (fewer at the end; b"" past it)."""
        out = bytearray(size)
        n = self._io.read_into(self._h, memoryview(out), offset)
        return bytes(out[:n])

    def copy_to(self, out: BinaryIO) -> int:
        """Write the whole plaintext to ``out``; returns its length.  A damaged block stops the
        copy after every byte before it was written (Unreadable says where)."""
        offset, step = 0, MAX_REQUEST
        while True:
            try:
                data = self.read(offset, step)
            except OSError as e:
                if step > 4096:  # find the first bad block: write everything before it
                    step = 4096
                    continue
                raise Unreadable(e.errno or errno.EIO, offset) from None
            if not data:
                return offset
            out.write(data)
            offset += len(data)

    def close(self) -> None:
        self._io.release(self._fh)

    def __enter__(self) -> PlainFile:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
