"""KMIP side by side with PyKMIP's own server: one C load generator (kmip_load.c: TLS with a
client certificate, one pre-encoded request message replayed per connection) drives Get of a
256-bit AES key and Create of one at 16 connections on both servers, each round's order changed
(load.round_order); in the same rounds wrk drives Strongroom's own HTTPS get of a 32-byte
deposit, the rate KMIP's Get is held against (targets: Get >= 10x PyKMIP, >= 0.5x HTTPS get)."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import statistics
import struct
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.bench import load, peers
from strongroom.bench.keyserver import Strongroom
from strongroom.client import kmipcert
from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import Item, decode, e, encode, i, s, txt

C_LOAD = Path(__file__).with_name("kmip_load.c")
Files = tuple[Path, Path, Path]


def build_generator(out_dir: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("a C compiler is missing: apt-get install gcc libssl-dev (scripts/install.sh does)")
    exe = out_dir / "kmip_load"
    subprocess.run([cc, "-O2", "-o", str(exe), str(C_LOAD), "-lssl", "-lcrypto", "-lpthread"], check=True)
    return exe


def message(op: int, payload: Item) -> bytes:
    version = s(t.PROTOCOL_VERSION, i(t.PROTOCOL_VERSION_MAJOR, 1), i(t.PROTOCOL_VERSION_MINOR, 2))
    header = s(t.REQUEST_HEADER, version, i(t.BATCH_COUNT, 1))
    return encode(s(t.REQUEST_MESSAGE, header, s(t.BATCH_ITEM, e(t.OPERATION, op), payload)))


def create_request() -> bytes:
    def attr(name: str, value: Item) -> Item:
        return s(t.ATTRIBUTE, txt(t.ATTRIBUTE_NAME, name), value)

    template = s(
        t.TEMPLATE_ATTRIBUTE,
        attr("Cryptographic Algorithm", e(t.ATTRIBUTE_VALUE, t.AES)),
        attr("Cryptographic Length", i(t.ATTRIBUTE_VALUE, 256)),
        attr("Cryptographic Usage Mask", i(t.ATTRIBUTE_VALUE, t.USAGE_ENCRYPT | t.USAGE_DECRYPT)),
    )
    return message(t.OP_CREATE, s(t.REQUEST_PAYLOAD, e(t.OBJECT_TYPE, t.SYMMETRIC_KEY_TYPE), template))


def call(address: tuple[str, int], files: Files, data: bytes) -> Item:
    ctx = ssl.create_default_context(cafile=str(files[2]))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(files[0]), str(files[1]))
    with ctx.wrap_socket(socket.create_connection(address, timeout=30)) as sock:
        sock.sendall(data)
        buf = b""
        while len(buf) < 8 or len(buf) < 8 + struct.unpack(">I", buf[4:8])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the KMIP server closed the connection")
            buf += chunk
    return decode(buf)


class _Kmip:
    def __init__(self, name: str, address: tuple[str, int], files: Files, pids: Callable[[], list[int]], tmp: Path) -> None:
        self.name, self.address, self.files, self.pids = name, address, files, pids
        made = call(address, files, create_request())
        uid = made.find(t.BATCH_ITEM).find(t.RESPONSE_PAYLOAD).need(t.UNIQUE_IDENTIFIER, t.TEXT)  # type: ignore[union-attr]
        self.requests = {"get": tmp / f"{name}-get.ttlv", "create": tmp / f"{name}-create.ttlv"}
        self.requests["get"].write_bytes(message(t.OP_GET, s(t.REQUEST_PAYLOAD, txt(t.UNIQUE_IDENTIFIER, uid))))
        self.requests["create"].write_bytes(create_request())

    def drive(self, exe: Path, op: str, conns: int, seconds: float) -> dict[str, Any]:
        host, port = self.address
        args = [str(exe), host, str(port), *(str(f) for f in self.files), str(conns), str(seconds), str(self.requests[op])]
        out = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 120, check=True)
        return dict(json.loads(out.stdout))


def run(
    rounds: int = 5, seconds: float = 3.0, conns: int = 16, workers: int = 2, progress: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    if not load.wrk_available():
        raise RuntimeError("wrk is missing: install it with 'apt-get install wrk' (scripts/install.sh does)")
    with tempfile.TemporaryDirectory(prefix="strongroom-kmip-bench-", dir="/var/tmp") as tmp_name:
        tmp = Path(tmp_name)
        exe = build_generator(tmp)
        bin_dir = peers.ensure_peers_venv()
        s_ = Strongroom(tmp / "strongroom", workers=workers, kmip_port=peers.free_port())
        peer = None
        try:
            peer = peers.PyKmip(tmp / "pykmip", bin_dir)
            assert s_.kmip is not None
            kmipcert.issue(s_.client, tmp / "ours")
            ours = _Kmip("strongroom", s_.kmip, kmipcert.files(tmp / "ours"), s_.pids, tmp)
            theirs = _Kmip("pykmip", peer.address, peer.client_files("bench"), peer.pids, tmp)
            s_.client.put("bench32", b"k" * 32)
            rows = []
            for op in ("get", "create"):
                runs: dict[str, list[dict[str, Any]]] = {"strongroom": [], "pykmip": [], "https": []}
                for r in range(rounds):
                    for target in load.round_order(["strongroom", "pykmip", *(["https"] if op == "get" else [])], r):
                        if target == "https":
                            lines = load.presign(s_.client, "GET", "/v1/deposits/bench32", b"", int(12000 * seconds))
                            res = load.run_wrk("strongroom https get", s_.url, lines, conns, seconds, s_.pids())
                            runs["https"].append({"rate": res.rate, "p99_ms": res.p99_ms, "errors": res.errors})
                        else:
                            runs[target].append((ours if target == "strongroom" else theirs).drive(exe, op, conns, seconds))
                rows.append(_row(op, conns, runs))
                progress(json.dumps(rows[-1]))
            return rows
        finally:
            s_.stop()
            if peer is not None:
                peer.stop()


def _row(op: str, conns: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def med(name: str, key: str) -> float:
        return float(statistics.median(x[key] for x in runs[name])) if runs[name] else 0.0

    ratios = [a["rate"] / b["rate"] for a, b in zip(runs["strongroom"], runs["pykmip"], strict=True) if b["rate"]]
    row: dict[str, Any] = {
        "base": "PyKMIP",
        "phase": f"KMIP {op}, {conns} clients",
        "rate vs PyKMIP": statistics.median(ratios) if ratios else 0.0,
        "lowest round": min(ratios, default=0.0),
        "Strongroom req/s": med("strongroom", "rate"),
        "PyKMIP req/s": med("pykmip", "rate"),
        "Strongroom p99 ms": med("strongroom", "p99_ms"),
        "PyKMIP p99 ms": med("pykmip", "p99_ms"),
        "errors": int(sum(x["errors"] for rs in runs.values() for x in rs)),
    }
    if runs["https"]:
        own = [a["rate"] / b["rate"] for a, b in zip(runs["strongroom"], runs["https"], strict=True) if b["rate"]]
        row["rate vs own HTTPS get"] = statistics.median(own) if own else 0.0
        row["HTTPS get req/s"] = med("https", "rate")
    return row
