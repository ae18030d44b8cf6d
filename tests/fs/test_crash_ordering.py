"""The daemon killed between any two of the lower calls one write or truncate makes: every byte
fsync'd before reads back intact afterwards, and fsck finds no damage (FILESYSTEM.md, "Crashes").

The seam: the daemon runs with its lower mutating calls (pwrite, pwritev, ftruncate, fallocate,
write, unlink, mkdir, setxattr) counted, and exits on the spot (os._exit, as a SIGKILL would
leave it) instead of making the Nth; the test runs N = 1, 2, ... until the operation completes."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from strongroom.fs import mount
from tests.fs.mounts import Mount
from tests.serverproc import cli

SEAM = r"""
import os, stat, sys
limit, lower = int(sys.argv.pop(1)), sys.argv.pop(1)
from strongroom.fs import fileio
count = [0]
fstat = os.fstat
def counted(fn):
    def call(*a, **k):
        # only calls on the volume's lower files (a descriptor of one, or a path in the volume)
        target = a[0]
        if isinstance(target, int):
            target = os.readlink(f"/proc/self/fd/{target}") if stat.S_ISREG(fstat(target).st_mode) else ""
        if os.fspath(target).startswith(lower):
            count[0] += 1
            if count[0] >= limit:
                os._exit(137)
        return fn(*a, **k)
    return call
for name in ("pwrite", "pwritev", "ftruncate", "write", "unlink", "mkdir", "setxattr"):
    setattr(os, name, counted(getattr(os, name)))
fileio._fallocate = counted(fileio._fallocate)
from strongroom.cli.main import main
sys.argv[0] = "strongroom"
main()
"""

MAX_CALLS = 12
BLOCK = 4096


def _start_seamed(m: Mount, limit: int) -> subprocess.Popen[bytes]:
    with open(m.log, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", SEAM, str(limit), str(m.lower), "fs", "mount", str(m.lower), str(m.mnt), "--foreground"]
            + ["--passphrase-file", str(m.pwfile)],
            stdout=log,
            stderr=log,
        )
    deadline = time.monotonic() + 20
    while mount.mounted_at(m.mnt) is None:
        assert proc.poll() is None, m.log.read_text()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return proc


def _pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


def _append_across_a_short_block(fd: int) -> None:
    os.pwrite(fd, _pattern(10_000, 3), 5_000)


def _write_past_the_end_leaving_a_gap(fd: int) -> None:
    os.pwrite(fd, _pattern(3_000, 4), 40_000)


def _shrink_into_a_block(fd: int) -> None:
    os.ftruncate(fd, 2_500)


def _fill_a_hole(fd: int) -> None:
    os.pwrite(fd, _pattern(2 * BLOCK, 5), 10 * BLOCK)


def _grow_by_truncate(fd: int) -> None:
    os.ftruncate(fd, 123_456)


# (operation, the fsync'd content it starts from, the range it may change)
CASES: dict[str, tuple[Callable[[int], None], Callable[[], bytes], tuple[int, int]]] = {
    "append-across-a-short-block": (_append_across_a_short_block, lambda: _pattern(5_000, 1), (5_000, 15_000)),
    "write-past-the-end": (_write_past_the_end_leaving_a_gap, lambda: _pattern(5_000, 1), (5_000, 43_000)),
    "shrink-into-a-block": (_shrink_into_a_block, lambda: _pattern(10_000, 1), (2_500, 10_000)),
    "fill-a-hole": (_fill_a_hole, lambda: b"a" + bytes(20 * BLOCK) + b"z", (10 * BLOCK, 12 * BLOCK)),
    "grow-by-truncate": (_grow_by_truncate, lambda: _pattern(5_000, 1), (5_000, 123_456)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_kill_between_lower_calls_loses_nothing_fsynced(tmp_path: Path, case: str) -> None:
    op, initial, (lo, hi) = CASES[case]
    m = Mount(tmp_path).init()
    old = initial()
    completed = False
    try:
        _rounds(m, case, op, old, lo, hi)
        completed = True
    finally:
        m.stop()
        subprocess.run(["fusermount3", "-u", "-z", str(m.mnt)], capture_output=True)
    assert completed


def _rounds(m: Mount, case: str, op: Callable[[int], None], old: bytes, lo: int, hi: int) -> None:
    completed = False
    for limit in range(1, MAX_CALLS + 1):
        name = f"f{limit}"
        m.start()
        fd = os.open(m.mnt / name, os.O_RDWR | os.O_CREAT, 0o600)
        os.write(fd, old)
        if case == "fill-a-hole":  # the zeros in between never written: holes
            os.ftruncate(fd, 0)
            os.pwrite(fd, b"a", 0)
            os.pwrite(fd, b"z", len(old) - 1)
        os.fsync(fd)
        os.close(fd)
        m.stop()
        proc = _start_seamed(m, limit)
        try:
            fd = os.open(m.mnt / name, os.O_RDWR)
            try:
                op(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            assert e.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO), e
        time.sleep(0.1)
        died = proc.poll() is not None
        if died:
            subprocess.run(["fusermount3", "-u", "-z", str(m.mnt)], capture_output=True)
        else:
            subprocess.run(["fusermount3", "-u", str(m.mnt)], capture_output=True)
            completed = True
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        m.start()  # a normal mount: finishes what the journal holds
        data = (m.mnt / name).read_bytes()  # raises EIO if any block was left torn
        m.stop()
        keep = min(len(old), lo)
        assert data[:keep] == old[:keep], f"{case}, killed before lower call {limit}: fsync'd bytes changed"
        if len(data) > hi:
            assert data[hi : len(old)] == old[hi : len(data)][: max(0, len(old) - hi)]
        r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
        assert r.returncode == 0, f"{case}, killed before lower call {limit}: {r.stdout.decode()}"
        if completed:
            break
    assert completed, f"{case} made more than {MAX_CALLS} lower calls"
