"""Notifications to the kernel (drop what you cache for this path), sent by one thread of their
own, never by a thread serving a request.

Why a thread of its own: the kernel answers an invalidation only after it has locked the
name's pages and waited for their writeback.  A writer holding those pages (a buffered write, a
page fault of a shared mapping, an msync) waits in turn for its WRITE to be answered by the
daemon.  Sent from a request's thread, the notification could wait for a request that only
another blocked thread would serve: with two names written at once, both writers and the daemon
hung forever, and killing the daemon released nothing.  Here request threads only queue paths
and return; the one thread that talks to the kernel serves no request, so every lock the
kernel waits on is released by a request some other, free thread answers.  The cost is that
another name's cache is dropped just after the request is answered rather than just before.

Pending paths are kept once each (a burst of writes through one name queues each other name
once) and are bounded by the hard-link table they come from (links.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("strongroom.fs")


def drop_nothing(path: str) -> None:
    """Off a mount (a reader of an unmounted volume) there is no kernel cache to drop."""


class Notifier:
    """Queues paths from request threads; ``send`` is called with each on the notifier's thread."""

    def __init__(self, send: Callable[[str], object], name: str = "strongroom-notify") -> None:
        self._send = send
        self._pending: dict[str, None] = {}  # insertion-ordered set
        self._wake = threading.Condition(threading.Lock())
        self._busy = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def post(self, path: str) -> None:
        """Queue ``path``; returns at once, whatever the kernel is doing."""
        with self._wake:
            if path not in self._pending:
                self._pending[path] = None
                self._wake.notify()

    def idle(self, timeout: float) -> bool:
        """Wait until everything queued has been sent (for tests and shutdown, never from a
        request); False if that took longer than ``timeout``."""
        with self._wake:
            return self._wake.wait_for(lambda: not self._pending and not self._busy, timeout)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify_all()

    def _run(self) -> None:
        while True:
            with self._wake:
                self._busy = False
                self._wake.notify_all()
                self._wake.wait_for(lambda: self._pending or self._stopped)
                if self._stopped:
                    return
                path = next(iter(self._pending))
                del self._pending[path]
                self._busy = True
            try:
                self._send(path)
            except Exception:  # noqa: BLE001 - a failed notification costs a stale cache, not the thread
                log.exception("could not tell the kernel to drop its cache of a path")
