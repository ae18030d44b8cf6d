"""The coalescing HTTP protocol, on a real server over TLS: every byte, in order, closes included."""

from __future__ import annotations

import json
import re
import socket
import ssl
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from strongroom.server import httpproto
from tests.serverproc import Deployment, tls


def _connect(url: str, ca: Path) -> ssl.SSLSocket:
    u = urlsplit(url)
    raw = socket.create_connection((u.hostname, u.port), timeout=10)
    return tls(ca).wrap_socket(raw, server_hostname=u.hostname)


def _read_all(s: ssl.SSLSocket) -> bytes:
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ssl.SSLEOFError:
            break
        if not chunk:
            break
        out += chunk
    return out


def test_connection_close_gets_the_whole_answer_before_the_close(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        s = d.start()
        with _connect(s.url, d.data.ca_file) as c:
            c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = _read_all(c)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b'"status":"ok"' in body
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        assert len(body) == length
    finally:
        d.close()


def test_pipelined_requests_are_answered_in_order_on_one_connection(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        s = d.start()
        with _connect(s.url, d.data.ca_file) as c:
            c.sendall(
                b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /v1/entropy?bytes=8 HTTP/1.1\r\nHost: x\r\n\r\n"  # unsigned: 401 with a JSON body
                b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            answer = _read_all(c)
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)  # a body is not followed by a line break
        assert statuses == [b"200", b"401", b"200"]
        assert answer.count(b'"status":"ok"') == 2 and b'"error":"unauthorized"' in answer
    finally:
        d.close()


def test_a_large_answer_arrives_whole(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        d.start()
        c = d.register()
        blob = bytes(range(256)) * 4000  # ~1 MiB: many TLS records, written as one buffer
        c.put("big", blob)
        assert c.get("big") == blob
    finally:
        d.close()


def _bounded(tmp_path: Path, header_timeout: float = 2.0, body_timeout: float = 2.0) -> tuple[Deployment, str]:
    d = Deployment(tmp_path, None)
    cfg = json.loads(d.data.config_path.read_text())
    cfg.update(header_timeout=header_timeout, body_timeout=body_timeout)
    d.data.config_path.write_text(json.dumps(cfg))
    return d, d.start().url


def _status(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else {}


def _healthy(url: str, d: Deployment) -> None:
    assert httpx.get(url + "/health", verify=tls(d.data.ca_file), timeout=5).status_code == 200


def test_oversized_heads_are_refused_before_anything_else(tmp_path: Path) -> None:
    d, url = _bounded(tmp_path)
    try:
        for head, expected in (
            (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (16 << 20) + b"\r\n\r\n", 431),  # one 16 MiB line
            (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * (httpproto.MAX_HEADERS + 1) + b"\r\n", 431),
            (b"GET /health HTTP/1.1\r\n" + (b"X-A: " + b"b" * 1000 + b"\r\n") * 70 + b"\r\n", 431),  # many long lines
            (b"GET /" + b"p" * (httpproto.MAX_URL_BYTES + 1) + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        ):
            with _connect(url, d.data.ca_file) as c:
                try:
                    c.sendall(head)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    pass  # the server answered and closed before taking all of it
                status, body = _status(_read_all(c))
            assert status == expected and body["error"] in ("headers_too_large", "uri_too_long"), body
        _healthy(url, d)
    finally:
        d.close()


def test_slow_heads_and_bodies_time_out(tmp_path: Path) -> None:
    d, url = _bounded(tmp_path, header_timeout=1.5, body_timeout=1.5)
    try:
        started = time.monotonic()
        with _connect(url, d.data.ca_file) as idle, _connect(url, d.data.ca_file) as slow, _connect(url, d.data.ca_file) as body:
            slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            body.sendall(b"POST /v1/register HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            for _ in range(4):  # a byte now and then does not extend the deadline
                time.sleep(0.5)
                slow.sendall(b"X")
            answers = [_status(_read_all(c)) for c in (idle, slow, body)]
        assert [a[0] for a in answers] == [408, 408, 408], answers
        assert time.monotonic() - started < 10
        _healthy(url, d)
    finally:
        d.close()


def test_connections_per_source_are_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d, url = _bounded(tmp_path, header_timeout=30)
    held: list[ssl.SSLSocket] = []
    try:
        for _ in range(httpproto.MAX_CONNECTIONS_PER_SOURCE):
            held.append(_connect(url, d.data.ca_file))
        held[-1].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # all of them accepted
        assert held[-1].recv(100).startswith(b"HTTP/1.1 200")
        with _connect(url, d.data.ca_file) as over:
            status, body = _status(_read_all(over))
        assert status == 503 and "this address" in body["message"]
        for c in held[:10]:
            c.close()
        time.sleep(0.3)
        _healthy(url, d)  # room again once some closed
    finally:
        for c in held:
            c.close()
        d.close()


def test_what_the_bounds_need_from_uvicorn_is_checked_at_start() -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from strongroom.server.httpproto import check_uvicorn

    assert check_uvicorn() == []  # the pinned version has it all

    class Renamed(HttpToolsProtocol):  # a uvicorn whose protocol changed under us
        on_url = None  # type: ignore[assignment]

    assert check_uvicorn(Renamed) == ["on_url"]

    class Bare:
        pass

    assert set(check_uvicorn(Bare)) >= {"data_received", "parser", "connections", "cycle"}


def test_what_the_servers_stop_needs_from_uvicorn_is_checked_at_start() -> None:
    """run.py's Server overrides _wait_tasks_to_complete (pinned uvicorn): a uvicorn whose Server
    renamed it, or stopped keeping the state it reads, refuses to start."""
    import uvicorn

    from strongroom.server.run import check_uvicorn_server

    assert check_uvicorn_server() == []

    class Renamed(uvicorn.Server):  # type: ignore[misc]
        _wait_tasks_to_complete = None

    assert check_uvicorn_server(Renamed) == ["_wait_tasks_to_complete"]

    class Changed(uvicorn.Server):  # type: ignore[misc]
        async def _wait_tasks_to_complete(self) -> None:
            pass

        async def shutdown(self, sockets: object = None) -> None:
            pass

    assert check_uvicorn_server(Changed) == ["server_state.connections", "force_exit", "server_state.tasks"]


def test_unfinished_tls_handshakes_are_capped_per_source_and_timed_out(tmp_path: Path) -> None:
    """Idle TCP connections that never begin TLS (issue 37, point 11): one source address holds
    at most HANDSHAKES_PER_SOURCE of them per worker, the rest are closed at once, each is closed
    at the handshake deadline, and other sources are served throughout."""
    from strongroom.server.tlsgate import HANDSHAKES_PER_SOURCE

    d = Deployment(tmp_path, None)
    cfg = json.loads(d.data.config_path.read_text())
    cfg.update(handshake_timeout=2.0)
    d.data.config_path.write_text(json.dumps(cfg))
    try:
        s = d.start(workers=1)
        u = urlsplit(s.url)
        held = []
        for _ in range(HANDSHAKES_PER_SOURCE + 20):
            c = socket.socket()
            c.bind(("127.0.0.2", 0))  # another source on the loopback
            c.settimeout(5)
            c.connect((u.hostname, u.port))
            held.append(c)
        time.sleep(0.5)
        closed = []
        for c in held:
            c.setblocking(False)
            try:
                closed.append(c.recv(1) == b"")
            except BlockingIOError:
                closed.append(False)
            except ConnectionResetError:
                closed.append(True)
        assert closed.count(False) == HANDSHAKES_PER_SOURCE, closed.count(False)  # the cap, not one more
        _healthy(s.url, d)  # 127.0.0.1 is another source: served
        time.sleep(2.5)  # past the handshake deadline: every held connection is closed
        for c in held:
            c.settimeout(2)
            try:
                assert c.recv(1) == b""
            except ConnectionResetError:
                pass
            c.close()
        _healthy(s.url, d)
        # and a handshake that begins in time completes as ever, from the capped source too
        raw = socket.create_connection((u.hostname, u.port), timeout=10, source_address=("127.0.0.2", 0))
        with tls(d.data.ca_file).wrap_socket(raw, server_hostname=u.hostname) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _read_all(conn).startswith(b"HTTP/1.1 200")
    finally:
        d.close()
