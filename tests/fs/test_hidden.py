"""hidden.py: a file renamed over while open stays reachable a moment after libfuse's last close,
then its descriptor is closed (its space freed) without anything else happening; an unlinked
one is closed at once; names the daemon let go of answer ESTALE outside renames and unlinks."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from strongroom.fs import hidden

pytestmark = pytest.mark.unit
NAME = "/d/.fuse_hidden0000000a00000001"


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as e:
        return e.errno == errno.EBADF
    return False


def _wait_closed(fd: int) -> None:
    deadline = time.monotonic() + 5
    while not _closed(fd):
        assert time.monotonic() < deadline, "the lingering descriptor was never closed"
        time.sleep(0.05)


def _kept(tmp_path: Path) -> tuple[hidden.HiddenFiles, int, int]:
    """Two hidden names held: NAME renamed over (descriptor a), NAME + "2" unlinked (b)."""
    h = hidden.HiddenFiles()
    a = os.open(tmp_path, os.O_RDONLY)
    b = os.open(tmp_path, os.O_RDONLY)
    h.keep(NAME, a, renamed_over=True)
    h.keep(NAME + "2", b, renamed_over=False)
    return h, a, b


def test_renamed_over_lingers_then_is_closed_unlinked_closes_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hidden, "LINGER_S", 0.2)
    h, a, b = _kept(tmp_path)
    assert h.release(NAME) and h.release(NAME + "2")
    assert _closed(b) and not _closed(a) and NAME in h.fds  # still served, for walks begun before
    _wait_closed(a)
    assert NAME not in h.fds
    assert not h.release(NAME)  # not one any more


def test_missing_errno() -> None:
    h = hidden.HiddenFiles()
    getattr_op, rename_op, unlink_op = 3, 12, 10
    assert h.missing_errno(NAME, getattr_op) == errno.ESTALE  # the kernel walks the path again
    assert h.missing_errno(NAME, rename_op) == errno.ENOENT  # libfuse probing for a free name
    assert h.missing_errno(NAME, unlink_op) == errno.ENOENT
    assert h.missing_errno(NAME, 0) == errno.ENOENT  # opcode unknown: as before
    assert h.missing_errno("/d/plain", getattr_op) == errno.ENOENT


def test_a_descriptor_in_use_or_opened_through_is_never_closed_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hidden, "LINGER_S", 0.1)
    h, a, b = _kept(tmp_path)
    with h.use(NAME + "2") as fd:
        assert fd == b
        assert h.release(NAME + "2")  # an unlinked file's last close, while a request works on it
        assert not _closed(b)
    assert _closed(b) and NAME + "2" not in h.fds  # closed as the request is done with it
    with h.use(NAME) as fd:
        assert fd == a
        h.opened(NAME, 7)  # a file opened through the name
    assert h.release(NAME)
    time.sleep(0.4)
    h.release(NAME)  # (runs the expiry again)
    assert not _closed(a) and NAME in h.fds  # still open through it: kept past its moment
    h.closed(7)
    assert not _closed(a)  # another moment, from that close
    _wait_closed(a)  # and closed once unused
    with h.use(NAME) as fd:
        assert fd is None
