"""The accept loop (tlsgate.Gate) under the event loop the server runs (uvloop): a listener that
breaks ends the loop and tells the worker to leave (its supervisor starts another), instead of
failing the same accept forever at full CPU or dying silently while the worker lives on."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time
from collections.abc import Callable

import pytest
import uvloop

from strongroom.server import tlsgate
from strongroom.server.run import _make_server_class
from strongroom.server.tlsgate import Gate

pytestmark = pytest.mark.unit


def _break_by_shutdown(s: socket.socket) -> None:
    s.shutdown(socket.SHUT_RDWR)  # no longer listening: EINVAL


def _break_by_closing_the_descriptor(s: socket.socket) -> None:
    os.close(s.fileno())  # the descriptor gone under the socket object: EBADF


def _break_by_closing_the_socket(s: socket.socket) -> None:
    s.close()  # uvloop answers a closed socket with ValueError, not OSError


@pytest.mark.parametrize("breaking", [_break_by_shutdown, _break_by_closing_the_descriptor, _break_by_closing_the_socket])
def test_a_broken_listener_stops_the_gate_and_the_worker(breaking: Callable[[socket.socket], None]) -> None:
    async def run() -> tuple[bool, float, float]:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        broken = asyncio.Event()
        gate = Gate(listener, lambda: None, ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), 1.0, broken.set)
        gate.start()
        await asyncio.sleep(0.05)
        cpu = time.process_time()
        address = listener.getsockname()
        breaking(listener)
        # a socket object closed under a pending accept keeps its descriptor until that accept
        # ends (uvloop holds it): the gate goes on serving it; the next connection ends it
        try:
            socket.create_connection(address, timeout=1).close()
        except OSError:
            pass  # nothing listens there any more: the other ways of breaking
        try:
            await asyncio.wait_for(broken.wait(), 2 * tlsgate.LISTENER_CHECK_S + 1)
        finally:
            gate.stop()
        assert gate._task is not None
        await asyncio.sleep(0.05)
        spent = time.process_time() - cpu
        if listener.fileno() != -1:
            try:
                listener.close()
            except OSError:
                pass
        return gate._task.done(), spent, 0.0

    done, spent, _ = uvloop.run(run())
    assert done
    assert spent < 0.5, f"{spent:.2f} s of CPU while the listener was broken"


def test_the_workers_server_leaves_when_its_listener_breaks() -> None:
    import uvicorn

    server = _make_server_class()(uvicorn.Config(app=None))
    assert not server.should_exit
    server.listener_broken()
    assert server.should_exit
