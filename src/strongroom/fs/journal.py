"""The volume's journal of shrinks: the one change to a file that no ordering of lower calls can
make crash-safe by itself.

Cutting a file short inside a block means sealing that block again, shorter, in place, and then
cutting the lower file after it.  Between the two calls the block is neither the old one nor the
new one, and it holds bytes that may have been fsync'd long before: a daemon killed there would
leave them unreadable.  So the new block and the new size are recorded first, in one write of a
file of their own under `strongroom.journal/` at the volume's root, and the record is removed
once both calls are done.  Whoever opens the volume next (a mount, rotate, reencrypt) finishes
every recorded shrink before anything else (`replay`).  A record cut short by the crash was
written before the file was touched, and is dropped.

A record: MAGIC, then the lower file's inode number, the new lower size, the block's lower
offset (each 8 bytes, little-endian), the path's length (2 bytes), the lower path relative to
the root, and the sealed block.  Nothing in it is plaintext.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import struct

from strongroom.fs import sidecar
from strongroom.fs.beneath import Beneath
from strongroom.fs.names import b64u

DIR = "strongroom.journal"
MAGIC = b"strongroom/v1/shrink\x00"
_FIXED = struct.Struct("<QQQH")
RECORD_MAX = len(MAGIC) + _FIXED.size + 4096 + 4096 + 64  # a path of PATH_MAX, a sealed block
RECORDS_MAX = 4096  # a replay reads no more than this many

log = logging.getLogger("strongroom.fs")


_RECORD_NAME = re.compile(r"[A-Za-z0-9_-]{12}")  # b64u of 9 random bytes


def _directory(root: str, create: bool) -> int | None:
    """A descriptor of the journal directory (None if there is none), opened without following a
    symlink: whoever can write the lower directory could otherwise aim the replay's reads and
    unlinks, or the records, anywhere.  sidecar.UnsafeFile if it is anything but a directory."""
    path = f"{root}/{DIR}"
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except (NotADirectoryError, OSError) as e:
        if isinstance(e, NotADirectoryError) or e.errno == errno.ELOOP:
            raise sidecar.UnsafeFile(path, "is not a directory") from None
        raise


class Journal:
    def __init__(self, root: str) -> None:
        self.root = root

    def begin(self, lower: str, ino: int, offset: int, block: bytes, new_size: int) -> str | None:
        """Record a shrink of the lower file ``lower`` (a path under the root); the record's name,
        or None for a file with no name to record (unlinked while open: a crash loses it
        anyway)."""
        if not lower.startswith(self.root + "/"):
            return None
        rel = os.fsencode(lower[len(self.root) + 1 :])
        data = MAGIC + _FIXED.pack(ino, new_size, offset, len(rel)) + rel + block
        dir_fd = _directory(self.root, create=True)
        assert dir_fd is not None
        name = b64u(os.urandom(9))
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError:
                os.close(fd)
                os.unlink(name, dir_fd=dir_fd)
                raise
            os.close(fd)
        finally:
            os.close(dir_fd)
        return name

    def end(self, record: str | None) -> None:
        if record is None:
            return
        dir_fd = _directory(self.root, create=False)
        if dir_fd is not None:
            try:
                os.unlink(record, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)


def parse(data: bytes) -> tuple[int, int, int, str, bytes] | None:
    """(inode, new lower size, block offset, relative path, sealed block), or None for a record
    cut short by a crash (the shrink it announced never began)."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _FIXED.size:
        return None
    ino, new_size, offset, n = _FIXED.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _FIXED.size
    rel, block = data[start : start + n], data[start + n :]
    if len(rel) != n or not block or new_size != offset + len(block):
        return None
    return ino, new_size, offset, os.fsdecode(rel), block


def pending(root: str) -> list[str]:
    """What the journal directory holds (at most RECORDS_MAX names), as paths to show."""
    try:
        dir_fd = _directory(root, create=False)
    except OSError:
        return [f"{root}/{DIR}"]  # not a directory: fsck shows it
    if dir_fd is None:
        return []
    try:
        return [f"{root}/{DIR}/{n}" for n in sorted(os.listdir(dir_fd))[:RECORDS_MAX]]
    finally:
        os.close(dir_fd)


def replay(root: str) -> list[str]:
    """Finish every recorded shrink (the volume is held by the caller, inuse.py); returns what was
    done, one line each, for the log.  Names that are no record of this journal are left alone."""
    try:
        dir_fd = _directory(root, create=False)
    except OSError as e:
        return [f"{root}/{DIR}: {e.strerror}; no interrupted shrink finished"]
    if dir_fd is None:
        return []
    done: list[str] = []
    beneath = Beneath(root)
    try:
        for name in sorted(os.listdir(dir_fd))[:RECORDS_MAX]:
            if not _RECORD_NAME.fullmatch(name):
                done.append(f"{DIR}/{name}: no record of this journal; left alone")
                continue
            done.append(_replay_one(beneath, root, dir_fd, name))
    finally:
        os.close(dir_fd)
    return done


def _replay_one(beneath: Beneath, root: str, dir_fd: int, name: str) -> str:
    try:
        parsed = parse(sidecar.read_bounded(name, RECORD_MAX, dir_fd=dir_fd) or b"")
    except OSError as e:
        os.unlink(name, dir_fd=dir_fd)
        return f"{DIR}/{name}: unreadable record dropped ({e.strerror})"
    if parsed is None:
        os.unlink(name, dir_fd=dir_fd)
        return f"{DIR}/{name}: a record cut short (its shrink never began) dropped"
    ino, new_size, offset, rel, block = parsed
    try:
        fd = beneath.open(f"{root}/{rel}", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        os.unlink(name, dir_fd=dir_fd)
        return f"{rel}: gone since its shrink was recorded ({e.strerror}); record dropped"
    try:
        if os.fstat(fd).st_ino != ino:
            line = f"{rel}: another file since its shrink was recorded; record dropped"
        else:
            os.pwrite(fd, block, offset)
            os.ftruncate(fd, new_size)
            os.fsync(fd)
            line = f"{rel}: an interrupted shrink finished"
    finally:
        os.close(fd)
    os.unlink(name, dir_fd=dir_fd)
    return line
