"""KMIP's bounds on a real server: frames that cannot be read are answered and the connection
closed (a 100 MB length allocates nothing), a whole but invalid message is answered on a
connection that stays, idle and half-open connections close in their time, TLS needs a
certificate of this server's CA naming a client, each client holds a bounded number of
connections, and random payloads for every operation are always answered."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from strongroom.server import tls
from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import Item, e, encode, s, txt
from tests.server.kmip.kmiphelp import Raw, issue, request, results
from tests.serverproc import Deployment

IDLE = 2.0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("kmip-limits")
    d = Deployment(root, None)
    cfg = json.loads(d.data.config_path.read_text())
    cfg.update(kmip_idle_timeout=IDLE, body_timeout=IDLE, handshake_timeout=IDLE, kmip_connections_per_client=3)
    d.data.config_path.write_text(json.dumps(cfg))
    try:
        srv = d.start(kmip=True)
        c = d.register("limited")
        yield {"d": d, "srv": srv, "files": issue(c, root / "c"), "root": root}
    finally:
        d.close()


def answered_then_closed(conn: Raw, reason: int) -> None:
    out = results(conn.receive())
    assert out[0][:2] == (t.OPERATION_FAILED, reason)
    assert conn.closed()


def alive(b: dict[str, Any]) -> None:
    conn = Raw(b["srv"].kmip, b["files"])
    try:
        assert results(conn.call((t.OP_DISCOVER_VERSIONS, None)))[0][0] == t.SUCCESS
    finally:
        conn.close()


def test_bad_frames_are_answered_and_closed(bounded: dict[str, Any]) -> None:
    srv = bounded["srv"]
    workers = [p for p in srv.pids() if p != srv.proc.pid]
    before = {p: rss_kib(p) for p in workers}
    unreadable = {  # the stream's framing is lost: answered, then closed
        "100 MB length": bytes.fromhex("42007801") + struct.pack(">I", 100 * 1024 * 1024) + b"\0" * 64,
        "not a request": bytes.fromhex("42007b01") + struct.pack(">I", 8) + b"\0" * 8,
        "odd length": bytes.fromhex("42007801") + struct.pack(">I", 12) + b"\0" * 16,
    }
    for name, data in unreadable.items():
        conn = Raw(srv.kmip, bounded["files"])
        try:
            conn.send(data)
            answered_then_closed(conn, t.INVALID_MESSAGE)
        except AssertionError as err:
            raise AssertionError(name) from err
        finally:
            conn.close()
    nested = b""
    for _ in range(20):
        nested = bytes.fromhex("42007701") + struct.pack(">I", len(nested)) + nested
    whole_but_bad = {  # read whole, so the stream is in step: answered, and the connection serves on
        "unknown type": bytes.fromhex("42007801") + struct.pack(">I", 16) + bytes.fromhex("4200770f00000000") + b"\0" * 8,
        "foreign tag": bytes.fromhex("42007801")
        + struct.pack(">I", 16)
        + bytes.fromhex("99000102")
        + struct.pack(">I", 4)
        + b"\0" * 8,
        "20 levels deep": bytes.fromhex("42007801") + struct.pack(">I", len(nested)) + nested,
    }
    conn = Raw(srv.kmip, bounded["files"])
    try:
        for name, data in whole_but_bad.items():
            conn.send(data)
            assert results(conn.receive())[0][:2] == (t.OPERATION_FAILED, t.INVALID_MESSAGE), name
        assert results(conn.call((t.OP_DISCOVER_VERSIONS, None)))[0][0] == t.SUCCESS
    finally:
        conn.close()
    grown = max(rss_kib(p) - before[p] for p in workers)
    assert grown < 50 * 1024, f"a worker grew by {grown} KiB"  # a 100 MB buffer would show
    alive(bounded)


def test_truncated_and_idle_connections_close_in_time(bounded: dict[str, Any]) -> None:
    conn = Raw(bounded["srv"].kmip, bounded["files"])
    try:
        conn.send(bytes.fromhex("42007801") + struct.pack(">I", 64) + b"\0" * 10)  # 54 bytes never come
        start = time.monotonic()
        answered_then_closed(conn, t.INVALID_MESSAGE)
        assert time.monotonic() - start < IDLE + 3
    finally:
        conn.close()
    conn = Raw(bounded["srv"].kmip, bounded["files"])
    try:
        start = time.monotonic()
        assert conn.closed()  # nothing sent: closed without an answer after the idle time
        assert IDLE - 0.5 < time.monotonic() - start < IDLE + 3
    finally:
        conn.close()
    with socket.create_connection(bounded["srv"].kmip, timeout=IDLE + 5) as raw:  # TCP, no TLS hello
        start = time.monotonic()
        assert raw.recv(1) == b""
        assert time.monotonic() - start < IDLE + 3
    alive(bounded)


def test_an_invalid_whole_message_keeps_the_connection(bounded: dict[str, Any]) -> None:
    conn = Raw(bounded["srv"].kmip, bounded["files"])
    try:
        conn.send(encode(s(t.REQUEST_MESSAGE, s(t.BATCH_ITEM, e(t.OPERATION, t.OP_GET)))))  # no header
        assert results(conn.receive())[0][:2] == (t.OPERATION_FAILED, t.INVALID_MESSAGE)
        conn.send(request(*[(t.OP_DISCOVER_VERSIONS, None)] * 65))  # over the batch limit
        assert results(conn.receive())[0][:2] == (t.OPERATION_FAILED, t.INVALID_MESSAGE)
        bad_utf8 = Item(t.UNIQUE_IDENTIFIER, t.BYTES, b"\xff\xfe")
        conn.send(request((t.OP_GET, s(t.REQUEST_PAYLOAD, Item(bad_utf8.tag, t.TEXT, "ok")))))
        assert results(conn.receive())[0][:2] == (t.OPERATION_FAILED, t.ITEM_NOT_FOUND)
        assert results(conn.call((t.OP_DISCOVER_VERSIONS, None)))[0][0] == t.SUCCESS
    finally:
        conn.close()


def test_tls_needs_a_client_of_this_ca(bounded: dict[str, Any], tmp_path: Path) -> None:
    srv, files = bounded["srv"], bounded["files"]
    plain = ssl.create_default_context(cafile=str(files[2]))
    plain.check_hostname = False
    refused = (ssl.SSLError, ConnectionError, OSError, EOFError)  # TLS 1.3: the refusal comes after the client's side is done
    with pytest.raises(refused), plain.wrap_socket(socket.create_connection(srv.kmip, timeout=5)) as sock:  # no certificate
        sock.sendall(request((t.OP_DISCOVER_VERSIONS, None)))
        if not sock.recv(8):
            raise ConnectionError("closed")
    other = tmp_path / "other"
    tls.create(other, ["127.0.0.1"])
    cert, key = tls.client_certificate(other, "stranger")
    with pytest.raises(refused):  # another CA's client
        conn = Raw(srv.kmip, (cert, key, files[2]))
        conn.call((t.OP_DISCOVER_VERSIONS, None))
    # this CA's certificate that names no client (as tls.client_certificate makes for peers)
    cert, key = tls.client_certificate(bounded["d"].data.tls, "not-a-client-id")
    conn = Raw(srv.kmip, (cert, key, files[2]))
    try:
        conn.send(request((t.OP_DISCOVER_VERSIONS, None)))
        answered_then_closed(conn, t.AUTHENTICATION_NOT_SUCCESSFUL)
    finally:
        conn.close()


def test_connections_per_client(bounded: dict[str, Any]) -> None:
    conns = [Raw(bounded["srv"].kmip, bounded["files"]) for _ in range(3)]
    try:
        for c in conns:
            assert results(c.call((t.OP_DISCOVER_VERSIONS, None)))[0][0] == t.SUCCESS
        for _ in range(2):  # a refused connection does not free a place for the next one
            extra = Raw(bounded["srv"].kmip, bounded["files"])
            extra.send(request((t.OP_DISCOVER_VERSIONS, None)))
            answered_then_closed(extra, t.PERMISSION_DENIED)
            extra.close()
        conns.pop().close()
        deadline = time.time() + 5
        while True:  # the server sees the close shortly
            again = Raw(bounded["srv"].kmip, bounded["files"])
            out = results(again.call((t.OP_DISCOVER_VERSIONS, None)))
            again.close()
            if out[0][0] == t.SUCCESS or time.time() > deadline:
                break
            time.sleep(0.2)
        assert out[0][0] == t.SUCCESS
    finally:
        for c in conns:
            c.close()


OPS = [t.OP_CREATE, t.OP_REGISTER, t.OP_REKEY, t.OP_LOCATE, t.OP_GET, t.OP_GET_ATTRIBUTES, t.OP_GET_ATTRIBUTE_LIST,
       t.OP_ADD_ATTRIBUTE, t.OP_MODIFY_ATTRIBUTE, t.OP_DELETE_ATTRIBUTE, t.OP_ACTIVATE, t.OP_REVOKE, t.OP_DESTROY,
       t.OP_QUERY, t.OP_DISCOVER_VERSIONS, t.OP_ENCRYPT, t.OP_DECRYPT, t.OP_SET_ATTRIBUTE, 0x02, 0x99]  # fmt: skip
TAGS = [v for k, v in vars(t).items() if k.isupper() and isinstance(v, int) and v > 0x420000]


def items(uids: list[str]) -> hs.SearchStrategy[Item]:
    leaf = hs.one_of(
        hs.builds(lambda tag, v: Item(tag, t.INTEGER, v), hs.sampled_from(TAGS), hs.integers(-(2**31), 2**31 - 1)),
        hs.builds(lambda tag, v: Item(tag, t.ENUM, v), hs.sampled_from(TAGS), hs.integers(0, 20)),
        hs.builds(lambda tag, v: Item(tag, t.TEXT, v), hs.sampled_from(TAGS), hs.sampled_from(uids) | hs.text(max_size=20)),
        hs.builds(lambda tag, v: Item(tag, t.BYTES, v), hs.sampled_from(TAGS), hs.binary(max_size=40)),
        hs.builds(lambda tag, v: Item(tag, t.BOOL, v), hs.sampled_from(TAGS), hs.booleans()),
        hs.builds(lambda tag, v: Item(tag, t.DATETIME, v), hs.sampled_from(TAGS), hs.integers(0, 2**40)),
    )
    return hs.recursive(
        leaf,
        lambda kids: hs.builds(lambda tag, c: Item(tag, t.STRUCTURE, c), hs.sampled_from(TAGS), hs.lists(kids, max_size=5)),
        max_leaves=12,
    )


def test_random_payloads_are_always_answered(bounded: dict[str, Any]) -> None:
    conn = Raw(bounded["srv"].kmip, bounded["files"])
    made = results(
        conn.call(
            (
                t.OP_CREATE,
                s(
                    t.REQUEST_PAYLOAD,
                    e(t.OBJECT_TYPE, 2),
                    s(t.ATTRIBUTES, e(t.CRYPTOGRAPHIC_ALGORITHM, t.AES), Item(t.CRYPTOGRAPHIC_LENGTH, t.INTEGER, 256)),
                ),
            ),
            version=(2, 0),
        )
    )
    uid = str(made[0][2].need(t.UNIQUE_IDENTIFIER, t.TEXT))  # type: ignore[union-attr]

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(op=hs.sampled_from(OPS), payload=hs.lists(items([uid]), max_size=6), v2=hs.booleans())
    def one(op: int, payload: list[Item], v2: bool) -> None:
        body = s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid), *payload)
        out = results(conn.call((op, body), version=(2, 0) if v2 else (1, 4)))
        assert len(out) == 1 and out[0][0] in (t.SUCCESS, t.OPERATION_FAILED)
        if out[0][0] == t.OPERATION_FAILED:
            assert out[0][1] is not None

    try:
        one()
    finally:
        conn.close()
    alive(bounded)
    assert "Traceback" not in bounded["srv"].log_text()
