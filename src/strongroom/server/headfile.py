"""The audit chain head mirrored in the data dir, so truncating the log in the database shows.

The file is one block: a line ``seq mac`` (settled), or ``seq mac prev_seq prev_mac`` while the
batch that takes the chain from ``prev`` to ``seq`` is being committed.  A batch writes its
pending line under the database's write lock, before the commit; after a crash the database
ends either at ``seq`` (the batch committed) or exactly at ``prev`` (it did not, and none of it
was answered); anything shorter is a truncated log.  An idle committer settles the line to
``seq mac``, so the batch answered last cannot be cut away either.

Durability costs one device flush per batch, not two: when the database is a file on the same
filesystem (SQLite), the line is written with O_DIRECT, so it sits in the device's cache when
the commit's own flush empties that cache to stable storage.  Otherwise (PostgreSQL, another
filesystem, no O_DIRECT) the caller flushes the line itself while the database commits.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

RECORD = 4096  # one aligned block, rewritten in place: no size change, no metadata to journal


@dataclass(frozen=True)
class Mirror:
    seq: int
    mac: bytes
    prev: tuple[int, bytes] | None = None  # set while the batch from prev to seq may be uncommitted


def _parse(raw: bytes) -> Mirror | None:
    fields = raw.decode().split()
    if not fields:
        return None
    if len(fields) == 2:
        return Mirror(int(fields[0]), bytes.fromhex(fields[1]))
    if len(fields) == 4:
        return Mirror(int(fields[0]), bytes.fromhex(fields[1]), (int(fields[2]), bytes.fromhex(fields[3])))
    raise ValueError("the audit head file is damaged")


def _open_direct(path: Path) -> tuple[int, bool]:
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_DIRECT, 0o600), True
    except OSError:  # a filesystem without O_DIRECT (tmpfs): buffered, flushed by the caller
        return os.open(path, flags, 0o600), False


class HeadFile:
    """The chain head mirrored in the data dir.  Each process opens its own descriptor, because
    flock excludes per open file, not per process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._pid = 0
        self._direct = False
        self._buf = mmap.mmap(-1, RECORD)  # page-aligned, as O_DIRECT needs

    def read(self) -> Mirror | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return _parse(raw)

    def _open(self) -> int:
        if self._pid != os.getpid():
            self._fd, self._direct = _open_direct(self.path)
            self._pid = os.getpid()
            try:
                self._initialize()
            except OSError as e:
                if not self._direct or e.errno != errno.EINVAL:
                    raise
                # O_DIRECT refused for this block size or alignment: buffered, and flushed by
                # the caller (covered_by answers False) instead of failing every batch.
                os.close(self._fd)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self._direct = False
                self._initialize()
        return self._fd

    def _initialize(self) -> None:
        """Read the line once, so that O_DIRECT is tried here; a file that is new or written by
        an older version becomes one allocated block, durably, before any batch relies on it."""
        self._read(self._fd)  # through O_DIRECT too: refused here, not in a batch
        if os.fstat(self._fd).st_size != RECORD:
            with _locked(self._fd):
                if os.fstat(self._fd).st_size != RECORD:
                    current = self._read(self._fd)
                    self._write(self._fd, current)
                    os.ftruncate(self._fd, RECORD)
                    os.fsync(self._fd)  # the block allocated and the size recorded, once

    def covered_by(self, database_file: str | None) -> bool:
        """Whether a commit flush of ``database_file`` also makes this file's writes durable."""
        fd = self._open()
        if not self._direct or not database_file:
            return False
        try:
            return os.stat(database_file).st_dev == os.fstat(fd).st_dev
        except OSError:
            return False

    def _read(self, fd: int) -> Mirror | None:
        n = os.preadv(fd, [self._buf], 0)
        return _parse(self._buf[:n])

    def _write(self, fd: int, m: Mirror | None) -> None:
        line = "" if m is None else f"{m.seq} {m.mac.hex()}" + (f" {m.prev[0]} {m.prev[1].hex()}" if m.prev else "")
        self._buf[:] = (line + "\n").encode().ljust(RECORD)
        os.pwritev(fd, [self._buf], 0)

    def advance(self, seq: int, mac: bytes, force: bool = False) -> None:
        """Settle the mirror at (seq, mac), never back unless ``force``, durably (init, restore)."""
        fd = self._open()
        with _locked(fd):
            current = self._read(fd)
            if not force and current is not None and current.seq >= seq and current.prev is None:
                return
            self._write(fd, Mirror(seq, mac))
            os.fdatasync(fd)

    def follow(self, seq: int, mac: bytes) -> bool:
        """Move a settled mirror forward to (seq, mac), the database's head, which other servers
        on the database may have written: this data dir then also sees a cut of their entries.
        Never back, never over a batch of this server's in flight; not flushed (the next flush
        carries it, and a lost write only narrows what is seen).  Whether it moved."""
        fd = self._open()
        with _locked(fd):
            current = self._read(fd)
            if current is not None and (current.prev is not None or current.seq >= seq):
                return False
            self._write(fd, Mirror(seq, mac))
            return True

    def begin(self, before: tuple[int, bytes], after: tuple[int, bytes]) -> None:
        """Record a batch about to commit.  The caller holds the database's write lock, so these
        writes land in commit order across processes.  Durable once the database's commit flush
        has run if ``covered_by`` the database file, otherwise once ``sync`` returns."""
        fd = self._open()
        with _locked(fd):
            self._write(fd, Mirror(after[0], after[1], before))

    def sync(self) -> None:
        os.fdatasync(self._open())

    def settle(self, seq: int, mac: bytes) -> None:
        """Drop the pending half of a committed batch, unless a later batch has begun since."""
        fd = self._open()
        with _locked(fd):
            current = self._read(fd)
            if current is None or current.prev is None or (current.seq, current.mac) != (seq, mac):
                return
            self._write(fd, Mirror(seq, mac))
            os.fdatasync(fd)


class _locked:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
