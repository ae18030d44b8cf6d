"""The audit chain head mirrored in the data dir is made durable before a batch is acknowledged.
A power cut cannot be caused here, so the test watches for the flush itself: every advance
fdatasyncs the head file's own descriptor after writing it (mocking only the fault)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strongroom.server.headfile import HeadFile


def test_every_advance_is_flushed_before_it_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    head = HeadFile(tmp_path / "audit.head")
    flushed: list[tuple[int, bytes]] = []
    real = os.fdatasync

    def watch(fd: int) -> None:
        flushed.append((os.fstat(fd).st_ino, os.pread(fd, 200, 0)))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", watch)
    head.advance(1, b"\x01" * 32)
    head.advance(2, b"\x02" * 32)
    head.advance(1, b"\x03" * 32)  # never moved back: nothing written, nothing to flush
    ino = (tmp_path / "audit.head").stat().st_ino
    assert [(i, data.split()[0]) for i, data in flushed] == [(ino, b"1"), (ino, b"2")]
    assert head.read() == (2, b"\x02" * 32)
