"""The coalescing HTTP protocol, on a real server over TLS: every byte, in order, closes included."""

from __future__ import annotations

import re
import socket
import ssl
from pathlib import Path
from urllib.parse import urlsplit

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
