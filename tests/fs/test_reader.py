"""Reading an unmounted volume through its API (fs/reader.py), the layers the mount uses without
the mount: files written through the mount's operations read back exact (holes included), and
each failure is the errno a read through the mount gives."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from strongroom.fs import content
from strongroom.fs.config import VolumeConfig
from strongroom.fs.fuse_ops import VolumeOps
from strongroom.fs.reader import Unreadable, VolumeReader
from strongroom.fs.volume import init_volume, unlock

pytestmark = pytest.mark.unit
PASSPHRASE = "reader test passphrase"


@pytest.fixture
def volume(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    vol = tmp_path / "vol"
    init_volume(vol, PASSPHRASE)
    ops = VolumeOps(str(vol), unlock(vol, lambda: PASSPHRASE))
    ops.mkdir("/d", 0o755)
    files = {"/empty": b"", "/d/small": b"hello", "/d/blocks": os.urandom(5 * content.BLOCK + 17), "/sparse": b""}
    for path, data in files.items():
        fh = ops.create(path, 0o644, os.O_WRONLY)
        ops.write(path, data, 0, fh)
        ops.release(path, fh)
    fh = ops.open("/sparse", os.O_WRONLY)
    ops.write("/sparse", b"end", 3 << 20, fh)  # 3 MiB of hole, then 3 bytes
    ops.release("/sparse", fh)
    files["/sparse"] = bytes(3 << 20) + b"end"
    ops.symlink("/link", "/d/small")  # (link path, target), as mfusepy passes them
    return vol, files


def reader(vol: Path) -> VolumeReader:
    return VolumeReader(vol, unlock(vol, lambda: PASSPHRASE), VolumeConfig.load(vol))


def test_every_file_reads_back_exact(volume: tuple[Path, dict[str, bytes]]) -> None:
    vol, files = volume
    with reader(vol) as r:
        for path, data in files.items():
            with r.open(path) as f:
                assert f.size() == len(data)
                out = io.BytesIO()
                assert f.copy_to(out) == len(data)
                assert out.getvalue() == data
                assert f.read(1, 3) == data[1:4]


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/missing", errno.ENOENT),
        ("/d", errno.EISDIR),
        ("/link", errno.ELOOP),
        ("/d/small/x", errno.ENOTDIR),
        ("/", errno.EINVAL),
    ],
)
def test_what_cannot_be_read_says_why(volume: tuple[Path, dict[str, bytes]], path: str, code: int) -> None:
    vol, _ = volume
    with reader(vol) as r, pytest.raises(OSError) as e:
        r.open(path)
    assert e.value.errno == code


def test_a_damaged_block_stops_the_copy_after_everything_before_it(volume: tuple[Path, dict[str, bytes]]) -> None:
    vol, files = volume
    with reader(vol) as r:
        lower = Path(r.paths.lower("/d/blocks"))
    raw = bytearray(lower.read_bytes())
    raw[content.block_offset(3) + 20] ^= 1
    lower.write_bytes(raw)
    out = io.BytesIO()
    with reader(vol) as r, r.open("/d/blocks") as f, pytest.raises(Unreadable) as e:
        f.copy_to(out)
    assert e.value.errno == errno.EIO and e.value.offset == 3 * content.BLOCK
    assert out.getvalue() == files["/d/blocks"][: 3 * content.BLOCK]
