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
