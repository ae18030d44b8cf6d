"""Set-user-ID and set-group-ID bits through the mount.  The mount takes their clearing over from
the kernel (FUSE_HANDLE_KILLPRIV_V2, negotiated by fuseio.c because libfuse 3.14 cannot): the
daemon clears them on a write, a truncate or an O_TRUNC open by a caller without CAP_FSETID
(set-group-ID only on a group-executable file), and the lower chown clears them on any chown.
The unprivileged caller here is a child process that dropped to nobody.  Every test runs twice:
with the set-id shim (the default) and without it (--no-setid-shim: the kernel clears the bits
itself, with its own extra requests), and the result must be the same."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.fs import fuseio
from tests.fs.mounts import Mount

NOBODY = 65534


@pytest.fixture(params=["--setid-shim", "--no-setid-shim"])
def shared(request: pytest.FixtureRequest) -> Iterator[Mount]:
    """A mount other users can reach (allow_other, and parents they may traverse)."""
    root = Path(tempfile.mkdtemp(prefix="sr-setid-"))
    root.chmod(0o755)
    m = Mount(root).init().start("--allow-other", request.param)
    m.mnt.chmod(0o777)
    yield m
    m.stop()
    shutil.rmtree(root)


def as_nobody(code: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", f"import os\nos.setgid({NOBODY})\nos.setuid({NOBODY})\n{code}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def made(m: Mount, name: str, mode: int) -> Path:
    path = m.mnt / name
    path.write_bytes(b"x" * 10_000)
    os.chmod(path, mode)
    assert mode_of(path) == mode
    return path


def test_who_clears_set_id_bits_is_as_asked(shared: Mount, request: pytest.FixtureRequest) -> None:
    assert fuseio.available(), "libsrfuseio.so is built by the package build, setup.py"
    deadline = time.monotonic() + 10  # the line is written by a thread once INIT is answered
    while "set-id bits are cleared" not in shared.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    who = "daemon" if "--setid-shim" in request.node.callspec.params.values() else "kernel"
    assert f"set-id bits are cleared by the {who}" in shared.log.read_text()
    assert "requests are read by one libfuse thread at a time (reader baton)" in shared.log.read_text()


def test_a_write_by_an_unprivileged_caller_clears_set_id_bits(shared: Mount) -> None:
    path = made(shared, "f", 0o6777)
    as_nobody(f"fd = os.open({str(path)!r}, os.O_WRONLY)\nos.pwrite(fd, b'y', 5000)\nos.close(fd)")
    assert mode_of(path) == 0o777
    assert path.read_bytes() == b"x" * 5000 + b"y" + b"x" * 4999


def test_a_whole_block_rewritten_in_place_clears_set_id_bits(shared: Mount) -> None:
    """The write the fast path takes (fastwrite.c), but of a set-id file: handed on, cleared."""
    path = made(shared, "f", 0o6777)
    as_nobody(f"fd = os.open({str(path)!r}, os.O_WRONLY)\nos.pwrite(fd, b'y' * 4096, 4096)\nos.close(fd)")
    assert mode_of(path) == 0o777
    assert path.read_bytes() == b"x" * 4096 + b"y" * 4096 + b"x" * 1808


def test_set_group_id_stays_on_a_file_that_is_not_group_executable(shared: Mount) -> None:
    path = made(shared, "f", 0o6766)
    as_nobody(f"fd = os.open({str(path)!r}, os.O_WRONLY)\nos.write(fd, b'y')\nos.close(fd)")
    assert mode_of(path) == 0o2766


def test_a_write_by_root_keeps_set_id_bits(shared: Mount) -> None:
    path = made(shared, "f", 0o6777)
    with open(path, "r+b") as f:
        f.write(b"y")
    assert mode_of(path) == 0o6777


def test_a_truncate_by_an_unprivileged_caller_clears_set_id_bits(shared: Mount) -> None:
    path = made(shared, "f", 0o6777)
    as_nobody(f"os.truncate({str(path)!r}, 100)")
    assert mode_of(path) == 0o777 and path.read_bytes() == b"x" * 100


def test_an_o_trunc_open_by_an_unprivileged_caller_clears_set_id_bits(shared: Mount) -> None:
    path = made(shared, "f", 0o6777)
    as_nobody(f"os.close(os.open({str(path)!r}, os.O_WRONLY | os.O_TRUNC))")
    assert mode_of(path) == 0o777 and path.read_bytes() == b""


def test_an_o_trunc_open_by_root_keeps_set_id_bits(shared: Mount) -> None:
    path = made(shared, "f", 0o6777)
    os.close(os.open(path, os.O_WRONLY | os.O_TRUNC))
    assert mode_of(path) == 0o6777 and path.read_bytes() == b""


def test_a_chown_clears_set_user_id_even_by_root(shared: Mount) -> None:
    path = made(shared, "f", 0o6755)
    os.chown(path, 1000, 1000)
    assert mode_of(path) == 0o755 and os.stat(path).st_uid == 1000


def test_system_and_security_attributes_read_as_absent(shared: Mount) -> None:
    path = made(shared, "f", 0o644)
    for name in ("security.capability", "system.posix_acl_access", "trusted.x"):
        with pytest.raises(OSError) as e:
            os.getxattr(path, name)
        assert e.value.errno == errno.ENODATA
    os.setxattr(path, "user.k", b"v")  # user attributes still go to the daemon
    assert os.getxattr(path, "user.k") == b"v"
