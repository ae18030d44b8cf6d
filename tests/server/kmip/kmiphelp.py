"""Helpers for the KMIP tests: a client certificate issued through the API (the key made here,
as `strongroom kmip cert` does), raw TTLV requests over TLS, and PyKMIP's client."""

from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path
from typing import Any

from strongroom.client import kmipcert
from strongroom.client.client import Client
from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import Item, decode, e, encode, i, s


def issue(client: Client, out: Path) -> tuple[Path, Path, Path]:
    """(cert, key, ca) files for ``client``, as `strongroom kmip cert` makes them."""
    kmipcert.issue(client, out)
    return kmipcert.files(out)


class Raw:
    """A KMIP connection that sends whatever bytes it is given."""

    def __init__(self, address: tuple[str, int], files: tuple[Path, Path, Path], timeout: float = 10) -> None:
        ctx = ssl.create_default_context(cafile=str(files[2]))
        ctx.check_hostname = False
        ctx.load_cert_chain(str(files[0]), str(files[1]))
        self.sock = ctx.wrap_socket(socket.create_connection(address, timeout=timeout))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self) -> Item:
        head = self._exactly(8)
        length = struct.unpack(">I", head[4:])[0]
        return decode(head + self._exactly(length))

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("closed")
            buf += chunk
        return buf

    def call(self, *items: tuple[int, Item | None], version: tuple[int, int] = (1, 2), **header: Any) -> Item:
        self.send(request(*items, version=version, **header))
        return self.receive()

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True

    def close(self) -> None:
        self.sock.close()


def request(*items: tuple[int, Item | None], version: tuple[int, int] = (1, 2), option: int | None = None) -> bytes:
    header = s(
        t.REQUEST_HEADER,
        s(t.PROTOCOL_VERSION, i(t.PROTOCOL_VERSION_MAJOR, version[0]), i(t.PROTOCOL_VERSION_MINOR, version[1])),
        e(t.BATCH_ERROR_CONTINUATION_OPTION, option) if option is not None else None,
        i(t.BATCH_COUNT, len(items)),
    )
    empty = s(t.REQUEST_PAYLOAD)
    batch = [s(t.BATCH_ITEM, e(t.OPERATION, op), payload if payload is not None else empty) for op, payload in items]
    return encode(s(t.REQUEST_MESSAGE, header, *batch))


def results(response: Item) -> list[tuple[int, int | None, Item | None]]:
    """(status, reason, payload) of each batch item."""
    out = []
    for item in response.all(t.BATCH_ITEM):
        out.append((item.get(t.RESULT_STATUS, t.ENUM), item.get(t.RESULT_REASON, t.ENUM), item.find(t.RESPONSE_PAYLOAD)))
    return out


def pykmip(address: tuple[str, int], files: tuple[Path, Path, Path], version: Any = None) -> Any:
    from kmip.core import enums
    from kmip.pie.client import ProxyKmipClient

    return ProxyKmipClient(
        hostname=address[0],
        port=address[1],
        cert=str(files[0]),
        key=str(files[1]),
        ca=str(files[2]),
        kmip_version=version or enums.KMIPVersion.KMIP_1_2,
    )
