"""A tree of any depth, as on ext4: each level adds about 24 bytes to the lower path, which passed
PATH_MAX at depth ~169 (mkdir -p failed there with ENAMETOOLONG).  The daemon reaches deep lower
directories through descriptors of their ancestors (beneath.py), so a 1,000-deep tree is made,
used, renamed and removed through the mount, and the offline tools walk it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fs.mounts import Mount
from tests.serverproc import cli

DEPTH = 1000


def _descend(top: Path, depth: int) -> int:
    """An O_PATH descriptor of the directory ``depth`` levels below ``top`` (d/d/...)."""
    fd = os.open(top, os.O_PATH | os.O_DIRECTORY)
    for _ in range(depth):
        nxt = os.open("d", os.O_PATH | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    return fd


@pytest.fixture
def scrub(tmp_path: Path) -> Iterator[None]:
    """Removes the test's trees afterwards (set up before the mount, so torn down after it):
    Python 3.11's shutil.rmtree, which pytest cleans up with, recurses, and fails at this depth."""
    yield
    subprocess.run(["rm", "-rf", "--one-file-system", str(tmp_path)], check=False)


@pytest.fixture
def deep(scrub: None, vol: Mount) -> Mount:
    made = subprocess.run(["mkdir", "-p", "/".join(["d"] * DEPTH)], cwd=vol.mnt, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    return vol


def test_a_thousand_levels_are_made_used_renamed_and_removed(deep: Mount) -> None:
    fd = _descend(deep.mnt, DEPTH)
    try:
        bottom = f"/proc/self/fd/{fd}"
        assert os.path.getsize(Path(bottom)) >= 0  # (a directory)
        Path(bottom, "f").write_bytes(b"x" * 10_000)
        assert Path(bottom, "f").read_bytes() == b"x" * 10_000
        assert os.stat(Path(bottom, "f")).st_size == 10_000
        os.rename(Path(bottom, "f"), Path(bottom, "g"))
        assert sorted(os.listdir(bottom)) == ["g"]
        os.chmod(Path(bottom, "g"), 0o640)
        assert os.stat(Path(bottom, "g")).st_mode & 0o777 == 0o640
        os.setxattr(Path(bottom, "g"), "user.k", b"v")
        assert os.getxattr(Path(bottom, "g"), "user.k") == b"v"
        os.symlink("g", Path(bottom, "s"))
        assert os.readlink(Path(bottom, "s")) == "g"
        os.link(Path(bottom, "g"), Path(bottom, "h"))
        assert os.stat(Path(bottom, "h")).st_nlink == 2
        long = "n" * 200  # a long name (its own sidecar) at the bottom
        Path(bottom, long).write_text("long")
        assert Path(bottom, long).read_text() == "long"
        with os.scandir(bottom) as it:
            assert sorted(e.name for e in it) == sorted(["g", "h", "s", long])
        synced = os.open(Path(bottom, "g"), os.O_RDONLY)
        try:
            os.fsync(synced)
        finally:
            os.close(synced)
    finally:
        os.close(fd)
    # a directory halfway down renamed: everything below it moves with it
    mid = _descend(deep.mnt, DEPTH // 2 - 1)
    try:
        os.rename("d", "e", src_dir_fd=mid, dst_dir_fd=mid)
        below = os.open("e", os.O_PATH | os.O_DIRECTORY, dir_fd=mid)
    finally:
        os.close(mid)
    try:
        path = f"/proc/self/fd/{below}/" + "/".join(["d"] * (DEPTH - DEPTH // 2))
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY)
    finally:
        os.close(below)
    try:
        assert Path(f"/proc/self/fd/{fd}", "g").read_bytes() == b"x" * 10_000
    finally:
        os.close(fd)
    removed = subprocess.run(["rm", "-rf", "d"], cwd=deep.mnt, capture_output=True, text=True)
    assert removed.returncode == 0, removed.stderr
    assert os.listdir(deep.mnt) == []
    deep.stop()
    f = cli("fs", "fsck", str(deep.lower), "--passphrase-file", str(deep.pwfile))
    assert f.returncode == 0, f.stdout


def _bottom_file(m: Mount) -> bytes:
    fd = _descend(m.mnt, DEPTH)
    try:
        return Path(f"/proc/self/fd/{fd}", "f").read_bytes()
    finally:
        os.close(fd)


def test_the_offline_tools_walk_a_thousand_levels(deep: Mount) -> None:
    fd = _descend(deep.mnt, DEPTH)
    try:
        Path(f"/proc/self/fd/{fd}", "f").write_bytes(b"bottom")
    finally:
        os.close(fd)
    deep.stop()
    pw = ("--passphrase-file", str(deep.pwfile))
    for cmd in ("fsck", "rotate", "reencrypt"):
        r = cli("fs", cmd, str(deep.lower), *pw, timeout=300)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
    r = cli("fs", "fsck", str(deep.lower), *pw)
    assert r.returncode == 0, r.stdout
    deep.start()
    assert _bottom_file(deep) == b"bottom"


def test_move_carries_a_thousand_levels_in(scrub: None, vol: Mount, tmp_path: Path) -> None:
    src = tmp_path / "app"
    src.mkdir()
    made = subprocess.run(["mkdir", "-p", "/".join(["d"] * DEPTH)], cwd=src, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    fd = _descend(src, DEPTH)
    try:
        Path(f"/proc/self/fd/{fd}", "f").write_bytes(b"bottom")
    finally:
        os.close(fd)
    r = cli("fs", "move", str(src), str(vol.mnt), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    fd = _descend(vol.mnt / "app", DEPTH)
    try:
        assert Path(f"/proc/self/fd/{fd}", "f").read_bytes() == b"bottom"
    finally:
        os.close(fd)
