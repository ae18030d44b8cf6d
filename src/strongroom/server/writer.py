"""The writer process: one per server, it runs every request's action in group commits.

Why a process of its own: with SQLite all workers share one write lock, and each worker's
group-commit thread held it for its batch's statements and fsync while competing for its
process's GIL with the event loop serving TLS and HTTP.  Measured under 16 clients, the lock was
held nearly all the time, at almost twice the time per get of a process that does nothing else.
Here one thread reads every worker's requests, runs them all as one batch (committer.py: one
transaction, one fsync) and answers; while it commits, the next batch gathers in the sockets.
Workers keep TLS, HTTP, parsing and the signature check (CPU work that needs no lock).

The channel is a Unix stream socket in a directory only the server's user can enter; peers are
checked to be that user.  Frames are a 4-byte big-endian length and a ``marshal`` body of plain
values (both ends are this package, same interpreter): the messages of messages.py, a ``Call``
from a worker, a ``Reply`` back; actions.py routes each to the action that serves it.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import struct
import time
from typing import Any

from strongroom.server import actions, audit, errors
from strongroom.server import barrier as barrier_mod
from strongroom.server import messages as m
from strongroom.server import storage as st
from strongroom.server.committer import SETTLE_IDLE, Outcome, Settle
from strongroom.server.datadir import DataDir
from strongroom.server.kmip.ops import Engine as KmipEngine
from strongroom.server.messages import Frames, failure, frame, frame_limit
from strongroom.server.nodes import NodeAgent
from strongroom.server.service import Service
from strongroom.server.vault.http import VaultEngine

log = logging.getLogger("strongroom.server.writer")

TICK_SECONDS = 0.5
SEALED_TICK_SECONDS = 0.05
SEND_TIMEOUT = 10.0


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class Writer:
    """The writer's loop: accept workers, gather their requests, commit them as one batch, answer."""

    def __init__(self, listener: socket.socket, data: DataDir, bar: barrier_mod.Barrier) -> None:
        self.listener = listener
        self.data = data
        config = data.load_config()
        self.store = st.Store(config.db_url, pinned=True)
        self.barrier = bar  # unsealed in the parent before the fork, or sealed until a grant
        self.service = Service(self.store, self.barrier, data, config)
        self.vault = VaultEngine(self.service)
        self.kmip = KmipEngine(self.service)
        self.agent = NodeAgent(self.store, self.barrier, data.node_key())
        sealing = self.service.sealing
        self.agent.when_sealed = lambda: sealing.when_sealed(self.agent)  # the HSM is asked from here alone
        self.limit = frame_limit(config.deposit_limit)
        self.stopping = False
        self._last_tick = 0.0
        self._sel = selectors.DefaultSelector()

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops us after the workers
        self.agent.join()
        self.listener.setblocking(False)
        self._sel.register(self.listener, selectors.EVENT_READ, None)
        next_tick = 0.0
        try:
            while not self.stopping:
                now = time.monotonic()
                if now >= next_tick:
                    self._tick()
                    next_tick = now + TICK_SECONDS
                work: list[tuple[socket.socket, m.Call]] = []
                timeout = max(0.0, next_tick - time.monotonic())
                unsettled = self.service.committer.unsettled
                events = self._sel.select(min(timeout, SETTLE_IDLE) if unsettled else timeout)
                if not events and unsettled:
                    self.service.committer.settle()  # idle: the head file drops the pending half
                    events = self._sel.select(max(0.0, next_tick - time.monotonic()))
                for key, _ in events:
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.fileobj, key.data, work)  # type: ignore[arg-type]
                if work:
                    if self.barrier.sealed and time.monotonic() - self._last_tick > SEALED_TICK_SECONDS:
                        self._tick()  # a grant may be waiting: look before answering "sealed"
                    self._commit(work)
        finally:
            self.agent.leave()
            self.store.dispose()

    def _stop(self, _signum: int, _frame: Any) -> None:
        self.stopping = True

    def _tick(self) -> None:
        self._last_tick = time.monotonic()
        try:
            self.agent.tick()
            with self.store.snapshot() as tx:  # the chain's head, whichever server wrote it
                seq, mac = audit.checkpoint(tx)
            self.data.head_file.follow(seq, mac)
        except Exception as e:  # noqa: BLE001 - a database outage must not stop the writer
            log.warning("seal-state tick failed: %s", type(e).__name__)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        if peer_uid(conn) != os.getuid():
            log.error("refused a writer connection from another user")
            conn.close()
            return
        conn.settimeout(SEND_TIMEOUT)  # replies are sent whole; a worker that stops reading is dropped
        self._sel.register(conn, selectors.EVENT_READ, Frames(self.limit))

    def _drop(self, conn: socket.socket) -> None:
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass  # dropped already
        conn.close()

    def _read(self, conn: socket.socket, frames: Frames, work: list[Any]) -> None:
        try:
            data = conn.recv(1 << 20)
            if not data:
                self._drop(conn)
                return
            for call in frames.feed(data):
                if not isinstance(call, m.Call):
                    raise TypeError("a worker sent something other than a call")
                work.append((conn, call))
        except (OSError, ValueError, EOFError, TypeError) as e:
            log.error("dropping a worker connection: %s", type(e).__name__)
            self._drop(conn)

    def _commit(self, work: list[tuple[socket.socket, m.Call]]) -> None:
        replies: dict[socket.socket, list[bytes]] = {}
        batch: list[tuple[Any, Settle]] = []
        answers: list[tuple[socket.socket, m.Call, Outcome]] = []
        for conn, call in work:
            fut = Outcome()
            if isinstance(call.body, m.Stats):
                s = self.service.committer.stats
                fut.set_result({"batches": s.batches, "actions": s.actions, "seconds": s.seconds})
            else:
                try:
                    batch.append((actions.action(self.service, self.vault, call, self.kmip), fut))
                except (ValueError, TypeError, errors.ApiError) as e:
                    fut.set_exception(e)
            answers.append((conn, call, fut))
        if batch:
            self.service.committer.run_now(batch)
        for conn, call, fut in answers:
            failed = fut.exception()
            if failed is None:
                after = actions.AFTER.get(type(call.body))
                if after is not None:
                    after(self.service)
            reply = m.Reply(call.rid, True, fut.result()) if failed is None else m.Reply(call.rid, False, failure(failed))
            replies.setdefault(conn, []).append(frame(reply))
        for conn, frames in replies.items():
            try:
                conn.sendall(b"".join(frames))
            except OSError as e:
                log.error("could not answer a worker (%s); dropping its connection", type(e).__name__)
                self._drop(conn)


def main(listener: socket.socket, data: DataDir, bar: barrier_mod.Barrier) -> None:
    """The writer process's body (forked by ``server start``)."""
    Writer(listener, data, bar).run()
