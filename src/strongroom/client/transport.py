"""HTTP/1.1 over TLS for the client: one kept-alive connection per server and thread.

Why the standard library's http.client and not httpx (the project's HTTP client for tests and
benchmarks): one request through httpx costs the calling process several times the CPU it costs
through http.client, and the client's own CPU is what limits registrations
in-process (git show 7c4ab38:docs/BENCHMARKS.md, "A leaner client transport").  The client needs little of an HTTP
library: whole bodies both ways, keep-alive, TLS with a chosen CA, timeouts.

Errors are sorted for failover: ``Unreachable`` (the server could not be reached or dropped the
connection before answering: try the next one), ``TimedOut`` (it was reached and did not answer
in time) and ``Broken`` (it answered with something that is not HTTP).
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
import weakref
from typing import Any
from urllib.parse import urlsplit


class Unreachable(Exception):
    pass


class TimedOut(Exception):
    pass


class Broken(Exception):
    pass


class Reply:
    """A whole response: status, body, headers."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, content: bytes, headers: http.client.HTTPMessage) -> None:
        self.status_code = status_code
        self.content = content
        self.headers = headers

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class Transport:
    """Sends requests to base URLs (``https://host:port``); safe to share between threads."""

    def __init__(self, context: ssl.SSLContext, timeout: float) -> None:
        self._context = context
        self._timeout = timeout
        self._local = threading.local()
        # Weak: a thread's connections go with its thread-local state when the thread ends.
        self._all: weakref.WeakSet[http.client.HTTPSConnection] = weakref.WeakSet()
        self._lock = threading.Lock()

    def request(self, base_url: str, method: str, target: str, body: bytes, headers: dict[str, str]) -> Reply:
        conn, fresh = self._connection(base_url)
        try:
            if fresh:
                conn.connect()
        except (OSError, ssl.SSLError) as e:  # refused, unreachable, name unknown, handshake or certificate
            self._discard(base_url, conn)
            raise Unreachable(_reason(e)) from None
        try:
            conn.request(method, target, body=body if body or method in ("POST", "PUT", "PATCH") else None, headers=headers)
            resp = conn.getresponse()
            content = resp.read()
        except TimeoutError:
            self._discard(base_url, conn)
            raise TimedOut("no answer in time") from None
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
            self._discard(base_url, conn)
            raise Unreachable(type(e).__name__) from None
        except (http.client.HTTPException, OSError) as e:
            self._discard(base_url, conn)
            raise Broken(type(e).__name__) from None
        if resp.will_close:
            self._discard(base_url, conn)
        return Reply(resp.status, content, resp.headers)

    def _connection(self, base_url: str) -> tuple[http.client.HTTPSConnection, bool]:
        conns: dict[str, http.client.HTTPSConnection] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(base_url)
        if conn is not None:
            if conn.sock is not None and not _readable(conn.sock):
                return conn, False
            # Closed by the server while idle (readable means EOF or stray bytes): never reuse
            # it for a request that could then fail half-sent.
            self._discard(base_url, conn)
        url = urlsplit(base_url)
        if url.scheme != "https" or not url.hostname:
            raise Unreachable(f"not an https URL: {base_url}")
        conn = http.client.HTTPSConnection(url.hostname, url.port or 443, timeout=self._timeout, context=self._context)
        conns[base_url] = conn
        with self._lock:
            self._all.add(conn)
        return conn, True

    def _discard(self, base_url: str, conn: http.client.HTTPSConnection) -> None:
        conn.close()
        conns = getattr(self._local, "conns", {})
        if conns.get(base_url) is conn:
            del conns[base_url]
        with self._lock:
            self._all.discard(conn)

    def close(self) -> None:
        """Close every connection, whichever thread opened it."""
        with self._lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for conn in conns:
            conn.close()
        self._local = threading.local()


def _readable(sock: socket.socket) -> bool:
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLCertVerificationError):
        return "TLS certificate not trusted (wrong --ca?)"
    if isinstance(e, ssl.SSLError):
        return f"TLS handshake failed ({e.reason or type(e).__name__})"
    if isinstance(e, socket.gaierror):
        return "unknown host name"
    if isinstance(e, TimeoutError):
        return "connection timed out"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return type(e).__name__
