"""fs/beneath.py: entries reached beneath the root, parent directories kept open briefly."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from strongroom.fs import beneath
from strongroom.fs.beneath import Beneath

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _make(root: Path, name: str, at: beneath.Entry) -> None:
    os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=at.dir_fd))


def test_a_parent_is_kept_for_a_while_then_looked_up_again(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    clock = Clock()
    b = Beneath(str(tmp_path), clock)
    lookups: list[str] = []
    real = b._open_rel
    b._open_rel = lambda rel: lookups.append(rel) or real(rel)  # type: ignore[method-assign]
    with b.path(str(tmp_path / "a" / "b" / "x")) as first:
        fd = first.dir_fd
    clock.now += beneath.DIR_CACHE_S / 2
    with b.path(str(tmp_path / "a" / "b" / "y")) as again:
        assert again.dir_fd == fd
    assert lookups == ["a/b"]  # one lookup for both
    clock.now += beneath.DIR_CACHE_S / 2
    # moved away and replaced meanwhile by someone else: noticed once the time is up
    (tmp_path / "a" / "b").rename(tmp_path / "a" / "old")
    (tmp_path / "a" / "b").mkdir()
    with b.path(str(tmp_path / "a" / "b" / "z")) as later:
        _make(tmp_path, later.name, later)
    assert (tmp_path / "a" / "b" / "z").exists() and not (tmp_path / "a" / "old" / "z").exists()
    assert lookups == ["a/b", "a/b"]
    b.close()


def test_one_step_below_a_kept_directory_is_trusted_no_longer_than_it(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (root / "a" / "c").symlink_to(outside)
    clock = Clock()
    b = Beneath(str(root), clock)
    lookups: list[str] = []
    real = b._open_rel
    b._open_rel = lambda rel: lookups.append(rel) or real(rel)  # type: ignore[method-assign]
    with b.path(str(root / "a" / "x")):
        pass
    clock.now += beneath.DIR_CACHE_S / 2
    with b.path(str(root / "a" / "b" / "y")) as at:
        _make(root, at.name, at)
    assert (root / "a" / "b" / "y").exists()
    assert lookups == []  # opened from the kept "a", not looked up from the root
    assert b._held["a/b"].born == b._held["a"].born
    with pytest.raises(OSError) as caught:  # a symlink one step below is not followed either
        b.path(str(root / "a" / "c" / "f"))
    assert caught.value.errno == errno.ELOOP
    clock.now += beneath.DIR_CACHE_S / 2  # both expire together
    with b.path(str(root / "a" / "b" / "z")):
        pass
    assert lookups == ["a/b"]
    assert not list(outside.iterdir())
    b.close()


def test_forget_drops_a_directory_and_those_below_it(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "d").mkdir()
    b = Beneath(str(tmp_path), Clock())
    for d in ("a", "a/b", "c/d"):
        with b.path(str(tmp_path / d / "x")):
            pass
    b.forget(str(tmp_path / "a"))
    assert sorted(b._held) == ["c/d"]
    (tmp_path / "a" / "b").rename(tmp_path / "moved")
    (tmp_path / "a" / "b").mkdir()
    with b.path(str(tmp_path / "a" / "b" / "new")) as at:
        _make(tmp_path, at.name, at)
    assert (tmp_path / "a" / "b" / "new").exists()
    b.forget()
    assert not b._held
    b.close()


def test_a_descriptor_in_use_is_closed_only_after_its_last_user(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    b = Beneath(str(tmp_path), Clock())
    before = _open_fds()
    with b.path(str(tmp_path / "a" / "x")) as at:
        b.forget()  # e.g. another thread's rmdir elsewhere
        os.fstat(at.dir_fd)  # still open: the call in flight keeps its directory
        _make(tmp_path, at.name, at)
    assert _open_fds() == before
    assert (tmp_path / "a" / "x").exists()
    b.close()


def test_kept_descriptors_are_bounded(tmp_path: Path) -> None:
    b = Beneath(str(tmp_path), Clock())
    before = _open_fds()
    for i in range(beneath.DIR_CACHE + 20):
        (tmp_path / f"d{i}").mkdir()
        with b.path(str(tmp_path / f"d{i}" / "x")):
            pass
    assert _open_fds() - before == beneath.DIR_CACHE
    b.close()
    assert _open_fds() == before - 1  # and the root's own descriptor


def test_no_symlink_is_followed_on_the_way(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    b = Beneath(str(root), Clock())
    with b.path(str(root / "a" / "x")):
        pass
    (root / "a").rename(root / "gone")
    (root / "a").symlink_to(outside)
    b.forget()
    with pytest.raises(OSError) as caught:
        b.path(str(root / "a" / "x"))
    assert caught.value.errno in (errno.ELOOP, errno.EXDEV)
    os.close(b.open(str(root / "gone" / "f"), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC))
    (root / "gone" / "g").symlink_to(outside / "target")
    with pytest.raises(OSError) as caught:
        b.open(str(root / "gone" / "g"), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC)
    assert caught.value.errno == errno.ELOOP
    assert not (outside / "target").exists()
    with pytest.raises(OSError) as caught:
        b.path(str(tmp_path / "outside" / "x"))
    assert caught.value.errno == errno.EXDEV
    b.close()


def test_without_openat2_the_walk_refuses_a_symlink_on_the_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(beneath, "_has_openat2", False)  # an old kernel: one component at a time
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (root / "a" / "c").symlink_to(outside)
    b = Beneath(str(root), Clock())
    with b.path(str(root / "a" / "b" / "x")) as at:
        _make(root, at.name, at)
    assert (root / "a" / "b" / "x").exists()
    with pytest.raises(OSError) as caught:
        b.path(str(root / "a" / "c" / "d" / "f"))
    assert caught.value.errno == errno.ELOOP
    assert not list(outside.iterdir())
    b.close()
