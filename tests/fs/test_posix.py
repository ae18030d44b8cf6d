"""POSIX semantics for every user and every file type, through a real --allow-other mount:
owners and groups of new entries, set-group-ID and sticky directories, permission errors, FIFOs,
Unix sockets and device nodes, modes and times exactly as asked, EFBIG, hard links exact through
every name, and files unlinked while open.  Other users are child processes that dropped to them."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fs.mounts import Mount

NOBODY, OTHER, GROUP = 65534, 65533, 4242  # GROUP: one neither user is a member of


@pytest.fixture
def shared() -> Iterator[Mount]:
    root = Path(tempfile.mkdtemp(prefix="sr-posix-"))
    root.chmod(0o755)
    m = Mount(root).init().start("--allow-other")
    m.mnt.chmod(0o777)
    yield m
    m.stop()
    shutil.rmtree(root)


def as_user(uid: int, code: str, gid: int | None = None, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python child that dropped to uid (and gid, default the same), no extra groups."""
    prologue = (
        f"import os, errno, socket\nos.setgroups([])\nos.setgid({uid if gid is None else gid})\n"
        f"os.setuid({uid})\nos.umask({umask})\n"
    )
    return subprocess.run([sys.executable, "-c", prologue + code], capture_output=True, text=True, timeout=60)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


def owner(p: Path) -> tuple[int, int]:
    st = os.lstat(p)
    return st.st_uid, st.st_gid


def test_new_entries_belong_to_their_creator(shared: Mount) -> None:
    m = shared.mnt
    (m / "root-file").write_text("r")
    os.chmod(m / "root-file", 0o666)  # protected_hardlinks: others may link only what they may write
    ok(
        as_user(
            NOBODY,
            f"""
d = {str(m)!r}
open(d + '/file', 'w').write('x')
os.mkdir(d + '/dir')
os.symlink('file', d + '/link')
os.mkfifo(d + '/fifo')
s = socket.socket(socket.AF_UNIX); s.bind(d + '/sock'); s.close()
os.mknod(d + '/node', 0o600 | 0o100000)
os.link(d + '/file', d + '/hard')
""",
        )
    )
    for name in ("file", "dir", "link", "fifo", "sock", "node", "hard"):
        assert owner(m / name) == (NOBODY, NOBODY), name
    assert stat.S_ISFIFO(os.lstat(m / "fifo").st_mode) and stat.S_ISSOCK(os.lstat(m / "sock").st_mode)
    # what the lower directory holds is owned the same way: no moment under another owner
    lower = {os.lstat(p).st_uid for p in shared.lower.iterdir() if not p.name.startswith("strongroom.")}
    assert lower == {0, NOBODY}
    # a hard link keeps its file's owner, whoever makes it
    ok(as_user(OTHER, f"os.link({str(m / 'root-file')!r}, {str(m / 'other-hard')!r})"))
    assert owner(m / "other-hard") == (0, 0)


def test_set_group_id_directory(shared: Mount) -> None:
    d = shared.mnt / "sgid"
    d.mkdir()
    os.chown(d, 0, GROUP)
    os.chmod(d, 0o2777)
    ok(
        as_user(
            NOBODY,
            f"""
d = {str(d)!r}
os.close(os.open(d + '/f', os.O_CREAT | os.O_WRONLY, 0o2755))
os.mkdir(d + '/sub', 0o755)
os.mkfifo(d + '/p')
""",
        )
    )
    assert owner(d / "f") == (NOBODY, GROUP)
    # not a member of GROUP: the new file's set-group-ID bit is dropped, as ext4 drops it
    assert stat.S_IMODE(os.stat(d / "f").st_mode) == 0o755
    assert owner(d / "sub") == (NOBODY, GROUP) and os.stat(d / "sub").st_mode & stat.S_ISGID
    assert owner(d / "p") == (NOBODY, GROUP)
    # root may keep it
    fd = os.open(d / "g", os.O_CREAT | os.O_WRONLY, 0o2755)
    os.close(fd)
    assert stat.S_IMODE(os.stat(d / "g").st_mode) == 0o2755 and owner(d / "g") == (0, GROUP)


def test_sticky_directory(shared: Mount) -> None:
    d = shared.mnt / "tmp"
    d.mkdir()
    os.chmod(d, 0o1777)
    ok(as_user(NOBODY, f"open({str(d / 'mine')!r}, 'w').write('x')"))
    r = as_user(
        OTHER,
        f"""
for call in (lambda: os.unlink({str(d / "mine")!r}), lambda: os.rename({str(d / "mine")!r}, {str(d / "theirs")!r})):
    try:
        call()
        print('allowed')
    except PermissionError as e:
        print(errno.errorcode[e.errno])
""",
    )
    assert ok(r).split() == ["EPERM", "EPERM"]
    ok(as_user(NOBODY, f"os.unlink({str(d / 'mine')!r})"))
    assert not (d / "mine").exists()


def test_permission_errors_for_non_owners(shared: Mount) -> None:
    m = shared.mnt
    f = m / "f"
    f.write_text("data")
    os.chmod(f, 0o644)
    ro = m / "ro"
    ro.mkdir(mode=0o755)
    (ro / "x").write_text("x")
    code = f"""
def e(call):
    try:
        call()
        return 'ok'
    except OSError as x:
        return errno.errorcode[x.errno]
f, ro = {str(f)!r}, {str(ro)!r}
print(e(lambda: os.chmod(f, 0o777)), e(lambda: os.chown(f, {NOBODY}, {NOBODY})),
      e(lambda: os.utime(f, (1, 1))), e(lambda: os.utime(f)), e(lambda: os.truncate(f, 0)),
      e(lambda: os.open(f, os.O_WRONLY)), e(lambda: os.unlink(ro + '/x')), e(lambda: os.link(f, ro + '/y')),
      e(lambda: os.rename(ro + '/x', {str(m / "moved")!r})), e(lambda: os.mkdir(ro + '/d')))
"""
    # link: protected_hardlinks refuses a file the caller may not write before the directory's
    # own permission is asked, as on ext4
    expected = ["EPERM", "EPERM", "EPERM", "EACCES", "EACCES", "EACCES", "EACCES", "EPERM", "EACCES", "EACCES"]
    assert ok(as_user(NOBODY, code)).split() == expected
    assert f.read_text() == "data" and (ro / "x").exists()


def test_fifo_between_a_writer_and_a_reader(shared: Mount) -> None:
    p = shared.mnt / "pipe"
    os.mkfifo(p, 0o666)
    writer = subprocess.Popen(["sh", "-c", f"for i in 1 2 3; do echo line$i; done > {p}"])
    r = as_user(NOBODY, f"print(open({str(p)!r}).read(), end='')")
    writer.wait(30)
    assert ok(r) == "line1\nline2\nline3\n"


def test_unix_socket_server_and_client_on_the_mount(shared: Mount) -> None:
    path = shared.mnt / "server.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen(1)
    talk = (
        f"import socket\nc = socket.socket(socket.AF_UNIX)\nc.connect({str(path)!r})\n"
        "c.sendall(b'hello')\nprint(c.recv(5).decode())"
    )
    client = subprocess.Popen(
        [sys.executable, "-c", talk],
        stdout=subprocess.PIPE,
        text=True,
    )
    conn, _ = server.accept()
    assert conn.recv(5) == b"hello"
    conn.sendall(b"world")
    out, _ = client.communicate(timeout=30)
    assert out.strip() == "world"
    conn.close()
    server.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    # the lower entry is a socket under an encrypted name
    lower = [p for p in shared.lower.iterdir() if not p.name.startswith("strongroom.")]
    assert [stat.S_ISSOCK(os.lstat(p).st_mode) for p in lower] == [True] and "server" not in lower[0].name
    os.unlink(path)
    assert not path.exists()


def test_device_nodes_for_root_only(shared: Mount) -> None:
    m = shared.mnt
    os.mknod(m / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(m / "blk", 0o600 | stat.S_IFBLK, os.makedev(7, 200))
    st = os.lstat(m / "null")
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
    st = os.lstat(m / "blk")
    assert stat.S_ISBLK(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (7, 200)
    assert [e.name for e in os.scandir(m) if not e.is_file() and not e.is_dir()] != []
    r = as_user(NOBODY, f"os.mknod({str(m / 'mine')!r}, 0o666 | 0o020000, os.makedev(1, 3))")
    assert r.returncode != 0 and "Operation not permitted" in r.stderr
    listing = subprocess.run(["ls", "-l", str(m)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"1,\s+3 ", listing) and re.search(r"7,\s+200 ", listing)


def test_modes_are_the_callers_without_the_daemons_umask(shared: Mount) -> None:
    m = shared.mnt
    ok(
        as_user(
            NOBODY,
            f"""
os.close(os.open({str(m / "f")!r}, os.O_CREAT | os.O_WRONLY, 0o666))
os.mkdir({str(m / "d")!r}, 0o777)
os.mkfifo({str(m / "p")!r}, 0o666)
""",
            umask=0,
        )
    )
    assert [stat.S_IMODE(os.lstat(m / n).st_mode) for n in ("f", "d", "p")] == [0o666, 0o777, 0o666]
    ok(as_user(NOBODY, f"os.close(os.open({str(m / 'g')!r}, os.O_CREAT | os.O_WRONLY, 0o666))", umask=0o027))
    assert stat.S_IMODE(os.lstat(m / "g").st_mode) == 0o640


def _utimensat(path: Path, atime: tuple[int, int], mtime: tuple[int, int]) -> None:
    class Ts(ctypes.Structure):
        _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]

    libc = ctypes.CDLL(None, use_errno=True)
    times = (Ts * 2)(Ts(*atime), Ts(*mtime))
    assert libc.utimensat(-100, os.fsencode(path), times, 0) == 0, os.strerror(ctypes.get_errno())


def test_utime_now_and_omit_mean_what_they_say(shared: Mount) -> None:
    f = shared.mnt / "t"
    f.write_text("x")
    now_ns, omit_ns = (1 << 30) - 1, (1 << 30) - 2
    os.utime(f, ns=(1_000_000_000_123, 2_000_000_000_456))
    _utimensat(f, (0, now_ns), (0, omit_ns))  # `touch -a`
    st = os.stat(f)
    assert abs(st.st_atime - time.time()) < 5 and st.st_mtime_ns == 2_000_000_000_456
    _utimensat(f, (0, omit_ns), (0, now_ns))  # `touch -m`
    st = os.stat(f)
    assert abs(st.st_mtime - time.time()) < 5 and abs(st.st_atime - time.time()) < 5
    os.utime(f, ns=(5, 6))
    subprocess.run(["touch", str(f)], check=True)  # both now
    st = os.stat(f)
    assert abs(st.st_atime - time.time()) < 5 and abs(st.st_mtime - time.time()) < 5


def test_sizes_past_the_format_answer_efbig_at_once(shared: Mount) -> None:
    from strongroom.fs.fileio import MAX_FILE_SIZE

    f = shared.mnt / "big"
    f.write_bytes(b"keep")
    start = time.monotonic()
    with pytest.raises(OSError) as e:
        os.truncate(f, 999_999_999_999_999)
    assert e.value.errno == errno.EFBIG
    fd = os.open(f, os.O_WRONLY)
    try:
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"x", MAX_FILE_SIZE)
        assert e.value.errno == errno.EFBIG
    finally:
        os.close(fd)
    assert time.monotonic() - start < 10
    assert f.read_bytes() == b"keep"
    assert sum(p.stat().st_size for p in shared.lower.rglob("*") if p.is_file()) < 1 << 20


def test_hard_links_are_exact_through_every_name_at_once(shared: Mount) -> None:
    """With the default attribute timeout: no name shows another's stale size, count or mode."""
    a, b, c = (shared.mnt / n for n in "abc")
    a.write_bytes(b"1")
    for p in (a,):
        os.stat(p)  # the kernel caches a
    os.link(a, b)
    assert os.stat(a).st_nlink == os.stat(b).st_nlink == 2
    os.link(b, c)
    assert [os.stat(p).st_nlink for p in (a, b, c)] == [3, 3, 3]
    os.chmod(b, 0o600)
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in (a, b, c)} == {0o600}
    with open(c, "ab") as f:
        f.write(b"23")
    assert [os.stat(p).st_size for p in (a, b, c)] == [3, 3, 3]
    assert a.read_bytes() == b"123"
    fd = os.open(a, os.O_RDONLY)  # an open name sees a write through another at once
    try:
        assert os.pread(fd, 10, 0) == b"123"
        b.write_bytes(b"rewritten")
        assert os.pread(fd, 20, 0) == b"rewritten" and os.fstat(fd).st_size == 9
    finally:
        os.close(fd)
    os.unlink(a)
    assert [os.stat(p).st_nlink for p in (b, c)] == [2, 2]
    os.rename(b, shared.mnt / "b2")
    os.unlink(c)
    assert os.stat(shared.mnt / "b2").st_nlink == 1


def test_a_file_unlinked_while_open(shared: Mount) -> None:
    d = shared.mnt / "dir"
    d.mkdir()
    f = d / "f"
    f.write_bytes(b"hello")
    fd = os.open(f, os.O_RDWR)
    try:
        os.unlink(f)
        assert os.listdir(d) == []  # gone at once, as on ext4: no .fuse_hidden* entry
        st = os.fstat(fd)
        assert st.st_nlink == 0 and st.st_size == 5
        os.pwrite(fd, b" world", 5)
        assert os.pread(fd, 100, 0) == b"hello world"
        os.fchmod(fd, 0o600)
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        os.setxattr(fd, "user.k", b"v")
        assert os.getxattr(fd, "user.k") == b"v"
        os.ftruncate(fd, 4)
        assert os.pread(fd, 100, 0) == b"hell"
        os.rmdir(d)  # its directory is empty
    finally:
        os.close(fd)
    assert [p.name for p in shared.lower.iterdir() if not p.name.startswith("strongroom.")] == []


def test_unsupported_requests_answer_an_errno_and_the_daemon_stays(shared: Mount) -> None:
    import fcntl

    f = shared.mnt / "f"
    f.write_bytes(b"x" * 10_000)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f, os.O_RDWR)
    try:
        collapse, insert = 0x08, 0x20  # FALLOC_FL_COLLAPSE_RANGE, _INSERT_RANGE: would shift every later block
        for _ in range(3):
            for mode in (collapse, insert):
                assert libc.fallocate(fd, mode, ctypes.c_long(0), ctypes.c_long(4096)) == -1
                assert ctypes.get_errno() == errno.EOPNOTSUPP
            with pytest.raises(OSError) as e:
                fcntl.ioctl(fd, 0x80086601, b"\0" * 8)  # FS_IOC_GETFLAGS
            assert e.value.errno == errno.ENOTTY
    finally:
        os.close(fd)
    assert f.read_bytes() == b"x" * 10_000 and shared.proc is not None and shared.proc.poll() is None
    # the kernel itself refuses fallocate modes FUSE does not carry; the ioctl reached the daemon
    assert shared.log.read_text().count("ioctl 0x80086601 is not supported") == 1
    assert "fallocate mode" not in shared.log.read_text()  # (FILESYSTEM.md: the kernel does not pass them)
