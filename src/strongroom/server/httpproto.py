"""The server's HTTP/1.1 protocol: uvicorn's httptools protocol, bounded, with a response's
writes coalesced into one.

Bounds (none of them is uvicorn's with httptools, which would buffer a header of any size and wait
forever for one that never ends; each answers before any authentication):
- the request target at most MAX_URL_BYTES: 414; the request line and headers together at most
  MAX_HEAD_BYTES and MAX_HEADERS lines: 431;
- the headers must arrive within ``header_timeout`` of the request's first byte (or of the
  connection's start), the body within ``body_timeout`` of the headers: 408, then close;
- at most MAX_CONNECTIONS open connections per worker, MAX_CONNECTIONS_PER_SOURCE from one
  address: the connection over the cap is answered 503 and closed.

Coalescing: an ASGI response is two messages (start, then body), and uvicorn writes each to the
transport as it comes: over TLS that is two records and two socket writes for every small
answer.  Here the writes made in one turn of the event loop are joined and handed to the
transport once, at the end of that turn: same bytes, same order, one record and one system call.

This subclasses uvicorn's protocol and uses its internals (parser callbacks, ``cycle``,
``connections``): pyproject pins uvicorn to the tested minor version, and ``check_uvicorn`` looks
for each of them before the server starts.  The bounds are a security promise, so a uvicorn
without them does not get a silently unbounded server: the server refuses to start.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from strongroom.server.request import VAULT_PREFIXES

MAX_HEAD_BYTES = 64 * 1024
MAX_URL_BYTES = 16 * 1024
MAX_HEADERS = 100
MAX_CONNECTIONS = 4096
MAX_CONNECTIONS_PER_SOURCE = 256
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
SWEEP_S = 0.25  # deadlines are kept to within this

_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


class CoalescingTransport:
    """Forwards everything to ``transport``; ``write`` is buffered until the loop's next turn."""

    __slots__ = ("_transport", "_loop", "_pending")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for c in chunks:
            self.write(c)

    def flush(self) -> None:
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending = []
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()  # what was written goes out before the close, as without the buffer
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Refuse(Exception):
    """Raised from a parser callback to stop parsing; the protocol answers ``status``."""


class BoundedHttpProtocol(HttpToolsProtocol):  # type: ignore[misc]
    header_timeout = HEADER_TIMEOUT_S
    body_timeout = BODY_TIMEOUT_S
    # open connections of this worker per source address (a worker is one process, one loop)
    _per_source: dict[str, int] = {}
    _sweeper: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        self._source = self.client[0] if self.client else ""
        self._per_source[self._source] = self._per_source.get(self._source, 0) + 1
        self._head_bytes = 0
        self._piece = 0
        self._in_head = True
        self._refusal: tuple[int, str, str] | None = None
        self._deadline_at = 0.0
        self._deadline_message = ""
        self._at_start = True  # between requests: the next byte begins a request line
        self._list = False
        _live.add(self)
        if len(self.connections) > MAX_CONNECTIONS:
            self._answer(503, "unavailable", "too many open connections to this server; retry later")
        elif self._per_source[self._source] > MAX_CONNECTIONS_PER_SOURCE:
            self._answer(503, "unavailable", "too many open connections from this address; retry later")
        else:
            self._arm(self.header_timeout, "the request's headers did not arrive in time")

    def connection_lost(self, exc: Exception | None) -> None:
        _live.discard(self)
        left = self._per_source.get(self._source, 1) - 1
        if left > 0:
            self._per_source[self._source] = left
        else:
            self._per_source.pop(self._source, None)
        self._disarm()
        super().connection_lost(exc)

    # -- deadlines -------------------------------------------------------------------------
    # A deadline is a time stored on the connection, checked by one sweep per worker every
    # SWEEP_S: two stores per request instead of a timer made and cancelled twice per request.
    def _arm(self, seconds: float, message: str) -> None:
        self._deadline_at = self.loop.time() + seconds
        self._deadline_message = message
        if BoundedHttpProtocol._sweeper is None:
            BoundedHttpProtocol._sweeper = self.loop.call_later(SWEEP_S, _sweep, self.loop)

    def _disarm(self) -> None:
        self._deadline_at = 0.0

    def _expired(self, message: str) -> None:
        self._deadline_at = 0.0
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete or not self.cycle.response_started:
            self._answer(408, "timeout", message)
        else:
            self.transport.close()

    # -- parsing ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._at_start and data[:5] == b"LIST ":
            # Vault's clients send the LIST verb, which httptools' parser refuses: parsed as GET,
            # handed to the app as LIST (a LIST pipelined behind another request in one read
            # still answers 400).
            data = b"GET " + data[5:]
            self._list = True
        self._piece = len(data)
        if self._in_head:
            self._head_bytes += self._piece
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._answer(400, "bad_request", "protocol upgrades are not supported")
            return
        except httptools.HttpParserError:
            status, code, message = self._refusal or (400, "bad_request", "invalid HTTP request")
            self._answer(status, code, message)
            return
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES:  # the parser holds a head this large
            self._answer(431, "headers_too_large", f"the request line and headers exceed {MAX_HEAD_BYTES} bytes")

    def on_message_begin(self) -> None:
        self._at_start = False
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = self._piece  # at most the whole piece that holds its start
        if not self._deadline_at:
            self._arm(self.header_timeout, "the request's headers did not arrive in time")

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            self._refusal = (414, "uri_too_long", f"the request target exceeds {MAX_URL_BYTES} bytes")
            raise _Refuse

    def on_headers_complete(self) -> None:
        self._in_head = False
        if len(self.headers) > MAX_HEADERS:
            self._refusal = (431, "headers_too_large", f"more than {MAX_HEADERS} header lines")
            raise _Refuse
        # Only a head that came with a large piece can be too large: measured exactly then,
        # so the usual request pays for no per-line accounting.
        if self._head_bytes > MAX_HEAD_BYTES:
            size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
            if size > MAX_HEAD_BYTES:
                self._refusal = (431, "headers_too_large", f"the request line and headers exceed {MAX_HEAD_BYTES} bytes")
                raise _Refuse
        self._arm(self.body_timeout, "the request's body did not arrive in time")
        super().on_headers_complete()
        if self._list:
            self._list = False
            self.scope["method"] = "LIST"  # the scope the request's cycle was just given

    def on_message_complete(self) -> None:
        self._disarm()
        self._at_start = True
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        self._answer(400, "bad_request", msg)

    def _answer(self, status: int, code: str, message: str) -> None:
        """A JSON error and the connection's end, before any application code ran."""
        self._disarm()
        if self.transport.is_closing():
            return
        target = bytes(getattr(self, "url", b"") or b"")
        if target.startswith(_VAULT):  # that API's clients read Vault's error shape
            body = json.dumps({"errors": [message]}).encode()
        else:
            body = json.dumps({"error": code, "message": message}).encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, _REASONS[status], len(body))
            + body
        )
        self.transport.close()


_VAULT = tuple(p.encode() for p in VAULT_PREFIXES)

# This worker's open connections, for the deadline sweep.
_live: set[BoundedHttpProtocol] = set()


def _sweep(loop: asyncio.AbstractEventLoop) -> None:
    now = loop.time()
    for conn in [c for c in _live if c._deadline_at and c._deadline_at <= now]:
        conn._expired(conn._deadline_message)
    BoundedHttpProtocol._sweeper = loop.call_later(SWEEP_S, _sweep, loop) if _live else None


# What BoundedHttpProtocol takes from uvicorn's HttpToolsProtocol: methods it overrides and calls
# through super(), and members it reads (set in __init__ or connection_made: checked on an instance).
_UVICORN_METHODS = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_url",
    "on_headers_complete",
    "on_message_complete",
    "_unset_keepalive_if_required",
)
_UVICORN_MEMBERS = ("loop", "client", "connections", "cycle", "parser", "transport")


def check_uvicorn(base: Any = HttpToolsProtocol) -> list[str]:
    """What this module needs from uvicorn's protocol and ``base`` lacks (empty: all there)."""
    import inspect

    missing = [m for m in _UVICORN_METHODS if not callable(getattr(base, m, None))]
    try:
        init = inspect.getsource(base.__init__) + inspect.getsource(base.connection_made)
    except (OSError, TypeError, AttributeError):  # not Python source (object's __init__): none set
        init = ""
    missing += [m for m in _UVICORN_MEMBERS if f"self.{m} " not in init and f"self.{m}:" not in init]
    return missing


def bounded_protocol(header_timeout: float, body_timeout: float) -> type[BoundedHttpProtocol]:
    """The protocol class for uvicorn's ``http`` setting, with this server's deadlines."""
    return type("BoundedHttpProtocol", (BoundedHttpProtocol,), {"header_timeout": header_timeout, "body_timeout": body_timeout})
