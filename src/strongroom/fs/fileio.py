"""File I/O of one volume: open lower files and the plaintext content in them (FORMAT.md §5).

The mount's content operations run on this (fuse_ops.py is the errno and namespace adapter
above it), and so does a reader of an unmounted volume (volume.VolumeReader): per lower inode,
its lock and its cipher; per open, a handle.  A read decrypts a whole request in one call; a
write plans its blocks (blockrange.py), seals them in one call, and puts them so that neither a
full disk nor a crash between two lower calls leaves a block half old (_put; a shrink into a
block is journalled, journal.py).

Concurrency: every operation on a file's content holds that file's lock (keyed by the lower
inode, so hard links share it), which makes each read-modify-write of a partial block atomic: a
reader never sees half a write.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strongroom.fs import blockrange, content, keys
from strongroom.fs import xattrs as xattrs_mod
from strongroom.fs.fastwrite import FastWrites, NativeFile
from strongroom.fs.journal import Journal
from strongroom.fs.keys import VolumeKeys

Key = tuple[int, int]  # (st_dev, st_ino) of a lower file

ZERO_PIECE = 1 << 20
MAX_REQUEST = 1 << 20  # FUSE requests are at most this large (mount.MAX_WRITE)
# A sequential reader of big requests has the lower file read this far ahead (see _read_ahead).
READ_AHEAD = 8 << 20
READ_AHEAD_PIECE = 512 << 10
SEQUENTIAL_MIN = 64 << 10
# The largest plaintext a file may hold: a file key seals at most MAX_BLOCKS_PER_KEY blocks
# (FORMAT.md §5).  A write or truncate past it answers EFBIG at once, as ext4 does past its own.
MAX_FILE_SIZE = content.MAX_BLOCKS_PER_KEY * content.BLOCK
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x01, 0x02, 0x10

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]

# (what, block or None, why): a damaged file or block met on the way (logged by the caller)
Damage = Callable[[str, "int | None", str], None]
# (descriptor, old binding, new binding): a file's attribute values must follow its new file id
Rebind = Callable[[int, bytes, bytes], None]


def os_error(code: int) -> OSError:
    """The OSError a system call failing with ``code`` raises (the mount answers its errno)."""
    return OSError(code, os.strerror(code))


def _fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    if length > 0 and _libc.fallocate(fd, mode, offset, length) != 0:
        raise os_error(ctypes.get_errno())


def _pwrite_all(fd: int, bufs: list[memoryview], offset: int) -> None:
    """One pwritev that must write everything: a short count is a full disk."""
    if os.pwritev(fd, bufs, offset) != sum(map(len, bufs)):
        raise os_error(errno.ENOSPC)


def _hole_in(fd: int, start: int, stop: int) -> bool:
    """Whether the lower range [start, stop) (inside the file) has a hole."""
    try:
        return os.lseek(fd, start, os.SEEK_HOLE) < stop
    except OSError:
        return False


def _seek(fd: int, offset: int, whence: int, size: int) -> int:
    """SEEK_DATA/SEEK_HOLE over a file with holes, from the lower file's own holes: a block is a
    hole only if its whole lower range lies in one (lower holes are in the lower file system's
    units, not aligned to the 4,124-byte blocks).  The last block is always data."""
    bs, cb = content.BLOCK, content.CBLOCK
    last = (size - 1) // bs
    k = offset // bs

    def lower_seek(pos: int, how: int) -> int:
        try:
            return os.lseek(fd, pos, how)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            return content.block_offset(last + 1)  # past the last block: nothing more

    if whence == os.SEEK_DATA:
        q = lower_seek(content.block_offset(k), os.SEEK_DATA)
        return max(offset, min(last, max(k, (q - content.HEADER) // cb)) * bs)
    pos = content.block_offset(k)
    while True:
        q = lower_seek(pos, os.SEEK_HOLE)
        j = max(k, -(-(q - content.HEADER) // cb))  # the first block starting in that hole
        if j >= last:
            return size
        r = lower_seek(content.block_offset(j), os.SEEK_DATA)
        if r >= content.block_offset(j + 1):
            return max(offset, j * bs)
        pos = max(r, content.block_offset(j) + 1)


@dataclass
class OpenFile:
    """What is kept per open lower inode: its lock and, once read, its header.  On a mount with
    the write fast path the lock is the file's state there (fastwrite.NativeFile), which is also
    told the file's key whenever it changes (``set_cipher``)."""

    lock: Any = field(default_factory=threading.RLock)
    native: NativeFile | None = None
    cipher: content.FileCipher | None = None
    opens: int = 0
    read_end: int = -1  # where the last read ended (plaintext): the next one there is sequential
    ahead: int = 0  # the lower file is asked into the page cache up to here
    # made by the daemon moments ago with no attribute set since: its first write need not look
    # for attribute values to bind to its new file id
    no_xattrs: bool = False

    def set_cipher(self, cipher: content.FileCipher | None) -> None:
        self.cipher = cipher
        if self.native is not None:
            self.native.publish(None, b"") if cipher is None else self.native.publish(cipher.key, cipher.file_id)


@dataclass
class Handle:
    fd: int
    key: Key
    path: str  # the lower path it was opened by (for damage reports)
    # Opened with O_APPEND: every write goes to the file's true end, whatever offset the kernel
    # sends (it computes it from its cached size for the name written through, which is stale
    # when another hard-link name grew the file).
    append: bool = False
    # Served without the kernel's page cache: an appender through one of several hard-link
    # names, whose writes land where the kernel does not expect them.
    direct_io: bool = False
    # The kernel may keep the pages it holds for the name opened (pagecache.py).
    keep_cache: bool = False


class FileIO:
    """The open lower files of one volume and their content.  ``holes``: blocks never written
    are holes (format version 3 on); ``rebind``: how a file's attribute values follow a change of
    its file id (format version 4 on; None before)."""

    def __init__(
        self, keys: VolumeKeys, holes: bool, damage: Damage, rebind: Rebind | None = None, journal: Journal | None = None
    ) -> None:
        self.keys = keys
        self.journal = journal  # where shrinks are recorded (journal.py); None for a reader
        self.holes = holes
        self._damage = damage
        self._rebind = rebind
        self._lock = threading.Lock()  # guards the tables below
        self.files: dict[Key, OpenFile] = {}
        self.handles: dict[int, Handle] = {}
        self._next_fh = 1
        self._tls = threading.local()
        # On a mount: the compiled path that rewrites whole blocks in place (fastwrite.py)
        self.fast: FastWrites | None = None

    # -- handles ---------------------------------------------------------------------------
    def add(self, fd: int, lower: str, st: os.stat_result | None = None, append: bool = False) -> int:
        """A handle for the open lower descriptor ``fd`` (closed at release)."""
        st = os.fstat(fd) if st is None else st
        key = (st.st_dev, st.st_ino)
        with self._lock:
            f = self.files.get(key)
            if f is None:
                native = self.fast.new_file() if self.fast is not None else None
                f = self.files[key] = OpenFile() if native is None else OpenFile(native, native)
            f.opens += 1
            fh = self._next_fh
            self._next_fh += 1
            self.handles[fh] = Handle(fd, key, lower, append)
        if self.fast is not None and f.native is not None and not append:
            self.fast.add(fh, fd, f.native)
        return fh

    def get(self, fh: int) -> Handle:
        h = self.handles.get(fh)
        if h is None:
            raise os_error(errno.EBADF)
        return h

    def release(self, fh: int) -> None:
        if self.fast is not None:  # first: returns once no fast write uses the descriptor or its file
            self.fast.remove(fh)
        with self._lock:
            h = self.handles.pop(fh, None)
            if h is None:
                return
            f = self.files.get(h.key)
            if f is not None:
                f.opens -= 1
                if f.opens <= 0:
                    del self.files[h.key]
        os.close(h.fd)

    def take_written(self, key: Key) -> bool:
        """Whether the fast path rewrote the open file ``key`` since the last call."""
        f = self.files.get(key)
        return f is not None and f.native is not None and f.native.take_written()

    def descriptor_of(self, key: Key) -> int | None:
        """A duplicate of an open descriptor of the lower file ``key`` (None if none is open)."""
        with self._lock:
            held = next((h.fd for h in self.handles.values() if h.key == key), None)
            return None if held is None else os.dup(held)

    def attributes_changed(self) -> None:
        """An attribute was set somewhere: every file's first write looks for values again."""
        with self._lock:
            for f in self.files.values():
                f.no_xattrs = False

    def _file(self, h: Handle) -> OpenFile:
        f = self.files.get(h.key)
        if f is None:
            raise os_error(errno.EBADF)
        return f

    # -- content ---------------------------------------------------------------------------
    def size(self, h: Handle) -> int:
        """The plaintext size of an open file (EIO for a lower size no valid file has)."""
        try:
            return content.plain_size(os.fstat(h.fd).st_size)
        except content.DamagedFile as e:
            self._damage(h.path, e.block, str(e))
            raise os_error(errno.EIO) from None

    def _cipher(self, h: Handle, f: OpenFile) -> content.FileCipher:
        """The cipher of a non-empty file, from its header (read once per open file)."""
        if f.cipher is not None:
            return f.cipher
        raw = os.pread(h.fd, content.HEADER, 0)
        try:
            header = content.FileHeader.decode(raw, self.keys.kek, self.keys.volume_id, self.keys.kind(keys.FILE))
        except content.DamagedFile as e:
            self._damage(h.path, None, str(e))
            raise os_error(errno.EIO) from None
        f.set_cipher(content.FileCipher(header))
        return f.cipher  # type: ignore[return-value]

    def _scratch(self, name: str, size: int) -> memoryview:
        """A per-thread buffer of at least ``size`` bytes, reused: fresh 1 MiB buffers per request
        cost more in page faults than the decryption."""
        buf = getattr(self._tls, name, None)
        if buf is None or len(buf) < size:
            buf = bytearray(max(size, content.sealed_size(MAX_REQUEST)))
            setattr(self._tls, name, buf)
        return memoryview(buf)

    def _hole_limit(self, size: int) -> int:
        """Blocks numbered below this may be holes: every block but a file's last, on a volume
        whose format allows holes (FORMAT.md §5)."""
        return (size - 1) // content.BLOCK if self.holes and size else 0

    def _open_blocks(self, h: Handle, cipher: content.FileCipher, first: int, last: int, out: memoryview, size: int) -> int:
        """Decrypt blocks first..last (those that exist) of a file of plaintext size ``size`` into
        ``out``; returns the bytes written."""
        raw = self._scratch("raw", (last - first + 1) * content.CBLOCK)[: (last - first + 1) * content.CBLOCK]
        n = os.preadv(h.fd, [raw], content.block_offset(first))
        try:
            return cipher.open_into(first, raw[:n], out, self._hole_limit(size))
        except content.DamagedFile as e:
            self._damage(h.path, e.block, str(e))
            raise os_error(errno.EIO) from None

    def read_into(self, h: Handle, dest: memoryview, offset: int) -> int:
        """Read into ``dest`` (FUSE's own buffer on the mount's read path); returns bytes read."""
        f = self._file(h)
        bs = content.BLOCK
        with f.lock:
            plain = self.size(h)
            end = min(plain, offset + len(dest))
            if offset >= end:
                return 0
            cipher = self._cipher(h, f)
            first, last = offset // bs, (end - 1) // bs
            sequential = offset == f.read_end and len(dest) >= SEQUENTIAL_MIN
            if sequential:
                self._read_ahead(h, f, content.block_offset(last + 1))
            f.read_end = end
            if offset % bs == 0 and (end % bs == 0 or end == plain):  # whole blocks: straight into dest
                n = self._open_blocks(h, cipher, first, last, dest[: end - offset], plain)
            else:
                tmp = self._scratch("plain", (last - first + 1) * bs)
                self._open_blocks(h, cipher, first, last, tmp, plain)
                skip = offset - first * bs
                n = end - offset
                dest[:n] = tmp[skip : skip + n]
            if sequential:  # its plaintext is in the kernel's cache now: the ciphertext need not be
                start = content.block_offset(first)
                os.posix_fadvise(h.fd, start, content.block_offset(last + 1) - start, os.POSIX_FADV_DONTNEED)
            return n

    def _read_ahead(self, h: Handle, f: OpenFile, lower_stop: int) -> None:
        """A sequential reader: keep the next READ_AHEAD bytes of the lower file on their way from
        the disk, whatever the disk's own read-ahead is (often 128 KiB, against the 1 MiB requests
        the kernel sends here), so the disk works while the blocks before are decrypted."""
        target = lower_stop + READ_AHEAD
        start = max(f.ahead, lower_stop)
        # The kernel reads at most the disk's largest request per call (often 512 KiB) and
        # silently drops the rest of a longer range: ask a piece at a time.
        while target - start >= READ_AHEAD_PIECE:
            os.posix_fadvise(h.fd, start, READ_AHEAD_PIECE, os.POSIX_FADV_WILLNEED)
            start += READ_AHEAD_PIECE
        f.ahead = start

    def write(self, h: Handle, data: memoryview, offset: int) -> int:
        """Write ``data`` at ``offset`` (at the end for an appending handle); returns its length."""
        f = self._file(h)
        with f.lock:
            size = self.size(h)
            if h.append:
                offset = size
            if offset + len(data) > MAX_FILE_SIZE:
                raise os_error(errno.EFBIG)
            if offset > size and not self.holes:
                size = self._grow(h, f, size, offset)
            self._write_at(h, f, data, offset, size)
        return len(data)

    def _grow(self, h: Handle, f: OpenFile, size: int, target: int) -> int:
        """Grow the file to ``target`` bytes of zeros; returns the new size.  With holes: the old
        last block is sealed at full length and the new last block written, and the blocks
        between are left as holes (nothing written).  Without (format versions 1 and 2): every
        new block is sealed zeros."""
        if self.holes:
            start = max(size, (target - 1) // content.BLOCK * content.BLOCK)
            self._write_at(h, f, memoryview(content.ZERO_BLOCK)[: target - start], start, size)
            return target
        return self._write_zeros(h, f, size, target, size)

    def _write_zeros(self, h: Handle, f: OpenFile, start: int, stop: int, size: int) -> int:
        """Seal zeros over [start, stop), a piece at a time; returns the new size."""
        zeros = memoryview(bytes(min(ZERO_PIECE, stop - start)))
        while start < stop:
            n = min(ZERO_PIECE, stop - start)
            self._write_at(h, f, zeros[:n], start, size)
            start += n
            size = max(size, start)
        return size

    def _write_at(self, h: Handle, f: OpenFile, data: memoryview, offset: int, size: int) -> None:
        """Write ``data`` at ``offset`` into the file, whose plaintext size is ``size``.  An offset
        past the end is for volumes with holes only: the old last block, if it was cut short, is
        sealed again at full length, and the blocks between are left as holes."""
        if not len(data):
            return
        bs = content.BLOCK
        plan = blockrange.plan_write(size, offset, len(data), bs)
        first = plan.first
        if size:
            cipher = self._cipher(h, f)
            header = None
        else:  # an empty file gets its header and file key with its first blocks
            fresh = content.FileHeader.fresh(self.keys.kind(keys.FILE))
            cipher, header = content.FileCipher(fresh), fresh.encode(self.keys.kek, self.keys.volume_id)
        pieces: list[tuple[int, memoryview]] = []  # (lower offset, sealed bytes)
        if plan.pad_block is not None:  # the old last block, cut short, must become whole
            pad = self._scratch("pad", bs)[:bs]
            got = self._open_blocks(h, cipher, plan.pad_block, plan.pad_block, pad, size)
            pad[got:] = content.ZERO_BLOCK[got:]
            sealed = self._scratch("padsealed", content.CBLOCK)
            pieces.append((content.block_offset(plan.pad_block), sealed[: cipher.seal_into(plan.pad_block, pad, sealed)]))
        if plan.merge:  # with the surviving plaintext around it
            n = plan.region_end - first * bs
            merged = self._scratch("merge", n)[:n]
            head = plan.head
            if plan.read_head:
                got = self._open_blocks(h, cipher, first, first, merged, size)
                merged[got:head] = content.ZERO_BLOCK[got:head]  # past the old end: zeros
            elif head:
                merged[:head] = content.ZERO_BLOCK[:head]
            if plan.read_tail is not None:
                self._open_blocks(h, cipher, plan.read_tail, plan.read_tail, merged[(plan.read_tail - first) * bs :], size)
            merged[head : head + len(data)] = data
            data = merged
        out = self._scratch("sealed", content.sealed_size(len(data)))
        pieces.append((content.block_offset(first), out[: cipher.seal_into(first, data, out)]))
        self._put(h, f, pieces, size, header, cipher)

    def _put(
        self,
        h: Handle,
        f: OpenFile,
        pieces: list[tuple[int, memoryview]],
        size: int,
        header: bytes | None,
        cipher: content.FileCipher,
    ) -> None:
        """Write sealed pieces (in file order) into the lower file (plaintext size ``size`` before
        them; a new file's ``header`` with them) so that the daemon killed between any two lower
        calls leaves every block that was there readable as it was (FILESYSTEM.md, "Crashes").
        When a piece rewrites a block across the old end, or fills holes (so the file has
        content, and no header is written), the room the pieces need is reserved first, so a
        full disk answers ENOSPC before anything is written; then each piece is one pwritev, in
        file order, so a block sealed again across the old end is replaced whole before anything
        extends the file past it.  Other writes (a new file's first blocks, new blocks past the
        end, blocks rewritten in place) need no room they do not have: _put_unreserved."""
        lower_end = content.lower_size(size)
        straddles = any(at < lower_end < at + len(buf) for at, buf in pieces)
        fills = self.holes and any(at < lower_end and _hole_in(h.fd, at, min(at + len(buf), lower_end)) for at, buf in pieces)
        if not (straddles or fills) or not self._reserve(h.fd, pieces, lower_end, fills):
            self._put_unreserved(h, f, pieces, lower_end, header)
        else:
            for at, buf in pieces:
                _pwrite_all(h.fd, [buf], at)
        f.set_cipher(cipher)
        if size == 0 and self._rebind is not None and not f.no_xattrs:  # the file has an id now: its attributes follow
            self._rebind(h.fd, xattrs_mod.EMPTY, xattrs_mod.file_binding(cipher.file_id))
        f.no_xattrs = False

    def _reserve(self, fd: int, pieces: list[tuple[int, memoryview]], lower_end: int, fills: bool) -> bool:
        """Reserve the lower room the pieces need (fallocate, keeping the size): what lies past
        the old end, and with ``fills`` (a piece fills holes) their ranges inside it too (already
        allocated ranges cost nothing more).  ENOSPC if there is none (nothing written); False
        where the lower file system cannot reserve (then _put_unreserved)."""
        for at, buf in pieces:
            end = at + len(buf)
            start = at if fills else max(at, lower_end)
            if start >= end:
                continue
            try:
                _fallocate(fd, FALLOC_FL_KEEP_SIZE, start, end - start)
            except OSError as e:
                if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
                    return False
                raise
        return True

    def _put_unreserved(
        self, h: Handle, f: OpenFile, pieces: list[tuple[int, memoryview]], lower_end: int, header: bytes | None
    ) -> None:
        """_put without reserving: what lies past the old end first, so that if the disk fills
        the file is cut back to its old end before anything was rewritten in place.  Crash-safe
        as _put for writes that rewrite no block across the old end; where one does (only on a
        lower file system that cannot reserve room), a crash between its two parts can leave that
        block unreadable (FILESYSTEM.md)."""
        beyond: list[tuple[int, memoryview]] = []
        inside: list[tuple[int, memoryview]] = []
        for at, buf in pieces:
            split = min(len(buf), max(0, lower_end - at))
            if split < len(buf):
                beyond.append((at + split, buf[split:]))
            if split:
                inside.append((at, buf[:split]))
        if header is not None:
            f.set_cipher(None)
        try:
            if header is not None:  # first (alone it is an empty file), with the first blocks if they follow it
                first = [beyond.pop(0)[1]] if beyond and beyond[0][0] == content.HEADER else []
                _pwrite_all(h.fd, [memoryview(header), *first], 0)
            for at, buf in beyond:
                _pwrite_all(h.fd, [buf], at)
        except OSError:
            os.ftruncate(h.fd, lower_end)
            raise
        for at, buf in inside:
            if os.pwritev(h.fd, [buf], at) != len(buf):
                raise os_error(errno.EIO)

    def truncate(self, h: Handle, length: int) -> None:
        if length > MAX_FILE_SIZE:
            raise os_error(errno.EFBIG)
        f = self._file(h)
        with f.lock:
            size = self.size(h)
            if length == 0:
                old = os.pread(h.fd, content.HEADER, 0) if size and self._rebind is not None else b""
                os.ftruncate(h.fd, 0)
                f.set_cipher(None)  # the next write makes a new header and file key
                if old and self._rebind is not None:  # no file id any more: its attributes are bound to emptiness
                    try:
                        self._rebind(h.fd, xattrs_mod.header_binding(old), xattrs_mod.EMPTY)
                    except content.DamagedFile:
                        pass  # a damaged header: its attributes stay unreadable, as before
            elif length > size:
                self._grow(h, f, size, length)
            elif length < size:
                cipher = self._cipher(h, f)
                last, keep = blockrange.shrink_plan(length, content.BLOCK)
                # the new last block is sealed again when it is cut short, or when it was a hole
                # (a file's last block never is one)
                if keep < content.BLOCK or self._is_hole(h, last, size):
                    block = self._scratch("plain", content.BLOCK)
                    self._open_blocks(h, cipher, last, last, block, size)
                    sealed, at, new_end = cipher.seal(last, block[:keep]), content.block_offset(last), content.lower_size(length)
                    # Cut short, the block is rewritten in place before the file is cut after it:
                    # recorded first, so a crash between the two is finished, never left torn.
                    record = None
                    if keep < content.BLOCK and self.journal is not None:
                        record = self.journal.begin(h.path, h.key[1], at, sealed, new_end)
                    os.pwrite(h.fd, sealed, at)
                    os.ftruncate(h.fd, new_end)
                    if self.journal is not None:
                        self.journal.end(record)
                else:
                    os.ftruncate(h.fd, content.lower_size(length))

    def _is_hole(self, h: Handle, index: int, size: int) -> bool:
        if index >= self._hole_limit(size):
            return False
        return os.pread(h.fd, content.CBLOCK, content.block_offset(index)) == content.ZERO_CBLOCK

    def supports(self, mode: int) -> bool:
        """Whether fallocate's ``mode`` can be served: allocation, ZERO_RANGE, and PUNCH_HOLE on
        volumes with holes (each with or without KEEP_SIZE).  Collapsing, inserting and unsharing
        ranges would move blocks to new numbers."""
        op = mode & ~FALLOC_FL_KEEP_SIZE
        return op in (0, FALLOC_FL_ZERO_RANGE) or (op == FALLOC_FL_PUNCH_HOLE and self.holes)

    def allocate(self, h: Handle, mode: int, offset: int, length: int) -> None:
        """fallocate(2) with a mode ``supports`` allows.  Allocation (mode 0): the lower range is
        reserved, and without KEEP_SIZE a file shorter than the range grows to it.  PUNCH_HOLE and
        ZERO_RANGE: the range reads as zeros from then on."""
        keep = bool(mode & FALLOC_FL_KEEP_SIZE)
        op = mode & ~FALLOC_FL_KEEP_SIZE
        end = offset + length
        if end > MAX_FILE_SIZE and not (keep or op == FALLOC_FL_PUNCH_HOLE):
            raise os_error(errno.EFBIG)
        f = self._file(h)
        with f.lock:
            size = self.size(h)
            if op != 0:
                self._zero(h, f, size, offset, min(end, size), op)
            if end > size and not keep and op != FALLOC_FL_PUNCH_HOLE:
                size = self._grow(h, f, size, end)
            if op == 0:
                start = content.block_offset(offset // content.BLOCK)
                _fallocate(h.fd, FALLOC_FL_KEEP_SIZE, start, content.block_offset((end - 1) // content.BLOCK + 1) - start)

    def _zero(self, h: Handle, f: OpenFile, size: int, start: int, stop: int, op: int) -> None:
        """Make [start, stop) of the file (inside its size) read as zeros: whole blocks other than
        the last become holes (PUNCH_HOLE deallocates them in the lower file, ZERO_RANGE keeps them
        allocated), or, without holes, sealed zeros; partial blocks are sealed with zeros in them."""
        if start >= stop:
            return
        bs = content.BLOCK
        a = -(-start // bs)
        b = min(stop // bs, (size - 1) // bs)  # the last block is never a hole
        if a < b and self.holes:
            lower = FALLOC_FL_PUNCH_HOLE if op == FALLOC_FL_PUNCH_HOLE else FALLOC_FL_ZERO_RANGE
            _fallocate(h.fd, lower | FALLOC_FL_KEEP_SIZE, content.block_offset(a), (b - a) * content.CBLOCK)
            self._write_zeros(h, f, start, a * bs, size)
            self._write_zeros(h, f, b * bs, stop, size)
        else:
            self._write_zeros(h, f, start, stop, size)

    def seek(self, h: Handle, offset: int, whence: int) -> int:
        """SEEK_DATA and SEEK_HOLE.  A hole is a run of whole blocks whose lower range is a hole
        in the lower file; anything else, including a block of sealed zeros, is data, as POSIX
        allows."""
        if whence not in (os.SEEK_DATA, os.SEEK_HOLE):
            raise os_error(errno.EINVAL)
        f = self._file(h)
        with f.lock:
            size = self.size(h)
            if offset < 0 or offset >= size:
                raise os_error(errno.ENXIO)
            if not self.holes:
                return offset if whence == os.SEEK_DATA else size
            return _seek(h.fd, offset, whence, size)
