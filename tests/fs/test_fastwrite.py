"""The write fast path (fastwrite.c): whole blocks rewritten in place, and fsyncs, are answered by
the mount's I/O thread; everything else reaches fileio.py unchanged.

Off a mount, its decisions are driven through fuseio.c's read on a socket pair (as
test_fuseio.py does) with files made by fileio.FileIO, so each case shows whether the request
was answered there or handed on.  On a mount, random writes of every shape against a model,
with readers going around the page cache, check what the two paths write together."""

from __future__ import annotations

import ctypes
import os
import random
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.fs import fuseio
from strongroom.fs.fastwrite import FastWrites
from strongroom.fs.fileio import FileIO
from strongroom.fs.keys import VolumeKeys
from tests.fs.mounts import Mount
from tests.fs.test_fuseio import HEADER, WRITE

BLOCK = 4096
OUT = struct.Struct("<IiQ")  # struct fuse_out_header
FSYNC = 20


@pytest.fixture(scope="module")
def so() -> ctypes.CDLL:
    assert fuseio.available(), "the package build (setup.py) builds libsrfuseio.so"
    lib = ctypes.CDLL(str(fuseio.LIBRARY), use_errno=True)
    lib.sr_fuseio_read.restype = ctypes.c_ssize_t
    lib.sr_fuseio_read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.sr_fuseio_reset.argtypes = [ctypes.c_int]
    lib.sr_fuseio_reset(0)
    return lib


class Files:
    def __init__(self, root: Path, holes: bool = True) -> None:
        self.root = root
        self.io = FileIO(VolumeKeys.fresh(os.urandom(16)), holes, lambda *a: None)
        fast = FastWrites.start(holes)
        assert fast is not None, "both helpers are built"
        self.io.fast = fast

    def make(self, name: str, data: bytes, append: bool = False) -> int:
        fd = os.open(self.root / name, os.O_RDWR | os.O_CREAT, 0o600)
        fh = self.io.add(fd, str(self.root / name), append=append)
        if data:
            self.io.write(self.io.get(fh), memoryview(data), 0)
        return fh

    def read(self, fh: int) -> bytes:
        h = self.io.get(fh)
        out = bytearray(self.io.size(h))
        return bytes(out[: self.io.read_into(h, memoryview(out), 0)])


@pytest.fixture
def files(tmp_path: Path) -> Iterator[Files]:
    f = Files(tmp_path)
    yield f
    for fh in list(f.io.handles):
        f.io.release(fh)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    kernel, daemon = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield kernel, daemon
    kernel.close()
    daemon.close()


def write_request(fh: int, offset: int, data: bytes, unique: int = 7, flags: int = 0) -> bytes:
    body = struct.pack("<QQIIQII", fh, offset, len(data), flags, 0, 0, 0) + data
    return HEADER.pack(HEADER.size + len(body), WRITE, unique, 1, 0, 0, 0, 0, 0) + body


def fsync_request(fh: int, flags: int, unique: int = 7) -> bytes:
    body = struct.pack("<QII", fh, flags, 0)
    return HEADER.pack(HEADER.size + len(body), FSYNC, unique, 1, 0, 0, 0, 0, 0) + body


def serve(so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], req: bytes) -> bytes | None:
    """Sends ``req`` and reads through fuseio.c: the reply if it answered the request itself,
    None if it handed the request on (it is then what the read returned)."""
    kernel, daemon = pair
    kernel.send(req)
    kernel.send(write_request(0, 1, b"x", unique=99))  # never served here: ends the read
    buf = ctypes.create_string_buffer(1 << 20)
    n = so.sr_fuseio_read(daemon.fileno(), buf, len(buf), None)
    assert n > 0
    if buf.raw[:n] == req:
        daemon.recv(1 << 20)  # the marker, still queued
        return None
    assert struct.unpack_from("<Q", buf.raw, 8)[0] == 99  # the marker came through
    return kernel.recv(4096)


def test_whole_blocks_in_place_are_answered_here(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], files: Files
) -> None:
    old = os.urandom(6 * BLOCK + 100)
    fh = files.make("f", old)
    files.read(fh)  # its header read: the key is published
    new = os.urandom(2 * BLOCK)
    reply = serve(so, pair, write_request(fh, 2 * BLOCK, new, unique=5))
    assert reply is not None
    length, error, unique = OUT.unpack_from(reply)
    assert (length, error, unique) == (24, 0, 5) and struct.unpack_from("<I", reply, 16)[0] == len(new)
    assert files.read(fh) == old[: 2 * BLOCK] + new + old[4 * BLOCK :]
    assert files.io.take_written(files.io.get(fh).key) and not files.io.take_written(files.io.get(fh).key)


@pytest.mark.parametrize(
    "case",
    ["unaligned offset", "partial block", "past the end", "into the last partial block", "appending handle",
     "hole in range", "two names", "set-id bit", "unknown handle", "key not yet read", "empty file"],
)  # fmt: skip
def test_everything_else_is_handed_on(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], files: Files, tmp_path: Path, case: str
) -> None:
    old = os.urandom(6 * BLOCK + 100)
    fh = files.make("f", b"" if case == "empty file" else old, append=case == "appending handle")
    if case == "key not yet read":  # opened again: a new handle whose file's header no one has read
        files.io.release(fh)
        fh = files.io.add(os.open(tmp_path / "f", os.O_RDWR), str(tmp_path / "f"))
    elif case != "empty file":
        files.read(fh)
    offset, data = 2 * BLOCK, os.urandom(BLOCK)
    if case == "unaligned offset":
        offset += 512
    elif case == "partial block":
        data = data[:1000]
    elif case == "past the end":
        offset = 7 * BLOCK
    elif case == "into the last partial block":
        offset = 6 * BLOCK
    elif case == "hole in range":
        h = files.io.get(fh)
        files.io.truncate(h, 40 * BLOCK)  # blocks 7..38 are holes
        files.io.write(h, memoryview(b"end"), 40 * BLOCK)
        offset = 20 * BLOCK
    elif case == "two names":
        os.link(tmp_path / "f", tmp_path / "g")
    elif case == "set-id bit":
        os.chmod(tmp_path / "f", 0o4755)
    elif case == "unknown handle":
        fh += 1000
    before = (tmp_path / "f").read_bytes()
    assert serve(so, pair, write_request(fh, offset, data)) is None
    assert (tmp_path / "f").read_bytes() == before  # nothing written here


def test_an_fsync_of_a_registered_handle_is_answered_here(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], files: Files
) -> None:
    fh = files.make("f", os.urandom(4 * BLOCK))
    for flags in (0, 1):  # fsync, fdatasync (FUSE_FSYNC_FDATASYNC)
        reply = serve(so, pair, fsync_request(fh, flags, unique=11))
        assert reply is not None and OUT.unpack_from(reply) == (16, 0, 11)
    appender = files.make("g", b"x", append=True)  # never registered: fileio.py serves it
    assert serve(so, pair, fsync_request(appender, 1)) is None
    assert serve(so, pair, fsync_request(fh + 1000, 1)) is None


def test_a_handle_released_is_forgotten(so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], files: Files) -> None:
    fh = files.make("f", os.urandom(4 * BLOCK))
    files.read(fh)
    files.io.release(fh)
    assert serve(so, pair, write_request(fh, 0, os.urandom(BLOCK))) is None


def test_a_truncated_file_takes_its_new_key(so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], files: Files) -> None:
    """Cut to nothing, a file gets a new header and key with its next write (fileio.py): blocks
    rewritten here afterwards are sealed under the new key."""
    fh = files.make("f", os.urandom(4 * BLOCK))
    files.read(fh)
    h = files.io.get(fh)
    files.io.truncate(h, 0)
    fresh = os.urandom(4 * BLOCK)
    files.io.write(h, memoryview(fresh), 0)
    new = os.urandom(BLOCK)
    assert serve(so, pair, write_request(fh, BLOCK, new)) is not None
    assert files.read(fh) == fresh[:BLOCK] + new + fresh[2 * BLOCK :]


# -- on a mount --------------------------------------------------------------------------------

READER = r"""
import mmap, os, sys
path, size, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
buf = mmap.mmap(-1, 512 << 10)  # big reads run beside other requests (baton.c's hands_on)
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)  # around the page cache: every read reaches the daemon
i = 0
while not os.path.exists(stop):
    i += 1
    assert os.preadv(fd, [buf], (i * 7919 % (size // 2 // 4096)) * 4096) == 512 << 10
"""


def test_mixed_writes_on_a_mount_match_a_model(vol: Mount) -> None:
    """Writes of every shape (whole blocks in place, partial, unaligned, growing, into holes) in
    random order, through the mount, while other processes read the whole file around the
    page cache (a torn block would read EIO): the content equals the model's, after a remount
    too, and fsck finds nothing."""
    size = 256 * BLOCK
    path = vol.mnt / "db"
    model = bytearray(os.urandom(size))
    path.write_bytes(model)
    stop = vol.mnt.parent / "stop"
    reader = [sys.executable, "-c", READER, str(path), str(size), str(stop)]
    readers = [subprocess.Popen(reader, stderr=subprocess.PIPE) for _ in range(2)]
    r = random.Random(5)
    fd = os.open(path, os.O_RDWR)
    try:
        for i in range(6000):
            kind = r.random()
            if kind < 0.7:  # whole blocks in place: the fast path
                off, n = r.randrange(size // BLOCK - 2) * BLOCK, BLOCK * r.choice((1, 2))
            elif kind < 0.95:  # partial or unaligned, inside
                off, n = r.randrange(size - 5000), r.randrange(1, 5000)
            else:  # around the end
                off, n = r.randrange(size - BLOCK, size + BLOCK), r.randrange(1, 3 * BLOCK)
            data = os.urandom(n)
            assert os.pwrite(fd, data, off) == n
            if off > len(model):
                model.extend(bytes(off - len(model)))
            model[off : off + n] = data
            if i % 500 == 0:
                os.fdatasync(fd)
    finally:
        os.close(fd)
        stop.touch()
    for p in readers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-2000:]
    same = path.read_bytes() == model  # (compared outside assert: no 1 MiB diff on failure)
    assert same, "the content differs from the model's"
    vol.stop()
    vol.start()
    same = path.read_bytes() == model
    assert same, "the content differs from the model's after a remount"
    vol.stop()
    r2 = subprocess.run(
        [sys.executable, "-m", "strongroom.cli.main", "fs", "fsck", str(vol.lower), "--passphrase-file", str(vol.pwfile)],
        capture_output=True,
        text=True,
    )
    assert r2.returncode == 0, r2.stdout + r2.stderr
