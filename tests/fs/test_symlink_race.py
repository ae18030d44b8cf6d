"""A process that can write the lower directory must not make the daemon touch a file outside the
volume (in the spirit of gocryptfs's tests/symlink_race): while an attacker keeps swapping a lower
entry (a file, or a directory on the way to one) for a symlink to the outside and back, the
mount's user chmods, chowns, writes, truncates, links, utimes, sets attributes on and unlinks the
plaintext name.  The outside file's mode, owner, size, times, content and link count must not
change, and nothing may appear beside it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from strongroom.fs import names
from tests.fs.mounts import Mount


def _hammer(m: Mount, victim: Path, swap: Callable[[], None], seconds: float = 4) -> int:
    """Run ``swap`` in a loop in a thread while changing ``victim`` through the mount every way
    the daemon changes a lower entry; returns how many swaps the attacker completed."""
    stop = threading.Event()
    swaps = 0

    def attacker() -> None:
        nonlocal swaps
        while not stop.is_set():
            try:
                swap()
                swaps += 1
            except OSError:
                continue

    t = threading.Thread(target=attacker)
    t.start()
    deadline, tries = time.monotonic() + seconds, 0
    try:
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
                    pass  # refused or raced: what matters is what happened outside
    finally:
        stop.set()
        t.join()
    return swaps


def _unchanged(outside: Path, content: bytes, before: os.stat_result) -> None:
    after = outside.stat()
    assert outside.read_bytes() == content
    assert (after.st_mode, after.st_uid, after.st_gid, after.st_nlink, after.st_size, after.st_mtime_ns) == (
        before.st_mode,
        before.st_uid,
        before.st_gid,
        1,
        before.st_size,
        before.st_mtime_ns,
    )
    assert not [a for a in os.listxattr(outside) if a.startswith("user.")]
    assert [p.name for p in outside.parent.iterdir()] == [outside.name]


def _outside(directory: Path, name: str, content: bytes) -> tuple[Path, os.stat_result]:
    directory.mkdir()
    outside = directory / name
    outside.write_bytes(content)
    os.chmod(outside, 0o600)
    return outside, outside.stat()


def test_a_symlink_swapped_in_below_the_daemon_is_never_followed(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    try:
        (m.mnt / "victim").write_bytes(b"x" * 10000)
        lower = m.lower_of("victim")
        outside, before = _outside(tmp_path / "outside", "target", b"must stay as it is\n")
        real, evil = lower.with_name(lower.name + ".real"), lower.with_name(lower.name + ".evil")
        os.link(lower, real)

        def swap() -> None:
            os.symlink(outside, evil)
            os.replace(evil, lower)  # the name now points outside
            os.link(real, evil)
            os.replace(evil, lower)  # and back to the real file

        assert _hammer(m, m.mnt / "victim", swap) > 100
    finally:
        m.stop()
    _unchanged(outside, b"must stay as it is\n", before)


def test_a_directory_swapped_for_a_symlink_is_never_walked_through(tmp_path: Path) -> None:
    """The same with a directory on the way: the lower directory is swapped for a symlink to an
    outside directory holding a copy of the victim under its lower name."""
    m = Mount(tmp_path).init().start()
    try:
        (m.mnt / "d").mkdir()
        (m.mnt / "d" / "victim").write_bytes(b"x" * 10000)
        lower_d = m.lower_of("d")
        (lower_victim,) = [p for p in lower_d.iterdir() if not p.name.startswith(names.RESERVED)]
        copy = lower_victim.read_bytes()  # a file the daemon could take for the victim
        outside, before = _outside(tmp_path / "outside", lower_victim.name, copy)
        real, evil = lower_d.with_name(lower_d.name + ".real"), lower_d.with_name(lower_d.name + ".evil")

        def swap() -> None:
            os.rename(lower_d, real)
            os.symlink(outside.parent, evil)
            os.rename(evil, lower_d)  # the directory now leads outside
            time.sleep(0.05)  # long enough for the mount's requests to land in it
            os.unlink(lower_d)
            os.rename(real, lower_d)  # and back
            time.sleep(0.005)

        assert _hammer(m, m.mnt / "d" / "victim", swap, seconds=6) > 20
        if lower_d.is_symlink() or not lower_d.exists():
            if lower_d.is_symlink():
                lower_d.unlink()
            os.rename(real, lower_d)
    finally:
        m.stop()
    _unchanged(outside, copy, before)
