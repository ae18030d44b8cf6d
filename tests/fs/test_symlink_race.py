"""A process that can write the lower directory must not make the daemon touch a file outside the
volume (in the spirit of gocryptfs's tests/symlink_race): while an attacker swaps a lower entry
between the real file and a symlink to an outside file, as fast as it can, the mount's user
chmods, chowns, opens, writes, truncates and links the plaintext name.  The outside file's mode,
owner, content and link count must not change."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from strongroom.fs import config, names
from tests.fs.mounts import PASSPHRASE, Mount


def test_a_symlink_swapped_in_below_the_daemon_is_never_followed(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    outside = tmp_path / "outside"
    outside.write_bytes(b"must stay as it is\n")
    os.chmod(outside, 0o600)
    before = outside.stat()
    try:
        (m.mnt / "victim").write_bytes(b"x" * 10000)
        iv = (m.lower / names.DIRIV).read_bytes()
        nc = names.NameCipher(config.VolumeConfig.load(m.lower).unlock_passphrase(PASSPHRASE).names)
        lower = m.lower / nc.lower_name(b"victim", iv)[0]
        real = lower.with_name(lower.name + ".real")
        os.link(lower, real)
        stop = threading.Event()
        swaps = 0

        def attacker() -> None:
            nonlocal swaps
            link = lower.with_name(lower.name + ".evil")
            while not stop.is_set():
                try:
                    os.symlink(outside, link)
                    os.replace(link, lower)  # the name now points outside
                    os.link(real, link)
                    os.replace(link, lower)  # and back to the real file
                    swaps += 1
                except OSError:
                    continue

        t = threading.Thread(target=attacker)
        t.start()
        deadline = time.monotonic() + 4
        tries = 0
        while time.monotonic() < deadline:
            tries += 1
            for op in (
                lambda: os.chmod(m.mnt / "victim", 0o777),
                lambda: os.chown(m.mnt / "victim", 12345, 12345),
                lambda: (m.mnt / "victim").write_bytes(b"overwritten"),
                lambda: os.truncate(m.mnt / "victim", 0),
                lambda n=tries: os.link(m.mnt / "victim", m.mnt / f"copy{n}"),
                lambda: os.utime(m.mnt / "victim", (1, 1)),
            ):
                try:
                    op()
                except OSError:
                    pass  # refused or raced: what matters is what happened outside
        stop.set()
        t.join()
        assert swaps > 100, swaps
    finally:
        m.stop()
    after = outside.stat()
    assert outside.read_bytes() == b"must stay as it is\n"
    assert (after.st_mode, after.st_uid, after.st_gid, after.st_nlink) == (before.st_mode, before.st_uid, before.st_gid, 1)
    assert after.st_mtime_ns == before.st_mtime_ns


def test_a_directory_swapped_for_a_symlink_is_never_walked_through(tmp_path: Path) -> None:
    """The same with a directory on the way: the attacker swaps the lower directory for a symlink
    to an outside directory holding a file under the same lower name."""
    m = Mount(tmp_path).init().start()
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir()
    try:
        (m.mnt / "d").mkdir()
        (m.mnt / "d" / "victim").write_bytes(b"x" * 10000)
        iv = (m.lower / names.DIRIV).read_bytes()
        nc = names.NameCipher(config.VolumeConfig.load(m.lower).unlock_passphrase(PASSPHRASE).names)
        lower_d = m.lower / nc.lower_name(b"d", iv)[0]
        (lower_victim,) = [p for p in lower_d.iterdir() if not p.name.startswith("strongroom.")]
        outside = outside_dir / lower_victim.name
        outside.write_bytes(lower_victim.read_bytes())  # a file the daemon could read as the victim
        os.chmod(outside, 0o600)
        original = outside.read_bytes()
        before = outside.stat()
        real = lower_d.with_name(lower_d.name + ".real")
        stop = threading.Event()
        swaps = 0

        def attacker() -> None:
            nonlocal swaps
            link = lower_d.with_name(lower_d.name + ".evil")
            while not stop.is_set():
                try:
                    os.rename(lower_d, real)
                    os.symlink(outside_dir, link)
                    os.rename(link, lower_d)  # the directory now leads outside
                    time.sleep(0.05)  # long enough for the mount's requests to land in it
                    os.unlink(lower_d)
                    os.rename(real, lower_d)  # and back
                    swaps += 1
                    time.sleep(0.005)
                except OSError:
                    continue

        t = threading.Thread(target=attacker)
        t.start()
        deadline = time.monotonic() + 4
        tries = 0
        victim = m.mnt / "d" / "victim"
        while time.monotonic() < deadline:
            tries += 1
            for op in (
                lambda: os.chmod(victim, 0o777),
                lambda: os.chown(victim, 12345, 12345),
                lambda: victim.write_bytes(b"overwritten"),
                lambda: os.truncate(victim, 0),
                lambda n=tries: os.link(victim, m.mnt / f"copy{n}"),
                lambda: os.utime(victim, (1, 1)),
                lambda: os.setxattr(victim, "user.planted", b"v"),
                lambda: os.unlink(victim),
            ):
                try:
                    op()
                except OSError:
                    pass
        stop.set()
        t.join()
        if not lower_d.is_dir() or lower_d.is_symlink():
            os.replace(real, lower_d)
        assert swaps > 20, swaps
    finally:
        m.stop()
    after = outside.stat()
    assert outside.read_bytes() == original
    assert (after.st_mode, after.st_uid, after.st_gid, after.st_nlink, after.st_size, after.st_mtime_ns) == (
        before.st_mode,
        before.st_uid,
        before.st_gid,
        1,
        before.st_size,
        before.st_mtime_ns,
    )
    assert not [a for a in os.listxattr(outside) if a.startswith("user.")]
    assert sorted(p.name for p in outside_dir.iterdir()) == [outside.name]
