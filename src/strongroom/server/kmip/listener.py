"""KMIP's listener in each worker: TLS 1.2+ with a client certificate from the server's CA
(tls.py's context, the accept and handshake bounded by tlsgate.py), then request messages one
after another on the connection, each read within bounds (frames.py), parsed (protocol.py),
run in the writer (ops.py) and answered.

Bounds: idle connections close after ``idle`` seconds, a message's remaining bytes must come
within ``timeout``, each client holds at most ``per_client`` connections in this process, and a
frame that cannot be read (over the size limit, malformed, truncated) is answered with an
error and the connection closed, since the stream's framing is lost; a message that was read
whole but is not a valid request is answered and the connection kept."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from strongroom.server import messages as m
from strongroom.server.errors import ApiError
from strongroom.server.kmip import certs, frames, protocol
from strongroom.server.kmip import tags as t
from strongroom.server.tlsgate import Gate
from strongroom.server.writerlink import WriterLink

log = logging.getLogger("strongroom.server.kmip")


def context(tls_dir: Path) -> ssl.SSLContext:
    """The server's certificate; clients must show one the server's CA issued."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls_dir / "server.pem", tls_dir / "server-key.pem")
    ctx.load_verify_locations(tls_dir / "ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    # KMIP's TLS 1.2 profiles name CBC suites as well as GCM ones: forward-secret ones of both
    ctx.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20:ECDHE+AES")
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx


class Listener:
    def __init__(
        self,
        sock: socket.socket,
        ctx: ssl.SSLContext,
        link: WriterLink,
        handshake_timeout: float,
        on_broken: Callable[[], None],
        idle: float = 300.0,
        timeout: float = 10.0,
        per_client: int = 32,
        reloader: Any = None,
        count: Callable[[str, str], None] | None = None,
    ) -> None:
        self.count = count or (lambda op, result: None)  # /metrics: (operation, "success" or the reason)
        self.reloader = reloader  # tlsreload.Reloader of ``ctx``: a renewed server.pem is looked for as connections come
        self._looked = time.monotonic()
        self.link = link
        self.idle, self.timeout, self.per_client = idle, timeout, per_client
        self.open: dict[str, int] = {}  # admitted connections per client
        self.refusing: dict[str, int] = {}  # over-cap connections being answered before they close
        self.writers: set[asyncio.StreamWriter] = set()
        self.gate = Gate(sock, self._protocol, ctx, handshake_timeout, on_broken)

    def start(self) -> None:
        self.gate.start()

    def stop(self) -> None:
        self.gate.stop()
        for w in list(self.writers):
            w.transport.abort()

    def _protocol(self) -> asyncio.Protocol:
        if self.reloader is not None and time.monotonic() - self._looked > 2:
            self._looked = time.monotonic()
            self.reloader.check()
        reader = asyncio.StreamReader(limit=frames.MAX_MESSAGE + frames.HEADER)
        return asyncio.StreamReaderProtocol(reader, self._serve)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        counted = None  # the client this connection counts against, once admitted
        try:
            ssl_object = writer.get_extra_info("ssl_object")
            client_id = certs.client_of(ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None)
            if client_id is None:
                await self._refuse(
                    reader, writer, t.AUTHENTICATION_NOT_SUCCESSFUL, "the certificate names no client of this server"
                )
                return
            if self.open.get(client_id, 0) >= self.per_client:
                log.warning("KMIP client %s is over its %d connections; closing one", client_id, self.per_client)
                if self.refusing.get(client_id, 0) < self.per_client:  # more at once: closed without waiting
                    self.refusing[client_id] = self.refusing.get(client_id, 0) + 1
                    try:
                        await self._refuse(
                            reader, writer, t.PERMISSION_DENIED, f"over {self.per_client} connections for this client"
                        )
                    finally:
                        self._release(self.refusing, client_id)
                return
            self.open[client_id] = self.open.get(client_id, 0) + 1
            counted = client_id
            await self._messages(reader, writer, client_id)
        except (ConnectionError, TimeoutError, ssl.SSLError, OSError):
            pass
        finally:
            if counted is not None:
                self._release(self.open, counted)
            self.writers.discard(writer)
            writer.transport.abort() if writer.transport.is_closing() else writer.close()

    @staticmethod
    def _release(counts: dict[str, int], client_id: str) -> None:
        left = counts.get(client_id, 1) - 1
        if left > 0:
            counts[client_id] = left
        else:
            counts.pop(client_id, None)

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reason: int, message: str) -> None:
        """Answer the connection's first message with ``reason``, then close it."""
        try:
            await frames.read_message(reader, self.timeout, idle=self.timeout)
        except (frames.FrameError, EOFError):
            return
        await self._send(writer, self._refusal(protocol.Refusal(reason, message)))

    def _counted(self, outcomes: Sequence[protocol.Outcome]) -> Sequence[protocol.Outcome]:
        for op, _, status, reason, _, _ in outcomes:
            name = t.OPERATION_NAMES.get(op, "other") if op is not None else "message"
            self.count(name, "success" if status == t.SUCCESS else t.REASON_NAMES.get(reason, "other"))
        return outcomes

    def _refusal(self, r: protocol.Refusal) -> bytes:
        self.count("message", t.REASON_NAMES.get(r.reason, "other"))
        return protocol.refusal(r)

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        if writer.transport.get_write_buffer_size() > 256 * 1024:  # a peer that does not read: bounded wait
            async with asyncio.timeout(self.timeout):
                await writer.drain()

    async def _messages(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        while True:
            try:
                raw = await frames.read_message(reader, self.timeout, idle=self.idle)
            except (EOFError, frames.IdleTimeout):
                return
            except frames.FrameError as e:
                await self._send(writer, self._refusal(protocol.Refusal(t.INVALID_MESSAGE, str(e))))
                return
            try:
                req = protocol.parse(raw)
            except protocol.Refusal as r:
                await self._send(writer, self._refusal(r))
                continue
            await self._send(writer, await self._run(client_id, req))

    async def _run(self, client_id: str, req: protocol.Request) -> bytes:
        msg = m.KmipRequest(client_id, req.major, req.minor, req.keep_going, [(op, payload) for op, _, payload in req.items])
        version = (req.major, req.minor)
        try:
            results = await self.link.call("kmip", None, msg)
        except (ApiError, m.WriterInternalError) as e:
            # the writer or the database is not there, or the action failed and was rolled back
            # whole: every item fails, the connection stays
            why = e.message if isinstance(e, ApiError) else "internal error; the operator has the server's log"
            if not isinstance(e, ApiError):
                log.error("KMIP request of client %s failed in the writer: %s", client_id, e)
            failed = [(op, bid, t.OPERATION_FAILED, t.GENERAL_FAILURE, why, b"") for op, bid, _ in req.items]
            return protocol.response(version, self._counted(failed), req.max_response)
        outcomes: list[protocol.Outcome] = []
        if len(results) == 1 and results[0][1] == t.AUTHENTICATION_NOT_SUCCESSFUL:
            return protocol.response(version, self._counted([(None, None, *results[0])]))
        for (op, bid, _), (status, reason, message, payload) in zip(req.items, results, strict=False):
            outcomes.append((op, bid, status, reason, message, payload))
        return protocol.response(version, self._counted(outcomes), req.max_response)
