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

import logging
import os
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


class Journal:
    def __init__(self, root: str) -> None:
        self.root = root
        self.dir = f"{root}/{DIR}"

    def begin(self, lower: str, ino: int, offset: int, block: bytes, new_size: int) -> str | None:
        """Record a shrink of the lower file ``lower`` (a path under the root); the record's path,
        or None for a file with no name to record (unlinked while open: a crash loses it
        anyway)."""
        if not lower.startswith(self.root + "/"):
            return None
        rel = os.fsencode(lower[len(self.root) + 1 :])
        data = MAGIC + _FIXED.pack(ino, new_size, offset, len(rel)) + rel + block
        try:
            os.mkdir(self.dir, 0o700)
        except FileExistsError:
            pass
        path = f"{self.dir}/{b64u(os.urandom(9))}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(28, os.strerror(28))
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return path

    @staticmethod
    def end(record: str | None) -> None:
        if record is not None:
            os.unlink(record)


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
    """The records under the root (at most RECORDS_MAX), oldest name first."""
    try:
        names = sorted(os.listdir(f"{root}/{DIR}"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [f"{root}/{DIR}/{n}" for n in names[:RECORDS_MAX]]


def replay(root: str) -> list[str]:
    """Finish every recorded shrink (the volume is held by the caller, inuse.py); returns what was
    done, one line each, for the log."""
    done: list[str] = []
    beneath = Beneath(root)
    for record in pending(root):
        try:
            parsed = parse(sidecar.read_bounded(record, RECORD_MAX) or b"")
        except OSError as e:
            done.append(f"{record}: unreadable record dropped ({e.strerror})")
            os.unlink(record)
            continue
        if parsed is None:
            done.append(f"{record}: a record cut short (its shrink never began) dropped")
            os.unlink(record)
            continue
        ino, new_size, offset, rel, block = parsed
        try:
            fd = beneath.open(f"{root}/{rel}", os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            done.append(f"{rel}: gone since its shrink was recorded ({e.strerror}); record dropped")
            os.unlink(record)
            continue
        try:
            if os.fstat(fd).st_ino != ino:
                done.append(f"{rel}: another file since its shrink was recorded; record dropped")
            else:
                os.pwrite(fd, block, offset)
                os.ftruncate(fd, new_size)
                os.fsync(fd)
                done.append(f"{rel}: an interrupted shrink finished")
        finally:
            os.close(fd)
        os.unlink(record)
    return done
