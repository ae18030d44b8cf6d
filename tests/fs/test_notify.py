"""The notifier (notify.py): posting never waits for the kernel, each pending path is sent once."""

from __future__ import annotations

import threading
import time

import pytest

from strongroom.fs.notify import Notifier

pytestmark = pytest.mark.unit


def test_post_returns_while_a_send_is_blocked_and_pending_paths_are_sent_once() -> None:
    release = threading.Event()
    sent: list[str] = []

    def send(path: str) -> None:
        sent.append(path)
        release.wait(10)  # the kernel waiting for a page lock

    n = Notifier(send)
    n.post("/a")
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.001)
    start = time.monotonic()
    for _ in range(1000):  # while "/a" is stuck in the kernel
        n.post("/b")
        n.post("/c")
    assert time.monotonic() - start < 1.0
    assert not n.idle(0.05)
    release.set()
    assert n.idle(5)
    assert sent == ["/a", "/b", "/c"]
    n.stop()


def test_a_failing_send_does_not_stop_the_thread() -> None:
    sent: list[str] = []

    def send(path: str) -> None:
        sent.append(path)
        if path == "/bad":
            raise OSError("gone")

    n = Notifier(send)
    n.post("/bad")
    n.post("/good")
    assert n.idle(5)
    assert sent == ["/bad", "/good"]
    n.stop()
