"""Listings carry full attributes (READDIRPLUS): right ones, and the kernel keeps them."""

from __future__ import annotations

import os
import stat
import time

from tests.fs.mounts import Mount


def test_a_listing_gives_each_entry_its_plaintext_attributes(vol: Mount) -> None:
    m = vol.mnt
    (m / "d").mkdir()
    sizes = {"empty": 0, "one": 1, "block": 4096, "odd": 4097 * 3 + 5}
    for name, n in sizes.items():
        (m / "d" / name).write_bytes(os.urandom(n))
    os.chmod(m / "d" / "odd", 0o640)
    os.utime(m / "d" / "one", ns=(1_600_000_000_000_000_000, 1_600_000_000_123_456_789))
    os.symlink("a/target/of/some/length", m / "d" / "link")
    (m / "d" / "sub").mkdir()
    vol.stop()
    vol.start()  # nothing cached in the kernel: the listing below is a fresh READDIRPLUS
    with os.scandir(m / "d") as it:
        seen = {e.name: e.stat(follow_symlinks=False) for e in it}
    assert set(seen) == set(sizes) | {"link", "sub"}
    for name, n in sizes.items():
        assert seen[name].st_size == n, name  # plaintext sizes, not the lower files'
        assert stat.S_ISREG(seen[name].st_mode)
    assert stat.S_IMODE(seen["odd"].st_mode) == 0o640
    assert seen["one"].st_mtime_ns == 1_600_000_000_123_456_789
    assert stat.S_ISLNK(seen["link"].st_mode) and seen["link"].st_size == len("a/target/of/some/length")
    assert stat.S_ISDIR(seen["sub"].st_mode)
    assert seen["odd"].st_blksize == 1 << 20
    for name, st in seen.items():  # the same as a stat by name says
        assert os.lstat(m / "d" / name).st_ino == st.st_ino


def test_the_kernel_keeps_a_listings_attributes(vol: Mount) -> None:
    """After a listing, a stat is answered from what the listing said (no LOOKUP per name): shown by
    changing the mode behind the mount's back, which only a round trip to the daemon would see."""
    (vol.mnt / "f").write_bytes(b"x")
    os.chmod(vol.mnt / "f", 0o644)
    (lower,) = [p for p in vol.lower_files() if p.is_file() and p.stat().st_size > 0]
    for _attempt in range(5):  # the kernel keeps a listing's entries for 1 s: measure inside that
        vol.stop()
        vol.start()
        os.chmod(lower, 0o644)
        t0 = time.monotonic()
        assert os.listdir(vol.mnt) == ["f"]
        os.chmod(lower, 0o600)  # behind the mount's back
        cached = stat.S_IMODE(os.stat(vol.mnt / "f").st_mode)
        if time.monotonic() - t0 < 0.5:
            break
    assert cached == 0o644, "the stat reached the daemon: the listing did not carry attributes"
    time.sleep(1.2)  # past the entry timeout: the change behind its back is seen
    assert stat.S_IMODE(os.stat(vol.mnt / "f").st_mode) == 0o600
