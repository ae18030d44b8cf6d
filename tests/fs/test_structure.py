"""Format version 5 authenticates the structure (FORMAT.md §6, §5): each attack here is made on
the lower directory with file operations only -- no key -- as someone who can write the disk
would, and each must read as EIO through the mount and be named by fsck.  On a version-4 volume
the same edits went unnoticed (FORMAT.md §8 said so)."""

from __future__ import annotations

import errno
import io
import os
import shutil
from pathlib import Path

import pytest

from strongroom.fs import config, names, standalone
from tests.fs.mounts import PASSPHRASE, Mount
from tests.serverproc import cli


def _fsck(m: Mount) -> str:
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    return r.stdout.decode()


def _errno(fn: object, *args: object) -> int:
    try:
        fn(*args)  # type: ignore[operator]
    except OSError as e:
        return e.errno or 0
    return 0


def _moved_pair(tmp_path: Path) -> tuple[Mount, Path, Path]:
    """A volume whose directories a/ and b/ (each holding a file) store their tweaks (they were
    moved once), and the lower paths of a/ and b/."""
    m = Mount(tmp_path).init().start()
    try:
        for d in ("a", "b"):
            (m.mnt / f"{d}0").mkdir()
            (m.mnt / f"{d}0" / f"in-{d}").write_text(f"I live in {d}")
            os.rename(m.mnt / f"{d}0", m.mnt / d)
            os.setxattr(m.mnt / d, "user.where", d.encode())
    finally:
        m.stop()
    a, b = m.lower_of("a"), m.lower_of("b")
    assert (a / names.DIRIV).stat().st_size == 32 and (b / names.DIRIV).stat().st_size == 32
    return m, a, b


def test_swapped_directories_with_their_stored_tweaks_read_as_eio(tmp_path: Path) -> None:
    """(a) the lower names of two directories swapped; each keeps its stored tweak."""
    m, a, b = _moved_pair(tmp_path)
    tmp = a.with_name("swap")
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)
    m.start()
    try:
        assert _errno(os.listdir, m.mnt / "a") == errno.EIO
        assert _errno(os.listdir, m.mnt / "b") == errno.EIO
        assert _errno(os.getxattr, m.mnt / "a", "user.where") == errno.EIO
    finally:
        m.stop()
    out = _fsck(m)
    assert out.count("does not authenticate here") == 2, out


def test_a_file_moved_to_a_directory_given_the_source_tweak_reads_as_eio(tmp_path: Path) -> None:
    """(b) a file's lower entry moved into another directory, which is given the source's
    stored tweak; (c) the source's attribute copied along to the destination."""
    m, a, b = _moved_pair(tmp_path)
    (entry,) = [p for p in a.iterdir() if not p.name.startswith("strongroom.")]
    os.rename(entry, b / entry.name)
    shutil.copyfile(a / names.DIRIV, b / names.DIRIV)  # (the tweak file is replaced, as an attacker can)
    for lower in os.listxattr(a):
        os.setxattr(b, lower, os.getxattr(a, lower))
    m.start()
    try:
        assert _errno(os.listdir, m.mnt / "b") == errno.EIO
        assert _errno(os.stat, m.mnt / "b" / "in-a") == errno.EIO
        assert _errno(os.getxattr, m.mnt / "b", "user.where") == errno.EIO
        assert os.listdir(m.mnt / "a") == []  # the source lost it: deletion is not detected (§8)
    finally:
        m.stop()
    assert "does not authenticate here" in _fsck(m)


def test_a_stored_tweak_cannot_be_forged_for_a_derived_one(tmp_path: Path) -> None:
    """A never-moved directory derives its tweak under the dir-ids key: storing any 16- or 32-byte
    value (a version-4 style tweak, or another directory's record) makes it unreadable."""
    m = Mount(tmp_path).init().start()
    try:
        (m.mnt / "d").mkdir()
        (m.mnt / "d" / "f").write_text("x")
        (m.mnt / "e").mkdir()
        os.rename(m.mnt / "e", m.mnt / "e2")  # e2 stores a record
    finally:
        m.stop()
    d, e2 = m.lower_of("d"), m.lower_of("e2")
    assert not (d / names.DIRIV).exists()
    for forged in (os.urandom(16), (e2 / names.DIRIV).read_bytes(), os.urandom(48)):
        (d / names.DIRIV).write_bytes(forged)
        m.start()
        try:
            assert _errno(os.listdir, m.mnt / "d") == errno.EIO, forged
        finally:
            m.stop()
        assert "directory tweak" in _fsck(m)
    (d / names.DIRIV).unlink()
    m.start()
    try:
        assert (m.mnt / "d" / "f").read_text() == "x"  # the derived one reads again
    finally:
        m.stop()


def test_directory_moves_keep_their_entries_readable_and_one_tag(tmp_path: Path) -> None:
    """A moved directory's record is bound to its new place (one tag once the move is done); a
    rename that fails leaves it bound to its old place; moving it back works."""
    m = Mount(tmp_path).init().start()
    try:
        (m.mnt / "x" / "y").mkdir(parents=True)
        (m.mnt / "x" / "y" / "f").write_text("deep")
        (m.mnt / "z").mkdir()
        os.rename(m.mnt / "x", m.mnt / "z" / "x2")
        assert (m.mnt / "z" / "x2" / "y" / "f").read_text() == "deep"
        (m.mnt / "full").mkdir()
        (m.mnt / "full" / "keep").write_text("k")
        assert _errno(os.rename, m.mnt / "z" / "x2", m.mnt / "full") == errno.ENOTEMPTY
        os.rename(m.mnt / "z" / "x2", m.mnt / "x")
        assert (m.mnt / "x" / "y" / "f").read_text() == "deep"
    finally:
        m.stop()
    assert (m.lower_of("x") / names.DIRIV).stat().st_size == 32
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0 and b"clean" in r.stdout, r.stdout


def _symlink_target_bytes(m: Mount, plain: str) -> bytes:
    raw = os.readlink(m.lower_of(plain))
    return names.unb64u(raw)


@pytest.mark.parametrize("attack", ["file-as-symlink", "symlink-as-file", "export-as-file"])
def test_object_kinds_are_kept_apart(tmp_path: Path, attack: str) -> None:
    """A file's lower bytes as a symlink target, a symlink's sealed target as a file, and a
    volume-keyed export stripped of its envelope and end marker as a file: each is EIO."""
    m = Mount(tmp_path).init().start()
    try:
        (m.mnt / "small").write_text("a small file")
        os.symlink("/etc/hostname", m.mnt / "link")
        (m.mnt / "victim").write_text("v")
        os.symlink("t", m.mnt / "victim-link")
    finally:
        m.stop()
    if attack == "file-as-symlink":
        target = m.lower_of("victim-link")
        target.unlink()
        os.symlink(names.b64u(m.lower_of("small").read_bytes()), target)
        probe = lambda: os.readlink(m.mnt / "victim-link")  # noqa: E731
    elif attack == "symlink-as-file":
        m.lower_of("victim").write_bytes(_symlink_target_bytes(m, "link"))
        probe = lambda: (m.mnt / "victim").read_bytes()  # noqa: E731
    else:
        cfg = config.VolumeConfig.load(m.lower)
        vk = cfg.unlock_passphrase(PASSPHRASE)
        out = io.BytesIO()
        standalone.encrypt_stream(io.BytesIO(b"exported secret"), out, vk.volume_id, vk.kek, None)
        data = out.getvalue()
        length = int.from_bytes(data[4:8], "big")
        m.lower_of("victim").write_bytes(data[8 + length : -36])
        probe = lambda: (m.mnt / "victim").read_bytes()  # noqa: E731
    m.start()
    try:
        assert _errno(probe) == errno.EIO
    finally:
        m.stop()
    assert "object kind" in _fsck(m)
