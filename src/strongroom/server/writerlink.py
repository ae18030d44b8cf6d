"""A worker's connection to the writer process (server/writer.py), on the worker's event loop.

One connection per worker, requests multiplexed by id; no thread, so nothing in the worker
competes with its event loop for the GIL.  A lost connection fails the requests in flight with
503 and is made again by the next request.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from strongroom.server import messages as m
from strongroom.server.errors import Unavailable
from strongroom.server.messages import Frames, frame, raise_failure


class _Channel(asyncio.Protocol):
    def __init__(self, limit: int) -> None:
        self.frames = Frames(limit)
        self.pending: dict[int, asyncio.Future[tuple[bool, Any]]] = {}
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._out: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, data: bytes, loop: asyncio.AbstractEventLoop) -> None:
        """Queue a frame; the frames of one loop turn go out in one write (one system call)."""
        if not self._out:
            loop.call_soon(self._flush)
        self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.closed:
            self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        try:
            replies = self.frames.feed(data)
        except (ValueError, EOFError, TypeError):
            assert self.transport is not None
            self.transport.abort()  # connection_lost fails what is pending
            return
        for reply in replies:
            if not isinstance(reply, m.Reply):
                continue
            fut = self.pending.pop(reply.rid, None)
            if fut is not None and not fut.done():
                fut.set_result((reply.ok, reply.result))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(Unavailable("the server's writer process went away; retry"))


class WriterLink:
    def __init__(self, path: str, timeout: float, limit: int) -> None:
        self.path = path
        self.timeout = timeout
        self.limit = limit
        self._channel: _Channel | None = None
        self._connecting: asyncio.Lock | None = None
        self._ids = itertools.count(1)

    async def _connect(self) -> _Channel:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            ch = self._channel
            if ch is not None and not ch.closed:
                return ch
            loop = asyncio.get_running_loop()
            try:
                _t, ch = await loop.create_unix_connection(lambda: _Channel(self.limit), self.path)
            except OSError:
                raise Unavailable("the server's writer process is not running; retry") from None
            self._channel = ch
            return ch

    async def call(self, raw_path: str, checked: m.Checked | None, body: Any) -> Any:
        """Run a request's message (messages.py) in the writer; returns its result or raises its ApiError."""
        ch = self._channel
        if ch is None or ch.closed:
            ch = await self._connect()
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[bool, Any]] = loop.create_future()
        ch.pending[rid] = fut
        ch.send(frame(m.Call(rid, raw_path, checked, body)), loop)
        timer = loop.call_later(self.timeout, _expire, ch, rid)
        try:
            ok, payload = await fut
        finally:
            timer.cancel()
        if not ok:
            raise_failure(payload)
        return payload

    async def stats(self) -> dict[str, float] | None:
        try:
            out: dict[str, float] = await self.call("", None, m.Stats())
        except Unavailable:
            return None
        return out

    def close(self) -> None:
        if self._channel is not None and self._channel.transport is not None:
            self._channel.transport.close()


def _expire(ch: _Channel, rid: int) -> None:
    fut = ch.pending.pop(rid, None)
    if fut is not None and not fut.done():
        fut.set_exception(Unavailable("the database did not answer in time; retry later"))
