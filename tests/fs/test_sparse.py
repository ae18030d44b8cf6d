"""Sparse files through a real mount (format version 3, FORMAT.md §5): blocks never written are
holes in the lower file and read as zeros, a file's last block is always sealed, fallocate's
modes and SEEK_DATA/SEEK_HOLE, and what an older (version 2) volume still does without holes."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.fs import content
from tests.fs import spec_decryptor as spec
from tests.fs.mounts import PASSPHRASE, Mount
from tests.serverproc import cli

GIB = 1 << 30
KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE, COLLAPSE_RANGE = 0x01, 0x02, 0x10, 0x08
libc = ctypes.CDLL(None, use_errno=True)


def fallocate(fd: int, mode: int, offset: int, length: int) -> int:
    """0, or the errno fallocate(2) answered."""
    if libc.fallocate(fd, mode, ctypes.c_long(offset), ctypes.c_long(length)) == 0:
        return 0
    return ctypes.get_errno()


def lower_file(m: Mount) -> Path:
    (only,) = [p for p in m.lower.iterdir() if p.is_file() and not p.name.startswith("strongroom.")]
    return only


def allocated(p: Path) -> int:
    return os.stat(p).st_blocks * 512


def fsck_clean(m: Mount) -> None:
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def v2(tmp_path: Path) -> Iterator[Mount]:
    """A volume of format version 2, which has no holes."""
    m = Mount(tmp_path).init().as_version(2).start()
    yield m
    m.stop()


def test_a_byte_at_5_gib_allocates_almost_nothing(vol: Mount) -> None:
    p = vol.mnt / "sparse"
    with open(p, "wb") as f:
        f.write(b"head")
        f.seek(5 * GIB)
        f.write(b"!")
    assert p.stat().st_size == 5 * GIB + 1
    lower = lower_file(vol)
    assert lower.stat().st_size == content.lower_size(5 * GIB + 1)
    assert allocated(lower) < 1 << 20  # two sealed blocks and a header, not 5 GiB
    with open(p, "rb") as f:
        assert f.read(8192) == b"head" + bytes(8188)
        f.seek(3 * GIB + 12345)
        assert f.read(1 << 20) == bytes(1 << 20)
        f.seek(5 * GIB - 4)
        assert f.read() == bytes(4) + b"!"
    fsck_clean(vol)
    # a file written past its end keeps every earlier byte: the cut-short block became whole
    q = vol.mnt / "grown"
    q.write_bytes(b"x" * 100)
    with open(q, "r+b") as f:
        f.seek(20_000)
        f.write(b"y")
    assert q.read_bytes() == b"x" * 100 + bytes(19_900) + b"y"


def test_truncate_up_leaves_holes_and_seals_the_last_block(vol: Mount) -> None:
    p = vol.mnt / "t"
    p.write_bytes(b"abc")
    os.truncate(p, 10_000_000)
    assert p.read_bytes() == b"abc" + bytes(10_000_000 - 3)
    lower = lower_file(vol)
    assert allocated(lower) < 1 << 20
    last = (10_000_000 - 1) // content.BLOCK
    raw = lower.read_bytes()[content.block_offset(last) :]
    assert raw and raw != bytes(len(raw))  # the last block is sealed, not a hole
    os.truncate(p, 3 * content.BLOCK)  # down onto a hole: the new last block is sealed
    assert p.read_bytes() == b"abc" + bytes(3 * content.BLOCK - 3)
    raw = lower.read_bytes()[content.block_offset(2) :]
    assert len(raw) == content.CBLOCK and raw != bytes(content.CBLOCK)
    fsck_clean(vol)
    vol.stop()
    assert spec.read_tree(vol.lower, PASSPHRASE)["/t"] == b"abc" + bytes(3 * content.BLOCK - 3)


def test_a_zeroed_block_reads_as_a_hole_but_a_zeroed_last_block_is_damage(vol: Mount) -> None:
    p = vol.mnt / "f"
    data = os.urandom(5 * content.BLOCK)
    p.write_bytes(data)
    vol.stop()
    lower = lower_file(vol)
    with open(lower, "r+b") as f:
        f.seek(content.block_offset(1))
        f.write(bytes(content.CBLOCK))  # what an attacker who zeroes a block gets (FORMAT.md §8)
    vol.start()
    assert p.read_bytes() == data[: content.BLOCK] + bytes(content.BLOCK) + data[2 * content.BLOCK :]
    vol.stop()
    with open(lower, "r+b") as f:
        f.seek(content.block_offset(4))
        f.write(bytes(content.CBLOCK))
    vol.start()
    with pytest.raises(OSError) as e:
        p.read_bytes()
    assert e.value.errno == errno.EIO


def test_seek_data_and_seek_hole(vol: Mount) -> None:
    p = vol.mnt / "s"
    mib = 1 << 20
    with open(p, "wb") as f:
        f.write(b"a" * 4096)
        f.seek(4 * mib)
        f.write(b"b" * 4096)
        f.seek(9 * mib)
        f.write(b"c")
    size = 9 * mib + 1
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_DATA) == 0
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
        assert 4096 <= hole < 4 * mib and hole % content.BLOCK == 0
        assert os.pread(fd, 4 * mib - hole, hole) == bytes(4 * mib - hole)
        data = os.lseek(fd, hole, os.SEEK_DATA)
        assert hole < data <= 4 * mib and os.pread(fd, 4 * mib - data, data) == bytes(4 * mib - data)
        hole2 = os.lseek(fd, 4 * mib, os.SEEK_HOLE)
        assert 4 * mib + 4096 <= hole2 < 9 * mib
        assert os.lseek(fd, hole2, os.SEEK_DATA) <= 9 * mib
        assert os.lseek(fd, 9 * mib, os.SEEK_HOLE) == size  # the last block is data
        assert os.lseek(fd, size - 1, os.SEEK_DATA) == size - 1
        for whence in (os.SEEK_DATA, os.SEEK_HOLE):
            with pytest.raises(OSError) as e:
                os.lseek(fd, size, whence)
            assert e.value.errno == errno.ENXIO
    finally:
        os.close(fd)
    # cp finds the holes through SEEK_DATA/SEEK_HOLE and keeps the copy sparse
    copy = vol.mnt / "copy"
    os.system(f"cp --sparse=auto {p} {copy}")  # noqa: S605 - fixed paths from the test
    assert copy.read_bytes() == p.read_bytes()


def test_fallocate_modes(vol: Mount) -> None:
    p = vol.mnt / "alloc"
    data = os.urandom(64 * content.BLOCK)
    p.write_bytes(data)
    lower = lower_file(vol)
    fd = os.open(p, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 300_000)  # mode 0: grows the file, the new range reads as zeros
        assert os.fstat(fd).st_size == 300_000
        assert os.pread(fd, 300_000, 0) == data + bytes(300_000 - len(data))
        assert fallocate(fd, KEEP_SIZE, 0, 1 << 20) == 0  # reserves past the end, size unchanged
        assert os.fstat(fd).st_size == 300_000 and allocated(lower) >= 1 << 20
        before = allocated(lower)
        assert fallocate(fd, PUNCH_HOLE | KEEP_SIZE, 5000, 40 * content.BLOCK) == 0
        expect = bytearray(data + bytes(300_000 - len(data)))
        expect[5000 : 5000 + 40 * content.BLOCK] = bytes(40 * content.BLOCK)
        assert os.pread(fd, 300_000, 0) == expect
        assert allocated(lower) < before  # whole blocks were given back
        assert fallocate(fd, ZERO_RANGE | KEEP_SIZE, 100, 200) == 0
        expect[100:300] = bytes(200)
        assert fallocate(fd, ZERO_RANGE, 299_000, 10_000) == 0  # past the end: the file grows
        expect[299_000:] = bytes(1000)
        expect += bytes(9000)
        assert os.fstat(fd).st_size == 309_000 and os.pread(fd, 400_000, 0) == expect
        assert fallocate(fd, PUNCH_HOLE | KEEP_SIZE, 0, 400_000) == 0  # the whole file, its last block too
        assert os.fstat(fd).st_size == 309_000 and os.pread(fd, 400_000, 0) == bytes(309_000)
        assert fallocate(fd, COLLAPSE_RANGE, 0, content.BLOCK) == errno.EOPNOTSUPP
    finally:
        os.close(fd)
    fsck_clean(vol)
    vol.stop()
    assert spec.read_tree(vol.lower, PASSPHRASE)["/alloc"] == bytes(309_000)


def test_a_version_2_volume_writes_zeros_and_has_no_holes(v2: Mount) -> None:
    p = v2.mnt / "f"
    p.write_bytes(b"x")
    os.truncate(p, 2 << 20)
    assert p.read_bytes() == b"x" + bytes((2 << 20) - 1)
    assert allocated(lower_file(v2)) >= 2 << 20  # sealed zeros, as before version 3
    fd = os.open(p, os.O_RDWR)
    try:
        assert fallocate(fd, PUNCH_HOLE | KEEP_SIZE, 0, content.BLOCK) == errno.EOPNOTSUPP
        assert fallocate(fd, ZERO_RANGE | KEEP_SIZE, 0, 3 * content.BLOCK) == 0
        assert os.pread(fd, 10, 0) == bytes(10)
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 2 << 20  # all data
    finally:
        os.close(fd)
    v2.stop()
    lower = lower_file(v2)
    with open(lower, "r+b") as f:  # a zeroed block is damage on a volume without holes
        f.seek(content.block_offset(1))
        f.write(bytes(content.CBLOCK))
    v2.start()
    with pytest.raises(OSError) as e:
        p.read_bytes()
    assert e.value.errno == errno.EIO
