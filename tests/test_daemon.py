"""Detached work (strongroom/daemon.py): the parent returns once the child is ready, or raises
the child's own error when it failed before that."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from strongroom.daemon import DetachError, run_detached

pytestmark = pytest.mark.unit


def _log() -> logging.Handler:
    return logging.NullHandler()


def test_the_childs_error_before_ready_reaches_the_parent() -> None:
    def work(ready: Callable[[], None]) -> None:
        raise RuntimeError("cannot open /dev/nothing")

    with pytest.raises(DetachError, match="cannot open /dev/nothing"):
        run_detached(work, _log)


def test_the_parent_returns_once_the_child_is_ready(tmp_path: Path) -> None:
    marker = tmp_path / "child"

    def work(ready: Callable[[], None]) -> None:
        marker.write_text(f"{os.getpid()} {os.getsid(0)}")
        ready()
        time.sleep(0.2)  # still running when the parent goes on

    run_detached(work, _log)
    pid, sid = (int(x) for x in marker.read_text().split())
    assert pid != os.getpid() and sid == pid  # its own session: detached from the terminal
