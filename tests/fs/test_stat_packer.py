"""The mount's one-call fill of libfuse's struct stat gives what mfusepy's field-by-field fill
gives, field for field, including times before 1970 and sizes past 4 GiB."""

from __future__ import annotations

import ctypes
import os

import mfusepy
import pytest

from strongroom.fs import fuse_front
from strongroom.fs.fuse_ops import BLKSIZE, VolumeOps

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process


@pytest.mark.parametrize(
    "atime_ns, size",
    [(1_700_000_000_123_456_789, 0), (-1_500_000_001, 5 << 32), (0, 1)],
)
def test_packed_stat_reads_back_field_by_field(atime_ns: int, size: int) -> None:
    pack = fuse_front.stat_packer()
    assert pack is not None  # on this platform the fast fill must be in use, not the fallback
    fields = (0o100640, 1 << 40, 3, 7, 1001, 1002, 99, 1, 2, 3, 1.0, 2.0, 3.0)  # mode .. ctime (floats unused)
    st = os.stat_result((*fields, atime_ns, 2_000_000_001, 5, 4096, 123, 0x0801))  # *_ns, blksize, blocks, rdev
    buf = mfusepy.c_stat()
    ctypes.memset(ctypes.byref(buf), 0xAB, ctypes.sizeof(buf))
    pack(buf, st, size)
    assert (buf.st_mode, buf.st_ino, buf.st_nlink, buf.st_uid, buf.st_gid) == (0o100640, 1 << 40, 7, 1001, 1002)
    assert (buf.st_size, buf.st_blocks, buf.st_blksize, buf.st_rdev) == (size, 123, BLKSIZE, 0x0801)
    assert buf.st_atimespec.tv_sec * 10**9 + buf.st_atimespec.tv_nsec == atime_ns
    assert 0 <= buf.st_atimespec.tv_nsec < 10**9
    assert (buf.st_mtimespec.tv_sec, buf.st_mtimespec.tv_nsec) == (2, 1)
    assert (buf.st_ctimespec.tv_sec, buf.st_ctimespec.tv_nsec) == (0, 5)
    assert buf.st_dev == 0  # as mfusepy leaves it: libfuse fills in the mount's own device
    reference = mfusepy.c_stat()
    mfusepy.set_st_attrs(reference, VolumeOps.attrs(st, size), use_ns=True)
    assert bytes(buf) == bytes(reference)


def test_what_the_front_end_needs_from_mfusepy_is_checked_before_mounting() -> None:
    import types

    import mfusepy

    from strongroom.fs import fuse_front

    assert fuse_front.check_mfusepy() == []  # the pinned series has it all

    class Renamed(mfusepy.FUSE):  # type: ignore[misc]
        utimens_fuse_3 = None  # as if mfusepy had renamed it

    changed = types.SimpleNamespace(**{k: getattr(mfusepy, k) for k in ("c_stat", "set_st_attrs", "fuse_context")}, FUSE=Renamed)
    assert fuse_front.check_mfusepy(changed) == ["_libfuse_path", "FUSE.utimens_fuse_3"]
