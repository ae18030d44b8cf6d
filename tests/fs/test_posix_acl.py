"""POSIX ACLs on a mount, with the real tools (setfacl, getfacl, rsync -A): the kernel enforces
them, the daemon stores them encrypted, keeps modes in step and gives new entries their
directory's default ACL (with the umask applied only where no default ACL is)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fs.mounts import Mount
from tests.serverproc import cli

pytestmark = pytest.mark.skipif(shutil.which("setfacl") is None or shutil.which("rsync") is None, reason="needs acl, rsync")


@pytest.fixture
def shared() -> Iterator[Mount]:
    base = Path(tempfile.mkdtemp(prefix="sr-acl-"))  # reachable by another user (pytest's tmp is not)
    base.chmod(0o755)
    m = Mount(base).init().start("--allow-other")
    m.mnt.chmod(0o755)
    yield m
    m.stop()
    shutil.rmtree(base, ignore_errors=True)


def _sh(script: str, user: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["su", user, "-s", "/bin/sh", "-c", script] if user else ["sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=60)


def _acl(path: Path) -> str:
    r = _sh(f"getfacl --omit-header --absolute-names {path}")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_an_acl_grants_and_takes_away_and_the_mode_follows(shared: Mount) -> None:
    f = shared.mnt / "f"
    f.write_text("secret\n")
    f.chmod(0o600)
    assert _sh(f"cat {f}", "nobody").returncode != 0
    assert _sh(f"setfacl -m u:nobody:r {f}").returncode == 0
    assert "user:nobody:r--" in _acl(f)
    assert oct(f.stat().st_mode & 0o777) == oct(0o640)  # the group class is the mask
    r = _sh(f"cat {f}", "nobody")
    assert r.returncode == 0 and r.stdout == "secret\n", r.stderr
    f.chmod(0o600)  # chmod takes the mask away, and with it nobody's read
    assert "mask::---" in _acl(f)
    assert _sh(f"cat {f}", "nobody").returncode != 0
    assert _sh(f"setfacl -b {f}").returncode == 0
    assert "nobody" not in _acl(f)


def test_default_acls_are_inherited_and_the_umask_applies_only_without_one(shared: Mount) -> None:
    d = shared.mnt / "d"
    d.mkdir()
    assert _sh(f"setfacl -d -m u:nobody:rwx,g::rwx {d}").returncode == 0
    assert _sh(f"umask 077; touch {d}/new; mkdir {d}/sub").returncode == 0
    new, sub = _acl(d / "new"), _acl(d / "sub")
    assert "user:nobody:rwx\t#effective:rw-" in new and "mask::rw-" in new
    assert "default:user:nobody:rwx" in sub  # a directory inherits the default too
    assert oct((d / "new").stat().st_mode & 0o777) == oct(0o664)  # the umask is not applied
    assert _sh(f"echo hi > {d}/new", "nobody").returncode == 0
    assert _sh(f"umask 077; touch {shared.mnt}/plain; mkdir {shared.mnt}/plaindir").returncode == 0
    assert oct((shared.mnt / "plain").stat().st_mode & 0o777) == oct(0o600)  # no default ACL: umask
    assert oct((shared.mnt / "plaindir").stat().st_mode & 0o777) == oct(0o700)


def test_rsync_A_carries_acls_in_and_out_and_they_are_stored_encrypted(shared: Mount, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "dir").mkdir(parents=True)
    (src / "dir" / "file").write_text("x")
    assert _sh(f"setfacl -m u:nobody:rw {src}/dir/file && setfacl -d -m g:nogroup:rx {src}/dir").returncode == 0
    r = _sh(f"rsync -aA {src}/ {shared.mnt}/copy/")
    assert r.returncode == 0, r.stderr
    assert _acl(shared.mnt / "copy" / "dir" / "file") == _acl(src / "dir" / "file")
    assert _acl(shared.mnt / "copy" / "dir") == _acl(src / "dir")
    back = tmp_path / "back"
    r = _sh(f"rsync -aA {shared.mnt}/copy/ {back}/")
    assert r.returncode == 0, r.stderr
    assert _acl(back / "dir" / "file") == _acl(src / "dir" / "file")
    shared.stop()
    for p in shared.lower.rglob("*"):
        if p.is_symlink():
            continue
        for name in os.listxattr(p):
            assert "posix_acl" not in name and b"nobody" not in os.getxattr(p, name)  # (base64url may spell "acl")
    r = cli("fs", "fsck", str(shared.lower), "--passphrase-file", str(shared.pwfile))
    assert r.returncode == 0, r.stdout
