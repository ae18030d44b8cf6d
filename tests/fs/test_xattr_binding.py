"""Extended attribute values are bound to their file (format version 4, FORMAT.md §6): a lower
value copied to another file or directory reads as EIO there; the binding follows a file through
its first write, a truncation to nothing and a reencrypt; a version-3 volume keeps its values,
bound to their names only."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from strongroom.fs import config, xattrs
from tests.fs.mounts import PASSPHRASE, Mount
from tests.serverproc import cli


def _user_attrs(p: Path) -> list[str]:
    return [a for a in os.listxattr(p) if a.startswith(xattrs.PREFIX)]


def test_a_value_moved_to_another_entry_reads_as_eio(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    for name in ("a", "b"):
        (m.mnt / name).write_bytes(os.urandom(5000))
    for name in ("empty1", "empty2"):
        (m.mnt / name).touch()
    for name in ("d1", "d2"):
        (m.mnt / name).mkdir()
    for name in ("a", "d1", "empty1"):
        os.setxattr(m.mnt / name, "user.secret", f"value of {name}".encode())
    m.stop()
    moves = {"a": "b", "d1": "d2"}
    for src, dst in moves.items():
        lower_src, lower_dst = m.lower_of(src), m.lower_of(dst)
        (attr,) = _user_attrs(lower_src)
        os.setxattr(lower_dst, attr, os.getxattr(lower_src, attr))
    m.start()
    try:
        for src, dst in moves.items():
            assert os.getxattr(m.mnt / src, "user.secret") == f"value of {src}".encode()
            with pytest.raises(OSError) as e:
                os.getxattr(m.mnt / dst, "user.secret")
            assert e.value.errno == errno.EIO, dst
        assert "moved from another file" in m.log.read_text()
    finally:
        m.stop()
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 1 and r.stdout.count(b"extended attribute does not open") == 2, r.stdout


def test_the_binding_follows_a_file_through_its_life(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    f = m.mnt / "f"
    try:
        f.touch()
        os.setxattr(f, "user.note", b"kept")
        f.write_bytes(b"now with content")  # a header and a file id
        assert os.getxattr(f, "user.note") == b"kept"
        with open(m.mnt / "new", "xb") as out:  # made, given a value, then written while open
            os.setxattr(m.mnt / "new", "user.note", b"early")
            out.write(b"first bytes")
        assert os.getxattr(m.mnt / "new", "user.note") == b"early"
        os.truncate(f, 0)  # no header again
        assert os.getxattr(f, "user.note") == b"kept"
        with open(f, "ab") as out:
            out.write(os.urandom(10000))
        os.link(f, m.mnt / "g")
        assert os.getxattr(m.mnt / "g", "user.note") == b"kept"
    finally:
        m.stop()
    r = cli("fs", "reencrypt", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stderr
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stdout
    m.start()
    try:
        assert os.getxattr(f, "user.note") == b"kept" and os.getxattr(m.mnt / "g", "user.note") == b"kept"
    finally:
        m.stop()


def test_a_version_3_volume_keeps_its_values(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().as_version(3).start()
    vk = config.VolumeConfig.load(m.lower).unlock_passphrase(PASSPHRASE)
    try:
        (m.mnt / "a").write_bytes(b"x" * 100)
        os.setxattr(m.mnt / "a", "user.old", b"name-bound")
    finally:
        m.stop()
    (attr,) = _user_attrs(m.lower_of("a"))
    xc = xattrs.XattrCipher(vk.xattr_names, vk.xattr_values)
    assert xc.open_value(attr, os.getxattr(m.lower_of("a"), attr), None) == b"name-bound"  # version 3's rule
    m.start()
    try:
        assert os.getxattr(m.mnt / "a", "user.old") == b"name-bound"
    finally:
        m.stop()
