"""What the FUSE front answers for failures no operation expected: MemoryError is ENOMEM (never
EINVAL), anything else EIO, and each kind is logged at most once a minute, however often it
happens (a broken rules file, a caller nobody can identify, used to log on every request)."""

from __future__ import annotations

import errno
import logging
import time
from types import SimpleNamespace

import pytest

from strongroom.fs import fuse_front
from strongroom.fs.ratelog import RateLimitedLog

pytestmark = pytest.mark.unit


def _front() -> fuse_front.Fuse:
    front = object.__new__(fuse_front.Fuse)
    front.operations = SimpleNamespace(warm=None)
    return front


def _raising(exc: BaseException, name: str = "read") -> object:
    def op(*_: object) -> int:
        raise exc

    op.__name__ = name
    return op


def test_memory_error_is_enomem_and_other_surprises_eio(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fuse_front, "_ratelog", RateLimitedLog(logging.getLogger("strongroom.fs")))
    front = _front()
    with caplog.at_level(logging.ERROR, "strongroom.fs"):
        for _ in range(500):
            assert front._wrapper(_raising(MemoryError())) == -errno.ENOMEM
            assert front._wrapper(_raising(KeyError("x"), "getattr")) == -errno.EIO
            assert front._wrapper(_raising(OSError(errno.ENOSPC, "full"))) == -errno.ENOSPC
    lines = [r.getMessage() for r in caplog.records]
    assert lines.count("out of memory serving read: answered ENOMEM") == 1
    assert lines.count("unexpected KeyError serving getattr: answered EIO") == 1
    assert len(lines) == 2


def test_rate_limited_log_says_how_many_it_held_back(caplog: pytest.LogCaptureFixture) -> None:
    log = RateLimitedLog(logging.getLogger("t"), interval=0.2)
    with caplog.at_level(logging.INFO, "t"):
        assert log(logging.INFO, "k", "same %s", 1)
        assert not any([log(logging.INFO, "k", "same %s", 1) for _ in range(3)])
        assert log(logging.INFO, "other", "other")  # keys are apart
        time.sleep(0.25)
        assert log(logging.INFO, "k", "same %s", 1)
    assert [r.getMessage() for r in caplog.records] == ["same 1", "other", "same 1 (3 more like this held back)"]
