"""Everything an application expects of a local filesystem, through a real mount, with plain
os/pathlib calls."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fs.mounts import Mount
from tests.serverproc import cli


def test_write_read_at_any_offset(vol: Mount) -> None:
    p = vol.mnt / "f"
    data = bytearray(os.urandom(3 * 4096 + 123))
    p.write_bytes(data)
    assert p.read_bytes() == data and p.stat().st_size == len(data)
    fd = os.open(p, os.O_RDWR)
    try:
        for off, n in [(0, 1), (4095, 2), (4096, 4096), (5000, 10_000), (len(data) - 1, 5), (2, 3 * 4096)]:
            chunk = os.urandom(n)
            os.pwrite(fd, chunk, off)
            if off + n > len(data):
                data.extend(bytes(off + n - len(data)))
            data[off : off + n] = chunk
            assert os.pread(fd, len(data) + 10, 0) == data
            assert os.pread(fd, 100, 4090) == data[4090:4190]
    finally:
        os.close(fd)
    vol.restart()
    assert p.read_bytes() == data


def test_append_truncate_and_sparse(vol: Mount) -> None:
    p = vol.mnt / "g"
    with open(p, "ab") as f:
        f.write(b"a" * 5000)
    with open(p, "ab") as f:
        f.write(b"b" * 100)
    assert p.read_bytes() == b"a" * 5000 + b"b" * 100
    os.truncate(p, 4100)
    assert p.read_bytes() == b"a" * 4100
    os.truncate(p, 10_000)  # up: zeros
    assert p.read_bytes() == b"a" * 4100 + bytes(5900)
    os.truncate(p, 0)
    assert p.read_bytes() == b"" and p.stat().st_size == 0
    with open(p, "r+b") as f:  # a write far past the end leaves zeros behind it
        f.seek(1 << 20)
        f.write(b"end")
    assert p.stat().st_size == (1 << 20) + 3
    data = p.read_bytes()
    assert data[: 1 << 20] == bytes(1 << 20) and data[-3:] == b"end"
    with open(p, "wb") as f:  # O_TRUNC
        f.write(b"new")
    assert p.read_bytes() == b"new"


def test_namespace_operations(vol: Mount) -> None:
    m = vol.mnt
    (m / "d1" / "d2").mkdir(parents=True)
    (m / "d1" / "x").write_text("x")
    (m / "y").write_text("y")
    os.rename(m / "y", m / "d1" / "x")  # over an existing file, across directories
    assert (m / "d1" / "x").read_text() == "y" and not (m / "y").exists()
    os.link(m / "d1" / "x", m / "hard")
    assert (m / "hard").stat().st_nlink == 2 and (m / "hard").stat().st_ino == (m / "d1" / "x").stat().st_ino
    (m / "hard").write_text("via link")
    time.sleep(1.1)  # the other name's cached size may be stale for --attr-timeout (1 s by default)
    assert (m / "d1" / "x").read_text() == "via link"
    os.symlink("d1/x", m / "sym")
    assert os.readlink(m / "sym") == "d1/x" and (m / "sym").read_text() == "via link"
    assert (m / "sym").lstat().st_size == len("d1/x")
    os.rename(m / "d1", m / "d3")
    assert (m / "d3" / "d2").is_dir() and (m / "d3" / "x").read_text() == "via link"
    with pytest.raises(OSError) as e:
        os.rmdir(m / "d3")
    assert e.value.errno == errno.ENOTEMPTY
    os.rmdir(m / "d3" / "d2")
    os.unlink(m / "d3" / "x")
    os.rmdir(m / "d3")
    assert sorted(os.listdir(m)) == ["hard", "sym"]


def test_directories_replaced_under_the_same_name(vol: Mount) -> None:
    """A directory removed or renamed away and another put in its place has a new tweak: names
    created in it afterwards must be encrypted under the new one (the daemon caches tweaks), so
    they still list after a restart (which reads every tweak from disk) and fsck finds nothing."""
    m = vol.mnt
    (m / "a").mkdir()
    (m / "a" / "x").write_text("old")
    assert not (m / "a" / "y").exists()  # a resolved (negative) name under the old tweak
    (m / "a" / "x").unlink()
    (m / "a").rmdir()
    (m / "a").mkdir()
    (m / "a" / "x").write_text("new x")
    (m / "a" / "y").write_text("new y")
    (m / "d" / "sub").mkdir(parents=True)
    (m / "e" / "sub").mkdir(parents=True)
    (m / "e" / "sub" / "f").write_text("in e")  # e and e/sub resolved and cached
    (m / "e" / "sub" / "f").unlink()
    (m / "e" / "sub").rmdir()
    os.rename(m / "d", m / "e")  # d replaces the empty e
    (m / "e" / "z").write_text("into the moved d")
    (m / "e" / "sub" / "w").write_text("into the moved d/sub")
    (m / "q" / "sub").mkdir(parents=True)
    (m / "q" / "sub" / "from-q").write_text("q's")
    os.rename(m / "e", m / "b")
    os.rename(m / "q", m / "e")  # e/sub is now q's sub, with q's tweaks
    (m / "e" / "sub" / "g").write_text("into q's sub")
    (m / "e" / "again").write_text("in q, now e")
    vol.restart()
    assert sorted(os.listdir(m / "a")) == ["x", "y"] and (m / "a" / "x").read_text() == "new x"
    assert sorted(os.listdir(m / "b")) == ["sub", "z"] and os.listdir(m / "b" / "sub") == ["w"]
    assert sorted(os.listdir(m / "e")) == ["again", "sub"] and sorted(os.listdir(m / "e" / "sub")) == ["from-q", "g"]
    vol.stop()
    r = cli("fs", "fsck", str(vol.lower), "--passphrase-file", str(vol.pwfile))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_many_entries_and_long_names(vol: Mount) -> None:
    d = vol.mnt / "many"
    d.mkdir()
    for i in range(2000):
        (d / f"file-{i:05d}").write_bytes(b"")
    long = "L" * 200
    (d / long).write_text("long")
    names = os.listdir(d)
    assert len(names) == 2001 and long in names
    assert (d / long).read_text() == "long"
    os.rename(d / long, d / (long + "2"))
    assert (d / (long + "2")).read_text() == "long" and not (d / long).exists()
    lower_names = [p.name for p in vol.lower.rglob("*")]
    assert any(n.startswith("strongroom.longname.") for n in lower_names)
    with pytest.raises(OSError) as e:
        (d / ("x" * 256)).write_text("too long")
    assert e.value.errno == errno.ENAMETOOLONG
    # FORMAT.md §5: a symlink target of up to 2,959 bytes fits the lower target's 4,095
    os.symlink("t" * 2959, d / "longest-link")
    assert os.readlink(d / "longest-link") == "t" * 2959
    with pytest.raises(OSError) as e:
        os.symlink("t" * 2960, d / "too-long-link")
    assert e.value.errno == errno.ENAMETOOLONG


def test_metadata_xattrs_statfs(vol: Mount) -> None:
    p = vol.mnt / "m"
    p.write_text("meta")
    os.chmod(p, 0o640)
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    os.chown(p, 1234, 5678)
    assert (p.stat().st_uid, p.stat().st_gid) == (1234, 5678)
    os.utime(p, ns=(1_000_000_000_123, 2_000_000_000_456))
    assert p.stat().st_mtime_ns == 2_000_000_000_456
    os.setxattr(p, "user.comment", b"secret attribute value")
    assert os.getxattr(p, "user.comment") == b"secret attribute value"
    assert os.listxattr(p) == ["user.comment"]
    lower = vol.lower_files()[0]
    assert all(n.startswith("user.sr.") for n in os.listxattr(lower))
    assert b"secret attribute" not in os.getxattr(lower, os.listxattr(lower)[0])
    os.removexattr(p, "user.comment")
    assert os.listxattr(p) == []
    for other in ("security.capability", "trusted.note", "user.missing"):  # only user.* is stored
        with pytest.raises(OSError) as e:
            os.getxattr(p, other)
        assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        os.setxattr(p, "trusted.note", b"x")
    assert e.value.errno == errno.ENOTSUP
    st = os.statvfs(vol.mnt)
    assert st.f_blocks > 0 and st.f_namemax == 255
    with open(p, "r+b") as f:
        f.write(b"sync")
        os.fsync(f.fileno())
        os.fdatasync(f.fileno())


def test_only_ciphertext_reaches_the_disk(vol: Mount) -> None:
    marker = b"PLAINTEXT-MARKER-" * 1000
    (vol.mnt / "secret-name.txt").write_bytes(marker)
    (vol.mnt / "secret-dir").mkdir()
    os.symlink("secret-target", vol.mnt / "secret-link")
    for p in vol.lower.rglob("*"):
        assert b"secret" not in p.name.encode()
        if p.is_symlink():
            assert "secret" not in os.readlink(p)
        elif p.is_file():
            assert b"PLAINTEXT-MARKER" not in p.read_bytes()


def test_concurrent_writers_never_show_half_a_block(vol: Mount) -> None:
    """Two processes rewrite the same block with all-A and all-B; a reader that asks the daemon
    (O_DIRECT: past the page cache, which tears concurrent buffered I/O on any Linux filesystem)
    sees one or the other, thanks to the per-file lock around each read-modify-write."""
    import mmap
    import multiprocessing

    p = vol.mnt / "shared"
    p.write_bytes(b"A" * 4096)

    def writer(byte: bytes, n: int) -> None:
        fd = os.open(p, os.O_WRONLY)
        for _ in range(n):
            os.pwrite(fd, byte * 4096, 0)
        os.close(fd)

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=writer, args=(b, 300)) for b in (b"A", b"B")]
    for pr in procs:
        pr.start()
    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)  # page-aligned
    reads = 0
    while any(pr.is_alive() for pr in procs):
        assert os.preadv(fd, [buf], 0) == 4096
        assert buf[:] in (b"A" * 4096, b"B" * 4096), (buf[:].count(b"A"), buf[:].count(b"B"))
        reads += 1
    os.close(fd)
    assert reads > 10
    for pr in procs:
        pr.join()
        assert pr.exitcode == 0


def test_shared_mmap(vol: Mount) -> None:
    import mmap

    p = vol.mnt / "mapped"
    p.write_bytes(bytes(3 * 4096))
    with open(p, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED)
        m[4090:4110] = b"x" * 20  # across a block boundary
        m.flush()
        m.close()
    vol.restart()
    data = p.read_bytes()
    assert data[4090:4110] == b"x" * 20 and data.count(b"x") == 20 and len(data) == 3 * 4096


@contextlib.contextmanager
def _on_a_small_disk(tmp_path: Path, size: str) -> Iterator[tuple[Mount, Path]]:
    """A volume on a tmpfs of ``size`` (mounted, with that disk's path), for full-disk tests."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(small)], check=True)
    m = Mount(small, "vol").init()
    m.mnt = tmp_path / "mnt"
    m.mnt.mkdir()
    try:
        yield m.start(), small
    finally:
        m.stop()
        subprocess.run(["umount", str(small)], check=False)


def test_enospc_never_leaves_a_block_unreadable(tmp_path: Path) -> None:
    with _on_a_small_disk(tmp_path, "1m") as (m, _):
        (m.mnt / "grow").write_bytes(b"g" * 5000)  # a partial last block, rewritten by each append
        full = False
        for i in range(400):
            try:
                with open(m.mnt / "grow", "ab") as f:
                    f.write(bytes([i % 256]) * 3000)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                assert e.errno == errno.ENOSPC
                full = True
                break
        assert full, "the 1 MiB filesystem never filled"
        data = (m.mnt / "grow").read_bytes()  # no EIO anywhere: every block opens
        assert data[:5000] == b"g" * 5000 and len(data) >= 5000
        # A new file whose first write finds the disk full is left empty, and usable once there
        # is room again (its header is written with its first blocks, or not at all).
        with open(m.mnt / "new", "wb", buffering=0) as f:
            try:
                f.write(b"n" * 200_000)
                os.fsync(f.fileno())
            except OSError as e:
                assert e.errno == errno.ENOSPC
            else:
                raise AssertionError("a 200 kB write fitted on a full filesystem")
            assert os.fstat(f.fileno()).st_size == 0
            (m.mnt / "grow").unlink()
            f.seek(0)
            f.write(b"m" * 6000)
        assert (m.mnt / "new").read_bytes() == b"m" * 6000
        m.stop()
        r = cli_fsck(m)
        assert r.returncode == 0, r.stdout


def test_hard_links_are_exact_at_once_with_attr_timeout_zero(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start("--attr-timeout", "0")
    try:
        (m.mnt / "a").write_text("1")
        assert (m.mnt / "a").read_text() == "1"
        os.link(m.mnt / "a", m.mnt / "b")
        for text in ("two", "three!", "4"):
            (m.mnt / "b").write_text(text)
            assert (m.mnt / "a").read_text() == text
    finally:
        m.stop()


def test_stat_reports_the_mounts_preferred_io_size(vol: Mount) -> None:
    """cp and stdio size their buffers by st_blksize: the mount's 1 MiB requests, not the lower 4 KiB."""
    from strongroom.fs.fileio import MAX_REQUEST

    f = vol.mnt / "blk"
    f.write_bytes(b"x")
    assert os.stat(f).st_blksize == MAX_REQUEST == 1 << 20
    assert os.stat(vol.mnt).st_blksize == MAX_REQUEST


def test_a_write_into_a_hole_on_a_full_disk_answers_enospc_and_changes_nothing(tmp_path: Path) -> None:
    """The room a write needs (holes it fills included) is reserved before anything is written:
    a full lower disk answers ENOSPC and the block reads as before, never torn (EIO)."""
    with _on_a_small_disk(tmp_path, "2m") as (m, small):
        sparse = m.mnt / "sparse"
        with open(sparse, "wb") as f:
            f.write(b"a")
            f.seek(1 << 20)
            f.write(b"z")
            f.flush()
            os.fsync(f.fileno())
        before = sparse.read_bytes()
        with open(small / "filler", "wb", buffering=0) as f:  # the rest of the lower disk
            try:
                while True:
                    f.write(bytes(4096))
            except OSError as e:
                assert e.errno == errno.ENOSPC
        fd = os.open(sparse, os.O_WRONLY)
        try:
            for offset in (512 << 10, (512 << 10) + 100):  # whole blocks, and partial ones
                with pytest.raises(OSError) as e:
                    os.pwrite(fd, b"h" * 8192, offset)
                assert e.value.errno == errno.ENOSPC
        finally:
            os.close(fd)
        assert sparse.read_bytes() == before  # no EIO, nothing changed
        (small / "filler").unlink()
        with open(sparse, "r+b") as f:
            f.seek(512 << 10)
            f.write(b"h" * 8192)
        after = sparse.read_bytes()
        assert after[512 << 10 : (512 << 10) + 8192] == b"h" * 8192 and after[:1] == b"a"
        m.stop()
        r = cli_fsck(m)
        assert r.returncode == 0, r.stdout


def cli_fsck(m: Mount) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "strongroom.cli.main", "fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile)],
        capture_output=True,
    )


@pytest.mark.parametrize("dev", [False, True], ids=["nodev-default", "dev"])
def test_device_nodes_open_only_with_dev(tmp_path: Path, dev: bool) -> None:
    m = Mount(tmp_path).init().start(*(["--dev"] if dev else []))
    try:
        os.mknod(m.mnt / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        if dev:
            with open(m.mnt / "null", "wb") as f:
                assert f.write(b"to /dev/null") == 12
        else:
            with pytest.raises(PermissionError):
                open(m.mnt / "null", "wb")  # noqa: SIM115 - it must not open
        # O_TMPFILE: libfuse 3.14's path-based API has no such operation (FILESYSTEM.md)
        with pytest.raises(OSError) as e:
            os.open(m.mnt, os.O_TMPFILE | os.O_RDWR, 0o600)
        assert e.value.errno == errno.EOPNOTSUPP
    finally:
        m.stop()
