"""Accepting connections, with the TLS handshake bounded: each worker lets one source address hold
at most HANDSHAKES_PER_SOURCE connections that have not finished their handshake (more are
closed at once, before any TLS) and gives each handshake ``timeout`` seconds; then the
connection belongs to the HTTP protocol (httpproto.py), whose own bounds take over.

Why not the event loop's ``create_server(ssl=...)``: there the handshake runs before any code of
ours sees the connection, with the loop's own 60 s deadline and no cap, so idle TCP connections
from one address could hold every descriptor.  Here the worker accepts (``loop.sock_accept``,
where the peer's address is known), counts, and hands the socket to
``loop.connect_accepted_socket`` with the TLS context and the deadline -- public asyncio API,
the same in uvloop, whose TLS layer is the one used before.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

log = logging.getLogger("strongroom.server.tls")

HANDSHAKES_PER_SOURCE = 64
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
FAILURES_BEFORE_PAUSE = 64
LISTENER_CHECK_S = 2.0  # how often an idle gate looks whether its listener still listens


class Gate:
    def __init__(
        self,
        listener: socket.socket,
        factory: Callable[[], Any],
        context: ssl.SSLContext,
        timeout: float,
        on_broken: Callable[[], None],
    ) -> None:
        self.listener = listener
        self.on_broken = on_broken  # the worker stops, and its supervisor starts another
        self.factory = factory  # the HTTP protocol, as uvicorn makes it
        self.context = context
        self.timeout = timeout
        self.pending: dict[str, int] = {}  # unfinished handshakes per source address
        self._task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.listener.setblocking(False)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._accept())
        self._watch_task = loop.create_task(self._watch())

    def stop(self) -> None:
        """Stop accepting (the listening socket stays open: the other workers share it) and drop
        the handshakes still under way."""
        for task in [self._task, self._watch_task, *self._handshakes]:
            if task is not None:
                task.cancel()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0  # in a row: a listener that fails every accept must not spin the worker
        while True:
            try:
                conn, addr = await loop.sock_accept(self.listener)
            except (OSError, ValueError) as e:  # ValueError: uvloop's answer for a closed socket
                code = e.errno if isinstance(e, OSError) else None
                name = errno.errorcode.get(code or 0, "closed")
                if not self._listening():
                    self._broken(name)
                    return
                failures += 1
                if code in _OUT_OF_DESCRIPTORS or failures >= FAILURES_BEFORE_PAUSE:
                    log.warning("cannot accept a connection (%s); retrying in 0.1 s", name)
                    failures = 0
                    await asyncio.sleep(0.1)
                continue  # ECONNABORTED and the like: that connection is gone, the next one is not
            failures = 0
            source = str(addr[0]) if isinstance(addr, tuple) and addr else ""
            if self.pending.get(source, 0) >= HANDSHAKES_PER_SOURCE:
                conn.close()
                continue
            self.pending[source] = self.pending.get(source, 0) + 1
            task = loop.create_task(self._handshake(conn, source))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _watch(self) -> None:
        """A descriptor closed under a pending accept never wakes it (epoll forgets a closed
        descriptor): look every LISTENER_CHECK_S whether the listener still listens.  Apart from
        the accept, so that no accept is ever cancelled with a connection in hand."""
        while self._task is not None and not self._task.done():
            await asyncio.sleep(LISTENER_CHECK_S)
            if not self._listening() and self._task is not None and not self._task.done():
                self._task.cancel()
                self._broken("closed")
                return

    def _listening(self) -> bool:
        try:
            return self.listener.fileno() != -1 and self.listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        except OSError:
            return False

    def _broken(self, why: str) -> None:
        log.error("the listening socket failed (%s); this worker stops accepting", why)
        self.on_broken()

    async def _handshake(self, conn: socket.socket, source: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(self.factory, conn, ssl=self.context, ssl_handshake_timeout=self.timeout)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as e:
            log.debug("TLS handshake from %s not completed: %s", source, type(e).__name__)
            try:
                conn.close()
            except OSError:
                pass
        finally:
            left = self.pending.get(source, 1) - 1
            if left > 0:
                self.pending[source] = left
            else:
                self.pending.pop(source, None)
