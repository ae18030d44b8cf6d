"""The FUSE front end keeps each libfuse thread's Python thread state for the thread's life
(fuse_front.Fuse._wrapper: one PyGILState_Ensure per thread, never released).  This leans on
ctypes' internals: a callback on a thread Python does not know gets a thread state made for the
call and destroyed on return, so every threading.local value (the per-thread crypto buffers)
would be rebuilt per request.  A real mount of the real front end, with a probe file system whose
read counts the thread states it meets, shows both halves: without the pin each request meets a
fresh state (the behaviour the pin is for; if a Python release stops doing this, the control half
fails and the pin can go), and with it the states stay within the pinned pool."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strongroom.fs import fuse_front

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(), reason="needs root and /dev/fuse")

PROBE = r"""
import errno, os, sys, threading
import mfusepy
from strongroom.fs import fuse_front

if sys.argv[2] == "unpinned":
    fuse_front._ensure_thread_state = lambda: 0  # the control: ctypes' own behaviour

DIR = os.stat("/")
FILE = os.stat(sys.argv[3])
local = threading.local()
fresh = 0
lock = threading.Lock()


class Probe(mfusepy.Operations):
    warm = None

    def plain_stat(self, path, fh):
        if path == "/":
            return DIR, DIR.st_size
        if path in ("/probe", "/count"):
            return FILE, 1 << 20
        raise OSError(errno.ENOENT, "")

    def open(self, path, flags):
        return 1 if path == "/probe" else 2

    def cache_mode(self, fh):
        return True, False  # direct I/O: every read reaches the daemon

    def getattr(self, path, fh=None):  # present so mfusepy registers the call (plain_stat answers it)
        raise OSError(errno.ENOSYS, "")

    def read(self, path, size, offset, fh):  # present so mfusepy registers the call (read_into answers it)
        raise OSError(errno.ENOSYS, "")

    def read_into(self, path, dest, offset, fh):
        global fresh
        if fh == 2:
            text = str(fresh).encode()[max(0, offset):]
            dest[: len(text)] = text
            return len(text)
        if not getattr(local, "seen", False):
            local.seen = True
            with lock:
                fresh += 1
        n = min(len(dest), 4096)
        dest[:n] = bytes(n)
        return n


fuse_front.Fuse(Probe(), sys.argv[1], fuse_front.stat_packer(), foreground=True, nothreads=False)
"""


def _fresh_states(tmp: Path, mode: str, reads: int) -> int:
    mnt = tmp / f"mnt-{mode}"
    mnt.mkdir()
    backing = tmp / "backing"
    backing.write_bytes(b"x")
    script = tmp / "probe.py"
    script.write_text(PROBE)
    proc = subprocess.Popen([sys.executable, str(script), str(mnt), mode, str(backing)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.05)
        fd = os.open(mnt / "probe", os.O_RDONLY)
        try:
            for i in range(reads):
                os.pread(fd, 4096, (i % 64) * 4096)
        finally:
            os.close(fd)
        return int((mnt / "count").read_bytes() or b"0")
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
        proc.wait(timeout=20)


def test_libfuse_threads_keep_their_python_thread_state(tmp_path: Path) -> None:
    reads = 400
    unpinned = _fresh_states(tmp_path, "unpinned", reads)
    pinned = _fresh_states(tmp_path, "pinned", reads)
    assert unpinned >= reads, f"ctypes kept thread states by itself ({unpinned} for {reads} reads): the pin may go"
    assert pinned <= fuse_front.PINNED_THREADS, f"{pinned} thread states for {reads} reads: the pin no longer holds"
