"""Many writers through many hard-link names of one file, buffered and through shared mappings,
at random 4 KiB offsets: nobody may hang.  Before the kernel's invalidations were sent from a
thread of their own (notify.py), a request's thread waited in the kernel for pages whose writeback
waited for a request no free thread was left to serve, and every writer hung for good."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strongroom.fs import mount
from tests.fs.mounts import Mount

SIZE = 1 << 20
WRITES = 3000
DEADLINE = 90  # seconds for every writer; the runs take a few

WRITER = r"""
import mmap, os, random, sys
path, n, how, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
size = 1 << 20
r = random.Random(seed)
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, size) if how == "mmap" else None
for i in range(n):
    off = r.randrange(size // 4096) * 4096
    block = bytes([seed]) * 4096
    if m is None:
        os.pwrite(fd, block, off)
    else:
        m[off:off + 4096] = block
        if i % 64 == 0:
            m.flush()
if m is not None:
    m.close()
os.close(fd)
"""


def _abort(mnt: Path) -> None:
    """Free a hung mount as an operator would: abort its FUSE connection (fusectl), so the
    writers stuck on it can be killed and the test ends."""
    connections = Path("/sys/fs/fuse/connections")
    if not any(connections.iterdir()):
        subprocess.run(["mount", "-t", "fusectl", "none", str(connections)], check=False)
    device = mount._mount_device(os.path.realpath(mnt))
    if device is not None:
        (connections / device.split(":")[1] / "abort").write_text("1")


@pytest.mark.parametrize("kinds", [("plain",) * 8, ("mmap",) * 4, ("plain", "mmap") * 3], ids=["pwrite", "mmap", "mixed"])
def test_writers_through_many_names_never_hang(vol: Mount, kinds: tuple[str, ...]) -> None:
    first = vol.mnt / "f"
    first.write_bytes(bytes(SIZE))
    names = [first]
    for k in range(1, len(kinds)):
        os.link(first, vol.mnt / f"name{k}")
        names.append(vol.mnt / f"name{k}")
    for p in names:  # the kernel now holds an inode per name (what the invalidations are for)
        assert p.stat().st_nlink == len(kinds)
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(p), str(WRITES), how, str(seed)])
        for seed, (p, how) in enumerate(zip(names, kinds, strict=True), start=1)
    ]
    start = time.monotonic()
    hung = []
    for p in procs:
        try:
            p.wait(timeout=max(1.0, DEADLINE - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            hung.append(p)
    if hung:
        _abort(vol.mnt)
        for p in procs:
            p.kill()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass  # still in the kernel: the assertion below says so
    assert not hung, f"{len(hung)} of {len(procs)} writers hung"
    assert all(p.returncode == 0 for p in procs)
    data = first.read_bytes()
    assert len(data) == SIZE
    # every block holds one writer's whole 4 KiB (or the zeros it started with), the same through every name
    for off in range(0, SIZE, 4096):
        assert data[off : off + 4096] == bytes([data[off]]) * 4096
    for p in names[1:]:
        assert p.read_bytes() == data
