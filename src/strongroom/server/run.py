"""`server start`: bind once, fork N workers that each run uvicorn on the shared socket.

Forking (rather than uvicorn's spawn-based workers) lets the barrier unsealed with the
passphrase reach the workers through inherited memory only: never through the environment, a
pipe or a file.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from strongroom import sdnotify
from strongroom.crypto.hygiene import harden_process
from strongroom.server import barrier as barrier_mod
from strongroom.server import numbers, storage, tls
from strongroom.server import repository as repo
from strongroom.server.datadir import DataDir
from strongroom.server.errors import SchemaTooNew, StorageUnavailable

log = logging.getLogger("strongroom.server")


class StartError(RuntimeError):
    """The server cannot start as promised (said in one line)."""


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or numbers.whole(port, 0, 65535, max_len=5) is None:
        raise ValueError(f"--listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def unsealed_barrier(data: DataDir, unlock: barrier_mod.Unlock) -> barrier_mod.Barrier:
    """A barrier unsealed with the operator's material, for the processes ``serve`` forks to inherit."""
    store = storage.Store(data.load_config().db_url)
    try:
        with store.exclusive() as tx:
            bar = barrier_mod.Barrier()
            bar.open_with(tx, unlock, int(repo.get_meta(tx, "seal_epoch") or "1"))
            return bar
    finally:
        store.dispose()


def upgrade_schema(data: DataDir) -> None:
    store = storage.Store(data.load_config().db_url)
    try:
        store.upgrade_schema()
    finally:
        store.dispose()  # before forking: no pooled connection crosses into a child


def check_uvicorn_server(base: Any = None) -> list[str]:
    """What ``_make_server_class``'s overrides need from uvicorn.Server and ``base`` lacks: the
    methods they extend or replace, and the state they read (empty: all there)."""
    import inspect

    import uvicorn

    cls = uvicorn.Server if base is None else base
    wait = getattr(cls, "_wait_tasks_to_complete", None)
    if not callable(wait):
        return ["_wait_tasks_to_complete"]
    try:
        source = inspect.getsource(wait) + inspect.getsource(cls.shutdown)
    except (OSError, TypeError, AttributeError):
        source = ""
    try:
        source += inspect.getsource(cls.startup)
    except (OSError, TypeError, AttributeError):
        pass
    needs = ["server_state.connections", "force_exit", "server_state.tasks", "lifespan.state", "http_protocol_class"]
    needs.append("self.started")
    return [m for m in needs if m not in source]


def _make_server_class() -> type:
    import asyncio

    import uvicorn

    from strongroom.server.tlsgate import Gate

    class Server(uvicorn.Server):  # type: ignore[misc]
        gate_args: tuple[socket.socket, Any, float]
        gate: Gate | None = None
        kmip: Any = None  # kmip.listener.Listener, started and stopped with the gate
        on_serving: Callable[[], None] | None = None

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=[])  # uvicorn listens on nothing: the gate accepts
            if not self.started:
                return
            listener, context, timeout = self.gate_args
            config, state = self.config, self.server_state

            def protocol() -> Any:
                make: Any = config.http_protocol_class
                return make(config=config, server_state=state, app_state=self.lifespan.state)

            self.gate = Gate(listener, protocol, context, timeout, self.listener_broken)
            self.gate.start()
            if self.kmip is not None:
                self.kmip.start()
            if self.on_serving is not None:
                self.on_serving()

        def listener_broken(self) -> None:
            self.should_exit = True  # a worker that cannot accept leaves; the supervisor starts another

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.gate is not None:
                self.gate.stop()
            if self.kmip is not None:
                self.kmip.stop()
            await super().shutdown(sockets=[])

        async def _wait_tasks_to_complete(self) -> None:
            # Let in-flight requests finish, then drop idle keep-alive connections: closing
            # a TLS transport politely waits for a close_notify that a client which is not
            # reading never sends, which would stall every stop for the full timeout.
            while self.server_state.tasks and not self.force_exit:
                await asyncio.sleep(0.05)
            for conn in list(self.server_state.connections):
                transport = getattr(conn, "transport", None)
                if transport is not None:
                    transport.abort()
            await super()._wait_tasks_to_complete()

    return Server


def _worker(
    sock: socket.socket,
    data: DataDir,
    bar: barrier_mod.Barrier,
    log_level: str,
    writer_path: str,
    serving: int,
    kmip_sock: socket.socket | None = None,
) -> None:
    import uvicorn

    from strongroom.server.api import REQUEST_TIMEOUT, Metrics, create_app
    from strongroom.server.httpproto import bounded_protocol
    from strongroom.server.messages import frame_limit
    from strongroom.server.nodes import NodeAgent
    from strongroom.server.service import Service
    from strongroom.server.tlsreload import Reloader
    from strongroom.server.writerlink import WriterLink

    # The event loop and this worker's own group-commit thread (the routes other than the hot
    # ones) hand the GIL back and forth; the default 5 ms
    # switch interval turned each handoff into a latency spike.
    sys.setswitchinterval(0.0005)
    config = data.load_config()
    store = storage.Store(config.db_url)
    service = Service(store, bar, data, config)
    link = WriterLink(writer_path, REQUEST_TIMEOUT, frame_limit(config.deposit_limit))
    agent = NodeAgent(store, bar, data.node_key())
    service.sealing.auto_unseal = False  # the writer asks the HSM; a worker takes its grant
    agent.when_sealed = lambda: service.sealing.when_sealed(agent)  # shares given to other processes
    context = tls.server_context(data.tls)
    reloader = Reloader(context, data.tls)
    signal.signal(signal.SIGHUP, lambda _s, _f: reloader.check("SIGHUP"))
    metrics = Metrics()
    app = create_app(service, link, agent, reloader, metrics)
    uconfig = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
        server_header=False,
        proxy_headers=False,  # the peer address is the source (rate limits): no X-Forwarded-For from anyone
        http=bounded_protocol(config.header_timeout, config.body_timeout),
    )
    uconfig.load()
    server = _make_server_class()(uconfig)
    # connections are accepted and their TLS begun by the gate (tlsgate.py: a cap per source, a deadline)
    server.gate_args = (sock, context, config.handshake_timeout)
    if kmip_sock is not None:
        from strongroom.server.kmip import listener as kmip_listener

        kmip_context = kmip_listener.context(data.tls)
        kmip_reloader = Reloader(kmip_context, data.tls)
        signal.signal(signal.SIGHUP, lambda _s, _f: (reloader.check("SIGHUP"), kmip_reloader.check("SIGHUP")))
        kmip_link = WriterLink(writer_path, REQUEST_TIMEOUT, frame_limit(config.deposit_limit))
        server.kmip = kmip_listener.Listener(
            kmip_sock,
            kmip_context,
            kmip_link,
            config.handshake_timeout,
            server.listener_broken,
            idle=config.kmip_idle_timeout,
            timeout=config.body_timeout,
            per_client=config.kmip_connections_per_client,
            reloader=kmip_reloader,
            count=metrics.kmip_item,
        )

    def say_serving() -> None:
        try:
            os.write(serving, b"s")  # the supervisor tells systemd once the first worker serves
        except OSError:
            pass

    server.on_serving = say_serving
    server.run(sockets=[])


def _name_process(name: str) -> None:
    """Name this process for ps and /proc/PID/comm (sr-writer, sr-worker); best effort."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _writer_socket() -> tuple[socket.socket, str]:
    """The writer process's listening socket, in a fresh directory only this user can enter."""
    path = os.path.join(tempfile.mkdtemp(prefix="strongroom-"), "writer.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(256)
    listener.set_inheritable(True)
    return listener, path


def raise_fd_limit() -> int:
    """The soft limit on open descriptors raised to the hard one (the workers inherit it): each
    connection is one, and Debian's default soft limit of 1,024 let 1,100 idle TCP connections
    stop the server.  Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # a container may forbid it: the limit stays what it was
    return soft


def serve(
    data: DataDir,
    listen: str,
    workers: int,
    bar: barrier_mod.Barrier | None,
    log_level: str = "warning",
    kmip_listen: str | None = None,
) -> int:
    """Bind, start the writer process and the workers, restart any that dies, stop them all on SIGTERM.

    On stop the workers go first (they finish the requests in flight, which need the writer),
    then the writer.
    """
    from strongroom.server import writer

    if workers < 1:
        raise ValueError("--workers must be at least 1")
    raise_fd_limit()
    tls.server_context(data.tls)  # fail in the parent, with one message, on bad TLS files
    from strongroom.server.httpproto import check_uvicorn

    if lacking := check_uvicorn() + check_uvicorn_server():  # the bounds and the stop rest on these
        raise StartError(
            f"this uvicorn lacks what the bounded HTTP protocol needs ({', '.join(lacking)}); install the pinned version"
        )
    try:
        upgrade_schema(data)
    except SchemaTooNew as e:
        raise StartError(str(e)) from None
    except StorageUnavailable as e:  # serve anyway: requests answer 503 until the database is back
        print(f"strongroom: warning: could not check the database schema at start ({e})", file=sys.stderr)
    sock = bind(listen)
    kmip_sock = bind(kmip_listen) if kmip_listen else None
    listener, writer_path = _writer_socket()
    serving_r, serving_w = os.pipe()
    children: dict[int, tuple[str, float]] = {}
    stopping = False

    for missing in harden_process():
        print(f"strongroom: warning: {missing}", file=sys.stderr)

    def spawn(role: str) -> None:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                harden_process()  # memory locks are not inherited across fork (the parent said what failed)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a worker sets its own (TLS reload)
                _name_process(f"sr-{role}")
                if role == "writer":
                    sock.close()
                    if kmip_sock is not None:
                        kmip_sock.close()
                    writer.main(listener, data, bar or barrier_mod.Barrier())
                else:
                    listener.close()
                    _worker(sock, data, bar or barrier_mod.Barrier(), log_level, writer_path, serving_w, kmip_sock)
            except BaseException as e:  # noqa: BLE001 - report and leave; the parent restarts us
                print(f"strongroom {role} {os.getpid()}: {type(e).__name__}: {e}", file=sys.stderr)
                code = 1
            finally:
                os._exit(code)
        children[pid] = (role, time.monotonic())

    def signal_role(role: str, sig: int = signal.SIGTERM) -> None:
        for pid, (r, _started) in list(children.items()):
            if r == role:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        signal_role("worker")
        if not any(r == "worker" for r, _ in children.values()):
            signal_role("writer")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, lambda _s, _f: signal_role("worker", signal.SIGHUP))  # reload TLS
    spawn("writer")
    for _ in range(workers):
        spawn("worker")
    host, port = parse_listen(listen)
    url = f"https://{host}:{sock.getsockname()[1]}"
    kmip = ""
    if kmip_sock is not None:
        kmip_host = parse_listen(kmip_listen or "")[0]
        kmip = f"; KMIP on {kmip_host}:{kmip_sock.getsockname()[1]}"
    print(f"strongroom server listening on {url} with {workers} worker(s){kmip}", flush=True)

    def tell_systemd() -> None:
        if os.read(serving_r, 1):
            sdnotify.ready(f"serving on {url}")

    threading.Thread(target=tell_systemd, name="sd-notify", daemon=True).start()
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        entry = children.pop(pid, None)
        if entry is None:
            continue
        role, started = entry
        if stopping:
            if not any(r == "worker" for r, _ in children.values()):
                signal_role("writer")
            continue
        log.error("%s %d exited (status %d); starting another", role, pid, status)
        if time.monotonic() - started < 2:
            time.sleep(1)  # a process that dies at once should not spin the CPU
        spawn(role)
    sock.close()
    if kmip_sock is not None:
        kmip_sock.close()
    listener.close()
    os.close(serving_w)
    os.unlink(writer_path)
    os.rmdir(os.path.dirname(writer_path))
    return 0


def spawn(
    data: DataDir,
    workers: int = 1,
    passphrase_file: os.PathLike[str] | str | None = None,
    stderr: Any = None,
    env: dict[str, str] | None = None,
    kmip_listen: str | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start `strongroom server start` on a free loopback port in its own session; returns (process, URL).

    For tests and benchmarks that need a real server process. Without a passphrase file it starts sealed.
    """
    args = [
        sys.executable,
        "-m",
        "strongroom.cli.main",
        "server",
        "start",
        "--data",
        str(data.path),
        "--listen",
        "127.0.0.1:0",
        "--workers",
        str(workers),
    ]
    args += ["--passphrase-file", str(passphrase_file)] if passphrase_file is not None else ["--sealed"]
    args += ["--kmip-listen", kmip_listen] if kmip_listen else []
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "listening on " not in line:
        proc.wait(10)
        raise RuntimeError(f"server did not start (exit {proc.returncode})")
    return proc, line.split("listening on ")[1].split()[0]
