"""The kernel keeps a file's plaintext pages across opens and across the mount's own writes
(pagecache.py), and still drops them when the lower file changed behind the mount's back.

Residency is read with mincore(2) on a mapping of the file through the mount: it reports which
of the file's pages the kernel's page cache holds, without reading any."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import time
from pathlib import Path

from strongroom.fs.pagecache import PageCache
from tests.fs.mounts import Mount

PAGE = mmap.PAGESIZE
SIZE = 64 * PAGE
ATTR_TIMEOUT = 1.0  # the mount's default --attr-timeout

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident(path: Path) -> int:
    """How many of the file's pages the page cache holds."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        m = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)  # private and untouched: the file's own pages
    finally:
        os.close(fd)
    try:
        vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
        buf = (ctypes.c_char * size).from_buffer(m)
        try:
            if _libc.mincore(ctypes.addressof(buf), size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del buf
        return sum(v & 1 for v in vec)
    finally:
        m.close()


def _refresh(path: Path) -> None:
    """Let the kernel's cached attributes expire and fetch them again (a GETATTR)."""
    time.sleep(ATTR_TIMEOUT + 0.3)
    os.stat(path)


def test_pages_kept_across_opens_and_own_writes(vol: Mount) -> None:
    f = vol.mnt / "db"
    f.write_bytes(os.urandom(SIZE))
    assert f.read_bytes()  # every page read (or written) through the mount is cached
    # kept (every one dropped before); now and then the kernel lets one or two go on its own
    assert resident(f) >= SIZE // PAGE * 7 // 8  # the open inside resident() kept them
    with open(f, "r+b") as w:  # writes through the mount, then attributes refreshed
        w.seek(5 * PAGE)
        w.write(b"x" * PAGE)
    _refresh(f)
    assert resident(f) >= SIZE // PAGE * 7 // 8
    assert f.read_bytes()[5 * PAGE : 6 * PAGE] == b"x" * PAGE


def test_a_change_behind_the_mounts_back_is_seen_at_the_next_open(vol: Mount) -> None:
    """A sync tool rewriting a closed lower file in place while the volume is mounted: the next
    open reads the new content, not the pages the kernel kept."""
    old, new = os.urandom(SIZE), os.urandom(SIZE)
    (vol.mnt / "y").write_bytes(old)
    (vol.mnt / "x").write_bytes(new)
    cached = (vol.mnt / "y").read_bytes() == old  # cached under y
    assert cached
    with open(vol.lower_of("y"), "r+b") as w:  # the same lower inode, same size, other content
        w.write(vol.lower_of("x").read_bytes())
    fresh = (vol.mnt / "y").read_bytes() == new  # (compared outside assert: no 256 KiB diff on failure)
    assert fresh, "the next open read the pages kept from before"


def test_a_change_behind_the_mounts_back_reaches_an_open_descriptor(vol: Mount) -> None:
    """The same change under a descriptor held open: once the attributes are refreshed, its
    cached pages are gone.  It then reads the new content, or EIO where the daemon had already
    read the old file's header through it; never the old content."""
    old, new = os.urandom(SIZE), os.urandom(SIZE)
    (vol.mnt / "y").write_bytes(old)
    (vol.mnt / "x").write_bytes(new)
    with open(vol.mnt / "y", "rb") as held:
        first = held.read() == old
        assert first
        with open(vol.lower_of("y"), "r+b") as w:
            w.write(vol.lower_of("x").read_bytes())
        _refresh(vol.mnt / "y")  # the refresh finds the change; the notifier drops the pages
        deadline = time.monotonic() + 10
        while True:
            held.seek(0)
            try:
                got = held.read()
            except OSError as e:
                assert e.errno == errno.EIO
                break
            if got == new:
                break
            # a read during the drop may see some pages of each: it is retried, never the end
            assert time.monotonic() < deadline, "still the old content" if got == old else "a mix"
            time.sleep(0.05)


# -- the rules themselves ------------------------------------------------------------------


class _St:
    def __init__(self, ino: int = 1, size: int = 10, mtime: int = 5, ctime: int = 5, mode: int = 0o100600) -> None:
        self.st_ino, self.st_size, self.st_mtime_ns, self.st_ctime_ns, self.st_mode = ino, size, mtime, ctime, mode


def test_rules() -> None:
    dropped: list[str] = []
    pc = PageCache(dropped.append, limit=3)
    st = _St()
    assert not pc.keep("/a", st)  # nothing known: the kernel drops what it may hold
    assert pc.keep("/a", st)  # unchanged since
    pc.changed("/a")
    st2 = _St(mtime=6, ctime=6)
    pc.seen("/a", st2)  # the mount's own change: adopted, nothing dropped
    assert dropped == [] and pc.keep("/a", st2)
    pc.seen("/a", _St(mtime=7, ctime=7))  # a change the mount did not make
    assert dropped == ["/a"]
    assert not pc.keep("/a", _St(mtime=8, ctime=8))
    pc.renamed("/a", "/b")
    assert pc.keep("/b", _St(mtime=8, ctime=8)) and not pc.keep("/a", _St(mtime=8, ctime=8))
    assert not pc.keep("/d", _St(mode=0o40755))  # directories have no pages to keep
    for p in ("/c", "/e", "/f", "/g"):
        pc.seen(p, st)
    assert not pc.keep("/b", _St(mtime=8, ctime=8))  # forgotten past the limit: dropped again
    pc.removed("/g")
    assert not pc.keep("/g", st)
